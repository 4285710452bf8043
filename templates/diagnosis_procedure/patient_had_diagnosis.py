"""Gold Python: whether any diagnosis of the patient has the given ICD long title (no diagnoses: no answer)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    mine = tables["diagnoses_icd"].filter(pl.col("subject_id") == slots["subject_id"]).collect()
    if mine.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Boolean})
    codes = tables["d_icd_diagnoses"].filter(concept_is("long_title", slots["diagnosis_title"])).collect()
    wanted = set(codes.select("icd_code", "icd_version").iter_rows())
    hit = any(key in wanted for key in mine.select("icd_code", "icd_version").iter_rows())
    return pl.DataFrame({"value": [hit]})
