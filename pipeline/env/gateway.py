"""The SQL gateway: admitted read queries run on a locked, read-only DuckDB cursor with a time limit and a row cap."""

from __future__ import annotations

import datetime as dt
import decimal
import heapq
import itertools
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import duckdb

from pipeline.env.sqlcheck import SqlRefused, admit_cached, allowed_functions


class LimitValues(TypedDict):
    row_cap: int
    seconds: float
    memory_limit: str
    threads: int


DEFAULT_LIMITS: LimitValues = {"row_cap": 500, "seconds": 5.0, "memory_limit": "2GB", "threads": 2}
MAX_TEXT = 10_000  # characters of one text value returned to the agent
MAX_RESULT_CHARS = 256_000  # characters of values one result may hold in the host and the trajectory


@dataclass(frozen=True)
class Limits:
    """Per-query row cap and time limit; per-database memory and threads."""

    row_cap: int = DEFAULT_LIMITS["row_cap"]
    seconds: float = DEFAULT_LIMITS["seconds"]
    memory_limit: str = DEFAULT_LIMITS["memory_limit"]
    threads: int = DEFAULT_LIMITS["threads"]


@dataclass
class QueryOutcome:
    """A gateway result: column names, JSON-plain rows (at most the cap), whether rows were cut, or an error."""

    ok: bool
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False
    error: str | None = None
    types: list[str] | None = None
    size_capped: bool = False  # values were cut or rows dropped at MAX_RESULT_CHARS


class Watchdog:
    """One thread that interrupts cursors whose query outlives its deadline (a Timer thread per query cost more
    than a small query)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, duckdb.DuckDBPyConnection]] = []
        self._live: set[int] = set()
        self._wake, self._ids = threading.Condition(), itertools.count()
        threading.Thread(target=self._loop, name="ehrgym-sql-watchdog", daemon=True).start()

    def arm(self, cursor: duckdb.DuckDBPyConnection, seconds: float) -> int:
        with self._wake:
            token = next(self._ids)
            heapq.heappush(self._heap, (time.monotonic() + seconds, token, cursor))
            self._live.add(token)
            self._wake.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._wake:
            self._live.discard(token)

    def _loop(self) -> None:
        with self._wake:
            while True:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                deadline, token, cursor = self._heap[0]
                if time.monotonic() < deadline:
                    self._wake.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self._heap)
                self._live.discard(token)
                cursor.interrupt()


WATCHDOG = Watchdog()


def open_locked(db_path: Path, limits: Limits) -> duckdb.DuckDBPyConnection:
    """A read-only connection with external access off, memory and threads set, then the configuration locked."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "enable_external_access": False,
        "memory_limit": limits.memory_limit,
        "threads": limits.threads,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    con = duckdb.connect(str(db_path), read_only=True, config=config)  # an open instance of the file is shared
    if not con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
        con.execute("SET lock_configuration = true")
    return con


class Budget:
    """Characters a result may still take; text, lists and maps are cut when it runs out (a list of large strings
    must not reach the trajectory whole)."""

    def __init__(self, chars: int = MAX_RESULT_CHARS) -> None:
        self.left = chars

    def text(self, value: str) -> str:
        keep = max(0, min(len(value), MAX_TEXT, self.left))
        self.left -= max(keep, 1)
        return value if keep == len(value) else value[:keep] + f"...[{len(value) - keep} more characters]"

    def items(self, values: list) -> list:
        out: list[Any] = []
        for value in values:
            if self.left <= 0:
                return out + [f"...[{len(values) - len(out)} more items]"]
            out.append(plain(value, self))
        return out


def plain(value: Any, budget: Budget | None = None) -> Any:
    """A JSON-plain version of a DuckDB value (timestamps as ISO text, decimals as floats, NaN as None), cut to the
    result's character budget."""
    budget = budget if budget is not None else Budget()
    budget.left -= 0 if isinstance(value, (str, list, tuple, dict)) else 8
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return budget.text(bytes(value[:MAX_TEXT]).hex()[:MAX_TEXT])
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple)):
        return budget.items(list(value))
    if isinstance(value, dict):
        keys = list(value)
        return dict(zip((str(k) for k in keys), budget.items([value[k] for k in keys]), strict=False))
    if isinstance(value, str):
        return budget.text(value)
    return value


_NAME = r'(?:"[^"\s]*"|[A-Za-z_][A-Za-z0-9_$]*)'
# catalog.schema. prefixes: a noisy episode's overlay lives in "temp".main, the clean table in <catalog>.main
_QUALIFIER = re.compile(rf"{_NAME}\.{_NAME}\.(?={_NAME})")
# how the binder names a relation differs between a table, a view and the overlay's unioned rows
_NO_COLUMN = re.compile(
    r'\b(?:Table|View|Values list|Subquery|Table Function)\s+("[^"]*") does not have a '
    r'column named ("[^"]*")'
)


def clean_error(err: Exception | str) -> str:
    """The first line of an engine error, worded the same for a clean and a noisy episode: no catalog or schema
    qualifiers, one wording for a missing column, "table" for "view"."""
    text = str(err).strip()
    text = text.splitlines()[0] if text else type(err).__name__
    text = _QUALIFIER.sub("", text)
    text = _NO_COLUMN.sub(r"column \2 not found in \1", text)
    return text.replace("view", "table").replace("View", "Table")[:300]


def execute_admitted(cursor: duckdb.DuckDBPyConnection, text: str, seconds: float, limits: Limits) -> QueryOutcome:
    """Run an admitted query on `cursor` under the watchdog; every failure comes back as an outcome."""
    token = WATCHDOG.arm(cursor, seconds)
    try:
        result = cursor.execute(text)
        columns = [d[0] for d in result.description or []]
        types = [str(d[1]) for d in result.description or []]
        rows, budget = _fetch(result, limits.row_cap)
    except duckdb.InterruptException:
        return QueryOutcome(False, [], [], error=f"query exceeded the time limit of {limits.seconds:g} s")
    except (duckdb.Error, RuntimeError, ValueError, OverflowError, MemoryError) as err:
        return QueryOutcome(False, [], [], error=clean_error(err))
    finally:
        WATCHDOG.disarm(token)
    capped = budget.left <= 0
    cut = len(rows) > limits.row_cap or capped
    return QueryOutcome(True, columns, rows[: limits.row_cap], cut, types=types, size_capped=capped)


def _fetch(result: duckdb.DuckDBPyConnection, row_cap: int) -> tuple[list[list[Any]], Budget]:
    """Up to row_cap + 1 rows, one at a time, made plain under one character budget: once it is spent no further
    row is converted (500 rows of large strings would otherwise all be held in the host)."""
    rows: list[list[Any]] = []
    budget = Budget()
    while len(rows) <= row_cap and budget.left > 0:
        row = result.fetchone()
        if row is None:
            break
        rows.append([plain(v, budget) for v in row])
    return rows, budget


class Gateway:
    """Admits queries for one episode and runs them on its own cursor (which carries the episode's overlay), or
    through `engine` (text, seconds) -> outcome: the episode's connection in a child process (pipeline.env.executor)."""

    def __init__(
        self,
        cursor: duckdb.DuckDBPyConnection | None,
        tables: list[str],
        functions: frozenset[str],
        limits: Limits,
        engine: Callable[[str, float], QueryOutcome] | None = None,
    ):
        self.cursor, self.tables, self.functions, self.limits = cursor, frozenset(tables), functions, limits
        self.engine = engine

    @classmethod
    def functions_of(cls, con: duckdb.DuckDBPyConnection) -> frozenset[str]:
        return allowed_functions(con)

    def run(self, sql: str, deadline: float | None = None) -> QueryOutcome:
        """Admit and run `sql`; every failure comes back as an outcome with an error, never as an exception.
        `deadline` (time.monotonic()) is the calling tool's: past it no query is served, before it a query gets at
        most the time left (the Python tool's sql() channel passes its own)."""
        if not isinstance(sql, str):
            return QueryOutcome(False, [], [], error="query must be a string")
        seconds = self.limits.seconds if deadline is None else min(self.limits.seconds, deadline - time.monotonic())
        if seconds <= 0:
            return QueryOutcome(False, [], [], error="the tool's time limit has passed; no further queries are run")
        try:
            text = admit_cached(sql, self.tables, self.functions)
        except SqlRefused as err:
            return QueryOutcome(False, [], [], error=str(err))
        except (RecursionError, Exception) as err:  # a parser failure on hostile input must stay a tool error
            return QueryOutcome(False, [], [], error=f"could not check the query ({type(err).__name__})")
        return self._execute(text, seconds)

    def _execute(self, text: str, seconds: float) -> QueryOutcome:
        if self.engine is not None:
            return self.engine(text, seconds)
        if self.cursor is None:
            raise RuntimeError("the gateway has neither a cursor nor an engine")
        return execute_admitted(self.cursor, text, seconds, self.limits)
