"""Noisy reference programs for repair contracts: the gold program over the valid rows of a table only.

SQL: every reference to the table in the gold query becomes a subquery without the invalid rows (sqlglot
rewrites the tree, so aliases and joins are kept). Python: the gold program sees the filtered frame.
"""

from __future__ import annotations

import polars as pl
import sqlglot
from sqlglot import expressions as exp


def excluding_sql(gold_sql: str, table: str, invalid_sql: str) -> str:
    """`gold_sql` reading only rows of `table` for which the boolean SQL `invalid_sql` is not true."""
    return reading_from(gold_sql, {table: f"SELECT * FROM {table} WHERE NOT coalesce(({invalid_sql}), FALSE)"})


def reading_from(gold_sql: str, views: dict[str, str]) -> str:
    """`gold_sql` with every unqualified reference to a table of `views` reading that view's SELECT instead (the
    SELECT may name the table itself: it then reads the table as the connection sees it)."""
    tree = sqlglot.parse_one(gold_sql, dialect="duckdb")
    for node in list(tree.find_all(exp.Table)):
        if node.name not in views or node.db:
            continue
        alias = node.alias or node.name
        view = f"({views[node.name]}) AS {alias}"
        node.replace(sqlglot.parse_one(f"SELECT * FROM {view}", dialect="duckdb").args["from_"].this)
    return tree.sql(dialect="duckdb")


def excluding_python(gold, table: str, invalid: pl.Expr, within: pl.Expr | None = None):
    """A `reference(tables, slots)`: the gold program on the tables with `table`'s invalid rows removed.

    `within` (optional) marks the only rows the rule can flag; the rule (a window expression, say) is then
    evaluated on those rows alone, as the SQL rule's subquery does, and the other rows pass untouched.
    """

    def reference(tables, slots):
        frame, keep = tables[table], ~invalid.fill_null(False)
        if within is None:
            valid = frame.filter(keep)  # lazy: the gold program's filters push down
        else:
            inside = within.fill_null(False)
            valid = pl.concat([frame.filter(~inside), frame.filter(inside).filter(keep)])
        return gold(tables.replaced({table: valid}), slots)

    return reference
