"""Gold Python: hours from an admission's start to its first ICU stay's intime (two decimals)."""

import polars as pl


def gold(tables, slots):
    patient = (pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"])
    stays = tables["icustays"].filter(patient & pl.col("intime").is_not_null()).collect()
    admission = tables["admissions"].filter(patient).collect()
    if stays.height == 0 or admission.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    delay = (stays["intime"].min() - admission["admittime"][0]).total_seconds() / 3600.0
    return pl.DataFrame({"value": [round(delay, 2)]})
