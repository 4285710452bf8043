"""Closing the holes hidden rows leave in a patient's block of ids (id_order._close_holes), without any database:
every hole closed once, ids unique and increasing, no other patient's id taken, a copied original never moved."""

from __future__ import annotations

from pipeline.noise.id_order import _close_holes, _Slot


def _slots(ids: list[int], pinned: frozenset[int] = frozenset()) -> list[_Slot]:
    return [_Slot(i, None, i, pinned=i in pinned) for i in ids]


def _gaps(slots: list[_Slot]) -> list[tuple[int, int]]:
    return [(a.id, b.id) for a, b in zip(slots, slots[1:], strict=False) if b.id - a.id != 1]


def test_two_holes_close_without_a_collision_or_a_hole_left():
    """The upper side closes the first hole (a tie goes to it); the second hole, whose id that side's rows now
    hold, is still closed by its own gap (the block the old loop left: 1..7, 9, and ids taken twice elsewhere)."""
    slots = _slots([1, 2, 3, 4, 6, 7, 8, 10])
    _close_holes(slots, {5, 9})
    ids = [s.id for s in slots]
    assert ids == sorted(set(ids)) and _gaps(slots) == []
    assert ids[0] >= 1 and len(ids) == 8


def test_a_gap_the_source_has_stays_and_only_holes_close():
    slots = _slots([1, 2, 5, 6, 8, 9])  # 3 and 4: another patient's or never used; 7 hidden
    _close_holes(slots, {7})
    assert [s.id for s in slots] == [2, 3, 6, 7, 8, 9] or [s.id for s in slots] == [1, 2, 5, 6, 7, 8]
    assert _gaps(slots) == [(3, 6)] or _gaps(slots) == [(2, 5)]


def test_a_side_that_would_land_on_another_patients_id_stays():
    slots = _slots([10, 11, 13, 14, 15])  # 12 hidden: the shorter lower side moves up; 9 is not in its way
    _close_holes(slots, {12}, foreign=frozenset({9}))
    assert [s.id for s in slots] == [11, 12, 13, 14, 15]
    slots = _slots([10, 11, 13, 14, 15])
    _close_holes(slots, {12}, foreign=frozenset({12}))  # both sides blocked: moving up lands on 12, down too
    assert [s.id for s in slots] == [10, 11, 13, 14, 15]


def test_a_pinned_original_keeps_its_id():
    slots = _slots([1, 2, 4, 5, 6, 7], pinned=frozenset({1}))
    _close_holes(slots, {3})
    assert [s.id for s in slots] == [1, 2, 3, 4, 5, 6]
