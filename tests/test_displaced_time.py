"""displaced_time on real demo rows: one end of a duration, no other qualifying record, implausible unround times,
siblings moved alike, and a guard that widens the window by the routine lead."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.encounters import ADMISSION, lead_of, outside_sql
from pipeline.noise.overlay import overlay
from pipeline.noise.verify import verify_pair
from pipeline.templates.instantiate import instantiate
from pipeline.templates.programs import Tables
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
DISPLACED = subtypes()["displaced_time"]


def _verify(source, template_id: str, tasks: int = 3) -> tuple[list, Counter]:
    template, pairs, reasons = TEMPLATES[template_id], [], Counter()
    for task in instantiate(source, [template], per_template=tasks, seed=7)[0]:
        try:
            pairs.append(verify_pair(source, Tables(source), task, template, DISPLACED, seed=0))
        except Rejected as exc:
            reasons[exc.reason] += 1
    return pairs, reasons


def _admittime(source, hadm_id):
    return scalar(source, "SELECT admittime FROM admissions WHERE hadm_id = ?", [hadm_id])


def test_an_icu_stay_is_not_moved_past_the_transfer_that_ends_when_it_begins(source):
    """The transfer before an ICU stay ends when the stay truly begins (127 of the demo's 140 stays): moving the
    stay's start before the admission would leave that transfer ending before it began, so such candidates are
    refused (sibling_keeps_the_time); a stay without one moves one end, with its ICU transfer alike."""
    pairs, reasons = _verify(source, "icu_hours_in_admission", tasks=8)
    assert reasons["sibling_keeps_the_time"] > 0, reasons
    for pair in pairs:
        (moved,) = pair.patch.tables["icustays"].add
        intime, outtime = source.execute(
            "SELECT intime, outtime FROM icustays WHERE stay_id = ?", [moved["stay_id"]]
        ).fetchall()[0]
        assert moved["outtime"] == outtime and moved["intime"] < intime  # the stay now lasts longer
        assert moved["intime"] < _admittime(source, moved["hadm_id"]) - dt.timedelta(hours=24)
        transfers = pair.patch.tables["transfers"].add
        assert any(t["intime"] == moved["intime"] for t in transfers)  # the ICU transfer no longer tells the time
        assert all(t["outtime"] is None or t["outtime"] >= t["intime"] for t in transfers)


def test_no_other_record_still_answers(source):
    pairs, reasons = _verify(source, "drug_given_first_24h", tasks=8)
    assert reasons["other_record_still_qualifies"] > 0  # another dose in the first 24 h kept the answer TRUE
    for pair in pairs:
        assert pair.naive_answer != pair.clean.answer  # the move changed what the question measures


def test_moved_times_lie_beyond_the_lead_on_the_columns_grid(source):
    for template_id, table, column in [
        ("lab_first_value_within_24h", "labevents", "charttime"),
        ("drugs_started_first_24h_by_route", "prescriptions", "starttime"),
    ]:
        pairs, reasons = _verify(source, template_id, tasks=6)
        assert pairs, reasons
        offsets = []
        for pair in pairs:
            row = pair.patch.tables[table].add[0]
            offsets.append(_admittime(source, row["hadm_id"]) - row[column])
            assert offsets[-1] > dt.timedelta(hours=24)
            if table == "prescriptions":  # real prescriptions start on the hour; so does the moved one
                assert row[column].minute == 0 and row[column].second == 0
                with overlay(source, pair.patch):  # and its pharmacy row says the same
                    assert (
                        scalar(source, "SELECT starttime FROM pharmacy WHERE pharmacy_id = ?", [row["pharmacy_id"]])
                        == row[column]
                    )
        assert any(o % dt.timedelta(hours=1) for o in offsets)  # not all a round number of hours before admission


def test_a_displaced_lab_takes_its_specimen_along(source):
    pairs, _ = _verify(source, "lab_first_value_within_24h", tasks=6)
    for pair in pairs:
        (specimen,) = {r["specimen_id"] for r in pair.patch.tables["labevents"].add}
        with overlay(source, pair.patch):
            times = source.execute(
                "SELECT DISTINCT charttime FROM labevents WHERE specimen_id = ?", [specimen]
            ).fetchall()
        assert len(times) == 1  # every row of the specimen shows the one moved time


def test_routine_early_records_are_not_flagged(source):
    early = "SELECT count(*) FROM emar e JOIN admissions a USING (hadm_id) WHERE e.charttime < a.admittime"
    flagged = f"SELECT count(*) FROM emar e WHERE {outside_sql(ADMISSION, 'e', 'charttime', False, lead_of('emar'))}"
    assert scalar(source, early) > 300 and scalar(source, flagged) == 0  # 371 eMAR rows precede admittime by < 24 h
