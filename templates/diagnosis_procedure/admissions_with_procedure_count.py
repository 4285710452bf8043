"""Gold Python: number of distinct admissions with a procedure whose ICD title matches exactly."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    codes = tables["d_icd_procedures"].filter(concept_is("long_title", slots["procedure_title"])).collect()
    wanted = set(codes.select("icd_code", "icd_version").iter_rows())
    procs = tables["procedures_icd"].collect()
    admissions = {
        h
        for c, v, h in procs.select("icd_code", "icd_version", "hadm_id").iter_rows()
        if (c, v) in wanted and h is not None
    }
    return pl.DataFrame({"value": [len(admissions)]})
