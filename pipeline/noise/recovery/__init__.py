"""The recovery check: before a pair is kept, play the careful analyst on its noisy overlay.

Each strategy (concept-normalised matching, sibling tables, duration arithmetic, zero-count semantics, another
qualifying record, antibiotic breakpoints, an encounter's time bounded by its events) is a small registered function
declared with its facts in `pipeline/noise/recovery.yaml`. It reads the overlay like an analyst would and returns a
definite answer it recovers, or None. Written apart from the sub-types' guards on purpose: it is the independent second
opinion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

from pipeline.noise.base import Rejected
from pipeline.noise.recovery.case import Case, load_config
from pipeline.templates.answers import AnswerValue, answers_agree, is_empty

Strategy = Callable[[duckdb.DuckDBPyConnection, Case, dict[str, Any]], AnswerValue | None]
STRATEGIES: dict[str, Strategy] = {}


def strategy(name: str) -> Callable[[Strategy], Strategy]:
    """Decorator: register a recovery strategy under its name (the name recovery.yaml uses)."""

    def add(fn: Strategy) -> Strategy:
        if name in STRATEGIES:
            raise ValueError(f"recovery strategy {name!r} registered twice")
        STRATEGIES[name] = fn
        return fn

    return add


def contradicts(answer: AnswerValue | None, case: Case) -> bool:
    """A definite recovered answer the label does not give (any answer against an abstain label)."""
    if answer is None or is_empty(answer):
        return False
    if case.expected is None or is_empty(case.expected):
        return True
    plain = case.template.spec.answer.model_copy(update={"records": []})
    bare = lambda a: a.model_copy(update={"records": {}})  # noqa: E731 - records are provenance, not the answer
    return not answers_agree(bare(answer), bare(case.expected), plain)


def recover(
    con: duckdb.DuckDBPyConnection, case: Case, config: dict[str, dict] | None = None
) -> tuple[str, AnswerValue] | None:
    """The first strategy (in recovery.yaml's order) that recovers an answer the label contradicts."""
    import pipeline.noise.recovery.anchors  # noqa: F401 - registers on import
    import pipeline.noise.recovery.strategies  # noqa: F401

    for name, rule in (config if config is not None else load_config()).items():
        if name not in STRATEGIES:
            raise ValueError(f"recovery.yaml: unknown strategy {name!r} (known: {sorted(STRATEGIES)})")
        answer = STRATEGIES[name](con, case, rule)
        if answer is not None and contradicts(answer, case):
            return name, answer
    return None


def check_recovery(con: duckdb.DuckDBPyConnection, case: Case) -> None:
    """Raise Rejected('recoverable_<strategy>') when the analyst recovers an answer the label contradicts."""
    found = recover(con, case)
    if found is not None:
        raise Rejected(f"recoverable_{found[0]}")
