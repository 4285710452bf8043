"""The baseline agents on the session's synthetic release: registry, information boundary, determinism and the
pass-rate targets; the targets also on the demo release, in one realdata test."""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from pathlib import Path

import pytest
from aggregate import assert_all_pass

from pipeline.agents import agent_names, get_agent
from pipeline.agents.base import Agent, context_for
from pipeline.env.release import Release
from pipeline.env.verifier import verify

SCRIPTED = ("oracle", "literal", "relaxing", "cautious")


@pytest.fixture(scope="module")
def release(synthetic_release_dir: Path, synthetic_db: Path):
    """The session's synthetic release (tests/conftest.py: every template, pair gate skipped), opened here."""
    with Release.open(synthetic_release_dir, synthetic_db) as opened:
        yield opened


def run_agent(release, name: str, task_id: str, seed: int = 0):
    episode = release.episode(task_id)
    try:
        get_agent(name).run(episode, context_for(release, task_id), seed=seed)
        return episode.trajectory(name)
    finally:
        episode.close()


def pass_rates(release) -> dict[str, dict[str, list[int]]]:
    """{agent: {"clean" | "noise" | "noise/<level>" | "noise/<level>/<sub-type>": [passed, total]}} over every task."""
    table: dict[str, dict[str, list[int]]] = {}
    source = release.source_cursor()  # scored as evaluation scores: evidence-based abstention on the clean source
    for name in SCRIPTED:
        counts, started = defaultdict(lambda: [0, 0]), time.perf_counter()
        for task in release.tasks():
            label = release.label(task.task_id)
            verdict = verify(label, run_agent(release, name, task.task_id), release.template(label), source=source)
            keys = [label.condition] + (
                [f"noise/{label.level}", f"noise/{label.level}/{label.subtype}"] if label.condition == "noise" else []
            )
            keys += ["trap", f"trap/{label.subtype}"] if label.trap else []
            for key in keys:
                counts[key][0] += verdict.passed
                counts[key][1] += 1
        table[name] = dict(counts)
        print(f"\n{name}: {len(release.tasks())} episodes in {time.perf_counter() - started:.1f} s")
        for key, (passed, total) in sorted(counts.items()):
            print(f"  {key:45s} {passed:3d}/{total:3d} = {passed / total:.0%}")
    source.close()
    return table


@pytest.fixture(scope="module")
def rates(release) -> dict[str, dict[str, list[int]]]:
    return pass_rates(release)


def rate(table: dict, key: str) -> float:
    passed, total = table[key]
    return passed / total


def test_registry_names_and_errors():
    assert {"oracle", "literal", "relaxing", "cautious", "llm"} <= set(agent_names())
    assert agent_names() == sorted(agent_names())
    assert get_agent("cautious").name == "cautious"
    with pytest.raises(ValueError, match="unknown agent 'nope'"):
        get_agent("nope")


def test_only_the_oracle_sees_the_label(release):
    seen = {}

    class Spy(Agent):
        name = "spy"

        def act(self, episode, context, seed):
            seen["label"] = context.label
            self.answer(episode, self.canonical(None, context))

    task_id = release.tasks()[0].task_id
    context = context_for(release, task_id)
    assert context.label is not None and context.label.task_id == task_id  # the label stays inside the context
    episode = release.episode(task_id)
    Spy().run(episode, context)
    episode.close()
    assert seen["label"] is None
    assert get_agent("oracle").privileged
    assert not any(get_agent(n).privileged for n in ("literal", "relaxing", "cautious", "llm"))


def test_a_context_for_another_task_is_refused(release):
    first, second = (t.task_id for t in release.tasks()[:2])
    episode = release.episode(first)
    with pytest.raises(ValueError, match="given for episode"):
        get_agent("literal").run(episode, context_for(release, second))
    episode.close()


def test_agents_act_only_through_tools_and_are_deterministic(release):
    task_ids = [t.task_id for t in release.tasks()[:6]]
    for name in ("relaxing", "cautious"):
        for task_id in task_ids:
            without_time = {"calls": {"__all__": {"seconds"}}}
            runs = [run_agent(release, name, task_id).model_dump(exclude=without_time) for _ in range(2)]
            assert runs[0] == runs[1], (name, task_id)
            assert runs[0]["answer"] is not None and runs[0]["calls"][-1]["tool"] == "answer"
            assert all(call["tool"] in ("sql", "answer") for call in runs[0]["calls"])


def oracle_passes_every_task(rates):
    assert rate(rates["oracle"], "clean") == 1.0
    assert rate(rates["oracle"], "noise") == 1.0


def relaxing_answers_clean_tasks(rates):
    assert rate(rates["relaxing"], "clean") == 1.0


def relaxing_falls_for_noise(rates):
    relaxing = rates["relaxing"]
    # Measured on the traps (the careless reading answers, and wrongly): on a noisy task whose careless query finds
    # nothing (a name the record lacks) the relaxing agent abstains too and passes, as any agent would (blind audit
    # 29). A value re-expressed in another unit (unit_mismatch at patient scope) is read right by any agent that
    # reports the row's own unit (37.0 with °C converts to the asked 98.6 °F); every other trap catches it.
    passed, total = relaxing["trap"]
    unit_passed, unit_total = relaxing.get("trap/unit_mismatch", [0, 0])
    assert total - unit_total >= 3 and (passed - unit_passed) / (total - unit_total) <= 0.10  # demo: 3, synthetic: 7


def cautious_abstains_or_repairs_on_noise(rates):
    assert rate(rates["cautious"], "noise") >= 0.80


def cautious_answers_clean_tasks(rates):
    assert rate(rates["cautious"], "clean") >= 0.95


def literal_is_measured_per_level_and_subtype(rates):
    literal = rates["literal"]
    assert rate(literal, "clean") == 1.0  # the clean gold SQL on the clean data is the expected answer
    assert rate(literal, "noise") < 1.0  # ... and some noise catches a literal reader
    levels = {key.split("/")[1] for key in literal if key.startswith("noise/")}
    assert levels <= {"record", "value", "query"} and len(levels) >= 2
    assert sum(total for key, (_, total) in literal.items() if key.count("/") == 2) == literal["noise"][1]


TARGETS = [
    oracle_passes_every_task,
    relaxing_answers_clean_tasks,
    relaxing_falls_for_noise,
    cautious_abstains_or_repairs_on_noise,
    cautious_answers_clean_tasks,
    literal_is_measured_per_level_and_subtype,
]
# Targets the synthetic release misses, each for a named reason (strict: the test fails once the target is met).
MISSED_ON_DEMO: dict = {}  # none since session 14: the careless reading takes the first of two rows, a careless
# agent looks for similar names among the patient's own labs, and a task prefers a trap pair
MISSED_ON_SYNTHETIC: dict = {}  # none since blind audit 20's fixes (relaxing_falls_for_noise was missed before)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(t, marks=[pytest.mark.xfail(strict=True, raises=AssertionError, reason=MISSED_ON_SYNTHETIC[t])])
        if t in MISSED_ON_SYNTHETIC
        else t
        for t in TARGETS
    ],
    ids=lambda f: f.__name__,
)
def test_pass_rate_target_on_the_synthetic_release(rates, target):
    target(rates)


def test_pass_rate_targets_hold_on_the_demo_release(demo_release_dir: Path, demo_db: Path):
    """Every target on the session's demo release (real records), the failing ones reported together."""
    with Release.open(demo_release_dir, demo_db) as release:
        rates = pass_rates(release)
        assert_all_pass(
            (target.__name__, functools.partial(target, rates)) for target in TARGETS if target not in MISSED_ON_DEMO
        )
        for target, reason in MISSED_ON_DEMO.items():  # strict: once the target is met, drop it from the list
            with pytest.raises(AssertionError):
                target(rates)
            print(f"missed on the demo, as expected: {target.__name__}: {reason}")


def test_llm_agent_plays_a_real_episode(release):
    from test_llm_agent import ScriptedServer, tool_call

    task_id = release.tasks()[0].task_id
    script = [
        tool_call("c1", "sql", {"query": "SELECT count(*) AS n FROM patients"}),
        tool_call("c2", "answer", {"value": None}),
    ]
    episode = release.episode(task_id)
    with ScriptedServer(script) as server:
        get_agent("llm", base_url=server.base_url).run(episode, context_for(release, task_id))
    trajectory = episode.trajectory("llm")
    episode.close()
    assert [c.tool for c in trajectory.calls] == ["sql", "answer"] and trajectory.answer.value is None
    assert trajectory.calls[0].queries[0].ok and trajectory.calls[0].result.rows[0][0] > 0
    assert server.requests[0]["tools"] == episode.observation["tools"]
    assert server.requests[1]["messages"][-1]["content"] == trajectory.calls[0].result.content


def test_the_oracle_looks_up_one_key_of_a_guard_too_long_for_the_sql_tool():
    """A population guard listing thousands of hidden evidence keys exceeds the sql tool's limit: the oracle
    inspects the first key it lists instead (a statement the abstention check can credit)."""
    from pipeline.agents.oracle import first_evidence_key_query
    from pipeline.env.sqlcheck import MAX_QUERY_CHARS

    keys = ", ".join(f"({30000000 + i}, TIMESTAMP '2150-01-01 00:00:00', 226559)" for i in range(2000))
    reference = (
        f"WITH evidence AS (SELECT * FROM outputevents WHERE (stay_id, charttime, itemid) IN ({keys}))\n"
        "SELECT g.* FROM (SELECT avg(value) AS value FROM outputevents) g WHERE NOT EXISTS (SELECT 1 FROM evidence)"
    )
    assert len(reference) > MAX_QUERY_CHARS
    probe = first_evidence_key_query(reference)
    assert probe is not None and len(probe) < 200 and "30000000" in probe and "30000001" not in probe
    assert probe.startswith("SELECT count(*) AS n FROM outputevents WHERE (stay_id, charttime, itemid) IN")
    assert first_evidence_key_query("SELECT 1") is None
