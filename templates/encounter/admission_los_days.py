"""Gold Python: length of one hospital admission in days (discharge minus admission time, two decimals)."""

import polars as pl


def gold(tables, slots):
    adm = (
        tables["admissions"]
        .filter(
            (pl.col("subject_id") == slots["subject_id"])
            & (pl.col("hadm_id") == slots["hadm_id"])
            & pl.col("admittime").is_not_null()
            & pl.col("dischtime").is_not_null()
        )
        .collect()
    )
    days = [
        round((row["dischtime"] - row["admittime"]).total_seconds() / 86400.0, 2) for row in adm.iter_rows(named=True)
    ]
    return pl.DataFrame({"value": days}, schema={"value": pl.Float64})
