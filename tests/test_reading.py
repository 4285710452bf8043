"""Reading a question back into its template and slots from the public phrasings; agents get only that reading."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from aggregate import assert_all_pass

from pipeline.agents import get_agent
from pipeline.agents.base import Agent, AgentContext, context_for, read_context
from pipeline.agents.reading import Phrasing, Reader, ReadError, checkout_reader, reader_for
from pipeline.templates.instantiate import typed_slots
from pipeline.templates.registry import load_templates
from pipeline.templates.render import render

# One made-up value per slot type, rendered into every phrasing of every template and read back.
SAMPLE = {
    "integer": 10012345,
    "number": 37.5,
    "text": "Made-up Analyte, serum",
    "date": "2150-03-04",
    "datetime": "2150-03-04 05:06:07",
}
PATCHED_SUBTYPES = {"nonexistent_entity", "false_premise", "unknown_concept", "out_of_window"}


@pytest.fixture(scope="module")
def release(synthetic_release_dir: Path, synthetic_db: Path):
    """The session's synthetic release (tests/conftest.py: every template, pair gate skipped), opened here."""
    from pipeline.env.release import Release

    with Release.open(synthetic_release_dir, synthetic_db) as opened:
        yield opened


def test_every_phrasing_of_every_template_reads_back():
    templates = load_templates()
    reader = Reader(templates, "checkout")
    for template in templates:
        slots = {name: SAMPLE[slot.type] for name, slot in template.spec.slots.items()}
        for index, text in enumerate(template.spec.questions):
            reading = reader.read(render(text, slots).strip())
            assert (reading.template.id, reading.phrasing) == (template.id, index)
            assert reading.slots == slots, (template.id, index)


def test_a_question_that_matches_no_phrasing_is_named():
    with pytest.raises(ReadError, match=r"question 'What is the meaning of life\?' matches no phrasing"):
        checkout_reader().read("What is the meaning of life?")


def test_a_question_of_two_templates_is_refused_naming_both():
    template = next(t for t in load_templates() if t.id == "lab_last_value_in_admission")
    twin = template.model_copy(update={"spec": template.spec.model_copy(update={"id": "lab_last_twin"})})
    question = render(template.spec.questions[0], {"subject_id": 1, "hadm_id": 2, "lab_label": "Sodium"}).strip()
    with pytest.raises(ReadError, match="reads in 2 ways.*lab_last_twin v.*lab_last_value_in_admission v"):
        Reader([template, twin], "test").read(question)


def test_a_question_that_splits_several_ways_keeps_the_names_whole_or_is_refused():
    templates = {t.id: t for t in load_templates()}
    share = templates["lab_abnormal_share_population"]
    phrasing = next(q for q in share.spec.questions if "{{ lab_label }} ({{ fluid }})" in q)
    question = render(phrasing, {"lab_label": "pO2 (Venous)", "fluid": "Blood"}).strip()
    assert len(Phrasing(phrasing, {"lab_label": "text", "fluid": "text"}).splits(question)) == 2  # "Venous) (Blood" too
    assert Reader([share], "test").read(question).slots == {"lab_label": "pO2 (Venous)", "fluid": "Blood"}
    route = templates["route_share_for_drug"]
    question = render(
        route.spec.questions[0],
        {
            "drug": "Foo prescriptions (with a recorded route) were given by the IV route? What percentage of Foo",
            "route": "PO",
        },
    ).strip()
    with pytest.raises(ReadError, match="reads in 2 ways"):
        Reader([route], "test").read(question)


def test_a_phrasing_that_leaves_a_slot_out_is_refused_naming_its_file():
    template = next(t for t in load_templates() if t.id == "lab_last_value_in_admission")
    spec = template.spec.model_copy(update={"questions": [*template.spec.questions, "The last {{ lab_label }}?"]})
    with pytest.raises(ReadError, match=r"lab_last_value_in_admission.yaml: questions\[2\]: .*'hadm_id', 'subject_id'"):
        Reader([template.model_copy(update={"spec": spec})], "test")


def reads_back_to_its_label(release, task) -> None:
    label = release.label(task.task_id)
    reading = reader_for(release).read(task.question)  # raises on no reading and on an ambiguous one
    template = release.template(label)
    assert (reading.template.id, reading.template.spec.version) == (label.template_id, label.template_version)
    assert typed_slots(template, reading.slots) == typed_slots(template, label.slots), task.task_id


def test_every_release_task_reads_back_to_its_label(release):
    for task in release.tasks():
        reads_back_to_its_label(release, task)
    seen = {release.label(t.task_id).subtype for t in release.tasks()}
    assert seen & PATCHED_SUBTYPES, "the release has no question-level noise to read back"  # each: test_reading_noisy


def test_every_demo_release_task_reads_back_to_its_label(demo_release_dir: Path, demo_db: Path):
    """The same on the session's demo release (questions with real names), every task that does not named."""
    from pipeline.env.release import Release

    with Release.open(demo_release_dir, demo_db) as demo:
        tasks = demo.tasks()
        assert_all_pass((t.task_id, functools.partial(reads_back_to_its_label, demo, t)) for t in tasks)
        assert {demo.label(t.task_id).subtype for t in tasks} & PATCHED_SUBTYPES


def test_an_edited_question_reads_the_edited_value(release):
    labels = [release.label(t.task_id) for t in release.tasks()]
    task, label = next(
        (t, lab)
        for t, lab in zip(release.tasks(), labels, strict=True)
        if lab.condition == "clean" and "lab_label" in lab.slots
    )
    edited = task.question.replace(label.slots["lab_label"], "Made-up Analyte")
    assert edited != task.question
    context = read_context(task.task_id, edited, reader_for(release))
    assert context.slots == {**label.slots, "lab_label": "Made-up Analyte"}
    assert context.template.id == label.template_id


def test_the_public_context_does_not_come_from_the_label(release, monkeypatch):
    task = release.tasks()[0]
    honest = context_for(release, task.task_id)
    label = release.label(task.task_id)
    lying = label.model_copy(update={"template_id": "nope", "slots": {k: "x" for k in label.slots}})
    monkeypatch.setattr(release, "label", lambda task_id: lying)
    context = context_for(release, task.task_id)
    assert (context.template.id, context.slots) == (honest.template.id, honest.slots)
    assert context.label is lying  # attached for the privileged oracle, and only as `label`


class Spy(Agent):
    name = "spy"
    seen: list[AgentContext] = []

    def act(self, episode, context, seed):
        Spy.seen.append(context)
        self.answer(episode, self.canonical(None, context))


def test_an_agent_run_through_eval_never_sees_the_label(release):
    from pipeline.evaluate.runner import run_trial

    Spy.seen.clear()
    tasks = release.tasks()[:4]
    for task in tasks:
        run_trial(release, Spy(), task.task_id, trial=0, seed=0, max_turns=5)
    assert [c.task_id for c in Spy.seen] == [t.task_id for t in tasks]
    for context, task in zip(Spy.seen, tasks, strict=True):
        assert context.label is None and context.read_from_question and context.question == task.question
        assert context.slots == reader_for(release).read(task.question).slots


def test_run_refuses_a_context_not_read_from_the_question(release):
    task = release.tasks()[0]
    label, read = release.label(task.task_id), context_for(release, task.task_id)
    by_hand = AgentContext(
        task_id=task.task_id, question=task.question, template=release.template(label), slots=dict(label.slots)
    )
    edited = read.model_copy(update={"slots": {**read.slots, next(iter(read.slots)): 1}})
    other = read_context(task.task_id, release.tasks()[1].question, reader_for(release))
    for context in (by_hand, edited, other):
        episode = release.episode(task.task_id)
        with pytest.raises(ValueError, match="not read from the episode's question"):
            get_agent("literal").run(episode, context)
        episode.close()
    episode = release.episode(task.task_id)
    get_agent("oracle").run(episode, by_hand.model_copy(update={"label": label}))  # privileged: reads the label
    assert episode.done
    episode.close()
