"""Episodes over the session's small synthetic release: the contract, the four tools (result and error path),
overlays, trajectories. Expected counts are read from the source with plain DuckDB."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.env.gateway import Limits, plain
from pipeline.env.release import Release, ReleaseError
from pipeline.env.sandbox import SandboxLimits, landlock_available
from pipeline.env.tools import TOOLS, tool_specs
from pipeline.noise.overlay import overlay
from pipeline.source.schema import load_schema

needs_landlock = pytest.mark.skipif(
    not landlock_available(), reason="this kernel offers no Landlock: the Python tool refuses to run unconfined"
)


@pytest.fixture(scope="module")
def release_dir(synthetic_small_release_dir: Path) -> Path:
    return synthetic_small_release_dir


@pytest.fixture(scope="module")
def db(synthetic_db: Path) -> Path:
    return synthetic_db


@pytest.fixture(scope="module")
def release(release_dir: Path, db: Path):
    with Release.open(release_dir, db) as opened:
        yield opened


def _count(release: Release, table: str) -> int:
    """The table's rows in the clean source, by plain DuckDB (not through an episode)."""
    raw = release.source_cursor()
    try:
        return raw.execute(f"SELECT count(*) FROM main.{table}").fetchall()[0][0]
    finally:
        raw.close()


def _pairs(release: Release) -> list[tuple[str, str]]:
    by_pair: dict[str, dict[str, str]] = {}
    for task in release.tasks():
        label = release.label(task.task_id)
        by_pair.setdefault(label.pair_id, {})[label.condition] = task.task_id
    return [(p["clean"], p["noise"]) for p in by_pair.values()]


def _patched_pair(release: Release) -> tuple[str, str]:
    return next((c, n) for c, n in _pairs(release) if release._patches.get(n) and release._patches[n].touched_tables)


def test_tasks_come_in_task_id_order_and_filter_by_split(release: Release):
    ids = [t.task_id for t in release.tasks()]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) > 0
    for split in {t.split for t in release.tasks()}:
        assert all(t.split == split for t in release.tasks(split))
    with pytest.raises(ValueError, match="no split 'nope'"):
        release.tasks("nope")
    with pytest.raises(KeyError, match="no label for task"):
        release.label("t-unknown")


def test_observation_shows_the_question_and_tools_only(release: Release):
    task = release.tasks()[0]
    with release.episode(task.task_id) as ep:
        obs = ep.observation
    assert set(obs) == {"task_id", "question", "scope", "intent", "answer_format", "tables", "tools"}
    assert obs["answer_format"] == task.answer_format.model_dump(mode="json")
    assert obs["question"] == task.question and len(obs["tables"]) == 31
    assert (
        [t["function"]["name"] for t in obs["tools"]]
        == ["sql", "python", "schema", "answer"]
        == [t["function"]["name"] for t in tool_specs()]
    )
    assert release.label(task.task_id).reference_sql not in json.dumps(obs)


def test_reference_programs_through_the_gateway_equal_raw_duckdb_on_the_overlay(release: Release):
    raw = release.source_cursor()  # same database instance (DuckDB refuses a second config for one file)
    for task in release.tasks():
        label, patch = release.label(task.task_id), release._patches.get(task.task_id)
        with release.episode(task.task_id) as ep:
            result = ep.call("sql", {"query": label.reference_sql})
        assert result.ok, (task.task_id, result.content)
        if patch is None:
            expected = raw.execute(label.reference_sql).fetchmany(500)
        else:
            with overlay(raw, patch):
                expected = raw.execute(label.reference_sql).fetchmany(500)
        assert result.rows == [[plain(v) for v in row] for row in expected], task.task_id
    raw.close()


def test_noisy_overlay_keeps_the_source_column_types_and_changes_only_the_patch(release: Release):
    from pipeline.noise.overlay import overlay_diff

    _, noisy = _patched_pair(release)
    patch = release._patches[noisy]
    with release.episode(noisy) as ep:
        for table in patch.touched_tables:
            described = ep.gateway.cursor.execute(f"DESCRIBE {table}").fetchall()
            assert [(r[0], r[1]) for r in described] == [(c.name, c.duckdb_type) for c in load_schema()[table].columns]
            removed, added = overlay_diff(ep.gateway.cursor, table, patch.tables[table])
            table_patch = patch.tables[table]  # a renumbered row is removed at its old id, added at its new
            assert (removed, added) == (
                len(table_patch.hide) + table_patch.renumbered,
                len(table_patch.add) + table_patch.renumbered,
            )


def test_schema_and_errors_look_the_same_in_a_clean_and_a_noisy_episode(release: Release):
    clean, noisy = _patched_pair(release)
    table = release._patches[noisy].touched_tables[0]
    seen = []
    for task_id in (clean, noisy):
        with release.episode(task_id) as ep:
            seen.append(
                [
                    ep.call("schema", {}).content,
                    ep.call("schema", {"table": table}).content,
                    ep.call("sql", {"query": f"SELECT no_such_column FROM {table}"}).content,
                    ep.call("sql", {"query": f"SELECT * FROM {table} WHERE 1 = 'x'"}).content,
                    ep.call("sql", {"query": f"SELECT rowid FROM {table} LIMIT 1"}).content,
                ]
            )
    assert seen[0] == seen[1]
    assert not any("view" in text.lower() for text in seen[1][2:])


def test_sql_tool_returns_rows_and_refuses_a_write(release: Release):
    with release.episode(release.tasks()[0].task_id) as ep:
        ok = ep.call("sql", {"query": "SELECT count(*) AS n FROM patients"})
        bad = ep.call("sql", {"query": "DELETE FROM patients"})
    assert ok.ok and ok.columns == ["n"] and ok.rows == [[_count(release, "patients")]] and "(1 rows)" in ok.content
    assert not bad.ok and bad.content.startswith("Error: only read queries")


@needs_landlock
def test_python_tool_reaches_the_data_through_the_gateway_only(release: Release):
    with release.episode(release.tasks()[0].task_id) as ep:
        ok = ep.call("python", {"code": "df = sql('SELECT count(*) AS n FROM admissions')\nprint(df['n'][0])"})
        via_sql = ep.call("sql", {"query": "SELECT count(*) AS n FROM admissions"})
        bad = ep.call("python", {"code": "print(open('/etc/hostname').read())"})
        trajectory = ep.trajectory("probe")
    # the episode's own view of the data (a noisy task may hide admissions): the same count as its sql tool
    assert ok.ok and ok.content.strip() == str(via_sql.rows[0][0]) and via_sql.rows[0][0] > 0
    assert not bad.ok and "PermissionError" in bad.content
    assert [(q.via, q.ok, q.row_count) for q in trajectory.calls[0].queries] == [("python", True, 1)]


def test_schema_tool_lists_tables_and_refuses_an_unknown_one(release: Release):
    with release.episode(release.tasks()[0].task_id) as ep:
        every, one = ep.call("schema", {}), ep.call("schema", {"table": "labevents"})
        bad = ep.call("schema", {"table": "__hide_labevents"})
    assert every.ok and len(every.content.splitlines()) == 31
    assert one.ok and "valuenum DOUBLE" in one.content
    assert not bad.ok and "unknown table" in bad.content


def test_answer_tool_ends_the_episode_and_later_calls_fail(release: Release):
    with release.episode(release.tasks()[0].task_id) as ep:
        bad = ep.call("answer", {"value": {"nested": 1}})
        ok = ep.call("answer", {"value": 4.2, "unit": "mg/dL", "records": {"itemid": 1}})
        after = ep.call("sql", {"query": "SELECT 1"})
        trajectory = ep.trajectory("probe", trial=2)
    assert not bad.ok and "bad arguments for answer" in bad.content
    assert ok.ok and ep.done and not after.ok and "ended" in after.content
    assert trajectory.answer.value == 4.2 and trajectory.answer.unit == "mg/dL" and trajectory.trial == 2
    assert len(trajectory.calls) == 2 and not trajectory.truncated


def test_null_answer_means_abstain_and_turns_run_out_as_truncation(release: Release):
    task_id = release.tasks()[0].task_id
    with release.episode(task_id) as ep:
        ep.call("answer", {"value": None})
        assert ep.trajectory("a").answer.value is None
    with release.episode(task_id, max_turns=2) as ep:
        ep.call("nope", {})
        ep.call("sql", {"query": "SELECT 1"})
        assert ep.done and ep.trajectory("a").truncated and ep.trajectory("a").answer is None
        assert ep.trajectory("a").calls[0].result.content.startswith("Error: unknown tool")


def test_release_open_refuses_a_modified_file_and_a_different_source(
    release: Release, release_dir: Path, db: Path, tmp_path: Path
):
    labevents = _count(release, "labevents")
    copy = shutil.copytree(release_dir, tmp_path / "copy")
    (copy / "tasks.jsonl").write_text((copy / "tasks.jsonl").read_text() + "\n")
    with pytest.raises(ReleaseError, match="tasks.jsonl: sha256 differs"):
        Release.open(copy, db)
    shutil.copy(release_dir / "tasks.jsonl", copy / "tasks.jsonl")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["source"]["rows"]["labevents"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ReleaseError, match=f"table labevents has {labevents} rows"):
        Release.open(copy, db, check_fingerprint=False)


def test_release_open_names_a_conflicting_configuration(release: Release, release_dir: Path, db: Path):
    # DuckDB shares one instance per file in a process: other limits cannot apply; the error says what to do
    with pytest.raises(ReleaseError, match="already open in this process.*source_cursor"):
        Release.open(release_dir, db, limits=Limits(memory_limit="123MB"))
    with release.episode(release.tasks()[0].task_id) as ep:  # the open release still serves
        assert ep.call("sql", {"query": "SELECT 1 AS one"}).ok


@needs_landlock
def test_python_limits_are_per_episode(release: Release):
    with release.episode(release.tasks()[0].task_id) as ep:
        ep.sandbox_limits = SandboxLimits(wall_seconds=3.0)
        stopped = ep.call("python", {"code": "while True:\n    pass"})
        after = ep.call("sql", {"query": "SELECT 1 AS one"})
    assert not stopped.ok and "limit" in stopped.content and after.rows == [[1]]


def test_tool_specs_are_generated_from_the_signatures():
    import inspect

    for spec in tool_specs():
        function = spec["function"]
        signature = inspect.signature(TOOLS[function["name"]])
        assert list(function["parameters"]["properties"]) == list(signature.parameters)
        assert function["parameters"].get("required", []) == [
            p.name for p in signature.parameters.values() if p.default is inspect.Parameter.empty
        ]
        assert function["description"] and function["parameters"]["additionalProperties"] is False
