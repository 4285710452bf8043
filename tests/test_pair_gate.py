"""The pair gate's overlay rules: every pair's patch fits its table (columns and types), and each patched table's
overlay keeps the source's schema; a patch that does not fit fails the gate's suite."""

from __future__ import annotations

import pytest

from pipeline.noise.patch import Patch, TablePatch
from pipeline.quality.gx_runner import load_suite_json, validate_batches
from pipeline.quality.pair_gate import SUITES, overlays_frame, patch_fits
from pipeline.release.records import PatchRecord


def _lab_patch(con) -> TablePatch:
    """Hide one lab row and add a changed copy of it."""
    row = con.sql("SELECT * FROM labevents WHERE valuenum IS NOT NULL ORDER BY labevent_id LIMIT 1").pl().to_dicts()[0]
    return TablePatch(
        key_columns=["labevent_id"], hide=[{"labevent_id": row["labevent_id"]}], add=[{**row, "valuenum": 1e6}]
    )


def _schema(con):
    return con.sql("SELECT * FROM labevents LIMIT 0").pl().schema


def _broken(patch: TablePatch, how: str) -> TablePatch:
    row = patch.add[0]
    if how == "unknown_key_column":
        return patch.model_copy(update={"key_columns": ["lab_id"], "hide": [{"lab_id": 1}]})
    if how == "incomplete_row":
        return patch.model_copy(update={"add": [{k: v for k, v in row.items() if k != "valueuom"}]})
    if how == "extra_column":
        return patch.model_copy(update={"add": [{**row, "note": "x"}]})
    if how == "value_of_another_type":
        return patch.model_copy(update={"add": [{**row, "valuenum": "high"}]})
    if how == "unknown_renumbered_column":
        return patch.model_copy(update={"renumber": {"lab_number": {1: 2}}})
    raise AssertionError(how)


def test_a_real_patch_fits_its_table(synthetic_source):
    assert patch_fits(_lab_patch(synthetic_source), _schema(synthetic_source))


@pytest.mark.parametrize(
    "how",
    ["unknown_key_column", "incomplete_row", "extra_column", "value_of_another_type", "unknown_renumbered_column"],
)
def test_a_patch_that_does_not_fit_its_table_is_found(synthetic_source, how: str):
    assert not patch_fits(_broken(_lab_patch(synthetic_source), how), _schema(synthetic_source))


def test_the_overlays_suite_fails_a_release_with_one_unfit_patch(synthetic_source):
    good = _lab_patch(synthetic_source)
    records = [
        PatchRecord(pair_id="p1", noise_task_id="t1", patch=Patch(tables={"labevents": good})),
        PatchRecord(
            pair_id="p2", noise_task_id="t2", patch=Patch(tables={"labevents": _broken(good, "value_of_another_type")})
        ),
    ]
    frame = overlays_frame(synthetic_source, records)
    assert frame.to_dict("records") == [
        {"pair_id": "p1", "table": "labevents", "patch_fits": True, "schema_matches": True},
        {"pair_id": "p2", "table": "labevents", "patch_fits": False, "schema_matches": True},
    ]
    suite = load_suite_json(SUITES / "overlays.json")
    assert validate_batches(suite, [frame.head(1)]).success
    assert not validate_batches(suite, [frame]).success


def test_a_gate_report_fingerprints_equal_frames_alike_whatever_cells_share_one_object():
    """GX fingerprints a frame with dict cells by pickling it, and pickle writes a cell that is the same object as an
    earlier one as a back-reference: two equal task frames, one sharing an answer format between rows, were reported
    with different fingerprints (a rebuild's gates.json, and so its manifest, changed). The report hashes the JSON."""
    import json

    import pandas as pd

    shared = {"type": "number", "unit": "mg/dL"}
    suite = {
        "name": "pairs.tasks",
        "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "format"}}],
    }
    one_object = pd.DataFrame({"task_id": ["a", "b"], "format": [shared, shared]})
    two_objects = pd.DataFrame({"task_id": ["a", "b"], "format": [dict(shared), dict(shared)]})
    reports = [validate_batches(suite, [frame]) for frame in (one_object, two_objects)]
    assert all(report.success for report in reports)
    markers = [report.gx_results[0]["meta"]["batch_markers"] for report in reports]
    assert markers[0] == markers[1] and set(markers[0]) == {"pandas_data_fingerprint"}
    assert json.dumps(reports[0].gx_results, sort_keys=True) == json.dumps(reports[1].gx_results, sort_keys=True)
    different = validate_batches(suite, [two_objects.assign(task_id=["a", "c"])])
    assert different.gx_results[0]["meta"]["batch_markers"] != markers[0]
