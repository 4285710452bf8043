"""Gold Python: mean APR DRG severity over the distinct admissions having a diagnosis title (two decimals;
an admission with several APR rows counts once, with its highest severity)."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    codes = tables["d_icd_diagnoses"].filter(concept_is("long_title", slots["diagnosis_title"])).collect()
    wanted = set(codes.select("icd_code", "icd_version").iter_rows())
    dx = tables["diagnoses_icd"].collect()
    cohort = {h for c, v, h in dx.select("icd_code", "icd_version", "hadm_id").iter_rows() if (c, v) in wanted}
    drg = tables["drgcodes"].filter((pl.col("drg_type") == "APR") & pl.col("drg_severity").is_not_null()).collect()
    severity = {}
    for hadm_id, level in drg.select("hadm_id", "drg_severity").iter_rows():
        if hadm_id in cohort:
            severity[hadm_id] = max(level, severity.get(hadm_id, level))
    if not severity:
        return pl.DataFrame({"value": []}, schema={"value": pl.Float64})
    return pl.DataFrame({"value": [round(sum(severity.values()) / len(severity), 2)]})
