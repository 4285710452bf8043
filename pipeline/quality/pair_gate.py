"""The pair gate: release files and overlays against the suites in `expectations/pairs/` before export."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl

from pipeline.noise.base import LEVELS
from pipeline.noise.guards import keys_frame
from pipeline.noise.overlay import overlay, source_catalog
from pipeline.noise.patch import Patch, TablePatch
from pipeline.quality.gx_runner import GateReport, load_suite_json, validate_batches
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord
from pipeline.release.splits import SCOPES

SUITES = Path(__file__).resolve().parents[2] / "expectations" / "pairs"


class GateFailed(Exception):
    """A gate failed; `report` says which rules and how many rows."""

    def __init__(self, report: GateReport):
        super().__init__(f"{report.gate} gate failed")
        self.report = report


def completeness_frame(tasks: list[TaskRecord], labels: list[LabelRecord], patches: list[PatchRecord]) -> pd.DataFrame:
    visible = {t.task_id: t for t in tasks}
    patched: defaultdict[str, int] = defaultdict(int)
    for patch in patches:
        patched[patch.pair_id] += 1
    rows: dict[str, dict] = defaultdict(
        lambda: {"n_clean": 0, "n_noise": 0, "splits": set(), "n_visible": 0, "clean_answered": True, "formats": set()}
    )
    for lab in labels:
        row = rows[lab.pair_id]
        row[f"n_{lab.condition}"] += 1
        row["splits"].add(lab.split)
        row["n_visible"] += lab.task_id in visible
        if lab.task_id in visible:
            # the unit follows the concept the question names (a swapped lab shows its own unit)
            shown = visible[lab.task_id].answer_format
            row["formats"].add(repr(shown.model_copy(update={"unit": None}) if shown is not None else None))
        if lab.condition == "clean":
            row["clean_answered"] = lab.expected.value not in (None, [])
    return pd.DataFrame(
        [
            {
                "pair_id": p,
                **{k: v for k, v in r.items() if k not in ("splits", "formats")},
                "n_splits": len(r["splits"]),
                "n_patches": patched[p],
                "n_formats": len(r["formats"]),
            }
            for p, r in sorted(rows.items())
        ],
        columns=["pair_id", "n_clean", "n_noise", "n_visible", "clean_answered", "n_splits", "n_patches", "n_formats"],
    )


def balance_frame(labels: list[LabelRecord]) -> pd.DataFrame:
    cells = {(s, lv): 0 for s in SCOPES for lv in LEVELS}
    for lab in labels:
        if lab.condition == "noise" and lab.split == "test":
            cells[(lab.scope, lab.level)] += 1
    return pd.DataFrame([{"scope": s, "level": lv, "pairs": n} for (s, lv), n in cells.items()])


def patients_frame(labels: list[LabelRecord]) -> pd.DataFrame:
    splits: dict[int, set] = defaultdict(set)
    for lab in labels:
        if lab.subject_id is not None:
            splits[lab.subject_id].add(lab.split)
    return pd.DataFrame(
        [{"subject_id": s, "n_splits": len(v)} for s, v in sorted(splits.items())], columns=["subject_id", "n_splits"]
    )


def overlays_frame(con: duckdb.DuckDBPyConnection, patches: list[PatchRecord]) -> pd.DataFrame:
    """Per pair and patched table: does the patch fit the table (its keys, renumbered ids and added rows name the
    table's columns, every added row all of them, and its values take the table's types), and does the table's
    overlay have the source table's columns and types? The overlay view has one shape per table whatever the patch
    (`_overlay_view_sql`), so it is applied for real once per table, with the first pair's patch of it (one overlay
    per pair cost 99 s of a 5,726-pair release)."""
    catalog, rows = source_catalog(con), []
    schemas: dict[str, pl.Schema] = {}
    view_matches: dict[str, bool] = {}
    for record in patches:
        for table in record.patch.touched_tables:
            if table not in schemas:
                schemas[table] = con.sql(f'SELECT * FROM "{catalog}".main.{table} LIMIT 0').pl().schema
                view_matches[table] = _overlay_schema_matches(con, catalog, record.patch, table)
            rows.append(
                {
                    "pair_id": record.pair_id,
                    "table": table,
                    "patch_fits": patch_fits(record.patch.tables[table], schemas[table]),
                    "schema_matches": view_matches[table],
                }
            )
    return pd.DataFrame(rows, columns=["pair_id", "table", "patch_fits", "schema_matches"])


def _overlay_schema_matches(con: duckdb.DuckDBPyConnection, catalog: str, patch: Patch, table: str) -> bool:
    with overlay(con, patch, ordered=False):
        view = con.sql(f"DESCRIBE {table}").fetchall()
    source = con.sql(f'DESCRIBE "{catalog}".main.{table}').fetchall()
    return [r[:2] for r in view] == [r[:2] for r in source]


def patch_fits(patch: TablePatch, schema: pl.Schema) -> bool:
    """The table patch names only the table's columns, adds complete rows, and its values take the column types."""
    columns = set(schema)
    if not set(patch.key_columns) <= columns or not set(patch.renumber) <= columns:
        return False
    if any(set(row) != columns for row in patch.add):
        return False
    try:
        if patch.hide:
            keys_frame(patch.hide, schema).collect()
        if patch.add:
            keys_frame(patch.add, schema).collect()
    except (pl.exceptions.PolarsError, ValueError, TypeError, OverflowError):
        return False
    return True


def gate_release(
    tasks: list[TaskRecord],
    labels: list[LabelRecord],
    patches: list[PatchRecord],
    con: duckdb.DuckDBPyConnection,
    suites: Path = SUITES,
) -> GateReport:
    """Validate everything a release would publish; raise GateFailed (with the report) when a rule fails."""
    frames = {
        "tasks": pd.DataFrame([t.model_dump() for t in tasks], columns=list(TaskRecord.model_fields)),
        "labels": pd.DataFrame(
            [
                lab.model_dump(include={"task_id", "condition", "contract", "level", "pair_id", "reference_sql"})
                for lab in labels
            ]
        ),
        "completeness": completeness_frame(tasks, labels, patches),
        "test_balance": balance_frame(labels),
        "patients": patients_frame(labels),
        "overlays": overlays_frame(con, patches),
    }
    reports = [validate_batches(load_suite_json(suites / f"{name}.json"), [frame]) for name, frame in frames.items()]
    report = GateReport("pairs", f"{len(tasks)} tasks, {len(patches)} pairs", reports)
    if not report.success:
        raise GateFailed(report)
    return report
