"""The source quality gate: suites cover the schema, the synthetic source and the real demo pass (the demo with
its recorded known exceptions), injected faults are caught, the CLI reports them."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import duckdb
import pytest
from aggregate import assert_all_pass
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.quality.gx_runner import load_suite_json
from pipeline.quality.source_gate import DEFAULT_SUITES, PK_DUPLICATE, fk_column, validate_source
from pipeline.source.schema import load_schema

SCHEMA = load_schema()


def _rules(table: str) -> set[tuple[str, str]]:
    suite = load_suite_json(DEFAULT_SUITES / f"{table}.json")
    return {(e["type"], e["kwargs"].get("column", "")) for e in suite["expectations"]}


@pytest.mark.parametrize("table", list(SCHEMA))
def test_suite_covers_every_key_and_not_null_of_the_schema(table: str):
    rules, spec = _rules(table), SCHEMA[table]
    if spec.primary_key:
        assert ("expect_column_values_to_be_null", PK_DUPLICATE) in rules
    for fk in spec.foreign_keys:
        assert ("expect_column_values_to_be_null", fk_column(fk)) in rules, fk.name
    for column in spec.columns:
        if not column.nullable:
            assert ("expect_column_values_to_not_be_null", column.name) in rules, column.name


def test_time_order_and_value_set_rules_are_present():
    assert ("expect_column_pair_values_a_to_be_greater_than_b", "") in _rules("admissions")
    assert ("expect_column_pair_values_a_to_be_greater_than_b", "") in _rules("icustays")
    assert ("expect_column_values_to_be_in_set", "gender") in _rules("patients")


def _known_exceptions_match_their_recorded_counts(report) -> None:
    known = [(s.suite, o) for s in report.suites for o in s.outcomes if o.status == "known_exception"]
    assert {(suite, o.columns[0]) for suite, o in known} == {
        ("source.emar", "__fk__poe_id__poe"),
        ("source.emar", "__fk__pharmacy_id__pharmacy"),
        ("source.emar_detail", "__fk__pharmacy_id__pharmacy"),
        ("source.pharmacy", "__fk__poe_id__poe"),
    }
    for _, outcome in known:
        observed = outcome.exception["observed"]
        assert (outcome.unexpected_count, outcome.element_count) == (
            observed["unexpected_count"],
            observed["element_count"],
        )
        assert len(outcome.sample) > 0 and all(isinstance(v, str) for v in outcome.sample)


def _strict_emar_suites(folder: Path) -> Path:
    """The default suites with emar's rules stripped of their recorded known exceptions."""
    suites = folder / "suites"
    shutil.copytree(DEFAULT_SUITES, suites)
    strict = json.loads((suites / "emar.json").read_text())
    for expectation in strict["expectations"]:
        expectation["meta"].pop("known_exception", None)  # the rule without its recorded exception
    (suites / "emar.json").write_text(json.dumps(strict))
    return suites


def test_the_demo_passes_the_gate_with_exactly_its_recorded_known_exceptions(demo_db: Path, tmp_path: Path):
    """The real demo's own dangling keys (emar and pharmacy rows whose poe / pharmacy row is not in the demo):
    recorded as known exceptions, the gate passes; without them emar's suite fails. Every failing check named."""
    report = validate_source(demo_db)

    def passes() -> None:
        assert report.success and len(report.suites) == 31

    def strict_fails() -> None:
        strict = validate_source(demo_db, _strict_emar_suites(tmp_path))
        assert not strict.success and {suite for suite, _ in _failed(strict)} == {"source.emar"}

    assert_all_pass(
        [
            ("the demo passes", passes),
            ("known exceptions", partial(_known_exceptions_match_their_recorded_counts, report)),
            ("without the recorded exceptions emar fails", strict_fails),
        ]
    )


def _ids(db: Path) -> tuple[int, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        first, second = (r[0] for r in con.execute("SELECT subject_id FROM patients ORDER BY 1 LIMIT 2").fetchall())
    return first, second


@pytest.fixture(scope="module")
def broken(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory):
    """(report, duplicated subject_id) of the synthetic source with one fault of each kind injected."""
    db = tmp_path_factory.mktemp("broken") / "broken.duckdb"
    shutil.copy(synthetic_db, db)
    duplicated, relabelled = _ids(db)
    con = duckdb.connect(str(db))
    con.execute(f"INSERT INTO patients SELECT * FROM patients WHERE subject_id = {duplicated}")  # duplicate PK
    con.execute(f"UPDATE patients SET gender = 'X' WHERE subject_id = {relabelled}")  # value set
    con.execute(
        "UPDATE labevents SET hadm_id = 1 "
        "WHERE labevent_id IN (SELECT labevent_id FROM labevents ORDER BY labevent_id LIMIT 3)"
    )
    con.execute(
        "UPDATE admissions SET dischtime = admittime - INTERVAL 1 DAY "
        "WHERE hadm_id = (SELECT min(hadm_id) FROM admissions)"
    )
    con.execute("UPDATE chartevents SET itemid = 999999999 WHERE rowid < 5")  # unknown item
    con.close()
    return validate_source(db), duplicated


def _failed(report) -> dict[tuple[str, str], int]:
    return {(s.suite, o.rule): o.unexpected_count for s in report.suites for o in s.outcomes if o.status == "fail"}


def test_injected_faults_fail_exactly_their_rules(broken):
    report, _ = broken
    assert not report.success
    assert _failed(report) == {
        ("source.patients", "primary key (subject_id) is unique"): 2,
        ("source.patients", "gender in ['F', 'M']"): 1,
        ("source.labevents", "every hadm_id exists in admissions.hadm_id"): 3,
        ("source.admissions", "dischtime >= admittime"): 1,
        ("source.chartevents", "every itemid exists in d_items.itemid"): 5,
    }


def test_failure_sample_shows_the_offending_keys(broken):
    report, duplicated = broken
    samples = {o.rule: o.sample for s in report.suites for o in s.outcomes if o.status == "fail"}
    assert samples["every hadm_id exists in admissions.hadm_id"] == ["1", "1", "1"]
    assert samples["primary key (subject_id) is unique"] == [str(duplicated)] * 2


def test_cli_validate_source_writes_gx_json_and_exit_code(synthetic_db: Path, tmp_path: Path):
    result = CliRunner().invoke(
        app, ["validate-source", "--db", str(synthetic_db), "--out", str(tmp_path / "gate.json")]
    )
    assert result.exit_code == 0, result.output
    assert "source gate: PASSED" in result.output
    written = json.loads((tmp_path / "gate.json").read_text())
    assert written["success"] is True and len(written["suites"]) == 31
    assert written["suites"][0]["gx_results"][0]["success"] in (True, False)


def test_cli_validate_source_exits_1_when_a_suite_fails(synthetic_db: Path, tmp_path: Path):
    """A suite the source breaks (patients' gender narrowed to one value; the demo's own case, emar without its
    known exceptions, is in the realdata test above)."""
    suites = tmp_path / "suites"
    shutil.copytree(DEFAULT_SUITES, suites)
    narrowed = json.loads((suites / "patients.json").read_text())
    rules = [e for e in narrowed["expectations"] if e["type"] == "expect_column_values_to_be_in_set"]
    assert [r["kwargs"]["column"] for r in rules] == ["gender"]
    rules[0]["kwargs"]["value_set"] = ["F"]
    (suites / "patients.json").write_text(json.dumps(narrowed))
    result = CliRunner().invoke(
        app,
        ["validate-source", "--db", str(synthetic_db), "--suites", str(suites), "--out", str(tmp_path / "gate.json")],
    )
    assert result.exit_code == 1
    assert "FAIL" in result.output and "source gate: FAILED" in result.output
