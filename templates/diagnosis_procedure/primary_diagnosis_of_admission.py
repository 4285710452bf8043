"""Gold Python: ICD long title of the diagnosis with seq_num 1 in one admission, with its code and version."""

import polars as pl


def gold(tables, slots):
    first = tables["diagnoses_icd"].filter(
        (pl.col("subject_id") == slots["subject_id"])
        & (pl.col("hadm_id") == slots["hadm_id"])
        & (pl.col("seq_num") == 1)
    )
    titled = first.join(tables["d_icd_diagnoses"], on=["icd_code", "icd_version"], how="inner")
    return titled.select(pl.col("long_title").alias("value"), "icd_code", "icd_version")
