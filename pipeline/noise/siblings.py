"""Sibling facts (siblings.yaml): where the record keeps a fact a noise changes, and the patch that changes it alike."""

from __future__ import annotations

import datetime as dt
import re
from functools import cache
from importlib import resources
from typing import Any

import polars as pl
import yaml

from pipeline.concepts import concept_key
from pipeline.db import scalar, source_fact
from pipeline.noise.base import Rejected
from pipeline.noise.patch import Patch, TablePatch


@cache
def sibling_rules() -> dict[str, Any]:
    """{"companions": ..., "rows": ..., "records": ...} from siblings.yaml."""
    return yaml.safe_load(resources.files("pipeline.noise").joinpath("siblings.yaml").read_text())


def companions(table: str, column: str) -> list[str]:
    """Columns of the same row of `table` that state the fact in `column`."""
    return sibling_rules()["companions"].get(table, {}).get(column, [])


def states_too(con, table: str, companion: str, row: dict) -> bool:
    """The companion column of `row` states the fact as well (siblings.yaml `companion_when`: a stay's last unit
    is its first only when one transfer begins and ends the stay)."""
    rule = sibling_rules().get("companion_when", {}).get(table, {}).get(companion)
    return rule is None or bool(matching_rows(con, rule, row))


def always_accepted(table: str, column: str) -> bool:
    """The day's other records date a removed value anyway (siblings.yaml `shared` `always_accepted`)."""
    return bool(sibling_rules().get("shared", {}).get(table, {}).get(column, {}).get("always_accepted"))


def matching_rows(con, rule: dict, row: dict) -> list[dict]:
    """Rows of `rule['table']` that `row` finds through `rule['match']` (none when an `on` value is NULL), and
    through `rule['where']` with its `bounds` when the rule has one."""
    if any(row[c] is None for c in rule["match"]):
        return []
    where = " AND ".join([*(f"{s} = ?" for s in rule["match"].values()), *([rule["where"]] if "where" in rule else [])])
    found = con.execute(
        f"SELECT * FROM {rule['table']} WHERE {where} ORDER BY ALL",
        [*(row[c] for c in rule["match"]), *rule.get("bounds", [])],
    )
    names = [d[0] for d in found.description]
    return [dict(zip(names, values)) for values in found.fetchall()]


def all_matched(con, rule: dict, rows: list[dict]) -> bool:
    """Every row finds a row as `matching_rows` does: one query for all of them, not one per row (a hidden
    patient's prescriptions are checked against their pharmacy rows by the hundred)."""
    if any(row[c] is None for row in rows for c in rule["match"]):
        return False
    if not rows:
        return True
    found = pl.DataFrame({f"__m{n}": [row[c] for row in rows] for n, c in enumerate(rule["match"])}).unique()
    on = [f"{s} = r.__m{n}" for n, s in enumerate(rule["match"].values())]
    where = " AND ".join([*on, *([f"({rule['where']})"] if "where" in rule else [])])
    con.register("__matched_rows", found)
    try:
        unmatched = scalar(
            con,
            f"SELECT count(*) FROM __matched_rows r WHERE NOT EXISTS (SELECT 1 FROM {rule['table']} WHERE {where})",
            list(rule.get("bounds", [])),
        )
    finally:
        con.unregister("__matched_rows")
    return unmatched == 0


def _alike(sibling_value, before, after):
    """A sibling value changed as the evidence value went from `before` to `after` (NULL, or the same shift)."""
    if after is None or sibling_value is None:
        return None
    if isinstance(before, dt.datetime | dt.date) and before is not None:
        return sibling_value + (after - before)
    return after


def sibling_patch(
    con, table: str, before: list[dict], after: list[dict], patched: Patch, replace: bool = True
) -> Patch:
    """`patched` plus the sibling rows of `table`'s changed rows (before -> after), changed alike: in place, or
    (`replace=False`, a conflicting duplicate) as a second copy beside the sibling row. A sibling row that two
    rules find (an ICU stay's only transfer: its start and its end) takes both changes; one the noise itself
    changed (in `patched`) is left as it is."""
    tables = {name: p.model_copy(deep=True) for name, p in patched.tables.items()}
    added: dict[tuple, dict] = {}  # (table, key) -> the changed copy of a sibling row, across rules
    for rule in sibling_rules()["rows"].get(table, []):
        target = tables.setdefault(rule["table"], TablePatch(key_columns=rule["key"]))
        mine = patched.tables.get(rule["table"])
        own = {tuple(k[c] for c in rule["key"]) for k in mine.hide} if mine else set()
        if rule["table"] == table:  # the changed rows themselves are no siblings (a copy beside them adds them once)
            own |= {tuple(row[c] for c in rule["key"]) for row in before}
        for old, new in zip(before, after, strict=True):
            changed = {e: s for e, s in rule["columns"].items() if old.get(e) != new.get(e)}
            for sibling in matching_rows(con, rule, old) if changed else []:
                key = tuple(sibling[c] for c in rule["key"])
                if key in own:
                    continue
                alike = {
                    s: _alike(sibling[s], old[e], new[e]) for e, targets in changed.items() for s in _listed(targets)
                }
                if (rule["table"], key) in added:
                    added[(rule["table"], key)].update(alike)
                    continue
                added[(rule["table"], key)] = copy = {**sibling, **alike}
                if replace:
                    target.hide.append({c: sibling[c] for c in rule["key"]})
                target.add.append(copy)
        if not target.hide and not target.add:
            del tables[rule["table"]]
    return Patch(tables=tables, slots=patched.slots)


INTERVALS = (("intime", "outtime"), ("starttime", "stoptime"), ("starttime", "endtime"))  # a row's start, end


def ends_before_start(patch: Patch, table: str) -> bool:
    """A sibling row `patch` changes (in a table other than `table`) would end before it starts: the record
    keeps the true time there (a transfer that ended when the moved ICU stay truly began), so the noise is no
    single-table slip but a contradiction no charting makes."""
    return any(
        row.get(start) is not None and row.get(end) is not None and row[end] < row[start]
        for name, changed in patch.tables.items()
        if name != table
        for row in changed.add
        for start, end in INTERVALS
    )


def kept_elsewhere(con, table: str, rows: list[dict], column: str | None = None, conflict: bool = False) -> None:
    """Rejected when the record keeps the rows' facts elsewhere, where a careful analyst reads them: another table
    charts them (`witnessed_elsewhere`), their own sample computes them (`derivable_from_sample`; for a `conflict`,
    any result of a relation its sample completes), or a sibling row says the kind of the changed `column`
    (`implied_by_sibling`: an IV Piggyback order's route)."""
    if witnessed(con, table, rows):
        raise Rejected("witnessed_elsewhere")
    if derivable(con, table, rows, any_member=conflict):
        raise Rejected("derivable_from_sample")
    if column is not None and implied(con, table, column, rows):
        raise Rejected("implied_by_sibling")
    if column is not None and panel_implied(con, table, column, rows):
        raise Rejected("implied_by_panel")


def panel_implied(con, table: str, column: str, rows: list[dict]) -> bool:
    """Some row's value is what its panel implies (siblings.yaml `panels`): for another result of the same panel
    (an isolate's susceptibility to another antibiotic), every other panel of the same kind (organism) with that
    result holds one value for the row's item, in at least `support` panels; or every such panel whose row of that
    item is shaped like this one (`shape`: its MIC given or not) does."""
    rule = sibling_rules().get("panels", {}).get(table, {}).get(column)
    if not rule:
        return False
    shapes: tuple[list[str], ...] = ([], rule.get("shape", []))
    return any(_panel_implied(con, table, column, rows, rule, shape) for shape in shapes)


def _panel_implied(con, table: str, column: str, rows: list[dict], rule: dict, shape: list[str]) -> bool:
    within, item, by = rule["within"], rule["item"], rule["by"]
    values = ", ".join(f"'{v}'" for v in rule["values"])
    same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM peers.{c}" for c in within)
    mine = " AND ".join(f"{c} IS NOT DISTINCT FROM ?" for c in within)
    theirs = " AND ".join(f"p.{c} IS NOT DISTINCT FROM ?" for c in within)
    sql = f"""
        WITH mine AS (SELECT {item} AS b, {column} AS bv FROM {table}
                      WHERE {mine} AND {item} <> ? AND {column} IN ({values})),
        peers AS (SELECT DISTINCT p.*, m.b FROM {table} p JOIN mine m ON p.{item} = m.b AND p.{column} = m.bv
                  WHERE p.{by} = ? AND NOT ({theirs}))
        SELECT count(*) FROM (
            SELECT peers.b FROM peers JOIN {table} t ON {same}
            WHERE t.{item} = ? AND t.{column} IN ({values}){"".join(f" AND (t.{c} IS NULL) = ?" for c in shape)}
            GROUP BY peers.b
            HAVING count(DISTINCT t.{column}) = 1 AND count(*) >= {int(rule["support"])} AND min(t.{column}) = ?)"""
    for row in rows:
        if row[column] is None or row[item] is None:
            continue
        keys = [row[c] for c in within]
        nulls = [row[c] is None for c in shape]
        found = con.execute(sql, [*keys, row[item], row[by], *keys, row[item], *nulls, row[column]]).fetchall()
        if found[0][0]:
            return True
    return False


def shared_value(con, table: str, column: str, rows: list[dict]) -> tuple[bool, Any]:
    """(True, value) when every other row of the rows' encounter (siblings.yaml `shared`: `within` columns, the
    rows left out by `position`) holds one value of `column`: what an analyst reads for a removed one (a
    procedure's date off the session's other procedures); (False, None) without such a rule or one such value."""
    rule = sibling_rules().get("shared", {}).get(table, {}).get(column)
    if not rule or any(row[c] is None for row in rows for c in rule["within"]):
        return False, None
    encounters = {tuple(row[c] for c in rule["within"]) for row in rows}
    if len(encounters) != 1:
        return False, None
    where = " AND ".join(f"{c} = ?" for c in rule["within"])
    apart = ", ".join("?" for _ in rows)
    values = con.execute(
        f"SELECT DISTINCT {column} FROM {table} WHERE {where} AND {rule['position']} NOT IN ({apart})",
        [*next(iter(encounters)), *(row[rule["position"]] for row in rows)],
    ).fetchall()
    return (True, values[0][0]) if len(values) == 1 and values[0][0] is not None else (False, None)


def implied(con, table: str, column: str, rows: list[dict]) -> bool:
    """Some row has a sibling (found by `match`) whose own columns say what kind of value `column` holds
    (siblings.yaml `implied`: the `where` they satisfy)."""
    for rule in sibling_rules().get("implied", {}).get(table, {}).get(column, []):
        match = rule["match"]
        where = " AND ".join(f"{theirs} = ?" for theirs in match.values())
        sql = f"SELECT count(*) FROM {rule['table']} WHERE {where} AND ({rule['where']})"
        for row in rows:
            if all(row[mine] is not None for mine in match) and scalar(con, sql, [row[m] for m in match]):
                return True
    return False


def witnessed(con, table: str, rows: list[dict]) -> bool:
    """Some row's encounter has rows near its time in a table that may record the same event another way (of
    the same name, where the rule says `named`)."""
    for rule in sibling_rules().get("witnesses", {}).get(table, []):
        named = rule.get("named")
        labels: dict[Any, str | None] = {}  # the sibling dictionary's labels, looked up once per item
        for row in rows:
            mine = _own_name(con, named, row) if named else None
            if any(_same_name(con, named, mine, sibling, labels) for sibling in _near_rows(con, rule, row)):
                return True
    return False


def _own_name(con, named: dict, row: dict) -> str | None:
    """The row's name: its `named.column`, or its item's label in `named.dictionary`."""
    if "column" in named:
        return concept_key(row.get(named["column"]))
    return _label(con, named["dictionary"], named["key"], named["label"], row[named["key"]])


def _near_rows(con, rule: dict, row: dict) -> list[dict]:
    """The rule's rows that `row` finds through `match`, within `near.hours` or `near.days` (calendar days) of its
    time (a row or sibling without a time is near)."""
    near = rule.get("near")
    if near is None or row.get(near["time"]) is None:
        return matching_rows(con, rule, row)
    mine, column = row[near["time"]], near["sibling"]
    if "hours" in near:
        span = dt.timedelta(hours=near["hours"])
        window, bounds = f"{column} BETWEEN ? AND ?", [mine - span, mine + span]
    else:
        day = mine.date() if isinstance(mine, dt.datetime) else mine
        window, bounds = f"abs(date_diff('day', CAST({column} AS DATE), ?)) <= {int(near['days'])}", [day]
    return matching_rows(con, {**rule, "where": f"({column} IS NULL OR {window})", "bounds": bounds}, row)


def _same_name(con, named: dict | None, mine: str | None, sibling: dict, labels: dict) -> bool:
    """The row's item label `mine` and the sibling's name (its `named.sibling` column, or its item's label in
    `named.sibling_dictionary`) name one thing: concept keys that begin with the same word ('Dextrose 50%' and
    'Dextrose 50%', 'Fentanyl' and 'Fentanyl Citrate'), or (`compare: concept`) are one concept (`one_concept`).
    Always, without a `named` rule."""
    if named is None:
        return True
    if "sibling_dictionary" in named:
        dictionary = named["sibling_dictionary"]
        item = sibling.get(dictionary["key"])
        if item not in labels:
            labels[item] = _label(con, dictionary["table"], dictionary["key"], dictionary["label"], item)
        other = labels[item]
    else:
        other = concept_key(sibling.get(named["sibling"]))
    if mine is None or other is None:
        return False
    if named.get("compare") == "concept":
        return one_concept(mine, other)
    return mine.split()[:1] == other.split()[:1] != []


def one_concept(name: str, other: str) -> bool:
    """Two labels name one concept once their specimen or qualifier is dropped, however it is written: in
    brackets or after a comma ('Potassium (whole blood)', 'Potassium, Whole Blood' and the lab 'Potassium': blind
    audit 22), or their words are the same in another order ('Bilirubin, Total' and 'Total Bilirubin')."""
    return _unqualified(name) == _unqualified(other) or _words(name) == _words(other)


def _unqualified(name: str) -> str:
    """The label without a trailing bracketed qualifier and without what follows its first comma."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", name).split(",")[0].strip()


def _words(name: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9]+", name.lower()))


def _label(con, dictionary: str, key: str, label: str, value) -> str | None:
    """The concept key of the item's label in the source's dictionary (read once per source file)."""
    labels = source_fact(
        con,
        ("labels", dictionary, key, label),
        lambda source: dict(con.execute(f"SELECT {key}, {label} FROM {source}{dictionary}").fetchall()),
    )
    return concept_key(labels[value]) if value in labels else None


def derivable(con, table: str, rows: list[dict], any_member: bool = False) -> bool:
    """Some row's number can be computed from other results of its own sample (siblings.yaml derivations). With
    `any_member` (a conflict), or for a `solvable` rule, a row of any concept of a rule counts when its sample holds
    every other one: the relation says which of two copies is true (a diastolic beside its mean), or solves for the
    one removed (a bicarbonate from its sodium, chloride and anion gap)."""
    for rule in sibling_rules().get("derivations", {}).get(table, []):
        dictionary, match = rule["dictionary"], _listed(rule["match"])
        members = {concept_key(n) for n in [rule["concept"], *rule["from"]]}
        for row in rows:
            own = _label(con, dictionary, "itemid", "label", row["itemid"])
            derived = own == concept_key(rule["concept"]) or ((any_member or rule.get("solvable")) and own in members)
            if not derived or any(row.get(c) is None for c in match):
                continue
            others = con.execute(
                f"SELECT DISTINCT d.label FROM {table} t JOIN {dictionary} d USING (itemid) "
                f"WHERE {' AND '.join(f't.{c} = ?' for c in match)} AND t.itemid <> ? AND t.valuenum IS NOT NULL",
                [*(row[c] for c in match), row["itemid"]],
            ).fetchall()
            if members - {own} <= {concept_key(label) for (label,) in others}:
                return True
    return False


def _listed(targets: str | list[str]) -> list[str]:
    """A rule's sibling column(s) for one evidence column."""
    return [targets] if isinstance(targets, str) else list(targets)


def record_rules(encounter_table: str) -> list[dict]:
    """Tables that also record an encounter of `encounter_table`, with how their rows are found."""
    return sibling_rules()["records"].get(encounter_table, [])


def reads_table(sql: str, table: str) -> bool:
    """The SQL names `table` in a FROM or JOIN."""
    return re.search(rf"\b(FROM|JOIN)\s+{table}\b", sql, re.I) is not None
