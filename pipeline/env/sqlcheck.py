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

from pipeline.env.sqlfunctions import ALLOWED_FUNCTIONS, BOUNDED
from pipeline.source.schema import load_schema

_READ_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery)
_DENIED_NODES = tuple(
    getattr(exp, name)
    for name in (
        "DDL",
        "DML",
        "Command",
        "Pragma",
        "Set",
        "Use",
        "Copy",
        "Attach",
        "Detach",
        "Describe",
        "Summarize",
        "Show",
        "Transaction",
        "Commit",
        "Rollback",
        "Placeholder",
        "Parameter",
        "Install",
        "Load",
        "Export",
    )
    if hasattr(exp, name)
)
# Keywords and special forms that sqlglot renders like calls but DuckDB does not list in duckdb_functions().
_SYNTAX_WORDS = frozenset(
    {
        "case",
        "cast",
        "try_cast",
        "extract",
        "interval",
        "current_date",
        "current_timestamp",
        "current_time",
        "localtime",
        "localtimestamp",
        "lambda",
        "not",
        "exists",
        "array",
        "coalesce",
        "struct_pack",
        "row",
        "map",
        "list_value",
        "unnest",
        "columns",
        "ifnull",
        "if",
    }
)
_LEADING_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\(|$)")
# Functions DuckDB also calls without parentheses, where sqlglot sees a bare column.
_KEYWORD_FUNCTIONS = frozenset(
    {
        "current_catalog",
        "current_schema",
        "current_user",
        "current_role",
        "session_user",
        "user",
        "current_database",
        "current_query",
        "current_setting",
    }
)
_CTE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Names DuckDB resolves to its own catalog objects: no CTE or alias may take them (a backstop to the scope check).
_SYSTEM_NAME = re.compile(
    r"^(duckdb_|pg_|sqlite_|pragma_|information_schema|(system|temp|main|memory|character_sets|check_constraints"
    r"|columns|constraint_column_usage|constraint_table_usage|key_column_usage|referential_constraints|schemata"
    r"|tables|table_constraints|views)$)",
    re.IGNORECASE,
)
MAX_QUERY_CHARS = 64_000  # parsing costs ~8 us a character: a cap keeps one hostile query under half a second
MAX_QUERY_NODES = 20_000  # the checks walk every node; the demo's largest reference program has 1,379
# Pseudo-columns a base table has and an overlay view has not: in any position they would tell which is patched.
_PSEUDO_COLUMNS = frozenset({"rowid"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class SqlRefused(ValueError):
    """The statement is not admitted; the message is what the agent reads after 'Error: '."""


def allowed_functions(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The reviewed allow-list (pipeline.env.sqlfunctions) cut to the scalar, aggregate, window and macro functions
    this DuckDB has."""
    rows = con.execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() "
        "WHERE function_type IN ('scalar', 'aggregate', 'window', 'macro')"
    ).fetchall()
    return frozenset(name.lower() for (name,) in rows) & ALLOWED_FUNCTIONS


def _parse_one(sql: str) -> exp.Expr:
    try:
        trees = [t for t in sqlglot.parse(sql, read="duckdb") if t is not None]
    except sqlglot.errors.SqlglotError as err:
        raise SqlRefused(f"could not parse the query: {str(err).splitlines()[0]}") from None
    if len(trees) != 1:
        raise SqlRefused(f"send exactly one statement (got {len(trees)})")
    return trees[0]


def _check_names(tree: exp.Expr) -> None:
    """CTE names: letters, digits and _, not starting with _; no CTE or alias named like a DuckDB catalog object."""
    for cte in tree.find_all(exp.CTE):
        name = cte.alias_or_name
        if not _CTE_NAME.match(name) or name.startswith("__"):
            raise SqlRefused(f"CTE name {name!r} is not allowed (letters, digits and _ only, not starting with _)")
    for alias in tree.find_all(exp.TableAlias):
        if _SYSTEM_NAME.match(alias.name):
            raise SqlRefused(f"the name {alias.name!r} is reserved; choose another CTE or table alias")


class _Ctes:
    """Where each WITH declares each CTE name (first position), computed once per WITH: the visibility check is
    then one lookup per enclosing query (scanning every CTE list per table reference made admission quadratic)."""

    def __init__(self) -> None:
        self._index: dict[int, dict[str, int]] = {}

    def _declared(self, with_: exp.With) -> dict[str, int]:
        if id(with_) not in self._index:
            names: dict[str, int] = {}
            for i, cte in enumerate(with_.expressions):
                names.setdefault(cte.alias_or_name.lower(), i)
            self._index[id(with_)] = names
        return self._index[id(with_)]

    def visible(self, node: exp.Expr, name: str) -> bool:
        """Whether CTE `name` is in scope at `node`: declared by an enclosing WITH, and inside a CTE's own body
        only if declared before it (a name declared in a nested query is not visible outside it)."""
        child, parent = node, node.parent
        while parent is not None:
            if isinstance(parent, exp.With):
                if self._declared(parent).get(name, len(parent.expressions)) < (child.index or 0):
                    return True
            else:
                with_ = parent.args.get("with_") or parent.args.get("with")
                if isinstance(with_, exp.With) and with_ is not child and name in self._declared(with_):
                    return True
            child, parent = parent, parent.parent
        return False


def _check_table(node: exp.Table, tables: frozenset[str], ctes: _Ctes) -> None:
    target = node.this
    if not isinstance(target, exp.Identifier):
        raise SqlRefused(f"table functions are not allowed: {node.sql(dialect='duckdb')[:80]}")
    if node.args.get("db") or node.args.get("catalog"):
        raise SqlRefused(f"use unqualified table names: {node.sql(dialect='duckdb')[:80]}")
    name = target.name.lower()
    is_cte = ctes.visible(node, name)
    if name not in tables and not is_cte:
        raise SqlRefused(f"unknown table {target.name!r}; call schema() for the tables of this task")
    if node.args.get("sample"):
        raise SqlRefused("sampling (TABLESAMPLE, USING SAMPLE) is not available; use ORDER BY ... LIMIT")
    if not is_cte:
        _check_alias_columns(node, name)


def _check_alias_columns(node: exp.Table, name: str) -> None:
    """A column-alias list longer than the table: the binder names the table for a base table and the alias for a
    view (an overlay), so the check answers first, the same way for both."""
    alias = node.args.get("alias")
    named = len(alias.columns) if isinstance(alias, exp.TableAlias) else 0
    have = len(load_schema()[name].column_names) if name in load_schema() else None
    if have is not None and named > have:
        raise SqlRefused(f"the alias list of table {name} names {named} columns; it has {have}")


def _check_pivot(node: exp.Pivot) -> None:
    """PIVOT without an IN list, or with a subquery for it, makes DuckDB create an ENUM type in the temp catalog
    (a write, one per call, kept for the episode's life): require a list of values."""
    if node.args.get("unpivot"):
        return
    ons = list(node.args.get("fields") or node.expressions)  # standard form: FOR col IN (...); DuckDB's: ON col
    if not ons or not all(
        isinstance(on, exp.In)
        and on.expressions
        and not on.args.get("query")
        and not any(e.find(exp.Query) for e in on.expressions)
        for on in ons
    ):
        raise SqlRefused(
            "PIVOT needs an explicit IN list of values (no subquery) for every ON column, e.g. "
            "PIVOT t ON k IN ('a', 'b') USING count(*)"
        )


_CLASS_NAMES: dict[tuple, str | None] = {}


def _function_name(node: exp.Func) -> str | None:
    """The DuckDB name a function node is generated as. A known sqlglot class with the same set of arguments and
    flags is generated under the same name, so it is rendered once per such shape (rendering every node made the
    check quadratic). JSON functions sqlglot renders as operators (`json_extract(j, p)` as `j -> p`) go by their
    class name, so the reviewed list decides them too."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    kind = (type(node), tuple(sorted((k, v) if isinstance(v, bool) else (k, None) for k, v in node.args.items() if v)))
    if kind not in _CLASS_NAMES:
        if type(node).__name__.upper().startswith("JSON"):
            _CLASS_NAMES[kind] = _CAMEL.sub("_", type(node).__name__).lower()
        else:
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


def _check_identifier(node: exp.Identifier) -> None:
    """Every identifier, not only column references: USING lists, alias lists, PIVOT/UNPIVOT, EXCLUDE..."""
    if node.name.lower() in _PSEUDO_COLUMNS:  # a table has it and an overlay view has not
        raise SqlRefused(f"the {node.name.lower()} pseudo-column is not available")


def _check_node(node: exp.Expr, tables: frozenset[str], functions: frozenset[str], ctes: _Ctes) -> None:
    if isinstance(node, _DENIED_NODES):
        raise SqlRefused("only read queries (SELECT) are allowed")
    if isinstance(node, exp.Identifier):
        _check_identifier(node)
    elif isinstance(node, exp.TableSample):
        raise SqlRefused("sampling (TABLESAMPLE, USING SAMPLE) is not available; use ORDER BY ... LIMIT")
    elif isinstance(node, exp.Table):
        _check_table(node, tables, ctes)
    elif isinstance(node, exp.Pivot):
        _check_pivot(node)
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
    if len(sql) > MAX_QUERY_CHARS:
        raise SqlRefused(f"the query is {len(sql):,} characters long; at most {MAX_QUERY_CHARS:,} are accepted")
    tree = _parse_one(sql)
    if not isinstance(tree, _READ_ROOTS):
        raise SqlRefused("only read queries (SELECT) are allowed")
    _check_names(tree)
    names, ctes, bounded = frozenset(t.lower() for t in tables), _Ctes(), []
    for count, node in enumerate(tree.walk()):
        if count >= MAX_QUERY_NODES:
            raise SqlRefused(f"the query has more than {MAX_QUERY_NODES:,} syntax nodes; simplify it")
        _check_node(node, names, functions, ctes)
        if isinstance(node, exp.Func) and _function_name(node) in BOUNDED:
            bounded.append(node)
    _bound_arguments(bounded)
    return tree.sql(dialect="duckdb", copy=False)  # the tree is ours and discarded: no defensive copy


@lru_cache(maxsize=64)
def _length_guard(name: str, max_chars: int) -> exp.Expr:
    """`x` as an expression that fails the query when x is longer than max_chars, evaluating x once (a CASE would
    repeat x, and nested calls would double the text at every level)."""
    return sqlglot.parse_one(
        f"LIST_TRANSFORM([__arg], LAMBDA __s : CASE WHEN LENGTH(__s) > {max_chars} THEN ERROR('{name}() accepts text "
        f"of at most {max_chars:,} characters') ELSE __s END)[1]",
        read="duckdb",
    )


def _bound_arguments(nodes: list[exp.Func]) -> None:
    """Wrap the two text arguments of each bounded function (sqlfunctions.yaml) in its length guard."""
    for node in nodes:  # pre-order: an inner call's guard is built inside the outer call's argument, not copied
        name = _function_name(node)
        if name is None:  # not reached: admit passes only the functions BOUNDED names
            continue
        args = node.expressions[:2] if isinstance(node, exp.Anonymous) else [node.this, node.args.get("expression")]
        for arg in (a for a in args if isinstance(a, exp.Expression)):
            guard = _length_guard(name, BOUNDED[name]).copy()
            placeholder = guard.find(exp.Column)
            if placeholder is None:
                raise RuntimeError(f"the length guard of {name}() has no argument placeholder")
            arg.replace(guard)
            placeholder.replace(arg)


@lru_cache(maxsize=4096)
def admit_cached(sql: str, tables: frozenset[str], functions: frozenset[str]) -> str:
    """`admit` memoised on the exact text: agents and trials repeat queries (refusals are not cached)."""
    return admit(sql, tables, functions)
