"""displaced_time on real demo rows: one end of a duration, no other qualifying record, implausible unround times,
siblings moved alike, and a guard that widens the window by the routine lead."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from pipeline.db import scalar
from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.encounters import ADMISSION, lead_of, outside_sql
from pipeline.noise.overlay import overlay
from pipeline.noise.subtypes.displaced_time import HABIT_RATE, TIME_COLUMNS, _outside_by_habit
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


def test_icu_stays_are_not_moved_because_the_record_fixes_their_times(source):
    """Every demo ICU stay begins when the transfer before it ends or, with none before it, within two minutes of its
    admission's admittime, and ends when the next transfer begins: a moved stay would be read back, so no
    question whose evidence is the stay takes displaced_time."""
    starts, ends, stays = source.sql(
        """SELECT
             count(*) FILTER (WHERE EXISTS (SELECT 1 FROM transfers t WHERE t.hadm_id = i.hadm_id AND t.outtime = i.intime)
               OR (NOT EXISTS (SELECT 1 FROM transfers t WHERE t.hadm_id = i.hadm_id AND t.intime < i.intime)
                   AND abs(date_diff('second', a.admittime, i.intime)) <= 120)),
             count(*) FILTER (WHERE EXISTS (SELECT 1 FROM transfers t WHERE t.hadm_id = i.hadm_id AND t.intime = i.outtime)),
             count(*)
           FROM icustays i JOIN admissions a USING (hadm_id)"""
    ).fetchall()[0]
    assert stays > 100 and starts == ends == stays
    for template_id in ("icu_hours_in_admission", "icu_admission_delay_hours", "mean_icu_los_by_first_careunit"):
        assert not DISPLACED.applies(TEMPLATES[template_id]), template_id
    assert "icustays" not in TIME_COLUMNS


def test_no_other_record_still_answers(source):
    pairs, reasons = _verify(source, "drug_given_first_24h", tasks=8)
    assert reasons["other_record_still_qualifies"] > 0  # another dose in the first 24 h kept the answer TRUE
    for pair in pairs:
        assert pair.naive_answer != pair.clean.answer  # the move changed what the question measures


def test_moved_times_lie_beyond_the_lead_on_the_columns_grid(source):
    for template_id, table, column, tasks in [("lab_first_value_within_24h", "labevents", "charttime", 6)]:
        pairs, reasons = _verify(source, template_id, tasks=tasks)
        assert pairs, reasons
        offsets = []
        for pair in pairs:
            row = pair.patch.tables[table].add[0]
            offsets.append(_admittime(source, row["hadm_id"]) - row[column])
            assert offsets[-1] > dt.timedelta(hours=24)
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


def test_a_table_or_record_that_dates_rows_outside_their_admissions_takes_no_displacement(source):
    """Blind audit 32 reported a procedure moved 4 days before its admission as recorded: untouched demo procedures
    lie weeks after discharge (4 of 722 rows beyond the one-day lead, over the habit rate). Prescriptions do so
    rarely (10 of 18,087), but a patient whose own orders do would take no displaced order."""

    def outside(table: str, time: str, as_date: bool) -> tuple[int, int, set]:
        where = outside_sql(ADMISSION, "t", time, as_date, lead_of(table))
        rows = source.sql(f"SELECT subject_id FROM {table} t WHERE {where}").fetchall()
        return len(rows), scalar(source, f"SELECT count(*) FROM {table}"), {s for (s,) in rows}

    found, total, _ = outside("procedures_icd", "chartdate", True)
    assert found > total * HABIT_RATE
    pairs, reasons = _verify(source, "procedure_first_date_in_admission", tasks=4)
    assert not pairs and reasons["table_times_rows_outside_encounters"] > 0, reasons
    found, total, habits = outside("prescriptions", "starttime", False)
    assert 0 < found <= total * HABIT_RATE and habits
    lead, others = lead_of("prescriptions"), {s for (s,) in source.sql("SELECT subject_id FROM patients").fetchall()}
    for subject in sorted(habits):
        reason = _outside_by_habit(source, "prescriptions", ADMISSION, "starttime", lead, {subject})
        assert reason == "record_times_rows_outside_encounters", subject
    assert _outside_by_habit(source, "prescriptions", ADMISSION, "starttime", lead, others - habits) is None
