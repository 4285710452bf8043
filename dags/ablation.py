"""Noise ablation, triggered by hand: a release restricted to the chosen noise levels, sub-types, intents and
scopes, named after the ablation, built on an existing source database. Wiring only: see `pipeline.stages`."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag, get_current_context, task
from ehrgym_common import CONFIG_PARAMS, DEFAULT_ARGS, TAGS, build_params, data_dir, release_chain

LEVELS, SCOPES = ["record", "value", "query"], ["patient", "population"]
STRINGS = {"type": "string"}

PARAMS = {
    "name": Param(
        type="string",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="ablation name; the release is ablation-<name>",
    ),
    "source_db": Param(type="string", description="path of an existing source DuckDB database"),
    "levels": Param(LEVELS, type="array", items={"type": "string", "enum": LEVELS}, description="noise levels"),
    "subtypes": Param(
        None, type=["null", "array"], items=STRINGS, description="noise sub-types (null: all of the levels)"
    ),
    "scopes": Param(SCOPES, type="array", items={"type": "string", "enum": SCOPES}, description="question scopes"),
    "pairs_per_cell": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        description="at most this many pairs per intent x scope x level x sub-type",
    ),
    **build_params(),
}


@task
def ablation_config() -> dict:
    """The build config of the ablation from the Params (validated by the prepare task)."""
    from pathlib import Path

    params = get_current_context()["params"]
    if not Path(params["source_db"]).is_file():
        raise FileNotFoundError(
            f"Param source_db: {params['source_db']} is not a database file; run ehrgym_rebuild or `ehrgym synth` first"
        )
    selection = {key: params[key] for key in ("levels", "subtypes", "scopes", "pairs_per_cell", *CONFIG_PARAMS)}
    return {
        "db": params["source_db"],
        "releases_dir": str(data_dir(params["data_dir"]) / "releases"),
        "version": f"ablation-{params['name']}",
        **selection,
    }


@dag(
    dag_id="ehrgym_ablation",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "ablation"],
    doc_md=__doc__,
)
def ehrgym_ablation():
    release_chain(ablation_config())


ehrgym_ablation()
