"""Red-team suite: hostile SQL and Python (tests/fixtures/redteam/*.yaml) fail safely in a noisy episode,
reveal nothing forbidden, and the episode keeps working after each attack. The attacks are on the sandbox and the
gateway, not on the records: they run on the session's small synthetic release."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pipeline.env.gateway import plain
from pipeline.env.release import Release
from pipeline.env.sandbox import SandboxLimits, landlock_available, run_code

FIXTURES = Path(__file__).parent / "fixtures" / "redteam"
SQL_ATTACKS = yaml.safe_load((FIXTURES / "sql_attacks.yaml").read_text())
PYTHON_ATTACKS = yaml.safe_load((FIXTURES / "python_attacks.yaml").read_text())
SECRET = "ehrgym-redteam-secret-7f3a9c"
WRITTEN = [
    Path("/tmp/ehrgym-redteam.csv"),
    Path("/tmp/ehrgym-redteam.parquet"),
    Path("/tmp/ehrgym-redteam-export"),
    Path("/tmp/ehrgym-redteam-py.txt"),
]


@pytest.fixture(scope="module")
def target(synthetic_small_release_dir: Path, synthetic_db: Path):
    """A noisy episode (of the session's small synthetic release) whose patch hides a source row, with what an
    attack must never see."""
    os.environ["EHRGYM_REDTEAM_SECRET"] = SECRET  # the parent's secret: must never reach the sandbox
    root, db = synthetic_small_release_dir, synthetic_db
    release = Release.open(root, db)
    task_id, table, key = next(
        (tid, name, tp.hide[0])
        for tid, patch in sorted(release._patches.items())
        for name, tp in sorted(patch.tables.items())
        if tp.hide
    )
    where = " AND ".join(f"{c} = {v!r}" if isinstance(v, str) else f"{c} = {v}" for c, v in key.items())
    raw = release.source_cursor()
    clean = raw.execute(f"SELECT * FROM main.{table} WHERE {where}").fetchall()
    clean_rows = [[plain(v) for v in row] for row in clean]
    assert clean_rows, "the hidden key must name a source row, or the hidden-row checks would prove nothing"
    catalog = raw.execute("SELECT current_database()").fetchall()[0][0]
    patients = raw.execute("SELECT count(*) FROM main.patients").fetchall()[0][0]
    raw.close()
    assert patients > 0
    episode = release.episode(task_id, max_turns=10_000)
    episode.sandbox_limits = SandboxLimits(cpu_seconds=3, wall_seconds=6.0, memory_bytes=1 << 30)
    before = episode.call("sql", {"query": f"SELECT count(*) FROM {table} WHERE {where}"}).rows
    values = {
        "{release_dir}": str(root),
        "{db}": str(db),
        "{catalog}": catalog,
        "{table}": table,
        "{hidden_where}": where,
        "{node_padding}": "+1" * 31_000,
    }
    yield {
        "episode": episode,
        "values": values,
        "clean_rows": clean_rows,
        "before": before,
        "label": release.label(task_id),
        "table": table,
        "where": where,
        "release": release,
        "task_id": task_id,
        "patients": patients,
    }
    episode.close()
    release.close()


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _forbidden(target) -> list[str]:
    label = target["label"]
    return [
        target["values"]["{release_dir}"],
        target["values"]["{db}"],
        "__hide_",
        "__add_",
        "CREATE VIEW",
        "root:x:0:0",
        SECRET,
        label.pair_id,
        label.reference_sql,
    ]


def _assert_safe(target, attack: dict, sent: str, result) -> None:
    if attack.get("expect", "refused") == "refused":
        assert not result.ok and result.content.startswith("Error: "), (attack["name"], result.content[:300])
    for marker in (m for m in _forbidden(target) if m not in sent):  # echoing the attacker's own text is no leak
        assert marker not in result.content, (attack["name"], marker)
    for row in target["clean_rows"]:
        assert row not in result.rows and str(row) not in result.content, attack["name"]
    assert not any(path.exists() for path in WRITTEN), attack["name"]


def _assert_still_works(target) -> None:
    episode, table, where = target["episode"], target["table"], target["where"]
    assert not episode.done
    assert episode.call("sql", {"query": "SELECT count(*) AS n FROM patients"}).rows == [[target["patients"]]]
    assert episode.call("sql", {"query": f"SELECT count(*) FROM {table} WHERE {where}"}).rows == target["before"]


@pytest.mark.parametrize("attack", SQL_ATTACKS, ids=[a["name"] for a in SQL_ATTACKS])
def test_sql_attack_fails_safely(target, attack: dict):
    sent = _fill(attack["sql"], target["values"])
    result = target["episode"].call("sql", {"query": sent})
    _assert_safe(target, attack, sent, result)
    _assert_still_works(target)


# Bad queries whose error text named the overlay ("temp".main.t, "Values list") in a noisy episode only.
ERROR_PROBES = [
    "SELECT * FROM {table}, {table}",
    "SELECT {table}.nosuch FROM {table}",
    "SELECT t.nosuch FROM {table} t",
    "SELECT nosuch FROM {table}",
    "SELECT * FROM {table} a, {table} a",
    "SELECT {table}.* FROM {table} a",
    "SELECT * FROM {table} JOIN {table} x USING (nosuch)",
    "SELECT * FROM {table} ORDER BY 999",
    "SELECT {table} + 1 FROM {table}",
    "SELECT sum(*) FROM {table}",
    "SELECT * FROM {table} JOIN {table} x USING (rowid)",
    "SELECT * FROM {table} TABLESAMPLE 1 ROWS",
    "SELECT * FROM {table} AS x(" + ", ".join(f"c{i}" for i in range(60)) + ")",
]


def test_error_text_is_the_same_in_the_clean_and_the_noisy_episode_of_a_pair(target):
    """An agent must not tell a patched table by how an error names it."""
    release, noisy = target["release"], target["task_id"]
    pair_id = release.label(noisy).pair_id
    clean = next(
        t.task_id for t in release.tasks() if t.task_id != noisy and release.label(t.task_id).pair_id == pair_id
    )
    probes = [_fill(probe, {"{table}": target["table"]}) for probe in ERROR_PROBES]
    with release.episode(clean, max_turns=100) as clean_episode:
        clean_texts = [clean_episode.call("sql", {"query": probe}).content for probe in probes]
    noisy_texts = [target["episode"].call("sql", {"query": probe}).content for probe in probes]
    assert all(text.startswith("Error: ") for text in clean_texts + noisy_texts), clean_texts + noisy_texts
    assert noisy_texts == clean_texts
    assert not any("main." in text or "Values list" in text for text in noisy_texts), noisy_texts


@pytest.mark.parametrize("attack", PYTHON_ATTACKS, ids=[a["name"] for a in PYTHON_ATTACKS])
def test_python_attack_fails_safely(target, attack: dict):
    sent = _fill(attack["code"], target["values"])
    result = target["episode"].call("python", {"code": sent})
    _assert_safe(target, attack, sent, result)
    assert len(result.content) < 25_000, attack["name"]
    _assert_still_works(target)


def test_suite_is_as_large_as_the_issue_asks():
    assert len(SQL_ATTACKS) >= 40 and len(PYTHON_ATTACKS) >= 20
    assert len({a["name"] for a in SQL_ATTACKS + PYTHON_ATTACKS}) == len(SQL_ATTACKS) + len(PYTHON_ATTACKS)


@pytest.mark.skipif(not landlock_available(), reason="this kernel offers no Landlock: the Python tool refuses to run")
def test_landlock_alone_keeps_the_release_and_the_db_out(target):
    """Without the audit hook, the kernel alone refuses the release, the DB and any program, by any route."""
    values = target["values"]
    paths = [f"{values['{release_dir}']}/labels.jsonl", values["{db}"], values["{release_dir}"], "/etc/hostname"]
    code = "\n".join(
        [
            "import os, subprocess",
            *[
                f"try:\n    {action}\n    print('allowed')\nexcept OSError as err:\n    print('denied', err.errno)"
                for action in [
                    *(f"open({p!r}, 'rb').read(10)" for p in paths[:2] + paths[3:]),
                    f"os.listdir({paths[2]!r})",
                    "subprocess.run(['/bin/true'])",
                    "os.execv('/bin/true', ['true'])",
                    "os.posix_spawn('/bin/true', ['true'], {})",
                ]
            ],
        ]
    )
    ok, output = run_code(code, lambda sql: target["episode"].query(sql, "python"), audit_hook=False)
    assert ok and output.splitlines() == ["denied 13"] * 7, output


@pytest.mark.skipif(not landlock_available(), reason="this kernel offers no Landlock: the Python tool refuses to run")
def test_python_still_works_after_the_attacks(target):
    result = target["episode"].call("python", {"code": "print(sql('SELECT count(*) AS n FROM patients')['n'][0])"})
    assert result.ok and result.content.strip() == str(target["patients"])


def test_the_hardened_gateway_still_admits_every_reference_and_gold_program(target):
    """The allow-lists must not cost legitimate SQL: each label's programs run in an episode of its own task."""
    release = target["release"]
    failures = []
    for task in release.tasks():
        label = release.label(task.task_id)
        with release.episode(task.task_id) as episode:
            outcomes = {sql: episode.gateway.run(sql) for sql in (label.reference_sql, label.gold_sql)}
        failures += [(task.task_id, o.error) for o in outcomes.values() if not o.ok]
    assert len(release.tasks()) >= 10 and not failures, failures
