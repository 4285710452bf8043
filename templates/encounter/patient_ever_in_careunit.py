"""Gold Python: whether any transfer of the patient went into the given care unit (no transfers: no answer)."""

import polars as pl


def gold(tables, slots):
    rows = tables["transfers"].filter(pl.col("subject_id") == slots["subject_id"]).collect()
    if rows.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Boolean})
    units = [u for u in rows["careunit"].to_list() if u is not None]
    return pl.DataFrame({"value": [slots["careunit"] in units]})
