"""The recovery check: each audit class is caught by its strategy, and its unanswerable twin is left alone."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import yaml

from pipeline.noise.overlay import overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.recovery import STRATEGIES, recover
from pipeline.noise.recovery.case import Case, load_config
from pipeline.source.schema import load_schema
from pipeline.templates.answers import AnswerShapeError, AnswerValue, canonical_answer
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.programs import run_sql
from pipeline.templates.registry import load_templates

CASES = yaml.safe_load((Path(__file__).parent / "fixtures" / "recovery" / "cases.yaml").read_text())
TEMPLATES = {t.id: t for t in load_templates()}


def _source(rows: dict[str, list[dict]]) -> duckdb.DuckDBPyConnection:
    """An in-memory MIMIC-IV (every table, official column types, no NOT NULL) holding the fixture rows."""
    con = duckdb.connect()
    for table in load_schema().values():
        con.execute(f"CREATE TABLE {table.name} ({', '.join(f'{c.name} {c.duckdb_type}' for c in table.columns)})")
    for name, table_rows in rows.items():
        for row in table_rows:
            con.execute(
                f"INSERT INTO {name} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values())
            )
    return con


def _recovered(case: dict) -> tuple[str, AnswerValue] | None:
    con, template = _source(case["rows"]), TEMPLATES[case["template"]]
    slots = typed_slots(template, case["slots"])
    patch = Patch(tables={t: TablePatch(**p) for t, p in case.get("patch", {}).items()})
    expected = AnswerValue(value=case["expected"], unit=template.spec.answer.unit)
    with overlay(con, patch):
        try:
            naive = canonical_answer(run_sql(con, template.gold_sql, slots), template.spec.answer)
        except (duckdb.Error, AnswerShapeError):
            naive = None
        return recover(con, Case(template, slots, patch, case["contract"], expected, naive))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_recovery_case(case):
    found = _recovered(case)
    assert (found and found[0]) == case["fires"], f"{case['name']}: recovered {found}"


def test_every_strategy_has_a_case_and_a_twin():
    fired = {c["fires"] for c in CASES if c["fires"]}
    assert fired == set(STRATEGIES) == set(load_config())
    assert sum(c["fires"] is None for c in CASES) >= len(fired)


def test_breakpoints_agree_with_interpreted_demo_rows(source):
    """On the real demo, every test with both an interpretation and a breakpoint reading agrees."""
    from pipeline.noise.recovery.strategies import breakpoint_sql

    reading = breakpoint_sql(load_config()["breakpoint"])
    n, wrong = source.sql(
        f"SELECT count(*), count(*) FILTER (WHERE {reading} <> interpretation) FROM microbiologyevents t "
        f"WHERE interpretation IS NOT NULL AND {reading} IS NOT NULL"
    ).fetchall()[0]
    assert n > 50 and wrong == 0


DEMO_PAIRS = [
    ("displaced_time", "lab_first_value_within_24h"),
    ("displaced_time", "drug_given_first_24h"),
    ("orphan_reference", "icu_admission_delay_hours"),
    ("out_of_window", "admissions_count_in_window"),
    ("null_value", "organism_resistant_to_antibiotic"),
    ("false_premise", "drug_first_administration_time"),
    ("conflicting_duplicate", "patients_with_lab_above_threshold"),
]


def test_no_kept_demo_pair_is_recoverable(source):
    """Pairs built on the real demo through verify_pair (which runs the check) are never recoverable afterwards."""
    from pipeline.noise.base import Rejected, subtypes
    from pipeline.noise.verify import verify_pair
    from pipeline.templates.instantiate import instantiate
    from pipeline.templates.programs import Tables

    kept, rejected = [], []
    for subtype, template_id in DEMO_PAIRS:
        template = TEMPLATES[template_id]
        for task in instantiate(source, [template], per_template=3, seed=0)[0]:
            try:
                kept.append(
                    (verify_pair(source, Tables(source), task, template, subtypes()[subtype], seed=0), template)
                )
            except Rejected as exc:
                rejected.append(exc.reason)
    assert kept and any(r.startswith("recoverable_") for r in rejected), rejected
    for pair, template in kept:
        slots = typed_slots(template, pair.noisy_slots)
        with overlay(source, pair.patch):
            assert (
                recover(source, Case(template, slots, pair.patch, pair.contract, pair.expected, pair.naive_answer))
                is None
            ), pair.pair_id
