"""Gold Python: distinct specimens (micro_specimen_id) of a specimen type in one admission."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    micro = (
        tables["microbiologyevents"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & (concept_is("spec_type_desc", slots["specimen"]))
            & pl.col("micro_specimen_id").is_not_null()
        )
        .collect()
    )
    if micro.height == 0:
        return pl.DataFrame({"value": []}, schema={"value": pl.Int64})
    return pl.DataFrame({"value": [micro["micro_specimen_id"].n_unique()]})
