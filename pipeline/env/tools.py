"""The four agent tools as typed signatures: one source for argument checking and the OpenAI function specs."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from pipeline.jsontree import without_key

Scalar = float | int | str | bool


def sql(query: str) -> None:
    """Run one read-only SQL query (DuckDB dialect) over this task's tables and return the rows.

    Args:
        query: a single SELECT statement (CTEs allowed); tables are referred to by their plain names.
    """


def python(code: str) -> None:
    """Run Python code in a sandbox and return what it prints; `sql(query)` inside returns a polars DataFrame.

    Args:
        code: Python source; polars is imported as `pl`; print what you want to read.
    """


def schema(table: str | None = None) -> None:
    """List the tables and their columns, or the columns and types of one table.

    Args:
        table: a table name; omit it to list every table.
    """


def answer(value: Scalar | list[Scalar] | None, unit: str | None = None, records: dict[str, Any] | None = None) -> None:
    """Give the final answer and end the episode; value null means the record does not support an answer.

    Args:
        value: the answer, of the type the task's answer_format names (number, count, text, true/false, date-time or list); null when the data does not support one.
        unit: the unit of the value; may be omitted when it is the answer_format's unit, or another unit of the same dimension with the value converted.
        records: only the record fields the task's answer_format lists, e.g. {"charttime": "..."}; omit when it lists none.
    """  # noqa: E501 - the tool description agents see: `_doc_parts` reads one line per argument


TOOLS: dict[str, Callable[..., None]] = {f.__name__: f for f in (sql, python, schema, answer)}


def _doc_parts(func: Callable) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(func) or ""
    summary = doc.split("\n\n")[0].replace("\n", " ").strip()
    params = dict(re.findall(r"^\s+(\w+): (.+)$", doc.split("Args:")[-1], flags=re.M)) if "Args:" in doc else {}
    return summary, params


@cache
def arguments_model(name: str) -> type[BaseModel]:
    """A strict pydantic model of the tool's arguments, built from its signature."""
    func = TOOLS[name]
    _, described = _doc_parts(func)
    fields: dict[str, Any] = {}
    for param in inspect.signature(func, eval_str=True).parameters.values():
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (param.annotation, Field(default, description=described.get(param.name, "")))
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def openai_spec(name: str) -> dict[str, Any]:
    """The tool in the OpenAI function-calling format."""
    summary, _ = _doc_parts(TOOLS[name])
    parameters = without_key(arguments_model(name).model_json_schema(), "title")
    parameters["additionalProperties"] = False
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": parameters}}


@cache
def _specs() -> tuple[dict[str, Any], ...]:
    return tuple(openai_spec(name) for name in TOOLS)


def tool_specs() -> list[dict[str, Any]]:
    """The four tools in the OpenAI format (built once; treat the dicts as read-only)."""
    return list(_specs())


class BadArguments(ValueError):
    """Arguments that do not fit the tool's signature."""


def parse_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """The validated arguments of a call, or BadArguments naming the tool and the problem."""
    if name not in TOOLS:
        raise BadArguments(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    if not isinstance(arguments, dict):
        raise BadArguments(f"arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    try:
        return dict(arguments_model(name).model_validate(arguments))
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in err.errors())
        raise BadArguments(f"bad arguments for {name}: {problems}") from None
