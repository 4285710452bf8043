"""Identifiers for added rows and fabricated entities, drawn where real unused ones are.

MIMIC-IV numbers some tables in per-patient blocks (`labevent_id`, `microevent_id`: consecutive within a
patient, gaps only between patients) and scatters others over a wide range (`orderid`, `pharmacy_id`,
`subject_id`...). A fresh id follows the column's own layout: next to the patient's block for a blocked
column; for a scattered one, a uniform draw inside the observed range that is no closer to a used id than
real ids are to each other.
"""

from __future__ import annotations

from pipeline.db import scalar
from pipeline.noise.base import Rejected

BLOCKED_GAP = 2  # a column whose median gap between one patient's consecutive ids is at most this is blocked
TRIES = 200


def is_blocked(con, table: str, column: str) -> bool:
    """Whether the column's ids run in per-patient blocks (median within-patient step <= BLOCKED_GAP)."""
    if column == "subject_id" or "subject_id" not in _columns(con, table):
        return False
    gap = scalar(
        con,
        f"SELECT median(d) FROM (SELECT {column} - lag({column}) OVER (PARTITION BY subject_id ORDER BY {column}) d "
        f"FROM (SELECT DISTINCT subject_id, {column} FROM {table})) WHERE d IS NOT NULL",
    )
    return gap is not None and gap <= BLOCKED_GAP


def _columns(con, table: str) -> list[str]:
    return list(con.sql(f"SELECT * FROM {table} LIMIT 0").columns)


def _used(con, table: str, column: str, candidate: int, margin: int = 0) -> bool:
    return bool(
        scalar(
            con,
            f"SELECT count(*) FROM {table} WHERE {column} BETWEEN ? AND ?",
            [candidate - margin, candidate + margin],
        )
    )


def beside_block(con, table: str, column: str, subject_id: int, taken: list[int]) -> int:
    """The first unused id after the patient's block (else before it): the block grows by one, as real ones do."""
    low, high = con.execute(
        f"SELECT min({column}), max({column}) FROM {table} WHERE subject_id = ?", [subject_id]
    ).fetchall()[0]
    if low is None:
        raise Rejected("no_id_block_for_patient")
    for candidate in [*range(high + 1, high + 50), *range(low - 1, max(low - 50, 0), -1)]:
        if candidate not in taken and not _used(con, table, column, candidate):
            return candidate
    raise Rejected("no_free_identifier_near_patient")


def scattered(con, table: str, column: str, rng, taken: list[int]) -> int:
    """A uniform draw inside the observed range, at least a tenth of the mean spacing from any used id."""
    low, high, count = con.execute(
        f"SELECT min({column}), max({column}), count(DISTINCT {column}) FROM {table}"
    ).fetchall()[0]
    margin = max(0, (high - low) // max(count, 1) // 10)
    for _ in range(TRIES):
        candidate = int(rng.integers(low, high + 1))
        if candidate not in taken and not _used(con, table, column, candidate, margin):
            return candidate
    raise Rejected("no_free_identifier")


def fresh_ids(con, table: str, column: str, rows: list[dict], rng) -> list[int]:
    """One unused id per row (each row has the subject_id of the patient it belongs to), as real ids lie."""
    blocked, chosen = is_blocked(con, table, column), list[int]()
    for row in rows:
        chosen.append(
            beside_block(con, table, column, row["subject_id"], chosen)
            if blocked
            else scattered(con, table, column, rng, chosen)
        )
    return chosen
