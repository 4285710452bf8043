"""Small releases for the environment's tests and benchmark: built on a given source, gated by nothing."""

from __future__ import annotations

from pathlib import Path

SMALL_SUBTYPES = ["missing_record", "null_value", "implausible_value", "conflicting_duplicate", "nonexistent_entity"]


class _NoGate:
    """A gate report that passes everything (the real pair gate loads Great Expectations, 7 s)."""

    def __init__(self, *_: object) -> None:
        pass

    def to_json_dict(self) -> dict:
        return {"gate": "none (environment test fixture)"}


def build_small_release(
    db: Path, releases_dir: Path, version: str = "env-test", intents: list[str] | None = None, per_template: int = 1
) -> Path:
    """A release of a few verified pairs per template of the chosen intents, for tests and benchmarks."""
    from pipeline.build import BuildConfig
    from pipeline.stages import run_build

    config = BuildConfig(
        db=db,
        releases_dir=releases_dir,
        version=version,
        per_template=per_template,
        seed=5,
        subtypes=SMALL_SUBTYPES,
        intents=intents or ["laboratory", "encounter"],
        fill_tasks=0,  # the episodes need pairs, not every intent x sub-type cell
    )
    return run_build(config, gate=_NoGate)
