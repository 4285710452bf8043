"""Scheduled rebuild: build or refresh the source database (synthetic or a MIMIC-IV folder), gate it, and
publish a new release version of verified Clean-Noise pairs. Wiring only: the stages are `pipeline.stages`."""

from __future__ import annotations

import os
from datetime import datetime
from typing import cast

from airflow.sdk import Param, dag, get_current_context, task
from ehrgym_common import CONFIG_PARAMS, DEFAULT_ARGS, TAGS, build_params, data_dir, release_chain

SCHEDULE = os.environ.get("EHRGYM_REBUILD_SCHEDULE", "@weekly")  # any cron or preset; "none" turns it off

PARAMS = {
    "source": Param(
        "synthetic", type="string", description="'synthetic', or the path of a MIMIC-IV folder (hosp/, icu/)"
    ),
    "patients": Param(1000, type="integer", minimum=1, description="synthetic source: number of patients"),
    "source_seed": Param(0, type="integer", description="synthetic source: generator seed"),
    "substitutes": Param(
        {},
        type="object",
        description='MIMIC-IV folder: substitute files by table, e.g. {"chartevents": "/data/ce.csv.gz"}',
    ),
    "version": Param("", type="string", description="release version (default <source label>-<run date as YYYYMMDD>)"),
    **build_params(),
}


@task
def source_db() -> str:
    """Build the source database, or reuse it when it is current."""
    from pipeline.stages import SourceSpec
    from pipeline.stages import source_db as build_source

    params = get_current_context()["params"]
    spec = SourceSpec(
        source=params["source"],
        patients=params["patients"],
        seed=params["source_seed"],
        substitutes=params["substitutes"],
    )
    return str(build_source(spec, data_dir(params["data_dir"])))


@task
def rebuild_config(db: str) -> dict:
    """The build config from the Params (validated by the prepare task); the version defaults to the source
    label and the run's date."""
    from pathlib import Path

    context = get_current_context()
    params, run = context["params"], context["dag_run"]
    day = (context.get("logical_date") or run.run_after).strftime("%Y%m%d")
    return {
        "db": db,
        "releases_dir": str(data_dir(params["data_dir"]) / "releases"),
        "version": params["version"] or f"{Path(db).stem}-{day}",
        **{key: params[key] for key in CONFIG_PARAMS},
    }


@dag(
    dag_id="ehrgym_rebuild",
    schedule=None if SCHEDULE == "none" else SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=PARAMS,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "rebuild"],
    doc_md=__doc__,
)
def ehrgym_rebuild():
    # Task.__call__ is typed to return XComArg, which Airflow resolves to the upstream str at run time.
    release_chain(rebuild_config(cast(str, source_db())))


ehrgym_rebuild()
