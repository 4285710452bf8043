"""No tells: every sub-type's patched rows look like the record's own (precision, ids, offsets, codes, order),
on the real demo and on a synthetic database; and the tell checks catch planted tells."""

from __future__ import annotations

import datetime as dt

import pytest

from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.overlay import open_source, overlay, polars_overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.tells import order_tells, patch_tells
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

SUBTYPES = subtypes()
TEMPLATES = {t.id: t for t in load_templates()}
PAIRS_PER_SUBTYPE = 4


def build_pairs(con) -> dict[str, list]:
    """Up to PAIRS_PER_SUBTYPE verified pairs per sub-type, one task per template in turn."""
    tasks, _ = instantiate(con, list(TEMPLATES.values()), per_template=2, seed=5)
    tables, pairs = Tables(con), {name: [] for name in SUBTYPES}
    for name, subtype in SUBTYPES.items():
        for task in sorted(tasks, key=lambda t: t.task_id.rsplit("-", 1)[1]):
            template = TEMPLATES[task.template_id]
            if not subtype.applies(template) or len(pairs[name]) >= PAIRS_PER_SUBTYPE:
                continue
            try:
                pairs[name].append(verify_pair(con, tables, task, template, subtype, seed=1))
            except Rejected:
                pass
    return pairs


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory):
    from pipeline.source.synthetic import generate_synthetic

    db = tmp_path_factory.mktemp("tells") / "synthetic-300.duckdb"
    generate_synthetic(db, 300, seed=0)
    con = open_source(db)
    yield con
    con.close()


@pytest.fixture(scope="module")
def demo_pairs(source):
    return build_pairs(source)


@pytest.fixture(scope="module")
def synthetic_pairs(synthetic):
    return build_pairs(synthetic)


def _assert_no_tells(con, pairs: list, name: str) -> None:
    patched = [pair for pair in pairs if pair.patch.tables or pair.patch.slots]
    for pair in patched:
        assert patch_tells(con, pair.patch) == [], (name, pair.pair_id)


@pytest.mark.parametrize("name", sorted(SUBTYPES))
def test_no_tells_on_the_demo(demo_pairs, source, name: str):
    _assert_no_tells(source, demo_pairs[name], name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SUBTYPES))
def test_no_tells_on_the_synthetic_default(synthetic_pairs, synthetic, name: str):
    _assert_no_tells(synthetic, synthetic_pairs[name], name)


@pytest.mark.slow
def test_pairs_patch_rows_for_the_value_and_record_subtypes(synthetic_pairs):
    """The tell test has something to look at: the row-patching sub-types made pairs on the synthetic DB."""
    for name in ("conflicting_duplicate", "implausible_value", "unit_mismatch", "placeholder_value", "displaced_time"):
        assert any(pair.patch.tables for pair in synthetic_pairs[name]), name


def _chart_row(con, itemid: int) -> dict:
    return con.sql(f"SELECT * FROM chartevents WHERE itemid = {itemid} ORDER BY ALL LIMIT 1").pl().to_dicts()[0]


def _altered(row: dict, **changes) -> Patch:
    keys = ["stay_id", "itemid", "charttime"]
    return Patch(
        tables={"chartevents": TablePatch(key_columns=keys, hide=[{k: row[k] for k in keys}], add=[{**row, **changes}])}
    )


def test_a_fractional_heart_rate_is_caught(synthetic):
    row = _chart_row(synthetic, 220045)  # heart rate: every real value an integer
    assert any("decimals" in t for t in patch_tells(synthetic, _altered(row, valuenum=64.9, value="64.9")))
    assert patch_tells(synthetic, _altered(row, valuenum=65.0, value=row["value"])) == []


def test_a_round_time_shift_is_caught(synthetic):
    row = _chart_row(synthetic, 220045)
    tells = patch_tells(synthetic, _altered(row, charttime=row["charttime"] + dt.timedelta(hours=2)))
    assert any("whole 2 h" in t for t in tells)


def test_an_id_off_the_patients_block_and_an_id_out_of_range_are_caught(synthetic):
    lab = synthetic.sql("SELECT * FROM labevents ORDER BY labevent_id LIMIT 1").pl().to_dicts()[0]
    inside = scalar(synthetic, "SELECT max(labevent_id) - 2000 FROM labevents")
    far = Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], add=[{**lab, "labevent_id": inside}])})
    assert any("from its patient's block" in t for t in patch_tells(synthetic, far))
    assert any("outside the real range" in t for t in patch_tells(synthetic, Patch(slots={"subject_id": 99_999_999})))


def test_a_female_code_for_a_male_patient_is_caught(synthetic):
    row = (
        synthetic.sql(
            "SELECT d.* FROM diagnoses_icd d JOIN patients USING (subject_id) WHERE gender = 'M' "
            "AND icd_version = 10 ORDER BY ALL LIMIT 1"
        )
        .pl()
        .to_dicts()[0]
    )
    keys = ["hadm_id", "seq_num"]
    patch = Patch(
        tables={
            "diagnoses_icd": TablePatch(
                key_columns=keys, hide=[{k: row[k] for k in keys}], add=[{**row, "icd_code": "C50911"}]
            )
        }
    )
    assert any("does not fit" in t for t in patch_tells(synthetic, patch))


def test_patched_rows_returned_last_are_caught(synthetic):
    lab = synthetic.sql("SELECT * FROM labevents ORDER BY labevent_id LIMIT 1").pl().to_dicts()[0]
    patch = Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], add=[{**lab, "valuenum": 1.0}])})
    source = f'"{scalar(synthetic, "SELECT current_database()")}".main.labevents'
    with overlay(synthetic, patch):  # the overlay as it was: the source's rows, then the added ones
        synthetic.execute(
            f"CREATE OR REPLACE TEMP VIEW appended AS SELECT * FROM {source} "
            f"UNION ALL SELECT * EXCLUDE (__pos, __sub) FROM temp.main.__add_labevents"
        )
        assert order_tells(synthetic, source, "labevents", "appended")
        assert order_tells(synthetic, source, "labevents") == []
        synthetic.execute("DROP VIEW appended")


def test_polars_overlay_keeps_the_sql_overlays_order(synthetic):
    rows = (
        synthetic.sql("SELECT * FROM labevents WHERE subject_id = (SELECT min(subject_id) FROM labevents) LIMIT 5")
        .pl()
        .to_dicts()
    )
    patch = Patch(
        tables={
            "labevents": TablePatch(
                key_columns=["labevent_id"],
                hide=[{"labevent_id": rows[1]["labevent_id"]}],
                add=[{**rows[1], "valuenum": 2.0}, {**rows[3], "labevent_id": rows[-1]["labevent_id"] + 1}],
            )
        }
    )
    subject, tables = rows[0]["subject_id"], Tables(synthetic)
    with overlay(synthetic, patch):
        in_sql = [
            r[0]
            for r in synthetic.execute("SELECT labevent_id FROM labevents WHERE subject_id = ?", [subject]).fetchall()
        ]
        for view in (tables, tables.for_subject(subject)):
            frame = polars_overlay(view, patch)["labevents"].filter(subject_id=subject).collect()
            assert frame["labevent_id"].to_list() == in_sql
    assert in_sql[:4] == [
        rows[0]["labevent_id"],
        rows[1]["labevent_id"],
        rows[2]["labevent_id"],
        rows[3]["labevent_id"],
    ]
