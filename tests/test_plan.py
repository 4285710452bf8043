"""Plan-first pairs (release/plan.py): one sub-type per clean task at a time, the next only on rejection; the same
pairs as trying everything would verify, fewer attempts, the same result with two workers, caps respected."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from pipeline.noise.base import subtypes
from pipeline.release.pairs import candidate_pairs
from pipeline.release.plan import DEAD_AFTER, _PlanState, planned_pairs
from pipeline.source.snapshot import ensure_snapshot
from pipeline.templates.instantiate import instantiate
from pipeline.templates.registry import load_templates

SUBTYPES = dict(sorted(subtypes().items()))
TEMPLATES = {t.id: t for t in load_templates()}
CHOSEN = ("lab_last_value_in_admission", "admission_discharge_location", "patients_with_diagnosis")


@pytest.fixture(scope="module")
def tasks(synthetic_source):
    found, _ = instantiate(synthetic_source, [TEMPLATES[t] for t in CHOSEN], per_template=4, seed=5)
    assert len(found) > 8
    return found


def _dump(verified) -> dict:
    return {k: [p.model_dump(mode="json") for p in v] for k, v in verified.items()}


def test_the_plan_keeps_pairs_trying_everything_verifies_with_fewer_attempts(synthetic_source, tasks):
    by_id = {t: TEMPLATES[t] for t in CHOSEN}
    everything, every_rejection = candidate_pairs(synthetic_source, tasks, by_id, SUBTYPES, seed=0)
    planned, rejected, report = planned_pairs(synthetic_source, tasks, by_id, SUBTYPES, seed=0)
    assert all(len(pairs) == 1 for pairs in planned.values())  # one pair per clean task
    assert set(planned) == set(everything)  # a task with any pair gets one
    for task_id, (pair,) in planned.items():  # seeded by task and sub-type: the very pair trying everything found
        assert pair.model_dump(mode="json") in _dump(everything)[task_id]
    tried_everything = sum(map(len, everything.values())) + sum(every_rejection.values())
    assert report.attempts == len(planned) + sum(rejected.values()) < tried_everything
    assert report.verified == len(planned) and report.without_pair == len(tasks) - len(planned)
    assert sum(report.waves) == report.attempts and report.waves == sorted(report.waves, reverse=True)


def test_two_workers_on_the_parquet_snapshot_plan_the_same_pairs(synthetic_source, synthetic_db, tasks):
    """Neither the worker count nor reading whole tables from the snapshot instead of memory changes a pair."""
    by_id = {t: TEMPLATES[t] for t in CHOSEN}
    one = planned_pairs(synthetic_source, tasks, by_id, SUBTYPES, seed=0)
    two = planned_pairs(
        synthetic_source, tasks, by_id, SUBTYPES, seed=0, workers=2, snapshot=ensure_snapshot(synthetic_db)
    )
    assert _dump(one[0]) == _dump(two[0]) and list(one[0]) == list(two[0])
    assert one[1] == two[1] and one[2] == two[2]


def test_a_template_with_a_full_cell_does_not_attempt_it_again(synthetic_source, tasks):
    by_id = {t: TEMPLATES[t] for t in CHOSEN}
    planned, _, _ = planned_pairs(synthetic_source, tasks, by_id, SUBTYPES, seed=0, per_cell=1)
    cells = Counter((p.clean.template_id, p.subtype) for ps in planned.values() for p in ps)
    assert cells and max(cells.values()) == 1


def _fake(**levels: str) -> dict:
    return {name: SimpleNamespace(level=level) for name, level in levels.items()}


def _task(n: int, template: str = "t", scope: str = "patient") -> SimpleNamespace:
    return SimpleNamespace(task_id=f"task{n}", template_id=template, intent="laboratory", scope=scope)


def test_a_wave_spreads_its_tasks_over_levels_then_sub_types():
    state = _PlanState(_fake(a="record", b="record", c="value", d="query"), per_cell=None)
    names = ["a", "b", "c", "d"]
    picks = [state.choose(_task(n), names) for n in range(6)]
    assert picks == ["a", "c", "b", "c", "a", "c"]  # the emptiest level first, then its emptiest sub-type, by name


def test_query_noise_is_tried_once_the_other_levels_are_spent():
    """Query-level noise verifies on nearly any task, so a task tries it last, at either scope; a template whose
    only level is query takes it at once."""
    for scope in ("patient", "population"):
        state = _PlanState(_fake(a="record", c="value", d="query"), per_cell=None)
        task = _task(0, scope=scope)
        tried = []
        while name := state.choose(task, ["a", "c", "d"]):
            tried.append(name)
            state.settle([(task, name)], ["some_reason"])
        assert tried[-1] == "d" and sorted(tried) == ["a", "c", "d"]
        assert state.choose(_task(1, template="q", scope=scope), ["d"]) == "d"


def test_a_rejection_frees_its_cell_and_the_task_tries_another_sub_type():
    state = _PlanState(_fake(a="record", c="value"), per_cell=None)
    task = _task(0)
    first = state.choose(task, ["a", "c"])
    assert state.settle([(task, first)], ["some_reason"]) == [task]
    second = state.choose(task, ["a", "c"])
    assert {first, second} == {"a", "c"} and state.choose(task, ["a", "c"]) is None
    assert state.settle([(task, second)], ["clean_evidence_impossible"]) == []  # no sub-type mends the evidence


def test_a_template_that_keeps_rejecting_a_sub_type_stops_trying_it():
    state = _PlanState(_fake(a="record", c="value"), per_cell=None)
    for n in range(DEAD_AFTER):
        task = _task(n)
        state.tried[task.task_id] = {"c"}
        assert state.choose(task, ["a"]) == "a"
        state.settle([(task, "a")], ["no_candidate_rows"])
    assert state.choose(_task(99), ["a", "c"]) == "c"  # "a" is emptier, but dead for this template
    assert state.choose(_task(98), ["a"]) is None  # and not tried at all
    assert state.choose(_task(100, template="other"), ["a", "c"]) == "a"  # not for another template


def test_a_wave_tries_a_sub_type_without_a_pair_on_no_more_tasks_than_could_kill_it():
    """Session 27: the first wave of a 120-task template tried each sub-type on about 20 tasks, and a sub-type the
    template never verifies spent all 20. Until it has a pair, a sub-type is in flight on at most DEAD_AFTER tasks
    (less its rejections); a task whose sub-types left are all in flight waits for the next wave."""
    state = _PlanState(_fake(a="record", c="value"), per_cell=None)
    tasks = [_task(n) for n in range(3 * DEAD_AFTER)]
    picks = [state.choose(task, ["a", "c"]) for task in tasks]
    assert Counter(picks) == {"a": DEAD_AFTER, "c": DEAD_AFTER, None: DEAD_AFTER}
    assert all(state.waits(task, ["a", "c"]) for task, pick in zip(tasks, picks, strict=True) if pick is None)
    tried_a = [task for task, pick in zip(tasks, picks, strict=True) if pick == "a"]
    state.settle([(tried_a[0], "a")], ["no_candidate_rows"])  # one rejection frees no attempt: 5 in flight + 1
    assert state.choose(tasks[-1], ["a"]) is None and state.waits(tasks[-1], ["a"])
    state.settle([(task, "a") for task in tried_a[1:]], ["no_candidate_rows"] * (DEAD_AFTER - 1))
    assert state.choose(tasks[-1], ["a"]) is None and not state.waits(tasks[-1], ["a"])  # dead: nothing to wait for
    state.record[("t", "c")] = [1, 0]  # a pair of "c": it is tried on every task that wants it
    untried = [task for task in tasks if "c" not in state.tried.get(task.task_id, set())]
    assert len(untried) == 2 * DEAD_AFTER and all(state.choose(task, ["c"]) == "c" for task in untried)


def test_a_task_whose_clean_evidence_needs_mending_does_not_kill_a_sub_type():
    """clean_evidence_impossible is the task's fault (its record holds an impossible number before any noise), so
    however often it comes back, the template goes on trying the sub-type on its other tasks."""
    state = _PlanState(_fake(a="record", c="value"), per_cell=None)
    for n in range(DEAD_AFTER + 2):
        task = _task(n)
        state.tried[task.task_id] = {"c"}
        assert state.choose(task, ["a"]) == "a"
        assert state.settle([(task, "a")], ["clean_evidence_impossible"]) == []
    assert state.choose(_task(99), ["a"]) == "a"
