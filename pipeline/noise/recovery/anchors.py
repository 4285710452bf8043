"""Strategies over an unknown time: the answer may hold at every time the record makes likely for it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import duckdb
from sqlglot import exp

from pipeline.noise.recovery import strategy
from pipeline.noise.recovery.case import Case
from pipeline.noise.recovery.sql import answer_of, gold_tree, reads, temp_views, with_tables
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue, answers_agree, is_empty
from pipeline.templates.render import sql_literal


@strategy("anchor_range")
def anchor_range(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """An encounter row hidden whole (its time anchors the question's window): every likely anchor its own events
    allow, hour by hour, gives the gold reading one answer, so the analyst needs no anchor to give it."""
    tree = gold_tree(case)
    for encounter in rule["encounters"]:
        patch = case.patch.tables.get(encounter["table"])
        if patch is None or patch.add or len(patch.hide) != 1 or not _reads_only(tree, encounter):
            continue
        key = patch.hide[0][encounter["key"]]
        found = likely_anchors(con, encounter, key)
        if found is None:
            continue
        identity, times = found
        table, row = encounter["table"], {**identity, encounter["key"]: key}
        for window in [*own_windows(con, encounter, key), times]:  # an anchor read alone first (the admit order)
            views = (
                {
                    table: f"SELECT * FROM {table} UNION ALL BY NAME SELECT "
                    + ", ".join(f"{sql_literal(v)} AS {c}" for c, v in {**row, encounter["anchor"]: time}.items())
                }
                for time in window
            )
            answer = _one_answer(con, case, tree, views)
            if answer is not None:
                return answer
    return None


def own_windows(con: duckdb.DuckDBPyConnection, encounter: dict[str, Any], key: Any) -> list[list[dt.datetime]]:
    """The whole hours of each event an analyst reads the anchor off alone (`alone: true`: an admission's ADT admit
    order), where the encounter has one: blind audit 26 placed a hidden admittime between the ED labs and the admit
    order, where the tables' joint range, ending at the labs, had put it before them."""
    windows = []
    for event in (e for e in encounter["events"] if e.get("alone")):
        first = _first_event(con, encounter, event, key)[-1]
        if first is not None:
            low, high = event["hours"]
            windows.append(_hours(first + dt.timedelta(hours=low), first + dt.timedelta(hours=high)))
    return windows


def _first_event(con: duckdb.DuckDBPyConnection, encounter: dict[str, Any], event: dict[str, Any], key: Any) -> tuple:
    """The identity columns and the time of the encounter's first row in the event's table (NULLs without one)."""
    where = f"{encounter['key']} = {sql_literal(key)} AND {event['time']} IS NOT NULL" + (
        f" AND ({event['where']})" if event.get("where") else ""
    )
    return con.execute(
        f"SELECT {', '.join(f'min({c})' for c in encounter['identity'])}, min({event['time']}) "
        f"FROM {event['table']} WHERE {where}"
    ).fetchall()[0]


def _hours(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The ends first (a reading that moves with the anchor shows at once), then every whole hour between."""
    hours = int((end - start).total_seconds() // 3600)
    return [start, end, *(t for h in range(1, hours + 1) if (t := start + dt.timedelta(hours=h)) < end)]


@strategy("bounded_time")
def bounded_time(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """Rows moved by one shift (a row and its order's other rows) whose true time the record bounds (its encounter,
    its order's interval, its neighbours in sequence): the gold reading with the rows shifted back to every sampled
    time of the bounds gives one answer."""
    tree = gold_tree(case)
    for fact in rule["rows"]:
        table, patch = fact["table"], case.patch.tables.get(fact["table"])
        if patch is None or not patch.add or not reads(tree, table) or not _one_shift(patch.add, fact["time"]):
            continue
        moved = patch.add[0]
        at = con.execute("SELECT CAST(? AS TIMESTAMP)", [str(moved[fact["time"]])]).fetchall()[0][0]
        found = (
            _interval_bounds(con, fact.get("encounter"), moved),
            _interval_bounds(con, fact.get("order"), moved),
            _sequence_bounds(con, fact, moved),
        )
        bounds = [b for b in found if b is not None]
        if not bounds or any(low <= at <= high for low, high in bounds):
            continue  # nothing bounds the rows, or they lie inside their bounds: they do not tell the true time
        low, high = max(b[0] for b in bounds), min(b[1] for b in bounds)
        if low > high:  # the bounds disagree: the last found (the sequence, then the order) is the finest
            low, high = bounds[-1]
        rows = " OR ".join(
            "(" + " AND ".join(f"t.{c} IS NOT DISTINCT FROM {sql_literal(row[c])}" for c in patch.key_columns) + ")"
            for row in patch.add
        )
        views = (
            {
                table: f"SELECT * REPLACE (CASE WHEN {rows} THEN t.{fact['time']} + "
                f"INTERVAL {int((time - at).total_seconds())} SECOND ELSE t.{fact['time']} END AS {fact['time']}) "
                f"FROM {table} t"
            }
            for time in _spread(low, high, rule["samples"])
        )
        return _one_answer(con, case, tree, views)
    return None


def _one_shift(rows: list[dict[str, Any]], time: str) -> bool:
    """The rows' times moved together: all set, and all equal (one order's rows share their start)."""
    times = {row.get(time) for row in rows}
    return None not in times and len(times) == 1


def _interval_bounds(
    con: duckdb.DuckDBPyConnection, interval: dict[str, Any] | None, moved: dict[str, Any]
) -> tuple | None:
    """The start and end (its start when it has none) of the interval the row lies in (its encounter, its order),
    found by `match`, widened by the declared slack; None without such an interval."""
    if not interval or any(moved.get(c) is None for c in interval["match"]):
        return None
    where = " AND ".join(f"{o} = {sql_literal(moved[c])}" for c, o in interval["match"].items())
    low, high = con.execute(
        f"SELECT min({interval['start']}), max(coalesce({interval['end']}, {interval['start']})) "
        f"FROM {interval['table']} WHERE {where}"
    ).fetchall()[0]
    return None if low is None else _widened(low, high, interval["slack_hours"])


def _sequence_bounds(con: duckdb.DuckDBPyConnection, fact: dict[str, Any], moved: dict[str, Any]) -> tuple | None:
    """The times of the rows just before and after the row in its sequence (same `within` columns), widened."""
    sequence = fact.get("sequence")
    if not sequence or moved.get(sequence["column"]) is None or any(moved.get(c) is None for c in sequence["within"]):
        return None
    same = " AND ".join(f"{c} = {sql_literal(moved[c])}" for c in sequence["within"])
    column, time, position = sequence["column"], fact["time"], sql_literal(moved[sequence["column"]])
    low, high = con.execute(
        f"SELECT (SELECT {time} FROM {fact['table']} WHERE {same} AND {column} < {position} AND {time} IS NOT NULL "
        f"ORDER BY {column} DESC LIMIT 1), (SELECT {time} FROM {fact['table']} WHERE {same} AND {column} > {position} "
        f"AND {time} IS NOT NULL ORDER BY {column} LIMIT 1)"
    ).fetchall()[0]
    return None if low is None or high is None else _widened(low, high, sequence["slack_hours"])


def _widened(low: dt.datetime, high: dt.datetime, hours: float) -> tuple[dt.datetime, dt.datetime]:
    return low - dt.timedelta(hours=hours), high + dt.timedelta(hours=hours)


def _reads_only(tree: exp.Expr, encounter: dict[str, Any]) -> bool:
    """The question reads the encounter table and none of its columns beyond the declared ones (an attribute such
    as the discharge time cannot be placed from the events)."""
    others = set(load_schema()[encounter["table"]].column_names) - set(encounter["reads"])
    return reads(tree, encounter["table"]) and not any(c.name in others for c in tree.find_all(exp.Column))


def likely_anchors(
    con: duckdb.DuckDBPyConnection, encounter: dict[str, Any], key: Any
) -> tuple[dict, list[dt.datetime]] | None:
    """The row's identity columns and every whole hour that each event table's first row of the encounter allows
    (its declared hours from that row), the range's ends first so that a reading that moves with the anchor shows at
    once; None when the encounter has no event. The range ends at the earliest table's latest likely anchor; a
    table whose whole window lies after that began late (a first culture a week into the stay: blind audit 16) and
    does not move the start. The identity's other rows (`apart`: a patient's admissions do not overlap) bound it
    too: a table whose window lies wholly before the previous row's end charted the previous stay (blind audit 20:
    restraint orders carried over from an ED observation stay that ended 19 h after them)."""
    bounds, firsts, identity = [], [], None
    for event in encounter["events"]:
        *ids, first = _first_event(con, encounter, event, key)
        if first is not None:
            low, high = event["hours"]
            bounds.append((first + dt.timedelta(hours=low), first + dt.timedelta(hours=high)))
            firsts.append(first)
            identity = identity or dict(zip(encounter["identity"], ids))
    if not bounds or identity is None:
        return None
    gap = _gap_start(con, encounter, identity, firsts)
    if gap is not None:
        return identity, [gap]
    after, before = _apart_bounds(con, encounter, identity, key, max(firsts))
    bounds = [(max(low, after), min(high, before)) for low, high in bounds if high >= after and low <= before]
    if not bounds:
        return None
    end = min(high for _, high in bounds)  # every table's first event comes after the anchor, give or take
    start = max(low for low, _ in bounds if low <= end)  # a table whose window lies wholly later began late
    return identity, _hours(start, end)


def _gap_start(
    con: duckdb.DuckDBPyConnection, encounter: dict[str, Any], identity: dict, firsts: list[dt.datetime]
) -> dt.datetime | None:
    """The start of the gap the hidden row left in a table that records the identity end to end (`gap`: an
    admission's transfers, each starting when the one before ended, the first at the admission's start), when the
    gap meets the span of the encounter's first events (give or take `slack_hours`; a stay's first transfer may
    last two minutes before the next ICU one): the analyst reads the anchor off it exactly (blind audit 23: a hidden
    ICU stay's transfer left its interval empty between the ward's out time and the next unit's in time). None
    without such a gap."""
    gap = encounter.get("gap")
    if not gap:
        return None
    same = " AND ".join(f"{c} = {sql_literal(identity[c])}" for c in gap["within"])
    opens = gap["opens"]
    opener = f"(SELECT min({opens['time']}) FROM {opens['table']} WHERE {same})"
    found = con.execute(
        f"WITH kept AS (SELECT {gap['start']} AS started, {gap['end']} AS ended FROM {gap['table']} WHERE {same}), "
        "edges AS (SELECT ended, lead(started) OVER (ORDER BY started, ended) AS next FROM kept "
        f"UNION ALL SELECT {opener}, (SELECT min(started) FROM kept) "
        f"WHERE NOT EXISTS (SELECT 1 FROM kept WHERE started <= {opener})) "
        "SELECT ended FROM edges WHERE next > ended AND ended <= $last + $slack AND next >= $first - $slack "
        "ORDER BY ended LIMIT 1",
        {"slack": dt.timedelta(hours=gap["slack_hours"]), "first": min(firsts), "last": max(firsts)},
    ).fetchall()
    return found[0][0] if found else None


def _apart_bounds(
    con: duckdb.DuckDBPyConnection, encounter: dict[str, Any], identity: dict, key: Any, reference: dt.datetime
) -> tuple[dt.datetime, dt.datetime]:
    """The end of the identity's last other row that ended by `reference` and the start of its first other row that
    began after it (the hidden row lies between them); the calendar's ends where there is none."""
    apart = encounter.get("apart")
    if not apart:
        return dt.datetime.min, dt.datetime.max
    same = " AND ".join(f"{c} = {sql_literal(v)}" for c, v in identity.items())
    start, end = apart["start"], apart["end"]
    after, before = con.execute(
        f"SELECT max({end}) FILTER (WHERE {end} <= $ref), min({start}) FILTER (WHERE {start} >= $ref) "
        f"FROM {encounter['table']} WHERE {same} AND {encounter['key']} <> $key",
        {"ref": reference, "key": key},
    ).fetchall()[0]
    return after or dt.datetime.min, before or dt.datetime.max


def _spread(start: dt.datetime, end: dt.datetime, samples: int) -> list[dt.datetime]:
    """The ends, then evenly spaced times between them (at most `samples` in all)."""
    step = (end - start) / max(samples - 1, 1)
    return [start, end, *(start + step * i for i in range(1, samples - 1))]


def _one_answer(
    con: duckdb.DuckDBPyConnection, case: Case, tree: exp.Expr, views: Iterable[dict[str, str]]
) -> AnswerValue | None:
    """The gold reading over each set of views; the answer when every reading is definite and they all agree."""
    plain, first = case.template.spec.answer.model_copy(update={"records": []}), None
    for selects in views:
        with temp_views(con, selects) as names:
            answer = answer_of(con, case, with_tables(tree, names))
        if answer is None or is_empty(answer):
            return None
        answer = answer.model_copy(update={"records": {}})
        if first is None:
            first = answer
        elif not answers_agree(first, answer, plain):
            return None
    return first
