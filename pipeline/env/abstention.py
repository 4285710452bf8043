"""Abstention validity from evidence: did some successful statement of the trace inspect the evidence?

A statement *covers* the evidence when, for some reference in it to a table that holds the evidence, the
conjunction of that reference's own single-table predicates (WHERE and JOIN ON conjuncts that mention only that
reference's columns; conjuncts touching other tables or subqueries are dropped: an over-approximation) holds, on
the clean source, for at least one row the table holds of the evidence. The holders (`holders`):

- an evidence table: the label's evidence rows (inline keys, or `evidence_sql` run on the clean source);
- a dictionary of an evidence table (`d_labitems` of `labevents` ...): the dictionary rows of the evidence rows,
  for a reference joined in the same query block with a reference to that evidence table, or for any reference
  when the dictionary is the inspect table (the looked-up concept lives there: a name search finds its entry);
- the inspect table: the looked-up entity, one row per looked-up value, holding the inspect filter's values and the
  task's slot values that are columns of the table. Conjuncts on its other columns are unknown for an entity and
  left out (guards such as `admittime IS NOT NULL`, a time window), except on ids and foreign keys (a wrong
  `itemid` names another concept). So `subject_id = X` covers a nonexistent admission of patient X and
  `label ILIKE '%grav%'` a perturbed name that contains it. For query-level noise the looked-up encounter id (a
  nonexistent admission, one without the premised events) is looked up in any table carrying it.

A reference counts only with at least one conjunct on an identifying column (ids, keys, foreign keys, the
concept columns the task's slots name, a time column where the task has a time window): `SELECT * FROM labevents
LIMIT 5` inspects nothing. The one exception is an inspect target with an empty filter (a population time window):
there the looked-up entity is the table itself and any read of it counts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from pipeline.db import first_row
from pipeline.env.records import Trajectory
from pipeline.release.records import LabelRecord
from pipeline.source.schema import load_schema
from pipeline.templates.spec import Template

_TIME_TYPES = ("TIMESTAMP", "DATE")
_ENCOUNTER_IDS = ("subject_id", "hadm_id", "stay_id")


@dataclass(frozen=True)
class Holder:
    """Rows a table holds of the evidence: `sql` (with `params`) selects them with the table's columns."""

    table: str
    kind: str  # "evidence", "dictionary" (of the evidence table `via`) or "entity"
    sql: str
    params: tuple[Any, ...] = ()
    via: str | None = None
    known: frozenset[str] | None = None  # entity rows: the columns they set (the others are unknown, not NULL)


@dataclass(frozen=True)
class Reference:
    """One reference to a source table in one query block: its alias, own conjuncts and the tables beside it."""

    table: str
    alias: str
    conjuncts: tuple[exp.Expr, ...]
    siblings: frozenset[str]


@dataclass(frozen=True)
class Coverage:
    """Whether the trace covered the evidence, and which statement did (or why none did)."""

    covered: bool
    detail: str


def coverage(
    label: LabelRecord, trajectory: Trajectory, template: Template | None, source: duckdb.DuckDBPyConnection
) -> Coverage:
    """Did a successful gateway statement of the trajectory cover the label's evidence on the clean `source`?"""
    found = holders(label, template, source)
    if not found:
        return Coverage(False, "the label names no evidence and no inspect target")
    keys = identifying_columns(label, template)
    ran = 0
    for call in trajectory.calls:
        for query in (q for q in call.queries if q.ok):
            ran += 1
            for ref in references(query.sql):
                holder = next((h for h in found if covers(ref, h, keys, label, source)), None)
                if holder is not None:
                    return Coverage(True, f"statement {ran} ({query.via}) covered {_describe(holder)}")
    return Coverage(False, _uncovered(found, ran, (label.inspect or {}).get("table")))


def _uncovered(found: list[Holder], ran: int, inspected: str | None) -> str:
    tables = sorted({h.table for h in found if h.kind != "entity" or h.table == inspected})
    anywhere = (
        "; the looked-up id in any table carrying it"
        if any(h.kind == "entity" and h.table != inspected for h in found)
        else ""
    )
    return f"none of {ran} successful statement(s) covered the evidence (held by {', '.join(tables)}{anywhere})"


def _describe(holder: Holder) -> str:
    if holder.kind == "entity":
        return f"the looked-up entity in {holder.table}"
    if holder.kind == "dictionary":
        return f"the {holder.table} entries of the evidence in {holder.via}"
    return f"evidence rows of {holder.table}"


# --- statements: table references and their own predicates ---------------------------------------------------


@cache
def _sqlglot_schema() -> dict[str, object]:  # {table: {column: type}}, as qualify() types its schema
    return {t.name: {c.name: c.duckdb_type for c in t.columns} for t in load_schema().values()}


@lru_cache(maxsize=4096)
def references(sql: str) -> tuple[Reference, ...]:
    """Every reference to a source table in the statement with its own conjuncts; () when it does not parse."""
    try:
        tree = qualify(
            sqlglot.parse_one(sql, dialect="duckdb"),
            schema=_sqlglot_schema(),
            dialect="duckdb",
            validate_qualify_columns=False,
        )
        scopes = traverse_scope(tree)
    except (sqlglot.errors.SqlglotError, KeyError, ValueError):
        return ()
    refs = []
    for scope in scopes:
        tables = {
            alias: src.name
            for alias, src in scope.sources.items()
            if isinstance(src, exp.Table) and src.name in load_schema()
        }
        conjuncts = list(_block_conjuncts(scope.expression))
        for alias, table in sorted(tables.items()):
            own = tuple(c for c in conjuncts if _only_alias(c, alias))
            refs.append(Reference(table, alias, own, frozenset(tables.values())))
    return tuple(refs)


def _block_conjuncts(select: exp.Expr) -> Iterator[exp.Expr]:
    """The AND-ed conjuncts of a query block's WHERE and JOIN ON clauses."""
    if not isinstance(select, exp.Select):
        return
    where = select.args.get("where")
    clauses = [where.this] if where else []
    clauses += [j.args["on"] for j in select.args.get("joins") or [] if j.args.get("on")]
    for clause in clauses:
        yield from _split_and(clause)


def _split_and(node: exp.Expr) -> Iterator[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from _split_and(node.left)
        yield from _split_and(node.right)
    else:
        yield node


def _only_alias(conjunct: exp.Expr, alias: str) -> bool:
    if conjunct.find(exp.Select, exp.Subquery) is not None:
        return False
    columns = list(conjunct.find_all(exp.Column))
    return bool(columns) and all(c.table == alias for c in columns)


# --- which columns identify what a reference reads ------------------------------------------------------------


def identifying_columns(label: LabelRecord, template: Template | None) -> dict[str, frozenset[str]]:
    """Per table: ids, keys, foreign keys, the columns the task's slots and inspect filter name, and (when the
    task has a time window) the time columns. A reference counts only with a conjunct on one of them."""
    slots = template.spec.slots if template else {}
    named = set(label.slots) | set((label.inspect or {}).get("filter", {}))
    vocab = {s.vocabulary for s in slots.values() if s.vocabulary}
    windowed = any(s.type in ("date", "datetime") for s in slots.values())
    out = {}
    for table in load_schema().values():
        keys = set(key_columns(table.name)) | {c for c in table.column_names if c in named}
        keys |= {v.split(".")[1] for v in vocab if v.split(".")[0] == table.name}
        if windowed:
            keys |= {c.name for c in table.columns if c.duckdb_type in _TIME_TYPES}
        out[table.name] = frozenset(keys)
    return out


@cache
def key_columns(table: str) -> frozenset[str]:
    """Columns that name a record or entity: ids, `itemid`, the primary key and the foreign keys."""
    spec = load_schema()[table]
    keys = {c for c in spec.column_names if c.endswith("_id") or c == "itemid"} | set(spec.primary_key or ())
    return frozenset(keys | {c for fk in spec.foreign_keys for c in fk.columns})


def _decidable(conjunct: exp.Expr, known: frozenset[str], table: str) -> bool:
    """Can an entity row decide this conjunct? Yes on the columns it sets; also on unset ids and foreign keys (a
    wrong `itemid` names another concept), except NULL guards (`hadm_id IS NOT NULL`)."""
    names = {c.name for c in conjunct.find_all(exp.Column)}
    if names <= known:
        return True
    guard = isinstance(conjunct, exp.Is) or (isinstance(conjunct, exp.Not) and isinstance(conjunct.this, exp.Is))
    return not guard and names <= known | _reference_columns(table)


@cache
def _reference_columns(table: str) -> frozenset[str]:
    spec = load_schema()[table]
    return frozenset(
        {c for c in spec.column_names if c.endswith("_id") or c == "itemid"}
        | {c for fk in spec.foreign_keys for c in fk.columns}
    )


def covers(
    ref: Reference,
    holder: Holder,
    keys: dict[str, frozenset[str]],
    label: LabelRecord,
    source: duckdb.DuckDBPyConnection,
) -> bool:
    """Does the reference's conjunction hold for a row of the holder (on the clean source)?"""
    inspect = label.inspect or {}
    if ref.table != holder.table or (
        holder.kind == "dictionary" and holder.table != inspect.get("table") and holder.via not in ref.siblings
    ):
        return False
    conjuncts = [q for q in ref.conjuncts if holder.known is None or _decidable(q, holder.known, ref.table)]
    open_entity = holder.kind == "entity" and not inspect.get("filter")
    if not open_entity and not any(c.name in keys[ref.table] for q in conjuncts for c in q.find_all(exp.Column)):
        return False
    where = " AND ".join(f"({c.sql(dialect='duckdb')})" for c in conjuncts) or "TRUE"
    alias = exp.to_identifier(ref.alias, quoted=True).sql(dialect="duckdb")
    try:
        row = first_row(source, f"SELECT 1 FROM ({holder.sql}) AS {alias} WHERE {where} LIMIT 1", list(holder.params))
    except duckdb.Error:
        return False
    return row is not None


# --- where the evidence is held --------------------------------------------------------------------------------


def holders(label: LabelRecord, template: Template | None, source: duckdb.DuckDBPyConnection) -> list[Holder]:
    """The evidence tables' rows, their dictionaries' rows and the looked-up entity, as relations on the source."""
    found = _evidence_holders(label, source)
    found += [d for h in list(found) for d in _dictionary_holders(h)]
    table = (label.inspect or {}).get("table")
    if table in load_schema():
        found.append(_entity_holder(label, template, table))
        found += [_entity_holder(label, template, t) for t in _id_carriers(label)]
    return found


def _id_carriers(label: LabelRecord) -> list[str]:
    """A query-level label's looked-up encounter (a nonexistent patient or admission, one without the premised
    events) can be checked in any table carrying its ids: the other tables with every filter column, when the
    filter holds only encounter ids. Record- and value-level entities are checked where their evidence is."""
    inspect = _inspect_of(label)
    table, filt = inspect["table"], inspect.get("filter", {})
    if label.level != "query" or not filt or not set(filt) <= set(_ENCOUNTER_IDS):
        return []
    return [t.name for t in load_schema().values() if t.name != table and set(filt) <= set(t.column_names)]


def _inspect_of(label: LabelRecord) -> dict[str, Any]:
    """The label's inspect target (the entity holders are built only for a label that has one)."""
    if label.inspect is None:
        raise ValueError("the label has no inspect target")
    return label.inspect


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _evidence_holders(label: LabelRecord, source: duckdb.DuckDBPyConnection) -> list[Holder]:
    if label.evidence is not None:
        by_table: dict[str, list[dict[str, Any]]] = {}
        for row in label.evidence:
            by_table.setdefault(str(row.get("table_name")), []).append(row)
        return [_inline_holder(t, rows) for t, rows in sorted(by_table.items()) if t in load_schema()]
    if not label.evidence_sql:
        return []
    return _sql_holders(label.evidence_sql, source)


def _inline_holder(table: str, rows: list[dict[str, Any]]) -> Holder:
    """The table's rows whose key columns equal one of the inline evidence rows (typed by the schema)."""
    spec = load_schema()[table]
    cols = [c for c in rows[0] if c in spec.column_names]
    cast = ", ".join(f"CAST(? AS {spec.column(c).duckdb_type})" for c in cols)
    values = ", ".join(f"({cast})" for _ in rows)
    on = " AND ".join(f't."{c}" = ev."{c}"' for c in cols)
    sql = (
        f'SELECT t.* FROM "{table}" AS t WHERE EXISTS (SELECT 1 FROM (VALUES {values}) AS ev('
        f"{', '.join(chr(34) + c + chr(34) for c in cols)}) WHERE {on})"
    )
    return Holder(table, "evidence", sql, tuple(r.get(c) for r in rows for c in cols))


def _sql_holders(evidence_sql: str, source: duckdb.DuckDBPyConnection) -> list[Holder]:
    """Evidence too large to inline: `evidence_sql` run inside each check (its columns are the keys)."""
    inner = f"(\n{evidence_sql.strip().rstrip(';')}\n)"
    try:
        cursor = source.execute(f"SELECT DISTINCT table_name FROM {inner} ORDER BY 1")
        tables, columns = (
            [r[0] for r in cursor.fetchall()],
            [d[0] for d in cursor.execute(f"SELECT * FROM {inner} LIMIT 0").description],
        )
    except duckdb.Error:
        return []
    found = []
    for table in (t for t in tables if t in load_schema()):
        cols = [c for c in columns if c in load_schema()[table].column_names]
        on = " AND ".join(f't."{c}" = ev."{c}"' for c in cols)
        sql = (
            f'SELECT t.* FROM "{table}" AS t WHERE EXISTS (SELECT 1 FROM {inner} AS ev '
            f"WHERE ev.table_name = '{table}' AND {on})"
        )
        found.append(Holder(table, "evidence", sql))
    return found


def _dictionary_holders(evidence: Holder) -> list[Holder]:
    """For each dictionary (`d_*`) the evidence table references: the entries of the evidence rows."""
    found = []
    for fk in load_schema()[evidence.table].foreign_keys:
        if not fk.references.startswith("d_"):
            continue
        on = " AND ".join(f'd."{r}" = e."{c}"' for c, r in zip(fk.columns, fk.ref_columns, strict=True))
        sql = f'SELECT d.* FROM "{fk.references}" AS d WHERE EXISTS (SELECT 1 FROM ({evidence.sql}) AS e WHERE {on})'
        found.append(Holder(fk.references, "dictionary", sql, evidence.params, via=evidence.table))
    return found


def _entity_holder(label: LabelRecord, template: Template | None, table: str) -> Holder:
    """The looked-up entity as rows of `table`: the inspect filter's values (one row per combination of listed
    values) and the slot values that are columns of the table; NULL elsewhere."""
    spec = load_schema()[table]
    values = {k: v for k, v in label.slots.items() if k in spec.column_names}
    for key, value in _inspect_of(label).get("filter", {}).items():
        column = _entity_column(key, table, template)
        if column is not None:
            values[column] = value
    columns = sorted(values)
    combos = list(itertools.product(*(_listed(values[c]) for c in columns)))
    select = ", ".join(
        f'CAST({"?" if c.name in columns else "NULL"} AS {c.duckdb_type}) AS "{c.name}"' for c in spec.columns
    )
    params = [combo[columns.index(c.name)] for combo in combos for c in spec.columns if c.name in columns]
    return Holder(
        table, "entity", " UNION ALL ".join(f"SELECT {select}" for _ in combos), tuple(params), known=frozenset(columns)
    )


def _entity_column(key: str, table: str, template: Template | None) -> str | None:
    """The inspect table's column an inspect filter key names: itself, or its slot's vocabulary column there."""
    if key in load_schema()[table].column_names:
        return key
    slot = template.spec.slots.get(key) if template else None
    if slot and slot.vocabulary and slot.vocabulary.split(".")[0] == table:
        return slot.vocabulary.split(".")[1]
    return None
