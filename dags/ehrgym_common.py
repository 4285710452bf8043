"""Wiring shared by the EHR-RobustGym DAGs: the release stages of `pipeline.stages` as Airflow tasks.

Task bodies only convert paths and call one stage each; every stage writes its output once into the build's
work folder and returns it when it is already there, so retries and reruns are idempotent. Heavy imports
(DuckDB, polars, Great Expectations) happen inside the task bodies, never at DAG parse time.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from pipeline.stage_table import FILL_TASKS, SHARDED_VALUES, STAGE_TABLE
from pipeline.templates.spec import INTENTS

if TYPE_CHECKING:
    from airflow.sdk.bases.decorator import Task

RELEASES = AssetAlias(name="ehrgym-releases")  # one Asset event per published release, added through this alias
DEFAULT_ARGS = {"owner": "ehrgym", "retries": 2, "retry_delay": timedelta(seconds=30)}
TAGS = ["ehrgym", "release"]
PROJECT = Path(__file__).resolve().parents[1]


def build_params() -> dict[str, Param]:
    """The Params both DAGs take (fresh objects per DAG); each DAG adds its own (the source for the rebuild,
    the selection for an ablation)."""
    return {
        "data_dir": Param(
            "", type="string", description="source databases and releases/ (default $EHRGYM_DATA, else <project>/data)"
        ),
        "seed": Param(0, type="integer", description="seed for sampling, noise and splits"),
        "per_template": Param(2, type="integer", minimum=1, description="clean tasks per template"),
        "intents": Param(
            list(INTENTS), type="array", items={"type": "string", "enum": list(INTENTS)}, description="intents to build"
        ),
        "fill_tasks": Param(
            FILL_TASKS, type="integer", minimum=0, description="further tasks per template for a cell with no pair"
        ),
        "test_size": Param(
            1008, type="integer", minimum=0, description="test pairs wanted (balanced over scope x level)"
        ),
        "template_shards": Param(1, type="integer", minimum=1, description="mapped task groups per intent"),
        "pair_workers": Param(
            1,
            type="integer",
            minimum=1,
            description="processes instantiating and verifying inside each mapped task and the fill",
        ),
    }


CONFIG_PARAMS = (
    "seed",
    "per_template",
    "intents",
    "test_size",
    "fill_tasks",
)  # Params copied into the BuildConfig as they are


def data_dir(value: str | None) -> Path:
    """The `data_dir` Param, else $EHRGYM_DATA, else the project's data/ folder."""
    return Path(value or os.environ.get("EHRGYM_DATA") or PROJECT / "data")


def fail_fast(call, *args):
    """Run a stage; a failed gate, an invalid config or a version taken by another release fails the task at
    once (a retry would fail the same way)."""
    from pipeline.quality.pair_gate import GateFailed  # pandas only: Great Expectations loads inside the gates

    try:
        return call(*args)
    except GateFailed as exc:
        raise AirflowFailException(f"{exc}; nothing is published (report: {exc.report.target})") from exc
    except (ValueError, FileExistsError) as exc:
        raise AirflowFailException(str(exc)) from exc


@task
def prepare(config: dict) -> str:
    """Validate the build config and create its work folder."""
    from pipeline import stages
    from pipeline.build import BuildConfig

    return str(stages.prepare(fail_fast(BuildConfig.model_validate, config)))


@task
def shards(work: str) -> list[str]:
    """The mapped groups: one per intent, each split into `template_shards` parts of its templates."""
    from pipeline import stages

    parts = int(get_current_context()["params"].get("template_shards", 1))
    return fail_fast(stages.shard_names, stages.load_config(Path(work)), parts)


@task
def source_gate(work: str) -> str:
    from pipeline import stages

    return str(fail_fast(stages.source_gate, Path(work)))


@task
def fingerprint(work: str) -> str:
    from pipeline import stages

    return str(stages.fingerprint(Path(work)))


@task
def instantiate(work: str, shard: str) -> str:
    from pipeline import stages

    workers = int(get_current_context()["params"].get("pair_workers", 1))
    return str(stages.instantiate_shard(Path(work), shard, workers=workers))


@task
def pairs(work: str, tasks: str) -> str:
    from pipeline import stages

    workers = int(get_current_context()["params"].get("pair_workers", 1))
    return str(stages.pair_shard(Path(work), Path(tasks), workers=workers))


@task
def fill(work: str, tasks: list[str], pairs: list[str]) -> str:
    from pipeline import stages

    workers = int(get_current_context()["params"].get("pair_workers", 1))
    return str(stages.fill(Path(work), [Path(p) for p in tasks], [Path(p) for p in pairs], workers=workers))


@task
def assemble(work: str, source: str, tasks: list[str], pairs: list[str], filled: str) -> str:
    from pipeline import stages

    paths = [Path(p) for p in tasks], [Path(p) for p in pairs]
    return str(stages.assemble(Path(work), Path(source), *paths, Path(filled)))


@task
def pair_gate(work: str, assembled: str) -> str:
    from pipeline import stages

    return str(fail_fast(stages.pair_gate, Path(work), Path(assembled)))


@task(outlets=[RELEASES])
def publish(work: str, assembled: str, gates: str) -> str:
    """Publish the release (one rename) and emit its Asset event."""
    from pipeline import stages

    release = fail_fast(stages.publish, Path(work), Path(assembled), Path(gates)).resolve()
    asset = Asset(name=f"ehrgym-release-{release.name}", uri=release.as_uri(), group="ehrgym-release")
    get_current_context()["outlet_events"][RELEASES].add(asset, extra={"version": release.name, "path": str(release)})
    return str(release)


STAGE_TASKS: dict[str, Task[..., Any]] = {
    "prepare": prepare,
    "source_gate": source_gate,
    "fingerprint": fingerprint,
    "instantiate": instantiate,
    "pairs": pairs,
    "fill": fill,
    "assemble": assemble,
    "pair_gate": pair_gate,
    "publish": publish,
}


def release_chain(config):
    """The stage tasks wired after `pipeline.stage_table` (the only place their order is written): each takes the
    outputs its stage names; a per-shard stage is mapped over the shards (from the `shards` task) or over the
    per-shard outputs it takes; `config` is a task output holding a BuildConfig as JSON."""
    values, tasks = {"config": config}, {}
    for stage in STAGE_TABLE:
        if stage.per_shard and "shard" not in values:
            values["shard"] = shards(values["work"])
        task_of = STAGE_TASKS[stage.name]
        mapped = {i: values[i] for i in stage.inputs if stage.per_shard and i in SHARDED_VALUES}
        fixed = {i: values[i] for i in stage.inputs if i not in mapped}
        tasks[stage.name] = values[stage.output] = (
            task_of.partial(**fixed).expand(**mapped) if mapped else task_of(**fixed)
        )
        for before in stage.after:
            tasks[before] >> tasks[stage.name]
    return values[STAGE_TABLE[-1].output]
