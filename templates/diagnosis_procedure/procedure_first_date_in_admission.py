"""Gold Python: earliest chartdate of a procedure (by ICD title) in one admission; ties broken by seq_num."""

import polars as pl

from pipeline.concepts import concept_is


def gold(tables, slots):
    codes = (
        tables["d_icd_procedures"]
        .filter(concept_is("long_title", slots["procedure_title"]))
        .select("icd_code", "icd_version")
    )
    done = (
        tables["procedures_icd"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("chartdate").is_not_null()
        )
        .join(codes, on=["icd_code", "icd_version"], how="semi")
        .collect()
    )
    rows = sorted(done.select("chartdate", "seq_num").iter_rows(), key=lambda r: (r[0], r[1] is None, r[1] or 0))[:1]
    return pl.DataFrame(
        {"value": [r[0] for r in rows], "seq_num": [r[1] for r in rows]},
        schema={"value": pl.Date, "seq_num": pl.Int32},
    )
