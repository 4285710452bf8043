"""Admit agent SQL by allow-lists: one read query over the episode's tables and CTEs, allowed functions only.

The statement is parsed with sqlglot (DuckDB dialect) and the *regenerated* text of the checked tree is what the
gateway runs, so DuckDB never sees anything the check did not see.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import duckdb
import sqlglot
from sqlglot import exp

_READ_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery)
_DENIED_NODES = tuple(
    getattr(exp, name) for name in (
        "DDL", "DML", "Command", "Pragma", "Set", "Use", "Copy", "Attach", "Detach", "Describe", "Summarize",
        "Show", "Transaction", "Commit", "Rollback", "Placeholder", "Parameter", "Install", "Load", "Export",
    ) if hasattr(exp, name)
)
# Functions that reach the catalog, settings, session state or logs, or that build values of caller-chosen size
# (memory bombs that the buffer manager's memory_limit does not cover).
_DENIED_FUNCTIONS = re.compile(
    r"^(__internal.*|current_(?!date$|time$|timestamp$|localtime$|localtimestamp$).*|pg_.*|has_.*privilege"
    r"|.*_description|format_pg_type|format_type|get_block_size|map_.*pg_oid|getvariable|nextval|currval|setseed"
    r"|sleep_ms|stats|txid_current|version|write_log|json_(de)?serialize_sql|parse_duckdb_log_message"
    r"|in_search_path|alias|typeof|session_user|user|generate_series|range|repeat|lpad|rpad|list_resize|array_resize"
    r"|generate_subscripts|regexp_split_to_table|sql_.*|duckdb_.*|pragma_.*|query.*|read_.*|glob)$"
)
# Keywords and special forms that sqlglot renders like calls but DuckDB does not list in duckdb_functions().
_SYNTAX_WORDS = frozenset({
    "case", "cast", "try_cast", "extract", "interval", "current_date", "current_timestamp", "current_time",
    "localtime", "localtimestamp", "lambda", "not", "exists", "array", "coalesce", "struct_pack", "row", "map",
    "list_value", "unnest", "columns", "ifnull", "if",
})
_LEADING_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\(|$)")
# Functions DuckDB also calls without parentheses, where sqlglot sees a bare column.
_KEYWORD_FUNCTIONS = frozenset({"current_catalog", "current_schema", "current_user", "current_role", "session_user",
                                "user", "current_database", "current_query", "current_setting"})
_CTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class SqlRefused(ValueError):
    """The statement is not admitted; the message is what the agent reads after 'Error: '."""


def allowed_functions(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """Scalar, aggregate, window and scalar-macro names of this DuckDB, minus the denied ones."""
    rows = con.execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() "
        "WHERE function_type IN ('scalar', 'aggregate', 'window', 'macro')"
    ).fetchall()
    return frozenset(name.lower() for (name,) in rows if not _DENIED_FUNCTIONS.match(name.lower()))


def _parse_one(sql: str) -> exp.Expression:
    try:
        trees = [t for t in sqlglot.parse(sql, read="duckdb") if t is not None]
    except sqlglot.errors.SqlglotError as err:
        raise SqlRefused(f"could not parse the query: {str(err).splitlines()[0]}") from None
    if len(trees) != 1:
        raise SqlRefused(f"send exactly one statement (got {len(trees)})")
    return trees[0]


def _cte_names(tree: exp.Expression) -> set[str]:
    names = set()
    for cte in tree.find_all(exp.CTE):
        name = cte.alias_or_name
        if not _CTE_NAME.match(name) or name.startswith("__"):
            raise SqlRefused(f"CTE name {name!r} is not allowed (letters, digits and _ only, not starting with _)")
        names.add(name.lower())
    return names


def _check_table(node: exp.Table, names: set[str]) -> None:
    target = node.this
    if not isinstance(target, exp.Identifier):
        raise SqlRefused(f"table functions are not allowed: {node.sql(dialect='duckdb')[:80]}")
    if node.args.get("db") or node.args.get("catalog"):
        raise SqlRefused(f"use unqualified table names: {node.sql(dialect='duckdb')[:80]}")
    if target.name.lower() not in names:
        raise SqlRefused(f"unknown table {target.name!r}; call schema() for the tables of this task")


_CLASS_NAMES: dict[tuple, str | None] = {}


def _function_name(node: exp.Func) -> str | None:
    """The DuckDB name a function node is generated as. A known sqlglot class with the same set of arguments and
    flags is generated under the same name, so it is rendered once per such shape (rendering every node made the
    check quadratic)."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    kind = (type(node), tuple(sorted((k, v) if isinstance(v, bool) else (k, None) for k, v in node.args.items() if v)))
    if kind not in _CLASS_NAMES:
        match = _LEADING_NAME.match(node.sql(dialect="duckdb"))
        _CLASS_NAMES[kind] = match.group(1).lower() if match else None
    return _CLASS_NAMES[kind]


def _check_function(node: exp.Func, functions: frozenset[str]) -> None:
    name = _function_name(node)
    if name is None or name in _SYNTAX_WORDS:
        return
    if name not in functions:
        raise SqlRefused(f"function {name}() is not available")


def _check_column(node: exp.Column) -> None:
    if node.args.get("db") or node.args.get("catalog"):
        raise SqlRefused(f"column reference with catalog or schema is not allowed: {node.sql(dialect='duckdb')}")
    if not node.table and node.name.lower() in _KEYWORD_FUNCTIONS:
        raise SqlRefused(f"function {node.name.lower()} is not available")
    if node.name.lower() == "rowid":  # a table has it and an overlay view has not: it would tell which is patched
        raise SqlRefused("the rowid pseudo-column is not available")


def _check_node(node: exp.Expression, names: set[str], functions: frozenset[str]) -> None:
    if isinstance(node, _DENIED_NODES):
        raise SqlRefused("only read queries (SELECT) are allowed")
    if isinstance(node, exp.Table):
        _check_table(node, names)
    elif isinstance(node, exp.Column):
        _check_column(node)
    elif isinstance(node, exp.Func):
        _check_function(node, functions)
    elif isinstance(node, exp.With) and node.args.get("recursive"):
        raise SqlRefused("recursive CTEs are not allowed")


def admit(sql: str, tables: Iterable[str], functions: frozenset[str]) -> str:
    """The DuckDB text to run for `sql`, or SqlRefused saying why it is not admitted."""
    if not isinstance(sql, str) or not sql.strip():
        raise SqlRefused("query must be a non-empty string")
    tree = _parse_one(sql)
    if not isinstance(tree, _READ_ROOTS):
        raise SqlRefused("only read queries (SELECT) are allowed")
    names = {t.lower() for t in tables} | _cte_names(tree)
    for node in tree.walk():
        _check_node(node, names, functions)
    return tree.sql(dialect="duckdb", copy=False)  # the tree is ours and discarded: no defensive copy


@lru_cache(maxsize=4096)
def admit_cached(sql: str, tables: frozenset[str], functions: frozenset[str]) -> str:
    """`admit` memoised on the exact text: agents and trials repeat queries (refusals are not cached)."""
    return admit(sql, tables, functions)
