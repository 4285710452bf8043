"""Sibling facts (siblings.yaml): where the record keeps a fact a noise changes, and the patch that changes it alike."""

from __future__ import annotations

import datetime as dt
import re
from functools import cache
from importlib import resources
from typing import Any

import yaml

from pipeline.noise.patch import Patch, TablePatch


@cache
def sibling_rules() -> dict[str, Any]:
    """{"companions": ..., "rows": ..., "records": ...} from siblings.yaml."""
    return yaml.safe_load(resources.files("pipeline.noise").joinpath("siblings.yaml").read_text())


def companions(table: str, column: str) -> list[str]:
    """Columns of the same row of `table` that state the fact in `column`."""
    return sibling_rules()["companions"].get(table, {}).get(column, [])


def matching_rows(con, rule: dict, row: dict) -> list[dict]:
    """Rows of `rule['table']` that `row` finds through `rule['match']` (none when an `on` value is NULL)."""
    if any(row[c] is None for c in rule["match"]):
        return []
    where = " AND ".join(f"{s} = ?" for s in rule["match"].values())
    found = con.execute(f"SELECT * FROM {rule['table']} WHERE {where} ORDER BY ALL", [row[c] for c in rule["match"]])
    names = [d[0] for d in found.description]
    return [dict(zip(names, values)) for values in found.fetchall()]


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
    (`replace=False`, a conflicting duplicate) as a second copy beside the sibling row."""
    tables = {name: p.model_copy(deep=True) for name, p in patched.tables.items()}
    for rule in sibling_rules()["rows"].get(table, []):
        taken = {
            tuple(k[c] for c in rule["key"])
            for k in tables.get(rule["table"], TablePatch(key_columns=rule["key"])).hide
        }
        for old, new in zip(before, after):
            changed = {e: s for e, s in rule["columns"].items() if old.get(e) != new.get(e)}
            for sibling in matching_rows(con, rule, old) if changed else []:
                key = tuple(sibling[c] for c in rule["key"])
                if key in taken:
                    continue
                taken.add(key)
                target = tables.setdefault(rule["table"], TablePatch(key_columns=rule["key"]))
                if replace:
                    target.hide.append({c: sibling[c] for c in rule["key"]})
                target.add.append(
                    {
                        **sibling,
                        **{
                            s: _alike(sibling[s], old[e], new[e])
                            for e, targets in changed.items()
                            for s in _listed(targets)
                        },
                    }
                )
    return Patch(tables=tables, slots=patched.slots)


def witnessed(con, table: str, rows: list[dict]) -> bool:
    """Some row's encounter has rows near its time in a table that may record the same event another way."""
    return any(
        _near(rule.get("near"), row, sibling)
        for rule in sibling_rules().get("witnesses", {}).get(table, [])
        for row in rows
        for sibling in matching_rows(con, rule, row)
    )


def _near(near: dict | None, row: dict, sibling: dict) -> bool:
    """The sibling row lies within `near.days` of the row (always, without a `near` rule or a time)."""
    if near is None or row.get(near["time"]) is None or sibling.get(near["sibling"]) is None:
        return True
    day = lambda value: value.date() if isinstance(value, dt.datetime) else value  # noqa: E731
    return abs((day(sibling[near["sibling"]]) - day(row[near["time"]])).days) <= near["days"]


def _listed(targets: str | list[str]) -> list[str]:
    """A rule's sibling column(s) for one evidence column."""
    return [targets] if isinstance(targets, str) else list(targets)


def record_rules(encounter_table: str) -> list[dict]:
    """Tables that also record an encounter of `encounter_table`, with how their rows are found."""
    return sibling_rules()["records"].get(encounter_table, [])


def reads_table(sql: str, table: str) -> bool:
    """The SQL names `table` in a FROM or JOIN."""
    return re.search(rf"\b(FROM|JOIN)\s+{table}\b", sql, re.I) is not None
