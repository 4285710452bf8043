"""Shared fixtures: the real MIMIC-IV demo (../shared/data), synthetic sources and releases, each built once per
test run (under pytest-xdist the first worker builds, the others wait on a lock and reuse it); tests that need the
real demo are marked `realdata` from their fixtures, so `-m "not realdata"` is the self-contained tier.

Every behaviour runs on the small synthetic source (`synthetic_db`, its releases `synthetic_release_dir` and
`synthetic_small_release_dir`); where the real records matter, one realdata test per behaviour runs every case on
the demo and reports the failing ones together (tests/aggregate.py)."""

from __future__ import annotations

import fcntl
import gc
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("EHRGYM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
DEMO_DIR = SHARED_DATA / "mimic-iv-demo-2.2"
CHARTEVENTS = SHARED_DATA / "chartevents-from-meds" / "chartevents.csv.gz"
SYNTHETIC_PATIENTS, SYNTHETIC_SEED = 300, 7  # synthetic_db: every template instantiates five tasks on it
REAL_DATA_FIXTURES = ("demo_dir", "demo_db")  # a test that uses one of these (even indirectly) needs ../shared


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test whose fixture closure reaches the real demo `realdata` (fixtures fetched at run time with
    request.getfixturevalue are marked where they are parametrized)."""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in REAL_DATA_FIXTURES):
            item.add_marker(pytest.mark.realdata)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder shared/<name> of this test run, filled by `build(folder)` exactly once: xdist workers share the
    run's base temp folder, the first takes the lock and builds, the others wait and read. Read-only for users."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when a worker dies
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a half-built folder of a failed attempt
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


class SkippedGate:
    """A pair-gate report that passes (the real gate loads Great Expectations; test_build runs it)."""

    def to_json_dict(self) -> dict:
        return {"gate": "skipped by a shared test fixture (tests/conftest.py)"}


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp").is_dir() or not CHARTEVENTS.is_file():
        pytest.skip(f"real MIMIC-IV demo not found at {DEMO_DIR} (and {CHARTEVENTS}); set EHRGYM_SHARED_DATA")
    return DEMO_DIR


@pytest.fixture(scope="session")
def demo_db(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo with the reconstructed chartevents, loaded by the project's loader. Read-only: copy to change it."""
    from pipeline.source.loader import load_mimic

    def load(folder: Path) -> None:
        load_mimic(demo_dir, folder / "demo.duckdb", substitutes={"chartevents": CHARTEVENTS})

    return built_once(tmp_path_factory, "demo", load) / "demo.duckdb"


@pytest.fixture(scope="session")
def synthetic_1000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1,000-patient synthetic MIMIC-IV (the embedded default's generator). Read-only: copy to change it."""
    from pipeline.source.synthetic import generate_synthetic

    folder = built_once(
        tmp_path_factory, "synthetic", lambda f: generate_synthetic(f / "synthetic-1000.duckdb", 1000, seed=11)
    )
    return folder / "synthetic-1000.duckdb"


def _every_template_release(db: Path, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """`<name>-v1`: every template on `db`, one task each, every default sub-type, no cell filling, the pair gate
    skipped."""
    from pipeline.build import BuildConfig
    from pipeline.stages import run_build

    def build(folder: Path) -> None:
        run_build(
            # agents and readers need a pair per template, not every intent x sub-type cell filled
            BuildConfig(db=db, releases_dir=folder, version=f"{name}-v1", per_template=1, fill_tasks=0),
            gate=lambda *_: SkippedGate(),
        )

    return built_once(tmp_path_factory, f"{name}-release", build) / f"{name}-v1"


@pytest.fixture(scope="session")
def demo_release_dir(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One release of every template on the demo (one task per template, every default sub-type, pair gate
    skipped): what the agents and the question reader are run over. Open it per module; never write into it."""
    return _every_template_release(demo_db, tmp_path_factory, "demo")


@pytest.fixture(scope="session")
def demo_small_release_dir(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pipeline.env.testing's small release (laboratory and encounter templates) on the demo. Never write into it."""
    from pipeline.env.testing import build_small_release

    return built_once(tmp_path_factory, "demo-small-release", lambda f: build_small_release(demo_db, f)) / "env-test"


@pytest.fixture(scope="session")
def synthetic_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 300-patient synthetic MIMIC-IV (seed 7), the self-contained tier's source. Read-only: copy to change it."""
    from pipeline.source.synthetic import generate_synthetic

    name = f"synthetic-{SYNTHETIC_PATIENTS}.duckdb"
    folder = built_once(
        tmp_path_factory,
        f"synthetic-{SYNTHETIC_PATIENTS}",
        lambda f: generate_synthetic(f / name, SYNTHETIC_PATIENTS, seed=SYNTHETIC_SEED),
    )
    return folder / name


@pytest.fixture(scope="session")
def synthetic_release_dir(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo_release_dir's twin on synthetic_db: every template, one task each, every default sub-type, pair gate
    skipped. Open it per module; never write into it."""
    return _every_template_release(synthetic_db, tmp_path_factory, "synthetic")


@pytest.fixture(scope="session")
def synthetic_small_release_dir(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pipeline.env.testing's small release (laboratory and encounter templates) on synthetic_db. Never write
    into it."""
    from pipeline.env.testing import build_small_release

    return (
        built_once(tmp_path_factory, "synthetic-small-release", lambda f: build_small_release(synthetic_db, f))
        / "env-test"
    )


@pytest.fixture(scope="module", autouse=True)
def _free_unreachable_connections():
    """Collect garbage before each module: DuckDB keeps one instance per file and configuration, so a connection
    an earlier module left in an unreachable cycle (a release's cursor) would refuse this module's plain one."""
    gc.collect()


@pytest.fixture(scope="module")
def synthetic_source(synthetic_db: Path):
    """A read-only connection to synthetic_db, on which overlays are created (the twin of `source`)."""
    from pipeline.noise.overlay import open_source

    con = open_source(synthetic_db)
    yield con
    con.close()


@pytest.fixture(scope="module")
def source(demo_db: Path):
    """A read-only connection to the demo database, on which overlays are created."""
    from pipeline.noise.overlay import open_source

    con = open_source(demo_db)
    yield con
    con.close()
