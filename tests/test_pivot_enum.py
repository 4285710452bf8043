"""PIVOT whose IN list is a subquery made DuckDB create a temporary ENUM type per call (kept for the episode's
life): it is refused before binding, a list of values is admitted, and neither leaves a type behind."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline.env.gateway import Gateway, Limits, open_locked
from pipeline.source.schema import load_schema

SUBQUERY_PIVOTS = [
    "SELECT * FROM (PIVOT patients ON gender IN (SELECT DISTINCT gender FROM patients) USING count(*))",
    "SELECT * FROM (PIVOT patients ON gender IN (SELECT 'F') USING count(*) GROUP BY anchor_age)",
    "SELECT * FROM (PIVOT patients ON gender IN ((SELECT min(gender) FROM patients), 'M') USING count(*))",
    "WITH g AS (SELECT gender FROM patients) SELECT * FROM (PIVOT patients ON gender IN (FROM g) USING count(*))",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("pivot") / "small.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(load_schema()["patients"].create_sql())
        con.execute(
            "INSERT INTO patients VALUES (1, 'F', 60, 2150, '2008 - 2010', NULL), "
            "(2, 'M', 70, 2160, '2011 - 2013', '2165-01-01')"
        )
    con = open_locked(path, Limits())
    yield Gateway(con.cursor(), ["patients"], Gateway.functions_of(con), Limits())
    con.close()


def _user_types(gateway: Gateway) -> int:
    return gateway.cursor.execute("SELECT count(*) FROM duckdb_types() WHERE NOT internal").fetchall()[0][0]


@pytest.mark.parametrize("sql", SUBQUERY_PIVOTS)
def test_a_pivot_over_a_subquery_list_is_refused_and_leaves_no_type(gateway: Gateway, sql: str):
    for _ in range(2):
        outcome = gateway.run(sql)
        assert not outcome.ok and "explicit IN list of values (no subquery)" in outcome.error
    assert _user_types(gateway) == 0


def test_a_pivot_over_a_list_of_values_runs_and_the_episode_stays_clean(gateway: Gateway):
    outcome = gateway.run("SELECT * FROM (PIVOT (SELECT gender FROM patients) ON gender IN ('F', 'M') USING count(*))")
    assert outcome.ok and outcome.rows == [[1, 1]]
    assert _user_types(gateway) == 0
    assert gateway.run("SELECT count(*) FROM patients").rows == [[2]]
