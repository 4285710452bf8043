"""out_of_window on real demo rows: an empty window inside the record is a real count of 0, not an abstention."""

from __future__ import annotations

import datetime as dt

from pipeline.noise.base import Rejected, subtypes
from pipeline.noise.subtypes.out_of_window import covered_span
from pipeline.noise.verify import verify_pair
from pipeline.templates.answers import canonical_answer
from pipeline.templates.instantiate import instantiate, typed_slots
from pipeline.templates.programs import Tables, run_sql
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}
COUNT = TEMPLATES["admissions_count_in_window"]


def test_an_empty_window_inside_the_record_counts_zero(source):
    lo, hi = covered_span(source)
    empty = source.execute(
        """SELECT d::DATE FROM range(?::TIMESTAMP + INTERVAL 1 DAY, ?::TIMESTAMP, INTERVAL 1 DAY) t(d)
        WHERE NOT EXISTS (SELECT 1 FROM admissions WHERE CAST(admittime AS DATE) = d::DATE) ORDER BY 1 LIMIT 1""",
        [lo, hi],
    ).fetchall()[0][0]
    slots = typed_slots(COUNT, {"window_start": empty.isoformat(), "window_end": empty.isoformat()})
    assert lo < empty < hi
    assert canonical_answer(run_sql(source, COUNT.gold_sql, slots), COUNT.spec.answer).value == 0  # 0, not no answer


def test_the_covered_span_is_the_records_not_the_encounters(source):
    """A week after the last admission is still covered while later labs, cultures or a death are recorded (the
    blind audit's "admissions between 2201-12-24 and 2201-12-30": 0 is an answer there)."""
    lo, hi = covered_span(source)
    last_discharge = source.execute("SELECT max(CAST(dischtime AS DATE)) FROM admissions").fetchall()[0][0]
    last_lab = source.execute("SELECT max(CAST(charttime AS DATE)) FROM labevents").fetchall()[0][0]
    assert last_lab > last_discharge and hi >= last_lab


def test_a_count_window_moves_outside_what_the_record_covers(source):
    lo, hi = covered_span(source)
    pairs = [
        verify_pair(source, Tables(source), task, COUNT, subtypes()["out_of_window"], seed=0)
        for task in instantiate(source, [COUNT], per_template=3, seed=7)[0]
    ]
    for pair in pairs:
        start, end = (dt.date.fromisoformat(pair.noisy_slots[s]) for s in ("window_start", "window_end"))
        assert end < lo or start > hi  # wholly before the first or after the last encounter
        assert (end - start) == (
            dt.date.fromisoformat(pair.clean.slots["window_end"])
            - dt.date.fromisoformat(pair.clean.slots["window_start"])
        )
        assert pair.expected.value is None and pair.naive_answer.value == 0 and pair.trap
        assert source.sql(pair.reference_sql).fetchall() == []


def test_no_window_outside_the_record_is_rejected(source):
    task = instantiate(source, [COUNT], per_template=1, seed=7)[0][0]
    far = task.model_copy(update={"slots": {"window_start": "0001-01-02", "window_end": "9999-12-30"}})
    try:
        subtypes()["out_of_window"].make(source, far, COUNT, __import__("numpy").random.default_rng(0))
    except Rejected as exc:
        assert exc.reason == "window_inside_coverage"
    else:
        raise AssertionError("a window spanning the whole calendar cannot leave the record")
