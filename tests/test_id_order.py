"""Ids that follow time (id_order.py): a copied or moved lab takes the id its time gives it among its patient's
labs, the rows that make room are renumbered, no hole is left, and the tell check catches the old layouts."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from pipeline.db import scalar
from pipeline.noise.base import Rejected
from pipeline.noise.id_order import in_id_order
from pipeline.noise.overlay import overlay, polars_overlay
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.tells import id_order_tells, patch_tells
from pipeline.templates.programs import Tables

pytestmark = pytest.mark.realdata


def _middle_lab(con) -> dict:
    """A numeric lab in the middle of the demo's largest block of one patient's labs."""
    subject = scalar(con, "SELECT subject_id FROM labevents GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")
    ids = [
        i
        for (i,) in con.execute(
            "SELECT labevent_id FROM labevents WHERE subject_id = ? AND valuenum IS NOT NULL ORDER BY 1", [subject]
        ).fetchall()
    ]
    return con.sql(f"SELECT * FROM labevents WHERE labevent_id = {ids[len(ids) // 2]}").pl().to_dicts()[0]


def _copy_patch(row: dict, **changed) -> Patch:
    return Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], add=[{**row, **changed}])})


def _tells(con, patch: Patch) -> list[str]:
    catalog = scalar(con, "SELECT current_database()")
    with overlay(con, patch):
        return id_order_tells(con, f'"{catalog}".main.labevents', "labevents")


def test_a_copy_sits_beside_its_original_and_the_block_makes_room(source):
    row = _middle_lab(source)
    patch = in_id_order(source, _copy_patch(row, valuenum=row["valuenum"] + 1))
    (copy,) = patch.tables["labevents"].add
    assert copy["labevent_id"] in (row["labevent_id"] - 1, row["labevent_id"] + 1)
    moves = patch.tables["labevents"].renumber["labevent_id"]
    assert row["labevent_id"] not in moves  # the original keeps its id: guards read it by that key
    assert all(abs(new - old) == 1 for old, new in moves.items())
    assert _tells(source, patch) == []
    with overlay(source, patch):
        ids = [
            i
            for (i,) in source.execute(
                "SELECT labevent_id FROM labevents WHERE subject_id = ? ORDER BY labevent_id", [row["subject_id"]]
            ).fetchall()
        ]
        assert len(ids) == len(set(ids))
    frame = polars_overlay(Tables(source), patch)["labevents"]  # the polars overlay renumbers the same rows
    mine = frame.filter(pl.col("subject_id") == row["subject_id"]).collect()
    assert sorted(mine["labevent_id"].to_list()) == ids


def test_the_tell_check_catches_a_copy_with_the_patients_highest_id(source):
    row = _middle_lab(source)
    high = scalar(source, "SELECT max(labevent_id) FROM labevents WHERE subject_id = ?", [row["subject_id"]])
    planted = _copy_patch(row, labevent_id=high + 1, valuenum=row["valuenum"] + 1)
    assert any("go back in time" in tell for tell in _tells(source, planted))
    reused = _copy_patch(row, valuenum=row["valuenum"] + 1)  # a copy reusing its original's id
    assert any("repeated" in tell for tell in _tells(source, reused))


def test_a_moved_specimen_takes_ids_at_its_new_time_and_leaves_no_hole(source):
    row = _middle_lab(source)
    specimen = source.sql(f"SELECT * FROM labevents WHERE specimen_id = {row['specimen_id']}").pl().to_dicts()
    first = scalar(source, "SELECT min(charttime) FROM labevents WHERE subject_id = ?", [row["subject_id"]])
    shift = first - row["charttime"] - dt.timedelta(hours=5, minutes=17)  # before every lab of the patient
    moved = [{**r, "charttime": r["charttime"] + shift, "storetime": r["storetime"] + shift} for r in specimen]
    hide = [{"labevent_id": r["labevent_id"]} for r in specimen]
    plain = Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], hide=hide, add=moved)})
    assert any("go back in time" in tell for tell in _tells(source, plain))  # moved, ids kept: the old tell
    patch = in_id_order(source, plain)
    assert _tells(source, patch) == []  # in time order, no repeated id, no skip wider than real blocks have
    low = scalar(source, "SELECT min(labevent_id) FROM labevents WHERE subject_id = ?", [row["subject_id"]])
    placed = sorted(r["labevent_id"] for r in patch.tables["labevents"].add)
    assert placed == list(range(placed[0], placed[0] + len(specimen)))  # the specimen's ids stay consecutive
    assert placed[0] >= low - len(specimen)  # at the block's start, not away from it
    assert in_id_order(source, plain) == patch  # deterministic


def test_a_patch_renumbering_ids_must_be_keyed_by_them(source):
    row = _middle_lab(source)
    keyed_otherwise = Patch(
        tables={"labevents": TablePatch(key_columns=["specimen_id", "itemid"], add=[{**row, "valuenum": 1.0}])}
    )
    with pytest.raises(ValueError, match="labevents: a patch renumbering labevent_id must be keyed by it"):
        in_id_order(source, keyed_otherwise)


def test_no_room_is_a_counted_rejection(source):
    row = _middle_lab(source)
    i = row["labevent_id"]
    around = source.sql(f"SELECT * FROM labevents WHERE labevent_id BETWEEN {i - 2} AND {i + 2} ORDER BY 1").pl()
    assert around["subject_id"].to_list() == [row["subject_id"]] * 5  # a run of five without a gap
    patch = _copy_patch(row, valuenum=row["valuenum"] + 1)
    for other in around.filter(pl.col("labevent_id").is_in([i - 1, i + 1])).to_dicts():
        # copies of both neighbours pin them too: the middle row's copy has no run to move beside it
        patch.tables["labevents"].add.append({**other, "valuenum": (other["valuenum"] or 0) + 1})
    with pytest.raises(Rejected, match="no_room_for_id_in_time_order"):
        in_id_order(source, patch)


def test_hidden_labs_leave_no_hole_once_the_block_closes(source):
    """missing_record: hidden labs leave a hole in the patient's ids (blind audit 41: one before each of 143 blood
    gases); the block closed over them has none, and the rows are found again by their natural key."""
    from pipeline.noise.subtypes.missing_record import _without_holes

    rows = source.sql("SELECT * FROM labevents WHERE itemid = 50810 ORDER BY labevent_id LIMIT 5").pl().to_dicts()
    hidden = [{"labevent_id": r["labevent_id"]} for r in rows]
    plain = Patch(tables={"labevents": TablePatch(key_columns=["labevent_id"], hide=hidden)})
    assert any("skip ids" in tell for tell in patch_tells(source, plain))
    closed, keys = _without_holes(source, "labevents", plain, rows, hidden)
    assert closed.tables["labevents"].renumbered > 0 and patch_tells(source, closed) == []
    assert keys == [{"specimen_id": r["specimen_id"], "itemid": r["itemid"]} for r in rows]
    with overlay(source, closed):
        for key in keys:  # gone by their natural key, while other rows now hold their old ids
            assert (
                scalar(
                    source, "SELECT count(*) FROM labevents WHERE specimen_id = ? AND itemid = ?", list(key.values())
                )
                == 0
            )
        held = scalar(
            source,
            f"SELECT count(*) FROM labevents WHERE labevent_id IN ({', '.join(str(h['labevent_id']) for h in hidden)})",
        )
    assert held > 0


def test_hidden_cultures_are_found_null_safe_by_their_natural_key(source):
    """A culture without an organism has NULL organism and antibiotic: the guard's key matches it null-safe, so a
    hidden culture's patient block closes too and the guard still finds the culture gone."""
    from pipeline.noise.guards import guarded_sql
    from pipeline.noise.subtypes.missing_record import _without_holes

    rows = (
        source.sql("SELECT * FROM microbiologyevents WHERE org_itemid IS NULL ORDER BY microevent_id LIMIT 2")
        .pl()
        .to_dicts()
    )
    hidden = [{"microevent_id": r["microevent_id"]} for r in rows]
    plain = Patch(tables={"microbiologyevents": TablePatch(key_columns=["microevent_id"], hide=hidden)})
    closed, keys = _without_holes(source, "microbiologyevents", plain, rows, hidden)
    assert keys[0]["org_itemid"] is None and patch_tells(source, closed) == []
    gold = "SELECT count(*) AS value FROM microbiologyevents"
    guard = "(SELECT count(*) FROM evidence) = 0"
    assert len(source.sql(guarded_sql(gold, "microbiologyevents", keys, guard)).fetchall()) == 1  # clean: found
    with overlay(source, closed):  # gone: the guard abstains
        assert source.sql(guarded_sql(gold, "microbiologyevents", keys, guard)).fetchall() == []
