"""Templates: every registered template lints clean and yields agreeing tasks on the real demo; lint finds breakage."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.templates.answers import AnswerValue, answers_agree, canonical_answer
from pipeline.templates.instantiate import instantiate
from pipeline.templates.lint import lint_all, lint_file
from pipeline.templates.registry import load_templates, template_files
from pipeline.templates.render import render_sql
from pipeline.templates.spec import INTENTS, Answer, AnswerType

TEMPLATES = load_templates()
BROKEN = Path(__file__).parent / "fixtures" / "templates"


@pytest.mark.parametrize("path", template_files(), ids=lambda p: p.stem)
def test_template_lints_clean(path: Path):
    assert lint_file(path).problems == []


def test_every_intent_has_templates():
    assert {t.spec.intent for t in TEMPLATES} == set(INTENTS)
    assert {t.spec.scope.value for t in TEMPLATES} == {"patient", "population"}


@pytest.fixture(scope="module")
def demo_instantiation(demo_db: Path):
    con = duckdb.connect(str(demo_db), read_only=True)
    return instantiate(con, TEMPLATES, per_template=5, seed=7)


@pytest.mark.parametrize("template_id", [t.id for t in TEMPLATES])
def test_template_yields_five_agreeing_tasks_on_the_demo(demo_instantiation, template_id: str):
    tasks, report = demo_instantiation
    mine = [t for t in tasks if t.template_id == template_id]
    assert len(mine) == 5, report.dropped[template_id]
    for task in mine:
        assert task.answer == task.python_answer and task.answer.value not in (None, [])
        assert task.evidence and "{{" not in task.question


@pytest.fixture(scope="module")
def synthetic_instantiation(synthetic_1000: Path):
    con = duckdb.connect(str(synthetic_1000), read_only=True)
    return instantiate(con, TEMPLATES, per_template=5, seed=7)


@pytest.mark.parametrize("template_id", [t.id for t in TEMPLATES])
def test_template_yields_five_agreeing_tasks_on_synthetic_data(synthetic_instantiation, template_id: str):
    tasks, report = synthetic_instantiation
    assert sum(t.template_id == template_id for t in tasks) == 5, report.dropped[template_id]


def test_sql_python_agreement_is_complete_on_synthetic_data(synthetic_instantiation):
    _, report = synthetic_instantiation
    assert report.compared > 0 and report.agreement_rate == 1.0


def test_sql_python_agreement_is_complete_on_the_demo(demo_instantiation):
    _, report = demo_instantiation
    assert report.compared > 0 and report.agreement_rate == 1.0


def test_instantiation_is_deterministic_and_seed_dependent(demo_db: Path):
    con = duckdb.connect(str(demo_db), read_only=True)
    first = [t.model_dump_json() for t in instantiate(con, TEMPLATES, 3, seed=1)[0]]
    again = [t.model_dump_json() for t in instantiate(con, TEMPLATES, 3, seed=1)[0]]
    other = [t.model_dump_json() for t in instantiate(con, TEMPLATES, 3, seed=2)[0]]
    assert first == again and first != other


def test_slot_values_enter_sql_only_as_literals():
    sql = render_sql(
        "SELECT * FROM patients WHERE gender = {{ g }} AND subject_id = {{ s }}",
        {"g": "F' OR '1'='1'; DROP TABLE patients; --", "s": 5},
    )
    con = duckdb.connect()
    con.execute("CREATE TABLE patients (gender VARCHAR, subject_id INTEGER)")
    con.execute("INSERT INTO patients VALUES ('F', 5)")
    assert con.execute(sql).fetchall() == []  # the injection is a harmless string literal
    assert con.execute("SELECT count(*) FROM patients").fetchone()[0] == 1


def test_answers_compare_within_tolerance_and_as_sets():
    number = Answer(type=AnswerType.number, tolerance=0.01)
    assert answers_agree(AnswerValue(value=1.0), AnswerValue(value=1.005), number)
    assert not answers_agree(AnswerValue(value=1.0), AnswerValue(value=1.02), number)
    assert not answers_agree(AnswerValue(value=1.0, unit="mg/dL"), AnswerValue(value=1.0, unit="mmol/L"), number)
    listing = Answer(type=AnswerType.list)
    assert answers_agree(AnswerValue(value=["a", "b"]), AnswerValue(value=["b", "a"]), listing)


def test_canonical_answer_refuses_ambiguous_scalars():
    import polars as pl

    with pytest.raises(ValueError, match="expected one row"):
        canonical_answer(pl.DataFrame({"value": [1.0, 2.0]}), Answer(type=AnswerType.number))


def test_lint_reports_each_broken_template_and_spares_the_good_one():
    results = {r.path.stem: r.problems for r in lint_all(BROKEN)}
    assert results["good_lab"] == []
    assert any("Unknown column: valuenumber" in p for p in results["bad_column"])
    assert "questions[0]: undefined slot(s) ['lab_name']" in results["bad_slots"]
    assert "questions[0]: does not mention slot(s) ['hadm_id', 'lab_label']" in results["bad_slots"]
    schema = " ".join(results["bad_schema"])
    assert "questions: List should have at least 2 items" in schema and "answer.type" in schema
    assert any("missing bad_sql.py" in p for p in results["bad_sql"])
    bad_python = " ".join(results["bad_python"])
    assert "noise: unknown sub-type(s) ['made_up_noise']" in bad_python and "must define a function gold" in bad_python


def test_lint_reports_sql_that_does_not_parse(tmp_path: Path):
    folder = tmp_path / "laboratory"
    folder.mkdir()
    for source in (BROKEN / "laboratory").glob("good_lab.*"):
        (folder / source.name.replace("good_lab", "unparsable")).write_text(
            source.read_text().replace("id: good_lab", "id: unparsable")
        )
    (folder / "unparsable.sql.j2").write_text(
        "SELECT value FROM WHERE {{ subject_id }} {{ hadm_id }} {{ lab_label }}\n"
    )
    problems = lint_file(folder / "unparsable.yaml").problems
    assert any(p.startswith("gold SQL: does not parse") for p in problems), problems


def test_cli_templates_check_exit_codes():
    assert CliRunner().invoke(app, ["templates", "check"]).exit_code == 0
    broken = CliRunner().invoke(app, ["templates", "check", "--root", str(BROKEN)])
    assert broken.exit_code == 1 and "bad_column.yaml" in broken.output


def test_cli_tasks_writes_jsonl_and_report(demo_db: Path, tmp_path: Path):
    out = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(app, ["tasks", "--db", str(demo_db), "--out", str(out), "--per-template", "2"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 * len(TEMPLATES)
    report = json.loads((tmp_path / "tasks.jsonl.report.json").read_text())
    assert sum(report["kept"].values()) == len(lines)


def test_disagreeing_programs_are_dropped_and_counted_by_reason(demo_db: Path, tmp_path: Path):
    """A template whose Python answer is off by one keeps no task; every candidate is counted as a disagreement."""
    folder = tmp_path / "laboratory"
    folder.mkdir()
    for source in (BROKEN / "laboratory").glob("good_lab.*"):
        (folder / source.name.replace("good_lab", "off_by_one")).write_text(
            source.read_text().replace("id: good_lab", "id: off_by_one")
        )
    python = folder / "off_by_one.py"
    python.write_text(
        python.read_text().replace('pl.col("valuenum").alias("value")', '(pl.col("valuenum") + 1).alias("value")')
    )
    con = duckdb.connect(str(demo_db), read_only=True)
    tasks, report = instantiate(con, load_templates(tmp_path), per_template=3, seed=1)
    assert tasks == [] and report.kept == {"off_by_one": 0}
    assert report.dropped["off_by_one"] == {"sql_python_disagree": 12}  # 3 wanted x 4 candidates each
    assert report.shortfall == {"off_by_one": 3} and report.agreement_rate == 0.0


def test_list_answers_of_dates_are_iso_text():
    import datetime as dt

    import polars as pl

    frame = pl.DataFrame({"value": [dt.date(2150, 1, 2), dt.date(2150, 1, 1)]})
    assert canonical_answer(frame, Answer(type=AnswerType.list)).value == ["2150-01-01", "2150-01-02"]


def test_lint_reports_noise_that_cannot_apply(tmp_path: Path):
    folder = tmp_path / "laboratory"
    folder.mkdir()
    for source in (BROKEN / "laboratory").glob("good_lab.*"):
        text = source.read_text().replace("id: good_lab", "id: windowless")
        if source.suffix == ".yaml":
            text = re.sub(r"^noise: \[", "noise: [out_of_window, ", text, flags=re.M)
        (folder / source.name.replace("good_lab", "windowless")).write_text(text)
    problems = lint_file(folder / "windowless.yaml").problems
    assert problems == ["noise: 'out_of_window' cannot apply here; it needs date slots window_start and window_end"]
