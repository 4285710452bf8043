"""Score only what is asked: every task shows an answer format, templates score only asked record fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.agents import get_agent
from pipeline.agents.llm import SYSTEM_PROMPT, VALIDITY_RULES, user_message
from pipeline.templates.answers import AnswerFormat, AnswerValue, answer_format
from pipeline.templates.lint import asked_in, lint_file
from pipeline.templates.registry import load_templates
from pipeline.templates.spec import Answer, AnswerType

BROKEN = Path(__file__).parent / "fixtures" / "templates"


def _copy_good_lab(tmp_path: Path, name: str, edit) -> Path:
    folder = tmp_path / "laboratory"
    folder.mkdir(exist_ok=True)
    for source in (BROKEN / "laboratory").glob("good_lab.*"):
        text = source.read_text().replace("id: good_lab", f"id: {name}")
        (folder / source.name.replace("good_lab", name)).write_text(edit(text) if source.suffix == ".yaml" else text)
    return folder / f"{name}.yaml"


def test_lint_fails_a_scored_field_that_a_phrasing_never_asks_for(tmp_path: Path):
    unasked = _copy_good_lab(
        tmp_path,
        "unasked",
        lambda t: t.replace(
            "records: [charttime, itemid]", "records: [charttime, itemid]\n  asked_records: [charttime]"
        ),
    )
    problems = lint_file(unasked).problems
    assert [p.split(":")[0] for p in problems] == ["questions[0]", "questions[1]"], problems
    assert "scores 'charttime', but this phrasing never asks for it" in problems[0]


def test_lint_accepts_a_scored_field_every_phrasing_asks_for(tmp_path: Path):
    def ask_when(text: str) -> str:
        text = text.replace(
            "records: [charttime, itemid]", "records: [charttime, itemid]\n  asked_records: [charttime]"
        )
        return re.sub(r'\?"$', ', and when was it measured?"', text, flags=re.M)

    assert lint_file(_copy_good_lab(tmp_path, "asked", ask_when)).problems == []


def test_asked_records_must_be_records():
    with pytest.raises(ValidationError, match="asked_records"):
        Answer(type=AnswerType.number, records=["charttime"], asked_records=["itemid"])


def test_templates_score_a_record_only_where_every_phrasing_asks_for_it():
    """ "... and when?" in every phrasing makes the time part of the answer; a field asked nowhere is never scored."""
    templates = {t.id: t for t in load_templates()}
    assert templates["vital_max_in_stay"].spec.answer.asked_records == ["charttime"]
    assert templates["lab_last_value_in_admission"].spec.answer.asked_records == []
    for template in templates.values():
        for field_name in template.spec.answer.asked_records:
            assert all(asked_in(q, field_name) for q in template.spec.questions), template.id
    assert not asked_in("What was the last Sodium value?", "charttime") and asked_in("... and when?", "charttime")


def test_answer_format_takes_the_fixed_or_the_clean_unit_and_only_asked_records():
    spec = Answer(type=AnswerType.number, records=["charttime", "itemid"])
    fmt = answer_format(spec, AnswerValue(value=1.2, unit="mg/dL", records={"charttime": "x", "itemid": 1}))
    assert fmt == AnswerFormat(type=AnswerType.number, unit="mg/dL", records=[])
    fixed = answer_format(Answer(type=AnswerType.number, unit="hours"), AnswerValue(value=3.0, unit="hours"))
    assert fixed.unit == "hours"
    listing = answer_format(Answer(type=AnswerType.list, ordered=True), AnswerValue(value=["a"]))
    assert "a list in order" in listing.describe() and "null when the record does not support" in listing.describe()


def test_the_llm_prompt_shows_the_answer_format():
    fmt = AnswerFormat(type=AnswerType.number, unit="mEq/L", records=["charttime"])
    text = user_message("What was the last Sodium?", "patient", "laboratory", fmt.model_dump(mode="json"))
    assert (
        text.splitlines()[1]
        == "Answer format: value: a number in mEq/L; records: {charttime}; value null when the record does not support an answer"
    )
    assert "Answer format" not in user_message("Q?", "patient", "laboratory", None)


def test_the_system_prompt_states_which_values_are_invalid():
    """Every value- and record-level contract that judges a value (abstain on a patient question, leave out of a
    population answer) is a rule the agent is told, not one it has to guess."""
    from pipeline.noise.base import subtypes

    named = {
        "null_value": "missing",
        "implausible_value": "impossible",
        "unit_mismatch": "cannot be converted to its usual unit",
        "placeholder_value": "placeholder",
        "conflicting_duplicate": "both rows are invalid",
        "displaced_time": "timed outside",
    }
    judged = {
        n for n, s in subtypes().items() if s.level == "value" or n in ("conflicting_duplicate", "displaced_time")
    }
    assert judged == set(named)
    assert all(words in VALIDITY_RULES for words in named.values()) and VALIDITY_RULES in SYSTEM_PROMPT


@pytest.fixture(scope="module")
def synthetic_release(synthetic_1000: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.env.testing import build_small_release

    return build_small_release(
        synthetic_1000, tmp_path_factory.mktemp("releases"), intents=["laboratory", "vital_signs"]
    )


@pytest.mark.slow
def test_every_task_of_a_release_shows_one_format_per_pair(synthetic_release: Path):
    import polars as pl

    tasks = [json.loads(line) for line in (synthetic_release / "tasks.jsonl").read_text().splitlines()]
    labels = {
        lab["task_id"]: lab for lab in map(json.loads, (synthetic_release / "labels.jsonl").read_text().splitlines())
    }
    assert tasks and all(t["answer_format"]["type"] for t in tasks)
    by_pair: dict[str, list] = {}
    for task in tasks:
        by_pair.setdefault(labels[task["task_id"]]["pair_id"], []).append(task["answer_format"])
    assert all(len(f) == 2 and f[0] == f[1] for f in by_pair.values())  # the format does not tell the condition
    clean = [labels[t["task_id"]] for t in tasks if labels[t["task_id"]]["condition"] == "clean"]
    assert any(lab["expected"]["records"] for lab in clean)  # labels keep the provenance records ...
    assert all(
        t["answer_format"]["records"] == []
        for t in tasks  # ... that no question asks for
        if labels[t["task_id"]]["template_id"] != "vital_max_in_stay"
    )
    frame = pl.concat([pl.read_parquet(p) for p in sorted((synthetic_release / "tasks").glob("*.parquet"))])
    assert frame.height == len(tasks) and frame["answer_format"].struct.field("type").to_list() == [
        t["answer_format"]["type"] for t in sorted(tasks, key=lambda t: (t["split"], tasks.index(t)))
    ]


@pytest.mark.slow
def test_the_episode_and_the_llm_agent_show_the_format(synthetic_release: Path, synthetic_1000: Path):
    from test_llm_agent import ScriptedServer, tool_call

    from pipeline.agents.base import context_for
    from pipeline.env.release import Release

    with Release.open(synthetic_release, synthetic_1000) as release:
        task = release.tasks()[0]
        with release.episode(task.task_id) as episode:
            assert episode.observation["answer_format"] == task.answer_format.model_dump(mode="json")
            with ScriptedServer([tool_call("c1", "answer", {"value": None})]) as server:
                get_agent("llm", base_url=server.base_url, model="scripted").run(
                    episode, context_for(release, task.task_id)
                )
            assert episode.trajectory("llm").answer_format == task.answer_format
    prompt = server.requests[0]["messages"][1]["content"]
    assert prompt.endswith("Answer format: " + task.answer_format.describe())
