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
    tree = sqlglot.parse_one(gold_sql, dialect="duckdb")
    for node in list(tree.find_all(exp.Table)):
        if node.name != table or node.db:
            continue
        alias = node.alias or table
        valid = f"(SELECT * FROM {table} WHERE NOT coalesce(({invalid_sql}), FALSE)) AS {alias}"
        node.replace(sqlglot.parse_one(f"SELECT * FROM {valid}", dialect="duckdb").args["from_"].this)
    return tree.sql(dialect="duckdb")


def excluding_python(gold, table: str, invalid: pl.Expr):
    """A `reference(tables, slots)`: the gold program on the tables with `table`'s invalid rows removed."""

    def reference(tables, slots):
        valid = tables[table].filter(~invalid.fill_null(False)).collect()
        return gold(tables.replaced({table: valid}), slots)

    return reference
