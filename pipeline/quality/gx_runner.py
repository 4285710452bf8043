"""Validate pandas frames against Great Expectations suites stored as JSON, batch by batch.

Great Expectations is imported here only (it takes seconds to import): keep this module off the
import path of the CLI and the environment; import it inside the functions that gate.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

SAMPLE_SIZE = 10
_INDEX = "ehrgym_index"  # GX does not return results in suite order: each result is matched by this


@dataclass
class Outcome:
    """One expectation's result summed over all batches of a suite's frame."""

    expectation: str
    columns: list[str]
    rule: str
    status: str  # "pass" | "fail" | "known_exception"
    element_count: int = 0
    unexpected_count: int = 0
    sample: list[Any] = field(default_factory=list)
    exception: dict[str, Any] | None = None

    @property
    def unexpected_percent(self) -> float:
        return 100.0 * self.unexpected_count / self.element_count if self.element_count else 0.0


@dataclass
class SuiteReport:
    """A suite's outcomes plus the raw GX validation result of every batch."""

    suite: str
    rows: int
    outcomes: list[Outcome]
    gx_results: list[dict[str, Any]]

    @property
    def success(self) -> bool:
        return all(o.status != "fail" for o in self.outcomes)


@dataclass
class GateReport:
    """All suites of one gate (e.g. the source gate on one database)."""

    gate: str
    target: str
    suites: list[SuiteReport]

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "target": self.target,
            "success": self.success,
            "suites": [
                {
                    "suite": s.suite,
                    "success": s.success,
                    "rows": s.rows,
                    "outcomes": [asdict(o) | {"unexpected_percent": o.unexpected_percent} for o in s.outcomes],
                    "gx_results": s.gx_results,
                }
                for s in self.suites
            ],
        }

    def write_json(self, path: Path) -> None:
        from pipeline.atomic import atomic_output

        with atomic_output(Path(path), overwrite=True) as tmp:
            tmp.write_text(json.dumps(self.to_json_dict(), indent=1, sort_keys=True, default=str) + "\n")


def load_suite_json(path: Path) -> dict[str, Any]:
    """A suite file: `{"name": ..., "expectations": [{"type", "kwargs", "meta"}], "meta": {...}}`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read expectation suite JSON: {exc}") from exc
    if not isinstance(data, dict) or "name" not in data or not isinstance(data.get("expectations"), list):
        raise ValueError(f"{path}: expected an object with 'name' and a list 'expectations'")
    return data


def expectation_columns(kwargs: dict[str, Any]) -> list[str]:
    """Every column an expectation reads, whatever its kwargs call them."""
    cols = [kwargs[k] for k in ("column", "column_A", "column_B") if k in kwargs]
    return cols + list(kwargs.get("column_list", []))


@cache
def _batch_definition():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    asset = context.data_sources.add_pandas("ehrgym").add_dataframe_asset("frame")
    return asset.add_batch_definition_whole_dataframe("whole")


def _to_suite(suite_json: dict[str, Any]):
    from great_expectations.core import ExpectationSuite

    return ExpectationSuite(
        name=suite_json["name"],
        expectations=[
            {"type": e["type"], "kwargs": e["kwargs"], "meta": e.get("meta", {}) | {_INDEX: i}}
            for i, e in enumerate(suite_json["expectations"])
        ],
    )


def _settle(expectation: dict[str, Any], outcome: Outcome) -> None:
    """Turn a failure into a known exception when the suite records one that covers it."""
    known = expectation.get("meta", {}).get("known_exception")
    if outcome.unexpected_count == 0 and outcome.status != "fail":
        outcome.status = "pass"
        return
    if known and outcome.unexpected_percent <= float(known["max_unexpected_percent"]):
        outcome.status, outcome.exception = "known_exception", known
    else:
        outcome.status = "fail"


def validate_batches(suite_json: dict[str, Any], frames: Iterable[pd.DataFrame]) -> SuiteReport:
    """Validate every frame against the suite and sum unexpected counts per expectation."""
    suite, batch_definition = _to_suite(suite_json), _batch_definition()
    expectations = suite_json["expectations"]
    outcomes = [
        Outcome(e["type"], expectation_columns(e["kwargs"]), e.get("meta", {}).get("rule", e["type"]), "pass")
        for e in expectations
    ]
    gx_results, rows = [], 0
    for frame in frames:
        rows += len(frame)
        batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
        result = batch.validate(suite, result_format="SUMMARY")
        gx_results.append(_reproducible(result.to_json_dict(), frame))
        for item in result.results:
            _accumulate(outcomes[item.expectation_config.meta[_INDEX]], item)
    for expectation, outcome in zip(expectations, outcomes, strict=True):
        _settle(expectation, outcome)
    return SuiteReport(suite_json["name"], rows, outcomes, gx_results)


def _reproducible(result: dict[str, Any], frame: pd.DataFrame) -> dict[str, Any]:
    """Equal inputs give equal reports: GX stamps the wall-clock load time into every result (dropped), and
    fingerprints a frame with dict or list cells by pickling it, whose bytes depend on which equal cells happen to
    be one object (a rebuild's pair gate fingerprinted the same tasks differently); the frame's JSON is hashed
    instead."""
    markers = result.get("meta", {}).get("batch_markers", {})
    markers.pop("ge_load_time", None)
    if "pandas_data_fingerprint" in markers:
        text = frame.to_json(orient="split", date_format="iso", default_handler=str)
        markers["pandas_data_fingerprint"] = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
    return result


def _accumulate(outcome: Outcome, item) -> None:
    result = item.result or {}
    outcome.element_count += int(result.get("element_count") or 0)
    outcome.unexpected_count += int(result.get("unexpected_count") or 0)
    if not item.success and not result.get("unexpected_count"):
        outcome.status = "fail"  # a table-level expectation failed without row counts
        outcome.unexpected_count += 1
        outcome.element_count += 1
    room = SAMPLE_SIZE - len(outcome.sample)
    if room > 0:
        outcome.sample.extend(_jsonable(v) for v in (result.get("partial_unexpected_list") or [])[:room])


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
