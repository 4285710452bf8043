"""Tells: simple statistics by which a patch's rows stand out from the record's own (precision, id
position and order, time offsets, sex fit of codes, row order). `patch_tells` lists every tell of a patch; a patch an
analyst can only find by reasoning has none.
"""

from __future__ import annotations

import datetime as dt

from pipeline.db import scalar
from pipeline.noise.code_fit import fits, sex_ranges
from pipeline.noise.fresh_ids import is_blocked
from pipeline.noise.id_order import ID_ORDER
from pipeline.noise.measurements import item_precision, measurement_tables
from pipeline.noise.overlay import overlay, source_catalog
from pipeline.noise.patch import Patch
from pipeline.noise.rules import time_step

ID_COLUMNS = (
    "labevent_id",
    "microevent_id",
    "orderid",
    "pharmacy_id",
    "specimen_id",
    "subject_id",
    "hadm_id",
    "stay_id",
)
ENTITY_TABLES = {"subject_id": "patients", "hadm_id": "admissions", "stay_id": "icustays"}


def decimals(value: float) -> int:
    """The fewest decimals (0..6) that write the number exactly: 64.0 -> 0, 64.9 -> 1."""
    return next((d for d in range(7) if abs(value - round(value, d)) < 1e-9), 7)


def precision_tells(con, table: str, rows: list[dict]) -> list[str]:
    facts, found = measurement_tables().get(table), list[str]()
    if facts is None:
        return found
    for row in rows:
        number = row.get(facts.number)
        if number is None:
            continue
        real = item_precision(con, facts, row[facts.item])
        if decimals(float(number)) > real.number:
            found.append(f"{table}: {number} has more decimals than item {row[facts.item]}'s real rows ({real.number})")
        text = row.get(facts.text) if facts.text else None
        if text is not None and _is_number(text) and _shown(text) != real.text:
            found.append(
                f"{table}: text {text!r} shows {_shown(text)} decimals, item {row[facts.item]}'s rows {real.text}"
            )
    return found


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _shown(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def id_tells(con, source: str, table: str, rows: list[dict]) -> list[str]:
    """New ids (no source row holds them) inside the column's range; for a blocked column, no farther from the
    patient's other ids in `table` (the overlay) than real ids of one patient are; for a scattered one, no closer
    to a used id than real ids are to each other."""
    found, columns = [], [c for c in ID_COLUMNS if rows and c in rows[0]]
    for column in columns:
        for row in rows:
            value = row[column]
            if value is None or scalar(con, f"SELECT count(*) FROM {source} WHERE {column} = ?", [value]):
                continue
            found += _one_id_tells(con, source, table, column, value, row.get("subject_id"))
    return found


def _one_id_tells(con, source: str, table: str, column: str, value: int, subject_id) -> list[str]:
    low, high = con.execute(f"SELECT min({column}), max({column}) FROM {source}").fetchall()[0]
    if not low <= value <= high:
        return [f"{source}.{column} {value} outside the real range {low}..{high}"]
    if subject_id is not None and is_blocked(con, source, column):
        gap = scalar(
            con,
            f"SELECT min(abs({column} - ?)) FROM {table} WHERE subject_id = ? AND {column} <> ?",
            [value, subject_id, value],
        )
        widest = _widest_block_gap(con, source, column)
        return (
            []
            if gap is not None and gap <= widest
            else [f"{source}.{column} {value} is {gap} from its patient's block"]
        )
    nearest = scalar(con, f"SELECT min(abs({column} - ?)) FROM {source}", [value])
    typical = scalar(
        con,
        f"SELECT quantile_cont(d, 0.01) FROM (SELECT {column} - lag({column}) OVER (ORDER BY {column}) d "
        f"FROM (SELECT DISTINCT {column} FROM {source})) WHERE d > 0",
    )
    return (
        []
        if nearest >= typical / 2
        else [f"{source}.{column} {value} is {nearest} from a used id (real: >= {typical})"]
    )


def _widest_block_gap(con, relation: str, column: str) -> int:
    """The widest step between successive ids of one patient, over every patient."""
    return scalar(
        con,
        f"SELECT coalesce(max(d), 1) FROM (SELECT {column} - lag({column}) OVER (PARTITION BY subject_id "
        f"ORDER BY {column}) d FROM {relation})",
    )


def time_tells(
    con, source: str, pairs: list[tuple[dict, dict]], inherited: frozenset[float] = frozenset()
) -> list[str]:
    """Each (added row, the source row it sits after): a changed time keeps the column's granularity and is
    not moved by a whole number of hours unless the column's real times are all on the hour, or the shift is one an
    hourly time of the same patch moved by (`inherited`: an order's entry time follows its start on the hour, so
    its distance to every other time of the record is kept)."""
    found = []
    for added, original in pairs:
        for column, value in added.items():
            before = original.get(column)
            if not isinstance(value, dt.datetime) or not isinstance(before, dt.datetime) or value == before:
                continue
            step, shift = time_step(con, source, column), (value - before).total_seconds()
            if int((value - dt.datetime(1970, 1, 1)).total_seconds()) % step:
                found.append(f"{source}.{column} {value} is finer than the column's real times (every {step} s)")
            if step < 3600 and shift % 3600 == 0 and shift not in inherited:
                found.append(f"{source}.{column} moved by a whole {shift / 3600:g} h (real times are not on the hour)")
    return found


def code_tells(con, table: str, source: str, rows: list[dict]) -> list[str]:
    """A written code fits the patient's sex: outside the other sex's ranges and given to the same sex in the source."""
    if table not in sex_ranges():
        return []
    found = []
    for row in rows:
        sex = scalar(con, "SELECT gender FROM patients WHERE subject_id = ?", [row["subject_id"]])
        seen = scalar(
            con,
            f"SELECT count(*) FROM {source} c JOIN patients p USING (subject_id) WHERE c.icd_code = ? "
            f"AND c.icd_version = ? AND p.gender = ?",
            [row["icd_code"], row["icd_version"], sex],
        )
        if not fits(table, row["icd_version"], sex, row["icd_code"]) or not seen:
            found.append(f"{table}: code {row['icd_code']} does not fit a patient of sex {sex}")
    return found


def order_tells(con, source: str, table: str, view: str | None = None) -> list[str]:
    """Under an active overlay: a patient's patched rows are not all returned after the record's own rows
    (unless the rows they alter or duplicate are the patient's last). `view`: the relation to scan."""
    view, found = view or table, []
    added = con.execute(
        f"SELECT DISTINCT subject_id, max(__pos) FROM temp.main.__add_{table} GROUP BY 1 ORDER BY 1"
    ).fetchall()
    for subject, anchor in added:
        flags = [
            r[0]
            for r in con.execute(
                f"SELECT v IN (SELECT a FROM (SELECT * EXCLUDE (__pos, __sub) FROM temp.main.__add_{table}) a) "
                f"FROM {view} v WHERE subject_id = ?",
                [subject],
            ).fetchall()
        ]
        last_source = scalar(con, f"SELECT max(rowid) FROM {source} WHERE subject_id = ?", [subject])
        tail = flags[len(flags) - sum(flags) :]
        if sum(flags) and all(tail) and len(flags) > sum(flags) and anchor != last_source:
            found.append(f"{table}: patient {subject}'s patched rows come back last")
    return found


def id_order_tells(con, source: str, table: str, view: str | None = None) -> list[str]:
    """Under an active overlay, for a table numbered in time order (id_order.py): a patient with added or hidden
    rows whose ids go back in time more often in the overlay than in the source, repeat, or skip more ids than
    real blocks do (a hidden row's hole)."""
    order = ID_ORDER.get(table)
    if order is None:
        return []
    view, found = view or table, []
    time, column = f"coalesce({', '.join(order.times)})", order.column
    touched = (
        f"SELECT subject_id FROM temp.main.__add_{table} UNION SELECT s.subject_id FROM {source} s "
        f"WHERE s.rowid IN (SELECT __pos FROM temp.main.__gone_{table} WHERE __sub = 0) ORDER BY 1"
    )
    widest = _widest_block_gap(con, source, column)  # one scan of the source table, not one per patient
    for (subject,) in con.execute(touched).fetchall():
        (source_back, _, source_skips, _), (back, repeated, skips, gap) = (
            _id_steps(con, relation, column, time, subject) for relation in (source, view)
        )
        if repeated:
            found.append(f"{table}: patient {subject} has {repeated} repeated {column}s")
        if back > source_back:
            found.append(
                f"{table}: patient {subject}'s {column}s go back in time {back} times ({source_back} in the source)"
            )
        if skips > source_skips:
            found.append(
                f"{table}: patient {subject}'s {column}s skip ids {skips} times ({source_skips} in the source)"
            )
        if gap > widest:
            found.append(f"{table}: patient {subject}'s {column}s skip {gap} (real blocks at most {widest})")
    return found


def _id_steps(con, relation: str, column: str, time: str, subject) -> tuple[int, int, int, int]:
    """(successive ids of the patient that go back in time, ids held twice, steps over unused ids, the widest
    step) in the relation."""
    return con.execute(
        f"SELECT count(*) FILTER (WHERE d < INTERVAL 0 SECOND), count(*) - count(DISTINCT {column}), "
        f"count(*) FILTER (WHERE step > 1), coalesce(max(step), 1) FROM (SELECT {column}, "
        f"{time} - lag({time}) OVER (ORDER BY {column}) d, {column} - lag({column}) OVER (ORDER BY {column}) step "
        f"FROM {relation} WHERE subject_id = ?)",
        [subject],
    ).fetchall()[0]


def patch_tells(con, patch: Patch) -> list[str]:
    """Every tell of the patch's table rows (entity slots: their id position)."""
    found, catalog = [], source_catalog(con)
    for slot, value in patch.slots.items():
        if slot in ENTITY_TABLES and isinstance(value, int):  # a fabricated entity (a real one is no tell)
            found += id_tells(con, ENTITY_TABLES[slot], ENTITY_TABLES[slot], [{slot: value}])
    with overlay(con, patch):
        anchored = {table: _with_anchor(con, f'"{catalog}".main.{table}', table) for table in patch.touched_tables}
        inherited = frozenset(
            shift
            for table, pairs in anchored.items()
            for shift in _hourly_shifts(con, f'"{catalog}".main.{table}', pairs)
        )
        for table in patch.touched_tables:
            source, added = f'"{catalog}".main.{table}', patch.tables[table].add
            found += precision_tells(con, table, added) + id_tells(con, source, table, added)
            found += code_tells(con, table, source, added) + order_tells(con, source, table)
            found += id_order_tells(con, source, table)
            found += time_tells(con, source, anchored[table], inherited)
    return found


def _hourly_shifts(con, source: str, pairs: list[tuple[dict, dict]]) -> list[float]:
    """Seconds by which the patch moved a time of a column whose real times are on the hour."""
    return [
        (value - original[column]).total_seconds()
        for added, original in pairs
        for column, value in added.items()
        if isinstance(value, dt.datetime)
        and isinstance(original.get(column), dt.datetime)
        and value != original[column]
        and time_step(con, source, column) >= 3600
    ]


def _with_anchor(con, source: str, table: str) -> list[tuple[dict, dict]]:
    """(added row, the source row the overlay places it after)."""
    added = con.sql(f"SELECT * EXCLUDE (__pos, __sub) FROM temp.main.__add_{table} ORDER BY __sub").pl().to_dicts()
    anchors = [p for (p,) in con.execute(f"SELECT __pos FROM temp.main.__add_{table} ORDER BY __sub").fetchall()]
    originals = [con.sql(f"SELECT * FROM {source} WHERE rowid = {int(p)}").pl().to_dicts() for p in anchors]
    return [(row, original[0]) for row, original in zip(added, originals, strict=True) if original]
