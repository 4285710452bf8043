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
