"""The recovery strategies: each reads the noisy overlay as a careful analyst would and returns what it recovers."""

from __future__ import annotations

import re
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from pipeline.concepts import concept_key, concept_sql
from pipeline.db import scalar
from pipeline.noise.overlay import less_source_records, source_catalog
from pipeline.noise.recovery import strategy
from pipeline.noise.recovery.case import Case
from pipeline.noise.recovery.sql import answer_of, gold_tree, reads, rewrite_literals, temp_views, with_tables
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerValue, answers_agree, is_empty
from pipeline.templates.render import sql_literal
from pipeline.templates.spec import AnswerType


def _definite(answer: AnswerValue | None) -> AnswerValue | None:
    return None if answer is None or is_empty(answer) else answer


def _new(answer: AnswerValue | None, case: Case) -> AnswerValue | None:
    """A rewritten reading counts only where it changes what the plain gold reading says on the overlay (its value
    or its unit)."""
    answer = _definite(answer)
    if answer is None or (
        case.naive is not None and (answer.value, answer.unit) == (case.naive.value, case.naive.unit)
    ):
        return None
    return answer


def _facts(rule: dict[str, Any], key: str, case: Case) -> list[dict[str, Any]]:
    """The facts of a rule that name this template."""
    return [f for f in rule.get(key, []) if case.template.id in f["templates"]]


_WRAPPERS = (exp.Lower, exp.Upper, exp.Trim, exp.RegexpReplace)


def _core(node: exp.Expr) -> exp.Expr:
    """The column or literal inside a normalising wrapper (lower/trim/regexp_replace, as concept_sql writes)."""
    while isinstance(node, _WRAPPERS):
        node = node.this
    return node


def _byte_form(tree: exp.Expr, literal_of: dict[str, str]) -> exp.Expr:
    """The literal reading: every normalised `f(column) = f('literal')` back to byte equality, and a value set on
    a column with declared synonyms (`event_txt IN (...)`) back to its one literal value ('Administered')."""

    def swap(node: exp.Expr) -> exp.Expr:
        if (
            isinstance(node, exp.In)
            and isinstance(_core(node.this), exp.Column)
            and _core(node.this).name in literal_of
        ):
            column = _core(node.this)
            return exp.EQ(this=column.copy(), expression=exp.Literal.string(literal_of[column.name]))
        if isinstance(node, exp.EQ) and isinstance(node.this, _WRAPPERS) and isinstance(node.expression, _WRAPPERS):
            column, literal = _core(node.this), _core(node.expression)
            if isinstance(column, exp.Column) and isinstance(literal, exp.Literal) and literal.is_string:
                return exp.EQ(this=column.copy(), expression=literal.copy())
        return node

    return tree.copy().transform(swap)


@strategy("concept_variant")
def concept_variant(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """Read the question by concept (each text slot matched by concept key, declared record values with their
    synonyms, e.g. eMAR 'Flushed' is administered) and literally: where only the concept reading finds the fact,
    the question's premise holds and the concept reading is the analyst's answer."""
    slots = case.template.spec.slots
    concepts = {
        v for name, v in case.slots.items() if isinstance(v, str) and name in slots and slots[name].type == "text"
    }
    synonyms = {(s["column"], s["value"]): s["means"] for s in rule.get("synonyms", [])}

    def widen(column: exp.Expr, literal: str) -> exp.Expr | None:
        means = synonyms.get((column.name if isinstance(column, exp.Column) else "", literal))
        if means:
            return sqlglot.parse_one(
                f"{concept_sql(column.sql(dialect='duckdb'))} IN ({', '.join(_quote(concept_key(m)) for m in means)})",
                dialect="duckdb",
            )
        if literal in concepts:
            return sqlglot.parse_one(
                f"{concept_sql(column.sql(dialect='duckdb'))} = {_quote(concept_key(literal))}", dialect="duckdb"
            )
        return None

    gold = gold_tree(case)
    by_bytes = _byte_form(gold, {column: value for column, value in synonyms})
    by_concept = rewrite_literals(by_bytes, widen)
    if by_concept == by_bytes:
        return None
    read = lambda tree: case.naive if tree == gold else answer_of(con, case, tree)  # noqa: E731
    concept = _definite(read(by_concept))
    if concept is None:  # the concept reading finds nothing either: nothing to recover (and no second query)
        return None
    return concept if _definite(read(by_bytes)) is None else None  # only the concept reading finds the fact


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _repaired(con: duckdb.DuckDBPyConnection, case: Case, repairs: dict[str, dict[str, str]]) -> AnswerValue | None:
    """The gold reading over tables whose columns are replaced by repair expressions (alias `t` is the row)."""
    tree = gold_tree(case)
    wanted = {
        table: cols for table, cols in repairs.items() if table in case.patch.touched_tables and reads(tree, table)
    }
    if not wanted:
        return None
    read = {column.name for column in tree.find_all(exp.Column)}
    wanted = {
        table: cols
        for table, cols in wanted.items()
        if _repairs_a_touched_row(con, table, {c: e for c, e in cols.items() if c in read}, case)
    }
    if not wanted:  # nothing the question reads is repaired: an answer that moved would only be another tie-break
        return None
    views = {
        table: f"SELECT * REPLACE ({', '.join(f'{expr} AS {col}' for col, expr in cols.items())}) FROM {table} t"
        for table, cols in wanted.items()
    }
    with temp_views(con, views) as names:  # a repaired row: its reading counts even where it equals the naive one
        return _definite(answer_of(con, case, with_tables(tree, names)))


def _repairs_a_touched_row(con: duckdb.DuckDBPyConnection, table: str, cols: dict[str, str], case: Case) -> bool:
    """A repair expression gives another value than the row's own in a row the patch added."""
    patch = case.patch.tables[table]
    if not patch.add or not cols:
        return False
    differs = " OR ".join(f"(({expr}) IS DISTINCT FROM t.{col})" for col, expr in cols.items())
    # the overlay's own added rows (`__add_<table>`), not a key filter over the whole overlay: a copy that keeps
    # its original's key would find the original too, and the scan of a large overlay costs ~0.1 s a pair
    return scalar(con, f"SELECT count(*) FROM temp.main.__add_{table} t WHERE {differs}") > 0


@strategy("sibling_table")
def sibling_table(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A sibling table or column keeps the fact (pharmacy times, transfers' unit, value text, specimen time);
    or the question's fact lives in a table the noise did not touch."""
    for fact in _facts(rule, "intact_facts", case):
        touched = case.patch.touched_tables
        if touched and not set(fact["tables"]) & set(touched):
            return _definite(case.naive)
    tables = [r["table"] for r in rule.get("repairs", [])]
    if len(tables) != len(set(tables)):
        raise ValueError(f"recovery.yaml sibling_table: a table is repaired twice in {tables}; list its columns once")
    return _repaired(con, case, {r["table"]: r["columns"] for r in rule.get("repairs", [])})


@strategy("derived_value")
def derived_value(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A missing calculated lab result (MCH, MCV, MCHC) computed from the same specimen's other results."""
    if "labevents" not in case.patch.touched_tables:
        return None
    branches = " ".join(f"WHEN {_quote(d['label'])} THEN {_formula(d['formula'])}" for d in rule["derived"])
    label = "(SELECT min(i.label) FROM d_labitems i WHERE i.itemid = t.itemid)"
    expr = f"coalesce(t.valuenum, round(CASE {label} {branches} END, 1))"
    return _repaired(con, case, {"labevents": {"valuenum": expr}})


def _formula(formula: str) -> str:
    """`{Label}` -> the same specimen's single Blood result of that d_labitems label (NULL when none or several)."""

    def result(match: re.Match) -> str:
        return (
            f"(SELECT min(s.valuenum) FROM labevents s JOIN d_labitems i ON i.itemid = s.itemid WHERE "
            f"s.specimen_id = t.specimen_id AND i.label = {_quote(match.group(1))} AND i.fluid = 'Blood' "
            f"HAVING count(DISTINCT s.valuenum) = 1)"
        )

    return re.sub(r"\{([^}]+)\}", result, formula)


@strategy("breakpoint")
def breakpoint(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A missing or masked interpretation read from the MIC: by standard breakpoints (declared drug/organism pairs
    only), else by the one interpretation the record gives the same organism, antibiotic and MIC elsewhere."""
    column, masks = f"t.{rule['column']}", ", ".join(_quote(m) for m in rule["masks"])
    reading = f"coalesce({breakpoint_sql(rule)}, {record_reading_sql(rule)}, {column})"
    return _repaired(
        con,
        case,
        {
            rule["table"]: {
                rule["column"]: f"CASE WHEN coalesce({column} IN ({masks}), TRUE) THEN {reading} ELSE {column} END"
            }
        },
    )


def record_reading_sql(rule: dict[str, Any]) -> str:
    """The single interpretation other rows of the table give the same organism and antibiotic at the same MIC."""
    column, masks = rule["column"], ", ".join(_quote(m) for m in rule["masks"])
    same = " AND ".join(f"o.{c} = t.{c}" for c in ("org_name", "ab_name", "dilution_value"))
    return (
        f"(SELECT min(o.{column}) FROM {rule['table']} o WHERE {same} AND trim(o.dilution_comparison) = "
        f"trim(t.dilution_comparison) AND o.{column} NOT IN ({masks}) HAVING count(DISTINCT o.{column}) = 1)"
    )


def breakpoint_sql(rule: dict[str, Any]) -> str:
    """CASE expression: 'R' / 'S' where the dilution lies beyond a breakpoint, NULL in between or unknown."""
    comparison, value = "trim(t.dilution_comparison)", "t.dilution_value"
    whens = []
    for bp in rule["breakpoints"]:
        organism, antibiotic = _quote(bp["organism"]), _quote(bp["antibiotic"])
        pair = f"{concept_sql('t.org_name')} LIKE {organism} AND {concept_sql('t.ab_name')} = {antibiotic}"
        resistant, susceptible = float(bp["resistant_at_least"]), float(bp["susceptible_at_most"])
        whens.append(f"WHEN {pair} AND {comparison} IN ('=>', '>', '=') AND {value} >= {resistant} THEN 'R'")
        whens.append(f"WHEN {pair} AND {comparison} IN ('<=', '<', '=') AND {value} <= {susceptible} THEN 'S'")
    return f"(CASE {' '.join(whens)} END)"


def _moved_together(con: duckdb.DuckDBPyConnection, case: Case, fact: dict[str, Any]) -> bool:
    """Every altered row of the table is its source row with both ends shifted by one delta, nothing else changed."""
    table, start, end = fact["table"], fact["start"], fact["end"]
    patch = case.patch.tables[table]
    if not patch.hide or len(patch.hide) != len(patch.add):
        return False
    keys = " AND ".join(f"a.{c} = s.{c}" for c in fact["id"])  # the row's identity (a patch key may hold the time)
    others = [c for c in load_schema()[table].column_names if c not in (start, end)]
    same = " AND ".join(
        [f"a.{c} IS NOT DISTINCT FROM s.{c}" for c in others] + [f"a.{end} - a.{start} = s.{end} - s.{start}"]
    )
    source = f'"{source_catalog(con)}".main.{table}'
    n, kept = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {same}) FROM temp.main.__add_{table} a JOIN {source} s ON {keys}"
    ).fetchall()[0]
    return n == len(patch.add) and kept == n


@strategy("duration")
def duration(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A duration answer is unchanged when both ends of each altered row moved together: the plain reading stands."""
    for fact in _facts(rule, "facts", case):
        if fact["table"] in case.patch.touched_tables and _moved_together(con, case, fact):
            return _definite(case.naive)
    return None


@strategy("zero_count")
def zero_count(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A count or yes/no over a window inside the record's covered time span is 0 / no, not unknown."""
    for window in _facts(rule, "windows", case):
        cover = window["covered_by"]
        lo, hi = con.execute(
            f"SELECT min({cover['column']})::DATE, max({cover['column']})::DATE FROM {cover['table']}"
        ).fetchall()[0]
        start, end = (_date(con, case.slots[window[k]]) for k in ("start", "end"))
        if lo is not None and lo <= start and end <= hi:
            return _definite(case.naive) or _nothing(case)
    return None


def _date(con: duckdb.DuckDBPyConnection, value: Any):
    return con.execute("SELECT CAST(? AS DATE)", [str(value)[:10]]).fetchall()[0][0]


def _nothing(case: Case) -> AnswerValue | None:
    """The answer of a count (0) or a yes/no (no) over nothing."""
    zero = {AnswerType.count: 0, AnswerType.boolean: False}.get(case.template.spec.answer.type)
    return None if zero is None else AnswerValue(value=zero, unit=case.template.spec.answer.unit)


@strategy("other_qualifying_record")
def other_qualifying_record(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """A yes/no question still answered 'yes' by a record of an entity the noise did not touch."""
    for fact in _facts(rule, "facts", case):
        table = fact["table"]
        if table not in case.patch.touched_tables:
            continue
        entity = ", ".join(fact["entity"])
        patch, source = case.patch.tables[table], f'"{source_catalog(con)}".main.{table}'
        on = " AND ".join(f"s.{c} IS NOT DISTINCT FROM h.{c}" for c in patch.key_columns)
        touched = (
            f"SELECT {entity} FROM {source} s SEMI JOIN temp.main.__hide_{table} h ON {on} "
            f"UNION ALL SELECT {entity} FROM temp.main.__add_{table}"
        )
        same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM k.{c}" for c in fact["entity"])
        untouched = f"SELECT t.* FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM ({touched}) k WHERE {same})"
        with temp_views(con, {table: untouched}) as names:
            answer = answer_of(con, case, with_tables(gold_tree(case), names))
        if answer is not None and answer.value is True:
            return answer
    return None


@strategy("either_value")
def either_value(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """Rows added beside existing rows of the same record (a conflict): the answer read with every record's
    original rows and the answer read with every record's added rows; one answer both ways is the answer."""
    tree = gold_tree(case)
    added = {
        t: p for t, p in case.patch.tables.items() if p.add and not p.hide and t in rule["records"] and reads(tree, t)
    }
    if not added:
        return None
    catalog = source_catalog(con)
    originals = {t: f'SELECT * FROM "{catalog}".main.{t}' for t in added}
    replaced = {t: less_source_records(t, f'"{catalog}".main.{t}', rule["records"][t], p.add) for t, p in added.items()}
    answers = []
    for views in (originals, replaced):
        with temp_views(con, views) as names:
            answers.append(_definite(answer_of(con, case, with_tables(tree, names))))
    first, second = answers
    if first is None or second is None:
        return None
    plain = case.template.spec.answer.model_copy(update={"records": []})
    same = answers_agree(first.model_copy(update={"records": {}}), second.model_copy(update={"records": {}}), plain)
    return first if same else None


@strategy("sibling_resolves")
def sibling_resolves(con: duckdb.DuckDBPyConnection, case: Case, rule: dict[str, Any]) -> AnswerValue | None:
    """Rows added beside existing rows of the same record (a conflict) that a sibling settles: in each conflicting
    record the rows whose value differs from the sibling's single value are dropped when another row agrees with
    it; the gold reading over what is left is the answer (None when nothing was settled)."""
    tree = gold_tree(case)
    views = {}
    for resolver in rule["resolvers"]:
        table, patch = resolver["table"], case.patch.tables.get(resolver["table"])
        if patch is None or not patch.add or not reads(tree, table):
            continue
        inside = _among(patch.add, resolver["record"])
        columns = resolver["columns"]
        siblings = ", ".join(f"({expr}) AS __sibling_{c}" for c, expr in columns.items())
        window = f"OVER (PARTITION BY {', '.join(resolver['record'])})"
        settled = " OR ".join(_settled(c, window) for c in columns)
        resolved = (
            f"SELECT * EXCLUDE ({', '.join(f'__sibling_{c}' for c in columns)}, __drop) FROM ("
            f"SELECT *, {settled} AS __drop FROM (SELECT t.*, {siblings} FROM {table} t WHERE {inside})) "
            f"WHERE NOT __drop"
        )
        if scalar(con, f"SELECT count(*) FROM {table} t WHERE {inside}") > scalar(
            con, f"SELECT count(*) FROM ({resolved})"
        ):
            views[table] = f"SELECT * FROM {table} t WHERE NOT {inside} UNION ALL {resolved}"
    if not views:
        return None
    with temp_views(con, views) as names:
        return _definite(answer_of(con, case, with_tables(tree, names)))


def _settled(column: str, window: str) -> str:
    """True for a row of a conflicting record whose `column` differs from the sibling's value while another row of
    the record agrees with it: equal as text or as a number, or one of its '/' parts (an eMAR's 'PO' for a 'PO/NG'
    order)."""
    text = lambda c: f"CAST({c} AS VARCHAR)"  # noqa: E731
    sibling = text(f"__sibling_{column}")
    same = (
        f"({text(column)} = {sibling} OR coalesce(TRY_CAST({text(column)} AS DOUBLE) = TRY_CAST({sibling} AS DOUBLE), "
        f"false) OR coalesce(list_contains(string_split({text(column)}, '/'), {sibling}), false))"
    )
    return f"coalesce(NOT {same} AND count(DISTINCT {column}) {window} > 1 AND bool_or({same}) {window}, false)"


def _among(rows: list[dict[str, Any]], columns: list[str], alias: str = "t") -> str:
    """True for a row of `alias` equal on `columns` (NULL equal to NULL) to one of `rows`."""
    values = ", ".join("(" + ", ".join(sql_literal(row.get(c)) for c in columns) + ")" for row in rows)
    same = " AND ".join(f"{alias}.{c} IS NOT DISTINCT FROM __among.{c}" for c in columns)
    return f"EXISTS (SELECT 1 FROM (VALUES {values}) __among({', '.join(columns)}) WHERE {same})"
