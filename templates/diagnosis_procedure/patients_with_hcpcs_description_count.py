"""Gold Python: number of distinct patients with an HCPCS event of the given short description."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    events = tables["hcpcsevents"].filter(concept_is("short_description", slots["hcpcs_description"])).collect()
    return pl.DataFrame({"value": [len(set(events["subject_id"].drop_nulls().to_list()))]})
