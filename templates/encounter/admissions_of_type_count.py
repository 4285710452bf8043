"""Gold Python: number of distinct admissions of one admission type."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    adm = tables["admissions"].filter(concept_is("admission_type", slots["admission_type"])).collect()
    return pl.DataFrame({"value": [len(set(adm["hadm_id"].drop_nulls().to_list()))]})
