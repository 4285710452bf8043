"""Registry conformance on the synthetic source: every registered noise sub-type makes verified pairs of the shapes
a release expects, every registered agent plays clean and noisy episodes through the tools to an answer, and the
gymnasium env passes gymnasium's own checker. A new sub-type or agent is picked up here without a line added."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pipeline.agents import agent_names, get_agent
from pipeline.agents.base import context_for
from pipeline.env.release import Release
from pipeline.env.verifier import verify
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import open_source
from pipeline.noise.verify import verify_pair
from pipeline.source.schema import load_schema
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

TEMPLATES = load_templates()
REASON = re.compile(r"^[a-z][a-z0-9_]*(: [A-Za-z]+)?$")  # a counted rejection reason (snake_case, maybe an error)


@pytest.mark.parametrize("name", sorted(subtypes()))
def test_every_subtype_makes_verified_pairs_of_the_release_shapes(name: str, synthetic_db: Path):
    """Over the templates the sub-type applies to (two tasks each, until two pairs verify): the pairs carry the
    sub-type's name, level and version, a contract with the expected answer it implies, and a patch of whole rows
    of real tables; every rejection is a counted snake_case reason."""
    with open_source(synthetic_db) as con:  # closed before the release below opens the same file
        _check_subtype(name, con)


def _check_subtype(name: str, synthetic_source) -> None:
    subtype, schema, pairs, reasons = subtypes()[name], load_schema(), [], Counter()
    applicable = [t for t in TEMPLATES if subtype.applies(t)]
    assert applicable, f"{name} applies to no template"
    tables = Tables(synthetic_source)
    for template in applicable:
        for task in instantiate(synthetic_source, [template], per_template=2, seed=7)[0]:
            try:
                pairs.append(verify_pair(synthetic_source, tables, task, template, subtype, seed=0))
            except Rejected as rejected:
                reasons[rejected.reason] += 1
        if len(pairs) >= 2:
            break
    assert pairs, f"{name}: no verified pair on the synthetic source; rejections {dict(reasons)}"
    assert all(REASON.match(reason) for reason in reasons), sorted(reasons)
    for pair in pairs:
        assert (pair.subtype, pair.level, pair.subtype_version) == (name, subtype.level, subtype.version)
        assert pair.contract in {"abstain", "repair"}
        if pair.contract == "abstain":
            assert pair.expected.value is None
        else:
            assert pair.expected.value is not None and pair.expected != pair.clean.answer or pair.trap
        assert pair.patch.tables or pair.patch.slots, "the noise changes neither a record nor the question"
        for table, changed in pair.patch.tables.items():
            columns = set(schema[table].column_names)
            assert set(changed.key_columns) <= columns, (table, changed.key_columns)
            assert all(set(row) == columns for row in changed.add), f"{table}: an added row is not a whole row"
            assert all(set(key) == set(changed.key_columns) for key in changed.hide), table


@pytest.fixture(scope="module")
def release(synthetic_release_dir: Path, synthetic_db: Path):
    with Release.open(synthetic_release_dir, synthetic_db) as opened:
        yield opened


def _llm_options(stack):
    """The llm agent against a scripted chat server: one query, then an abstention."""
    from test_llm_agent import ScriptedServer, tool_call

    server = stack.enter_context(
        ScriptedServer(
            [
                tool_call("c1", "sql", {"query": "SELECT count(*) AS n FROM patients"}),
                tool_call("c2", "answer", {"value": None}),
            ]
        )
    )
    return {"base_url": server.base_url}


@pytest.mark.parametrize("name", agent_names())
def test_every_agent_plays_clean_and_noisy_episodes_to_an_answer(name: str, release):
    """A clean and a noisy task: the agent acts only through the episode's tools, ends with an answer, and the
    verifier gives a verdict."""
    from contextlib import ExitStack

    with release.episode(release.tasks()[0].task_id) as first:  # closed: an open episode keeps the database open
        tools = {tool["function"]["name"] for tool in first.observation["tools"]}
    by_condition = {}
    for task in release.tasks():
        by_condition.setdefault(release.label(task.task_id).condition, task.task_id)
    assert set(by_condition) == {"clean", "noise"}
    with release.source_cursor() as source:
        for task_id in by_condition.values():
            with ExitStack() as stack:
                options = _llm_options(stack) if name == "llm" else {}
                episode = release.episode(task_id)
                stack.callback(episode.close)
                get_agent(name, **options).run(episode, context_for(release, task_id), seed=0)
                trajectory = episode.trajectory(name)
            assert trajectory.calls and {c.tool for c in trajectory.calls} <= tools, [c.tool for c in trajectory.calls]
            assert trajectory.calls[-1].tool == "answer" and trajectory.answer is not None
            label = release.label(task_id)
            verdict = verify(label, trajectory, release.template(label), source=source)
            assert isinstance(verdict.passed, bool)


def test_the_gym_env_passes_gymnasiums_checker(release):
    from gymnasium.utils.env_checker import check_env

    from pipeline.env.gym_env import EHRRobustGymEnv

    env = EHRRobustGymEnv(release=release)
    try:
        check_env(env, skip_render_check=True)  # reset/step API, seeding, spaces, determinism
        action = env.action_space.sample()
        assert env.action_space.contains(action) and action["tool"] in {"sql", "answer"}
        observation = env.observation_space.sample()  # a real opening observation: the question and the tools
        assert env.observation_space.contains(observation) and observation["question"] and observation["tools"]
    finally:
        env.close()
