"""Tests of the synthetic MIMIC-IV generator: schema, keys, determinism, file handling and demo fidelity."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import SYNTHETIC_PATIENTS as PATIENTS
from conftest import SYNTHETIC_SEED as SEED

from pipeline.source.schema import load_schema
from pipeline.source.synthetic import generate_synthetic
from pipeline.source.synthetic.fidelity import fidelity_report, write_fidelity_html

SCHEMA = load_schema()
DUCKDB_CANONICAL = {"REAL": "FLOAT"}  # DESCRIBE spells the 4-byte float type FLOAT


@pytest.fixture(scope="module")
def con(synthetic_db):
    connection = duckdb.connect(str(synthetic_db), read_only=True)
    yield connection
    connection.close()


def scalar(con, sql: str):
    return con.execute(sql).fetchone()[0]


def test_all_tables_have_exactly_the_schema_columns_and_types(con):
    present = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert present == set(SCHEMA)
    for table in SCHEMA.values():
        described = con.execute(f"DESCRIBE {table.name}").fetchall()
        expected = [(c.name, DUCKDB_CANONICAL.get(c.duckdb_type, c.duckdb_type)) for c in table.columns]
        assert [(r[0], r[1]) for r in described] == expected


def test_every_table_has_rows(con):
    empty = [t for t in SCHEMA if scalar(con, f"SELECT count(*) FROM {t}") == 0]
    assert empty == []


@pytest.mark.parametrize("table", list(SCHEMA))
def test_primary_keys_unique_and_not_null_columns_filled(con, table):
    spec = SCHEMA[table]
    for column in spec.columns:
        if not column.nullable:
            assert scalar(con, f"SELECT count(*) FROM {table} WHERE {column.name} IS NULL") == 0, column.name
    if spec.primary_key:
        keys = ", ".join(spec.primary_key)
        duplicated = f"SELECT {keys} FROM {table} GROUP BY ALL HAVING count(*) > 1"
        duplicates = scalar(con, f"SELECT count(*) FROM ({duplicated})")
        assert duplicates == 0


@pytest.mark.parametrize(
    "table,fk", [(t.name, fk) for t in SCHEMA.values() for fk in t.foreign_keys], ids=lambda v: getattr(v, "name", v)
)
def test_foreign_keys_resolve(con, table, fk):
    join = " AND ".join(f"c.{a} = p.{b}" for a, b in zip(fk.columns, fk.ref_columns))
    present = " AND ".join(f"c.{a} IS NOT NULL" for a in fk.columns)
    sql = f"""SELECT count(*) FROM {table} c WHERE {present}
              AND NOT EXISTS (SELECT 1 FROM {fk.references} p WHERE {join})"""
    assert scalar(con, sql) == 0


def test_clinical_invariants(con):
    checks = {
        "gender": "SELECT count(*) FROM patients WHERE gender NOT IN ('M', 'F')",
        "admission order": "SELECT count(*) FROM admissions WHERE dischtime < admittime",
        "stay order": "SELECT count(*) FROM icustays WHERE outtime < intime",
        "transfer order": "SELECT count(*) FROM transfers WHERE outtime < intime",
        "stay in admission": """SELECT count(*) FROM icustays i JOIN admissions a USING (hadm_id)
                                WHERE i.intime < a.admittime OR i.outtime > a.dischtime
                                   OR i.subject_id <> a.subject_id""",
        "los in days": """SELECT count(*) FROM icustays
                          WHERE abs(los - date_diff('second', intime, outtime) / 86400.0) > 1e-6""",
        "abnormal flag": """SELECT count(*) FROM labevents WHERE coalesce(flag = 'abnormal', false) IS DISTINCT FROM
                            coalesce(valuenum < ref_range_lower OR valuenum > ref_range_upper, false)""",
        "pharmacy matches": """SELECT count(*) FROM prescriptions r JOIN pharmacy p USING (pharmacy_id)
                               WHERE r.poe_id <> p.poe_id OR r.hadm_id <> p.hadm_id""",
        # as in the demo, an observation stay is billed by no DRG (the others by an HCFA one)
        "drg of an observation stay": """SELECT count(*) FROM drgcodes d JOIN admissions a USING (hadm_id)
                                         WHERE a.admission_type LIKE '%OBSERVATION' AND a.admission_type <> 'OBSERVATION ADMIT'""",
    }
    billed = "SELECT count(*) FROM admissions WHERE hadm_id IN (SELECT hadm_id FROM drgcodes WHERE drg_type = 'HCFA')"
    assert scalar(con, billed) == scalar(
        con,
        "SELECT count(*) FROM admissions WHERE admission_type NOT LIKE '%OBSERVATION' OR admission_type = 'OBSERVATION ADMIT'",
    )
    for name, sql in checks.items():
        assert scalar(con, sql) == 0, name
    for table, column in [
        ("labevents", "charttime"),
        ("microbiologyevents", "charttime"),
        ("emar", "charttime"),
        ("poe", "ordertime"),
        ("pharmacy", "starttime"),
        ("services", "transfertime"),
    ]:
        outside = f"""SELECT count(*) FROM {table} e JOIN admissions a USING (hadm_id)
                      WHERE e.{column} < a.admittime OR e.{column} > a.dischtime"""
        assert scalar(con, outside) == 0, table
    for table, column in [
        ("chartevents", "charttime"),
        ("datetimeevents", "charttime"),
        ("outputevents", "charttime"),
        ("inputevents", "starttime"),
        ("inputevents", "endtime"),
        ("procedureevents", "endtime"),
        ("ingredientevents", "starttime"),
    ]:
        outside = f"""SELECT count(*) FROM {table} e JOIN icustays s USING (stay_id)
                      WHERE e.{column} < s.intime OR e.{column} > s.outtime OR e.hadm_id <> s.hadm_id"""
        assert scalar(con, outside) == 0, f"{table}.{column}"


def test_heart_rate_is_charted_about_hourly(con):
    per_hour = scalar(
        con,
        """SELECT (SELECT count(*) FROM chartevents WHERE itemid = 220045)
                                     / (SELECT sum(los) * 24 FROM icustays)""",
    )
    assert 0.7 < per_hour < 1.5


def table_hashes(path: Path) -> dict[str, int]:
    """Per table, a hash of its contents that does not depend on row order."""
    with duckdb.connect(str(path), read_only=True) as connection:
        # order-independent multiset hash of whole rows (same as hashing the sorted contents)
        return {t: scalar(connection, f"SELECT sum(hash(r)::HUGEINT) FROM (SELECT * FROM {t}) r") for t in SCHEMA}


def test_same_seed_same_contents_other_seed_differs(synthetic_db, tmp_path):
    again, other = tmp_path / "again.duckdb", tmp_path / "other.duckdb"
    generate_synthetic(again, PATIENTS, seed=SEED)  # synthetic_db's own size and seed (tests/conftest.py)
    generate_synthetic(other, PATIENTS, seed=SEED + 1)
    first, second, third = table_hashes(synthetic_db), table_hashes(again), table_hashes(other)
    assert first == second
    differing = [t for t in SCHEMA if first[t] != third[t]]
    assert set(differing) >= {"patients", "admissions", "labevents", "chartevents", "emar"}


def test_refuses_existing_path(synthetic_db):
    with pytest.raises(FileExistsError):
        generate_synthetic(synthetic_db, 10, seed=1)


def test_failure_leaves_no_temporary_file(tmp_path):
    def explode(stage: str, done: int) -> None:
        if stage == "patients":
            raise RuntimeError("interrupted")

    target = tmp_path / "broken.duckdb"
    with pytest.raises(RuntimeError):
        generate_synthetic(target, 20, seed=1, progress=explode)
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_patients_done(tmp_path):
    seen: list[tuple[str, int]] = []
    generate_synthetic(
        tmp_path / "small.duckdb", 25, seed=3, progress=lambda s, n: seen.append((s, n)), chunk_patients=10
    )
    assert seen == [("dictionaries", 1), ("patients", 10), ("patients", 20), ("patients", 25)]


def test_fidelity_against_demo(synthetic_1000, demo_dir: Path, tmp_path):
    report = fidelity_report(synthetic_1000, demo_dir)  # the fixture skips, naming the path, without the demo
    failing = {
        k: v for section in ("rows_per_patient", "lab_medians") for k, v in report[section].items() if not v["pass"]
    }
    assert failing == {}
    assert len(report["lab_medians"]) == 20
    write_fidelity_html(report, tmp_path / "fidelity.html")
    assert "PASS" in (tmp_path / "fidelity.html").read_text()


@pytest.mark.slow
def test_synthetic_passes_the_source_gate_unchanged(synthetic_1000):
    from pipeline.quality.source_gate import validate_source

    report = validate_source(synthetic_1000)
    problems = [(s.suite, o.rule, o.unexpected_count) for s in report.suites for o in s.outcomes if o.status != "pass"]
    assert report.success and problems == []  # not even a known exception: the generator keeps every key
