"""Self-contained releases: a release carries the templates, rules and unit tables scoring needs (scoring/), is
scored unchanged after every template of the checkout is bumped, and `ehrgym eval` / `serve` find its source."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from pipeline.build import BuildConfig
from pipeline.env import verifier
from pipeline.env.records import Trajectory
from pipeline.env.release import Release, ReleaseError
from pipeline.evaluate.cli import eval_command
from pipeline.release.records import LabelRecord
from pipeline.stages import run_build
from pipeline.templates.registry import CHECKOUT_TEMPLATES, ROOT_ENV
from pipeline.train.reward import release_reward

SUBTYPES = ["missing_record", "null_value", "unit_mismatch", "nonexistent_entity", "unknown_concept"]
INTENTS = ["laboratory", "encounter"]


class PassedGate:
    """The pair gate is not under test here (test_build runs it); a passing report keeps these builds short."""

    def to_json_dict(self) -> dict:
        return {"success": True}


@pytest.fixture(scope="module")
def built(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(release folder, source database): a small release on the session's synthetic source."""
    db = synthetic_db
    config = BuildConfig(
        db=db,
        releases_dir=tmp_path_factory.mktemp("releases"),
        version="v1",
        per_template=1,
        seed=0,
        subtypes=SUBTYPES,
        intents=INTENTS,
    )
    return run_build(config, gate=lambda *_: PassedGate()), db


def _eval(out: Path, *args) -> typer.testing.Result:
    app = typer.Typer()
    app.command()(eval_command)
    return CliRunner().invoke(app, ["--agent", "oracle,literal", "--workers", "1", "--out", str(out), *map(str, args)])


def _labels(release: Path) -> list[LabelRecord]:
    return [LabelRecord.model_validate_json(line) for line in (release / "labels.jsonl").read_text().splitlines()]


def _bumped_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the checkout's templates with every version raised by 100, made the registry's root."""
    copy = tmp_path / "templates"
    shutil.copytree(CHECKOUT_TEMPLATES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for path in copy.glob("*/*.yaml"):
        text, bumped = re.subn(r"(?m)^version: (\d+)", lambda m: f"version: {int(m.group(1)) + 100}", path.read_text())
        path.write_text(text if bumped else f"version: 101\n{text}")
    monkeypatch.setenv(ROOT_ENV, str(copy))
    verifier._templates.cache_clear()  # the registry is read once per process
    return copy


@pytest.fixture
def registry_restored():
    yield
    verifier._templates.cache_clear()


def carries_its_templates_rules_and_unit_tables_hashed(release: Path) -> None:
    manifest, labels = json.loads((release / "manifest.json").read_text()), _labels(release)
    used = {lab.template_id: lab.template_version for lab in labels}
    assert manifest["scoring"]["templates"] == used and used
    assert manifest["scoring"]["rule_version"] == getattr(verifier, "RULE_VERSION", 1)
    assert "unit_aliases.yaml" in manifest["scoring"]["tables"]
    scoring = {name for name in manifest["files"] if name.startswith("scoring/")}
    assert {"scoring/rules.json", "scoring/unit_aliases.yaml"} <= scoring
    assert {Path(name).name.split(".")[0] for name in scoring if "/templates/" in name} == set(used)
    for name in scoring:
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == manifest["files"][name]["sha256"], name
    assert Path(manifest["source"]["path"]).is_absolute()


def test_release_carries_its_templates_rules_and_unit_tables_hashed(built):
    carries_its_templates_rules_and_unit_tables_hashed(built[0])


def test_the_demo_release_carries_its_templates_rules_and_unit_tables_hashed(demo_release_dir: Path, demo_db: Path):
    """The session's release of the real demo (every template): its scoring/ is complete and hashed, and it opens
    on its recorded source and scores a label with the template it carries."""
    carries_its_templates_rules_and_unit_tables_hashed(demo_release_dir)
    label = _labels(demo_release_dir)[0]
    with Release.open(demo_release_dir, demo_db) as opened:
        assert opened.template(label).path.is_relative_to(demo_release_dir / "scoring")


def test_an_old_release_is_scored_unchanged_after_every_template_is_bumped(
    built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry_restored
):
    release, _ = built
    before = _eval(tmp_path / "before", "--release", release)  # no --db: the recorded source
    assert before.exit_code == 0, before.output
    _bumped_registry(tmp_path, monkeypatch)
    label = _labels(release)[0]
    assert verifier.registry_template(label.template_id).spec.version == label.template_version + 100
    with pytest.raises(ValueError, match="the registry has v"):  # what scoring from the checkout would do
        verifier.template_of(label)
    after = _eval(tmp_path / "after", "--release", release)
    assert after.exit_code == 0, after.output
    for agent in ("oracle", "literal"):
        verdicts = (tmp_path / "before" / "verdicts" / f"{agent}.jsonl").read_text()
        assert verdicts and (tmp_path / "after" / "verdicts" / f"{agent}.jsonl").read_text() == verdicts, agent
    trajectories = [
        Trajectory.model_validate_json(line)
        for line in (tmp_path / "before" / "trajectories" / "oracle.jsonl").read_text().splitlines()
    ]
    passed = [
        json.loads(line)["passed"]
        for line in (tmp_path / "before" / "verdicts" / "oracle.jsonl").read_text().splitlines()
    ]
    with Release.open(release) as opened:
        assert opened.template(label).spec.version == label.template_version
        assert opened.template(label).path.is_relative_to(release / "scoring")
        assert [release_reward(opened, t).passed for t in trajectories] == passed  # the RL reward scores it too


def _republished(release: Path, folder: Path, **source) -> Path:
    """A copy of a release whose manifest's source entry is changed (the manifest is not in its own file list)."""
    copy = folder / release.name
    shutil.copytree(release, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["source"].update(source)
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return copy


def test_a_moved_source_gives_the_clear_message(built, tmp_path: Path):
    release, db = built
    moved = _republished(release, tmp_path, path=str(tmp_path / "gone" / "source.duckdb"))
    fingerprint = json.loads((release / "manifest.json").read_text())["source"]["fingerprint"]
    result = _eval(tmp_path / "o", "--release", moved)
    assert result.exit_code == 2 and not (tmp_path / "o").exists()
    message = " ".join(result.output.split())
    assert str(tmp_path / "gone" / "source.duckdb") in message and "pass --db PATH" in message
    assert fingerprint[:12] in message
    found = _eval(tmp_path / "o2", "--release", moved, "--db", db)  # --db overrides the recorded path
    assert found.exit_code == 0, found.output


def test_a_fingerprint_mismatch_is_refused_with_or_without_db(built, tmp_path: Path):
    release, db = built
    altered = tmp_path / "altered.duckdb"
    shutil.copy(db, altered)
    with duckdb.connect(str(altered)) as con:  # same row counts, one value changed
        con.execute(
            "UPDATE patients SET anchor_age = anchor_age + 1 WHERE subject_id = (SELECT min(subject_id) FROM patients)"
        )
    given = _eval(tmp_path / "o", "--release", release, "--db", altered)
    assert given.exit_code == 2 and "source fingerprint" in given.output and "not the database" in given.output
    recorded = _eval(tmp_path / "o", "--release", _republished(release, tmp_path, path=str(altered)))
    assert recorded.exit_code == 2 and str(altered) in " ".join(recorded.output.split())
    assert "pass --db PATH" in " ".join(recorded.output.split())


def test_serve_without_db_opens_the_recorded_source(built, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import uvicorn

    from pipeline.env.cli import serve_command

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    app = typer.Typer()
    app.command()(serve_command)
    release, _ = built
    result = CliRunner().invoke(app, [str(release), "--max-memory-gb", "0"])
    assert result.exit_code == 0, result.output
    assert len(served) == 1 and served[0].title  # the app over the release opened on its recorded source
    moved = _republished(release, tmp_path, path=str(tmp_path / "nowhere.duckdb"))
    refused = CliRunner().invoke(app, [str(moved), "--max-memory-gb", "0"])
    assert refused.exit_code == 2 and "pass --db PATH" in " ".join((refused.output + (refused.stderr or "")).split())


def test_a_release_published_before_scoring_falls_back_to_the_registry(
    built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry_restored
):
    release, db = built
    old = tmp_path / "old"
    shutil.copytree(release, old)
    shutil.rmtree(old / "scoring")
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items() if not k.startswith("scoring/")}
    (old / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    label = _labels(old)[0]
    _bumped_registry(tmp_path, monkeypatch)
    with Release.open(old, db) as opened:
        assert any("published before scoring/" in note for note in opened.scoring_drift())
        with pytest.raises(
            ValueError,
            match=f"uses template '{label.template_id}' v{label.template_version}, "
            f"the registry has v{label.template_version + 100}",
        ):
            opened.template(label)
    with pytest.raises(ReleaseError, match="carries no template"):
        with Release.open(release, db) as opened:
            opened.template(label.template_id, label.template_version + 100)
