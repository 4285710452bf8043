"""Gold Python: number of results of a lab (by label) flagged 'abnormal' in one admission.

No answer when the admission or the lab label does not exist; 0 when both exist but nothing is flagged.
"""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    admission = (
        tables["admissions"]
        .filter((pl.col("subject_id") == slots["subject_id"]) & (pl.col("hadm_id") == slots["hadm_id"]))
        .collect()
    )
    items = tables["d_labitems"].filter(concept_is("label", slots["lab_label"])).select("itemid").collect()
    if admission.height == 0 or items.height == 0:
        return pl.DataFrame(schema={"value": pl.Int64})
    flagged = (
        tables["labevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (pl.col("flag") == "abnormal")
        )
        .join(items.lazy(), on="itemid")
        .collect()
    )
    return pl.DataFrame({"value": [flagged["labevent_id"].n_unique()]})
