"""Templates: every registered template lints clean and yields agreeing tasks on the synthetic source (a test each)
and on the real demo (one test for all, naming every template that fails); lint finds breakage."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import duckdb
import pytest
from aggregate import assert_all_pass
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


def _instantiated(db: Path, per_template: int = 5, seed: int = 7):
    with duckdb.connect(str(db), read_only=True) as con:
        return instantiate(con, TEMPLATES, per_template=per_template, seed=seed)


def yields_five_agreeing_tasks(instantiation, template_id: str) -> None:
    tasks, report = instantiation
    mine = [t for t in tasks if t.template_id == template_id]
    assert len(mine) == 5, report.dropped[template_id]
    spec = next(t for t in TEMPLATES if t.id == template_id).spec.answer
    for task in mine:
        # agree within the template's tolerance: a mean of 64.625 rounds to 64.63 in SQL and 64.62 in polars
        assert answers_agree(task.answer, task.python_answer, spec) and task.answer.value not in (None, [])
        assert task.evidence and "{{" not in task.question


def agreement_is_complete(instantiation) -> None:
    _, report = instantiation
    assert report.compared > 0 and report.agreement_rate == 1.0


@pytest.fixture(scope="module")
def synthetic_instantiation(synthetic_db: Path):
    return _instantiated(synthetic_db)


@pytest.mark.parametrize("template_id", [t.id for t in TEMPLATES])
def test_template_yields_five_agreeing_tasks_on_synthetic_data(synthetic_instantiation, template_id: str):
    yields_five_agreeing_tasks(synthetic_instantiation, template_id)


def test_sql_python_agreement_is_complete_on_synthetic_data(synthetic_instantiation):
    agreement_is_complete(synthetic_instantiation)


def test_every_template_yields_five_agreeing_tasks_on_the_demo(demo_db: Path):
    instantiation = _instantiated(demo_db)
    assert_all_pass(
        [
            *((t.id, functools.partial(yields_five_agreeing_tasks, instantiation, t.id)) for t in TEMPLATES),
            ("SQL-Python agreement", functools.partial(agreement_is_complete, instantiation)),
        ]
    )


def test_instantiation_is_deterministic_and_seed_dependent(synthetic_db: Path):
    """Same seed, byte-identical tasks (the gold Python's cross-check answer too: a float sum or mean is taken in
    one order, so a mean rounded to 2 decimals cannot flip its last digit between runs); another seed, others."""
    with duckdb.connect(str(synthetic_db), read_only=True) as con:
        first, again, other = (
            [t.model_dump_json() for t in instantiate(con, TEMPLATES, 3, seed=seed)[0]] for seed in (1, 1, 2)
        )
    assert first == again and first != other


def test_two_instantiating_workers_make_the_same_tasks_and_report(synthetic_db: Path):
    """Each template draws from its own seeded generator: worker processes change neither a task nor a count."""
    chosen = TEMPLATES[:6]
    with duckdb.connect(str(synthetic_db), read_only=True) as con:
        one = instantiate(con, chosen, 3, seed=4)
        two = instantiate(con, chosen, 3, seed=4, workers=2)
    assert [t.model_dump_json() for t in one[0]] == [t.model_dump_json() for t in two[0]] and len(one[0]) > 6
    assert one[1].model_dump_json() == two[1].model_dump_json()


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
    # a mean rounded to 2 decimals one rounding step apart (DuckDB sums doubles in parallel, in no fixed order):
    # 2.68 - 2.67 is 0.010000000000000231 in floating point, and agrees as the verifier would score it
    assert answers_agree(AnswerValue(value=2.67), AnswerValue(value=2.68), number)
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


def test_cli_tasks_writes_jsonl_and_report(synthetic_db: Path, tmp_path: Path):
    out = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(app, ["tasks", "--db", str(synthetic_db), "--out", str(out), "--per-template", "2"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 * len(TEMPLATES)
    report = json.loads((tmp_path / "tasks.jsonl.report.json").read_text())
    assert sum(report["kept"].values()) == len(lines)


def test_disagreeing_programs_are_dropped_and_counted_by_reason(synthetic_db: Path, tmp_path: Path):
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
    con = duckdb.connect(str(synthetic_db), read_only=True)
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


def test_a_task_carries_its_first_evidence_rows_and_task_evidence_gives_them_all(synthetic_db: Path):
    """A population question's evidence can be every result of a lab: the task keeps the first
    EVIDENCE_INLINE_MAX rows and the count, and `task_evidence` runs its evidence query again for all of them."""
    from pipeline.noise.evidence import evidence_table, task_evidence
    from pipeline.templates.instantiate import EVIDENCE_INLINE_MAX

    template = next(t for t in TEMPLATES if t.id == "lab_median_value_population")
    with duckdb.connect(str(synthetic_db), read_only=True) as con:
        tasks, _ = instantiate(con, [template], 3, seed=0)
        large = [t for t in tasks if t.evidence_rows and t.evidence_rows > EVIDENCE_INLINE_MAX]
        assert large, "no task with more evidence rows than are carried inline"
        task = large[0]
        every = task_evidence(con, task)
        assert len(task.evidence) == EVIDENCE_INLINE_MAX and len(every) == task.evidence_rows
        assert every[:EVIDENCE_INLINE_MAX] == task.evidence
        assert len(evidence_table(con, task)[2]) == task.evidence_rows
        small = task.model_copy(update={"evidence_rows": None})  # a task that carries all of its rows
        assert task_evidence(con, small) is small.evidence


def test_evidence_rows_become_the_same_iso_text_row_by_row_or_column_by_column():
    """jsonable_rows (polars, column by column) writes times and dates exactly as the per-value `_jsonable` does."""
    import datetime as dt

    import polars as pl

    from pipeline.templates.instantiate import _jsonable, jsonable_rows

    frame = pl.DataFrame(
        {
            "id": [1, None, 3],
            "charttime": [dt.datetime(2150, 1, 2, 3, 4, 5), None, dt.datetime(2150, 1, 2, 3, 4, 5, 120)],
            "chartdate": [dt.date(2150, 1, 2), dt.date(2101, 12, 31), None],
            "label": ["x", None, "é"],
            "valuenum": [1.5, None, 2.0],
        }
    )
    one_by_one = [{k: _jsonable(v) for k, v in row.items()} for row in frame.iter_rows(named=True)]
    assert jsonable_rows(frame) == one_by_one and one_by_one[2]["charttime"] == "2150-01-02 03:04:05.000120"
