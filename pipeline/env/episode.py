"""One episode: a release task on its clean source or its noisy overlay, driven through the four tools."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from typing import Any

import duckdb

from pipeline.env.executor import Executor
from pipeline.env.gateway import MAX_RESULT_CHARS, Gateway, Limits, QueryOutcome
from pipeline.env.records import QueryRecord, ToolCall, ToolResult, Trajectory
from pipeline.env.tools import BadArguments, parse_arguments, tool_specs
from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch
from pipeline.release.records import TaskRecord
from pipeline.source.schema import TABLE_NAMES, load_schema
from pipeline.templates.answers import AnswerValue

MAX_CELL = 200
# Every readable table is a view of one shape in every episode, clean or noisy (pipeline.noise.overlay): which
# table a patch touches must not show in scan times, errors or plans. () reads untouched tables directly.
SHADOW_TABLES: tuple[str, ...] = TABLE_NAMES


def error(message: str) -> ToolResult:
    return ToolResult(ok=False, content=f"Error: {message}", error=message)


def render_table(columns: list[str], rows: list[list[Any]], truncated: bool, size_capped: bool = False) -> str:
    """Rows as a pipe-separated text table, with the row count (and a note when a cap cut them)."""
    lines = [" | ".join(columns)] + [" | ".join(str(v)[:MAX_CELL] for v in row) for row in rows]
    note = f"({len(rows)} rows shown; more rows exist, refine the query)" if truncated else f"({len(rows)} rows)"
    if size_capped:
        note = (
            f"({len(rows)} rows shown; the result was cut at {MAX_RESULT_CHARS:,} characters of values, "
            "refine the query)"
        )
    return "\n".join(lines + [note])


def schema_text(table: str | None) -> str:
    """The schema tool's text; it comes from the schema file, so it is the same for clean and noisy episodes."""
    tables = load_schema()
    if table is None:
        return "\n".join(f"{t.name}({', '.join(t.column_names)})" for t in tables.values())
    if table.lower() not in tables:
        raise BadArguments(f"unknown table {table!r}; call schema() without arguments for the list")
    return "\n".join(
        f"{c.name} {c.duckdb_type}{'' if c.nullable else ' NOT NULL'}" for c in tables[table.lower()].columns
    )


class Episode:
    """Tools sql / python / schema / answer over one task's data; every call is recorded for the trajectory."""

    def __init__(
        self,
        task: TaskRecord,
        cursor: duckdb.DuckDBPyConnection | None,
        patch: Patch | None,
        functions: frozenset[str],
        limits: Limits,
        max_turns: int = 30,
        executor: Executor | None = None,
    ):
        """Queries run on `cursor` (its overlay applied here) or, given an `executor`, in its child process (the
        overlay applied there; `cursor` is None)."""
        self.task, self.max_turns, self.limits = task, max_turns, limits
        self._stack = ExitStack()
        if executor is None:
            if cursor is None:
                raise ValueError("an episode needs a cursor or an executor")
            self._stack.callback(cursor.close)
            self._stack.enter_context(overlay(cursor, patch, SHADOW_TABLES))
            self.gateway = Gateway(cursor, list(TABLE_NAMES), functions, limits)
        else:
            remote = executor.open(patch)
            self._stack.callback(executor.close, remote)
            engine = lambda text, seconds: executor.run(remote, text, seconds)  # noqa: E731 - one episode's engine
            self.gateway = Gateway(None, list(TABLE_NAMES), functions, limits, engine=engine)
        self.calls: list[ToolCall] = []
        self.answer: AnswerValue | None = None
        self.done, self.truncated = False, False
        self._pending: list[QueryRecord] = []
        self.sandbox_limits = None  # None: the sandbox defaults (pipeline.env.sandbox.SandboxLimits)

    @property
    def observation(self) -> dict[str, Any]:
        answer_format = self.task.answer_format.model_dump(mode="json") if self.task.answer_format else None
        return {
            "task_id": self.task.task_id,
            "question": self.task.question,
            "scope": self.task.scope,
            "intent": self.task.intent,
            "answer_format": answer_format,
            "tables": list(TABLE_NAMES),
            "tools": tool_specs(),
        }

    def call(self, tool: str, arguments: dict) -> ToolResult:
        """Run one tool call; failures are results with ok=False, never exceptions."""
        if self.done:
            return error("the episode has ended; no further calls are accepted")
        started, self._pending = time.perf_counter(), []
        try:
            result = self._dispatch(tool, parse_arguments(tool, arguments))
        except BadArguments as err:
            result = error(str(err))
        except Exception as err:  # noqa: BLE001 - a tool never crashes the episode; the type alone is shown
            result = error(f"the {tool} tool failed ({type(err).__name__})")
        self.calls.append(
            ToolCall(
                tool=str(tool),
                arguments=_plain_arguments(arguments),
                result=result,
                queries=self._pending,
                seconds=time.perf_counter() - started,
            )
        )
        if not self.done and len(self.calls) >= self.max_turns:
            self.done, self.truncated = True, True
        return result

    def _dispatch(self, tool: str, args: dict[str, Any]) -> ToolResult:
        return getattr(self, f"_tool_{tool}")(**args)

    def query(self, sql: str, via: str, deadline: float | None = None) -> QueryOutcome:
        """Run a statement through the gateway and record it (the Python tool's `sql()` lands here too, with the
        tool's deadline: a query never outlives the Python call that sent it)."""
        outcome = self.gateway.run(sql, deadline)
        self._pending.append(
            QueryRecord(
                sql=sql if isinstance(sql, str) else repr(sql),
                via=via,
                ok=outcome.ok,
                row_count=len(outcome.rows),
                error=outcome.error,
            )
        )
        return outcome

    def _tool_sql(self, query: str) -> ToolResult:
        outcome = self.query(query, "sql")
        if not outcome.ok:
            return error(outcome.error or "query failed")
        content = render_table(outcome.columns, outcome.rows, outcome.truncated, outcome.size_capped)
        return ToolResult(
            ok=True, content=content, columns=outcome.columns, rows=outcome.rows, truncated=outcome.truncated
        )

    def _tool_python(self, code: str) -> ToolResult:
        from pipeline.env.sandbox import SandboxLimits, run_code

        limits = self.sandbox_limits or SandboxLimits()
        deadline = time.monotonic() + limits.wall_seconds
        ok, output = run_code(code, lambda sql: self.query(sql, "python", deadline), limits)
        return ToolResult(ok=True, content=output) if ok else error(output)

    def _tool_schema(self, table: str | None = None) -> ToolResult:
        return ToolResult(ok=True, content=schema_text(table))

    def _tool_answer(self, value: Any, unit: str | None = None, records: dict | None = None) -> ToolResult:
        self.answer = AnswerValue(value=value, unit=unit, records=records or {})
        self.done = True
        return ToolResult(ok=True, content="Answer recorded; the episode has ended.")

    def trajectory(self, agent: str, trial: int = 0) -> Trajectory:
        return Trajectory(
            task_id=self.task.task_id,
            agent=agent,
            trial=trial,
            question=self.task.question,
            answer_format=self.task.answer_format,
            calls=list(self.calls),
            answer=self.answer,
            truncated=self.truncated,
        )

    def close(self) -> None:
        """Drop the overlay and the cursor; safe to call twice."""
        self.done = True
        self._stack.close()

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain_arguments(arguments: Any) -> dict[str, Any]:
    """The call's arguments as JSON values for the trajectory (whatever the agent sent)."""
    if not isinstance(arguments, dict):
        return {"_invalid": repr(arguments)[:200]}
    try:
        return json.loads(json.dumps(arguments, default=repr))
    except (TypeError, ValueError):
        return {str(k): repr(v)[:200] for k, v in arguments.items()}
