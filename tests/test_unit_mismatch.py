"""unit_mismatch at patient scope on real demo rows: the same quantity in another unit, repaired to the clean answer."""

from __future__ import annotations

import pytest

from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.subtypes.unit_mismatch import expected_units, re_expressed_units, units_of, written_as
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.matching import convert_unit, normal_unit
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

UNIT_MISMATCH = subtypes()["unit_mismatch"]
TEMPLATES = {t.id: t for t in load_templates()}


def first_pair(source, template_id: str, per_template: int = 40):
    template, reasons = TEMPLATES[template_id], []
    for task in instantiate(source, [template], per_template=per_template, seed=0)[0]:
        try:
            return verify_pair(source, Tables(source), task, template, UNIT_MISMATCH, seed=0)
        except Rejected as exc:
            reasons.append(exc.reason)
    pytest.fail(f"unit_mismatch on {template_id}: no verified pair ({reasons})")


def test_every_re_expressed_unit_converts():
    for usual, written in re_expressed_units().items():
        assert convert_unit(1.0, usual, written) not in (None, 1.0), (usual, written)


@pytest.mark.parametrize(
    ("template_id", "table", "number"),
    [
        ("lab_first_value_within_24h", "labevents", "valuenum"),
        ("prescription_first_dose", "prescriptions", "dose_val_rx"),
    ],
)
def test_a_patient_pair_holds_the_converted_quantity_and_its_label_is_the_clean_answer(
    source, template_id, table, number
):
    pair = first_pair(source, template_id)
    units, tolerance = units_of(table), TEMPLATES[template_id].spec.answer.tolerance
    (row,) = pair.patch.tables[table].add
    usual = expected_units(source, units, {row[units.item]})[row[units.item]]
    assert normal_unit(row[units.unit]) == normal_unit(re_expressed_units()[usual]) != normal_unit(usual)
    assert row[units.unit] == written_as(source, units, row[units.unit], row[units.item])  # as real rows spell it
    (hidden,) = pair.patch.tables[table].hide
    key = " AND ".join(f"{c} = {v!r}" for c, v in hidden.items())
    clean = float(scalar(source, f"SELECT {number} FROM {table} WHERE {key}"))
    assert convert_unit(row[number], row[units.unit], usual) == pytest.approx(clean, abs=tolerance)  # same quantity
    assert float(row[number]) != pytest.approx(clean)
    assert pair.contract == "repair" and pair.expected == pair.clean.answer  # the careful reading is the clean answer
    assert pair.trap and pair.naive_answer != pair.expected
    if table == "labevents":  # its reference range is written in the row's unit too (blind audit 29)
        ranges = source.execute(f"SELECT ref_range_lower, ref_range_upper FROM {table} WHERE {key}").fetchall()[0]
        for clean_bound, bound in zip(ranges, (row["ref_range_lower"], row["ref_range_upper"])):
            assert (clean_bound is None) == (bound is None)
            if bound is not None:
                assert convert_unit(bound, row[units.unit], usual) == pytest.approx(clean_bound, abs=1e-6)


def test_a_unit_the_column_never_writes_is_not_written(source):
    """Blind audit 26: a dose's gram spelling stood out, and an input of 0.1 'L' where every real input volume is
    in 'ml'. A unit is written as the item's (else the column's) real rows spell it, or the candidate is rejected."""
    prescriptions = units_of("prescriptions")
    assert written_as(source, prescriptions, "grams") == "g" and written_as(source, prescriptions, "mg") == "mg"
    assert written_as(source, prescriptions, "grams", "Ampicillin Sodium") == "g"
    assert written_as(source, units_of("inputevents"), "L") is None
    template, reasons = TEMPLATES["input_volume_total_in_stay"], set()
    for task in instantiate(source, [template], per_template=6, seed=0)[0]:
        with pytest.raises(Rejected) as rejected:
            verify_pair(source, Tables(source), task, template, UNIT_MISMATCH, seed=0)
        reasons.add(rejected.value.reason)
    assert reasons == {"unit_unknown_to_column"}


def test_a_temperature_is_written_in_the_other_scale(source):
    pair = first_pair(source, "vital_first_after_icu_admission")
    (row,) = pair.patch.tables["chartevents"].add
    assert row["valueuom"] in ("°C", "°F")
    assert convert_unit(row["valuenum"], row["valueuom"], pair.expected.unit) == pytest.approx(
        pair.expected.value, abs=1e-6
    )


def test_an_item_without_a_same_dimension_unit_is_rejected(source):
    """RBC (m/uL), platelets (K/uL): no unit of the same dimension to write the count in, and a relabel alone
    (3.55 'K/uL' of RBC) is still read as 3.55 m/uL by a careful analyst: no pair at all."""
    task = instantiate(source, [TEMPLATES["lab_last_value_in_admission"]], per_template=1, seed=3)[0][0]
    rbc = scalar(source, "SELECT min(labevent_id) FROM labevents WHERE valuenum IS NOT NULL AND valueuom = 'm/uL'")
    counted = task.model_copy(update={"evidence": [{"table_name": "labevents", "labevent_id": rbc}]})
    with pytest.raises(Rejected, match="no_convertible_unit"):
        UNIT_MISMATCH.make(source, counted, TEMPLATES[task.template_id], None)
