"""Gold Python: whether any transfer of the patient went into the given care unit (no transfers: no answer)."""

import polars as pl

from pipeline.concepts import concept_key


def gold(tables, slots):
    rows = tables["transfers"].filter(pl.col("subject_id") == slots["subject_id"]).collect()
    if rows.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Boolean})
    units = [concept_key(u) for u in rows["careunit"].to_list() if u is not None]
    return pl.DataFrame({"value": [concept_key(slots["careunit"]) in units]})
