"""A large evidence stays a frame (`KeyRows`): its rows read as the dicts tasks store, and keyed by it, DuckDB and
polars find the very rows the dicts would find."""

from __future__ import annotations

import pytest

from pipeline.noise.evidence import evidence_table, frame_by_key
from pipeline.noise.guards import KeyRows, keys_frame
from pipeline.templates.instantiate import EVIDENCE_INLINE_MAX, instantiate, jsonable_rows
from pipeline.templates.registry import load_templates

TEMPLATES = {t.id: t for t in load_templates()}


@pytest.fixture(scope="module")
def population_task(synthetic_source):
    """A population mean of a vital sign: its evidence is every charted value of the item, too many to carry."""
    tasks, _ = instantiate(synthetic_source, [TEMPLATES["vital_mean_value_population"]], per_template=1, seed=0)
    (task,) = tasks
    assert task.evidence_rows > EVIDENCE_INLINE_MAX == len(task.evidence)
    return task


def test_key_rows_read_as_the_dicts_a_task_stores(synthetic_source):
    frame = synthetic_source.sql("SELECT stay_id, charttime, itemid FROM chartevents ORDER BY ALL LIMIT 50").pl()
    rows, dicts = KeyRows(frame), jsonable_rows(frame)
    assert len(rows) == 50 and list(rows) == dicts and isinstance(dicts[0]["charttime"], str)
    assert rows[0] == dicts[0] and rows[-1] == dicts[-1] and rows[10:12] == dicts[10:12]
    with pytest.raises(IndexError):
        rows[50]
    schema = synthetic_source.sql("SELECT stay_id, charttime, itemid FROM chartevents LIMIT 0").pl().schema
    assert keys_frame(rows, schema).collect().equals(keys_frame(dicts, schema).collect())


def test_a_large_evidence_is_kept_as_a_frame_and_keys_the_same_rows(synthetic_source, population_task):
    table, columns, keys = evidence_table(synthetic_source, population_task)
    assert isinstance(keys, KeyRows) and len(keys) == population_task.evidence_rows
    assert table == "chartevents" and list(keys[0]) == columns
    assert keys[: len(population_task.evidence)] == [
        {c: row[c] for c in columns} for row in population_task.evidence
    ]  # the rows the task carries come first, as it stores them
    by_frame, by_dicts = frame_by_key(synthetic_source, table, keys), frame_by_key(synthetic_source, table, list(keys))
    assert by_frame.height == len(keys) and by_frame.equals(by_dicts)


def test_an_evidence_read_as_a_set_keeps_its_rows_and_a_limited_query_keeps_its_order(
    synthetic_source, population_task
):
    """Checks that read evidence as a set skip its sort; a query whose LIMIT picks its rows by the order keeps it."""
    from pipeline.noise.evidence import as_a_set

    unsorted = as_a_set(population_task.evidence_sql)
    assert "ORDER BY" in population_task.evidence_sql and "ORDER BY" not in unsorted
    sorted_sql, differ = population_task.evidence_sql, "SELECT count(*) FROM (({}) EXCEPT ALL ({}))"
    assert synthetic_source.sql(f"SELECT count(*) FROM ({unsorted})").fetchall() == [(population_task.evidence_rows,)]
    assert synthetic_source.sql(differ.format(unsorted, sorted_sql)).fetchall() == [(0,)]
    assert synthetic_source.sql(differ.format(sorted_sql, unsorted)).fetchall() == [(0,)]
    last = "SELECT stay_id FROM chartevents ORDER BY charttime DESC LIMIT 1"
    first_per_stay = "SELECT DISTINCT ON (stay_id) stay_id, valuenum FROM chartevents ORDER BY stay_id, charttime"
    assert as_a_set(last) == last and as_a_set(first_per_stay) == first_per_stay


def test_a_guard_narrows_its_evidence_by_each_few_valued_key_column_and_finds_the_same_rows(synthetic_source):
    """A patient's keys also filter column by column (an IN list the scan uses), where a column has few values and
    no NULL; the rows found are exactly those the keys name, NULL parts matched null-safe."""
    from pipeline.noise.guards import NARROWING, guarded_sql

    stay, item = synthetic_source.sql(
        "SELECT stay_id, itemid FROM chartevents GROUP BY ALL ORDER BY count(*) DESC, stay_id, itemid LIMIT 1"
    ).fetchall()[0]
    many = (
        synthetic_source.sql(  # one stay and item, many times
            f"SELECT stay_id, itemid, charttime FROM chartevents WHERE stay_id = {stay} AND itemid = {item} ORDER BY ALL"
        )
        .pl()
        .to_dicts()
    )
    assert len(many) > NARROWING
    with_null = [{**many[0], "charttime": None}, many[1]]
    for chosen, narrowed in ((many, ["stay_id IN", "itemid IN"]), (with_null, ["stay_id IN", "itemid IN"])):
        sql = guarded_sql("SELECT count(*) AS value FROM evidence", "chartevents", chosen, "FALSE")
        where = sql.split("WHERE", 1)[1]
        assert [part for part in narrowed if part in where] == narrowed and "charttime IN" not in where
        found = synthetic_source.sql(sql).fetchall()[0][0]
        assert found == sum(1 for key in chosen if key["charttime"] is not None)  # a NULL time names no charted row


def test_a_cohort_in_duckdb_counts_and_draws_the_rows_the_sorted_frame_held(synthetic_source, population_task):
    """A population evidence stays in DuckDB (`Cohort`): its size, null counts, values in order, patients and the rows
    at drawn positions are those of the sorted frame the sub-types read before, so every draw picks the same rows."""
    import numpy as np
    import polars as pl

    from pipeline.noise.cohort import drop_cohort, task_cohort
    from pipeline.noise.rules import pick

    table, columns, keys, cohort = task_cohort(synthetic_source, population_task)
    frame = frame_by_key(synthetic_source, *evidence_table(synthetic_source, population_task)[::2])
    try:
        assert (table, keys, cohort.height) == ("chartevents", population_task.evidence_rows, frame.height)
        assert columns == [c for c in population_task.evidence[0] if c != "table_name"]
        positions = [frame.height - 1, 0, frame.height // 2]
        assert cohort.rows_at(positions) == [frame.row(p, named=True) for p in positions]
        assert cohort.rows_at(range(60)) == frame.head(60).to_dicts()  # several patients' rows, each sorted once
        assert cohort.values("valuenum").equals(frame["valuenum"]) and cohort.frame().equals(frame)
        assert cohort.null_count("valueuom") == frame["valueuom"].null_count()
        assert cohort.distinct("itemid") == set(frame["itemid"].to_list())
        assert cohort.subject_sizes() == dict(frame.group_by("subject_id").len().iter_rows())
        for seed in range(3):
            subject = sorted(cohort.subject_sizes())[seed]
            assert cohort.subject_rows(subject) == frame.filter(pl.col("subject_id") == subject).to_dicts()
            chosen = pick(cohort, False, np.random.default_rng(seed))  # one patient's rows, in order
            assert 0 < len(chosen) and {row["subject_id"] for row in chosen} <= set(frame["subject_id"].to_list())
        high = cohort.filtered("valuenum > 100")
        assert high.height == frame.filter(pl.col("valuenum") > 100).height < cohort.height
        assert high.rows_at([0]) == [frame.filter(pl.col("valuenum") > 100).row(0, named=True)]
        with pytest.raises(IndexError):
            cohort.rows_at([frame.height])
    finally:
        drop_cohort(synthetic_source)
    assert not synthetic_source.sql("SELECT 1 FROM duckdb_tables() WHERE temporary").fetchall()


def test_a_lab_cohort_finds_rows_at_positions_by_its_row_ids(synthetic_source):
    """A lab table's first column is each row's own id, so a position's group is one row: the rows at drawn
    positions and a patient's every row are still those of the sorted frame, read in one query."""
    from pipeline.noise.cohort import ROWS, Cohort, drop_cohort

    item = synthetic_source.sql("SELECT itemid FROM labevents GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1").fetchall()
    synthetic_source.execute(f"CREATE TEMP TABLE {ROWS} AS SELECT * FROM labevents WHERE itemid = {item[0][0]}")
    try:
        cohort, frame = (
            Cohort(synthetic_source, "labevents"),
            synthetic_source.sql(f"SELECT * FROM labevents WHERE itemid = {item[0][0]} ORDER BY ALL").pl(),
        )
        assert cohort.columns[0] == "labevent_id" and cohort.height == frame.height > 100
        positions = [frame.height - 1, 7, 0, 7]
        assert cohort.rows_at(positions) == [frame.row(p, named=True) for p in positions]
        assert cohort.rows_at(range(frame.height)) == frame.to_dicts()
    finally:
        drop_cohort(synthetic_source)
