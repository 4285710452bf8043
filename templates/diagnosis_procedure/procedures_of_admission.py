"""Gold Python: the distinct ICD procedure titles of one admission (a set)."""

import polars as pl


def gold(tables, slots):
    procs = (
        tables["procedures_icd"]
        .filter((pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"]))
        .collect()
    )
    titles = tables["d_icd_procedures"].collect()
    lookup = {(c, v): t for c, v, t in titles.select("icd_code", "icd_version", "long_title").iter_rows()}
    found = {lookup.get((c, v)) for c, v in procs.select("icd_code", "icd_version").iter_rows()}
    return pl.DataFrame({"value": sorted(t for t in found if t is not None)}, schema={"value": pl.String})
