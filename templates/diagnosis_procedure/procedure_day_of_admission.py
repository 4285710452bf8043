"""Gold Python: the hospital day (admission day = 1) of a procedure's first chartdate in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    patient = (pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"])
    codes = (
        tables["d_icd_procedures"]
        .filter(concept_is("long_title", slots["procedure_title"]))
        .select("icd_code", "icd_version")
    )
    done = (
        tables["procedures_icd"]
        .filter(patient & pl.col("chartdate").is_not_null())
        .join(codes, on=["icd_code", "icd_version"], how="semi")
        .collect()
    )
    admission = tables["admissions"].filter(patient).collect()
    if done.height == 0 or admission.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    day = (done["chartdate"].min() - admission["admittime"][0].date()).days + 1
    return pl.DataFrame({"value": [day]})
