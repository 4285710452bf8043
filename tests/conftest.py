"""Shared fixtures: where the real MIMIC-IV demo lives (../shared/data) and a demo DuckDB loaded once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("EHRGYM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
DEMO_DIR = SHARED_DATA / "mimic-iv-demo-2.2"
CHARTEVENTS = SHARED_DATA / "chartevents-from-meds" / "chartevents.csv.gz"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp").is_dir() or not CHARTEVENTS.is_file():
        pytest.skip(f"real MIMIC-IV demo not found at {DEMO_DIR} (and {CHARTEVENTS}); set EHRGYM_SHARED_DATA")
    return DEMO_DIR


@pytest.fixture(scope="session")
def demo_db(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo with the reconstructed chartevents, loaded by the project's loader."""
    from pipeline.source.loader import load_mimic

    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    load_mimic(demo_dir, db, substitutes={"chartevents": CHARTEVENTS})
    return db


@pytest.fixture(scope="session")
def synthetic_1000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1,000-patient synthetic MIMIC-IV (the embedded default's generator), built once per session."""
    from pipeline.source.synthetic import generate_synthetic

    db = tmp_path_factory.mktemp("synthetic") / "synthetic-1000.duckdb"
    generate_synthetic(db, 1000, seed=11)
    return db


@pytest.fixture(scope="module")
def source(demo_db: Path):
    """A read-only connection to the demo database, on which overlays are created."""
    from pipeline.noise.overlay import open_source

    con = open_source(demo_db)
    yield con
    con.close()
