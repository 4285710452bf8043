"""SQL plumbing of the recovery check: run a template's gold SQL on the noisy overlay, rewritten by a strategy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import duckdb
import sqlglot
from sqlglot import exp

from pipeline.noise.recovery.case import Case
from pipeline.templates.answers import AnswerShapeError, AnswerValue, canonical_answer
from pipeline.templates.render import render_sql

PREFIX = "__recovery_"  # temp views a strategy creates; gold SQL reads them through `with_tables`


def gold_tree(case: Case) -> exp.Expr:
    """The gold SQL rendered with the noisy slots, parsed."""
    return sqlglot.parse_one(render_sql(case.template.gold_sql, case.slots), dialect="duckdb")


def answer_of(con: duckdb.DuckDBPyConnection, case: Case, tree: exp.Expr) -> AnswerValue | None:
    """The canonical answer of a (rewritten) gold query on the overlay; None when it fails to run or shape."""
    try:
        return canonical_answer(con.sql(tree.sql(dialect="duckdb")).pl(), case.template.spec.answer)
    except (duckdb.Error, AnswerShapeError, ValueError, TypeError):
        return None


def with_tables(tree: exp.Expr, names: dict[str, str]) -> exp.Expr:
    """The query reading `names[table]` wherever it read `table` (aliases kept, so column references hold)."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Table) and not node.args.get("db") and node.name in names:
            alias = node.alias or node.name
            return exp.to_table(names[node.name]).as_(alias)
        return node

    return tree.copy().transform(swap)


def reads(tree: exp.Expr, table: str) -> bool:
    """The query reads the table (by its unqualified name)."""
    return any(t.name == table and not t.args.get("db") for t in tree.find_all(exp.Table))


@contextmanager
def temp_views(con: duckdb.DuckDBPyConnection, views: dict[str, str]) -> Iterator[dict[str, str]]:
    """Create `__recovery_<name>` temp views from SELECT texts for the block; yields {name: view name}."""
    names = {name: f"{PREFIX}{name}" for name in views}
    try:
        for name, select in views.items():
            con.execute(f"CREATE OR REPLACE TEMP VIEW {names[name]} AS {select}")
        yield names
    finally:
        for view in names.values():
            con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")


def rewrite_literals(tree: exp.Expr, rule: Callable[[exp.Expr, str], exp.Expr | None]) -> exp.Expr:
    """Replace each `column = 'literal'` comparison by `rule(column, literal)` where the rule gives one."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.EQ):
            for side, other in ((node.this, node.expression), (node.expression, node.this)):
                if isinstance(other, exp.Literal) and other.is_string and not isinstance(side, exp.Literal):
                    return rule(side, other.this) or node
        return node

    return tree.copy().transform(swap)
