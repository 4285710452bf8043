"""The MIMIC-IV loader: the real demo and a synthetic source written out in the PhysioNet layout load exactly;
every kind of bad input is refused by name."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from mimic_folder import make_folder, write_checksums, write_table
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.source.loader import LoadError, load_mimic
from pipeline.source.schema import TABLE_NAMES, load_schema

# Published row counts of the MIMIC-IV demo v2.2 (MIT-LCP mimic-code validate_demo.sql); chartevents is
# the MEDS reconstruction's count (the original demo's 668,862 rows are not available here).
DEMO_ROWS = {
    "admissions": 275,
    "d_hcpcs": 89200,
    "d_icd_diagnoses": 109775,
    "d_icd_procedures": 85257,
    "d_labitems": 1622,
    "diagnoses_icd": 4506,
    "drgcodes": 454,
    "emar": 35835,
    "emar_detail": 72018,
    "hcpcsevents": 61,
    "labevents": 107727,
    "microbiologyevents": 2899,
    "omr": 2964,
    "patients": 100,
    "pharmacy": 15306,
    "poe": 45154,
    "poe_detail": 3795,
    "prescriptions": 18087,
    "procedures_icd": 722,
    "provider": 40508,
    "services": 319,
    "transfers": 1190,
    "icustays": 140,
    "caregiver": 15468,
    "d_items": 4014,
    "chartevents": 588935,
    "datetimeevents": 15280,
    "inputevents": 20404,
    "ingredientevents": 25728,
    "outputevents": 9362,
    "procedureevents": 1468,
}
PATIENT = "10000032,F,52,2180,2014 - 2016,"


def test_schema_has_31_tables_22_hosp_9_icu():
    schema = load_schema()
    assert len(schema) == 31
    assert sum(t.module == "hosp" for t in schema.values()) == 22
    assert sum(t.module == "icu" for t in schema.values()) == 9
    assert set(DEMO_ROWS) == set(TABLE_NAMES)


def test_demo_loads_with_published_row_counts(demo_db: Path):
    con = duckdb.connect(str(demo_db), read_only=True)
    names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name='main'").fetchall()}
    assert names == set(TABLE_NAMES)
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLE_NAMES}
    assert counts == DEMO_ROWS


def assert_typed_by_the_schema(con) -> None:
    """Every table's columns, in order, with the DuckDB type the schema declares."""
    for table in load_schema().values():
        actual = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position",
            [table.name],
        ).fetchall()
        assert actual == [(c.name, c.duckdb_type.replace("REAL", "FLOAT")) for c in table.columns], table.name


def test_demo_columns_are_typed_by_the_schema(demo_db: Path):
    con = duckdb.connect(str(demo_db), read_only=True)
    assert_typed_by_the_schema(con)


def test_demo_values_survive_loading(demo_db: Path):
    con = duckdb.connect(str(demo_db), read_only=True)
    # procedureevents' ORIGINALAMOUNT header is upper-case in the demo file; it must still land by name.
    assert con.execute("SELECT count(originalamount) FROM procedureevents").fetchone()[0] > 0
    row = con.execute("SELECT gender, anchor_age, dod FROM patients WHERE subject_id = 10003400").fetchone()
    assert row[0] == "F" and row[1] == 72 and str(row[2]) == "2137-09-02"


def test_demo_without_chartevents_names_the_missing_table(demo_dir: Path, tmp_path: Path):
    with pytest.raises(LoadError, match=r"missing: chartevents .*--allow-missing"):
        load_mimic(demo_dir, tmp_path / "x.duckdb")
    assert list(tmp_path.iterdir()) == []


PLAIN_CSV_ROWS = 100_000  # the synthetic folder's larger tables are plain CSV (as after a gunzip), the others gzip


@pytest.fixture(scope="module")
def synthetic_folder(synthetic_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """synthetic_db written out in the PhysioNet layout (hosp/ and icu/, one CSV with a header per table)."""
    root = tmp_path_factory.mktemp("synthetic-mimic")
    with duckdb.connect(str(synthetic_db), read_only=True) as con:
        con.execute("SET enable_progress_bar = false")
        for table in load_schema().values():
            rows = con.execute(f"SELECT count(*) FROM {table.name}").fetchone()[0]
            gz = rows < PLAIN_CSV_ROWS
            path = root / f"{table.relative_path}.csv{'.gz' if gz else ''}"
            path.parent.mkdir(parents=True, exist_ok=True)
            options = "HEADER, COMPRESSION gzip" if gz else "HEADER"
            con.execute(f"COPY (SELECT * FROM {table.name}) TO '{path}' ({options})")
    return root


def _contents(db: Path) -> dict[str, tuple[int, int]]:
    """Per table: rows and an order-independent hash of the whole rows."""
    with duckdb.connect(str(db), read_only=True) as con:
        return {
            t: con.execute(f"SELECT count(*), sum(hash(r)::HUGEINT) FROM (SELECT * FROM {t}) r").fetchone()
            for t in TABLE_NAMES
        }


def test_a_synthetic_source_in_the_physionet_layout_loads_back_exactly(
    synthetic_folder: Path, synthetic_db: Path, tmp_path: Path
):
    assert {p.name.endswith(".gz") for p in synthetic_folder.rglob("*.csv*")} == {True, False}  # both kinds
    report = load_mimic(synthetic_folder, tmp_path / "loaded.duckdb")
    assert report.missing == [] and set(report.rows) == set(TABLE_NAMES)
    loaded, source = _contents(tmp_path / "loaded.duckdb"), _contents(synthetic_db)
    assert {t: n for t, (n, _) in loaded.items()} == report.rows
    assert [t for t in TABLE_NAMES if loaded[t] != source[t]] == []
    con = duckdb.connect(str(tmp_path / "loaded.duckdb"), read_only=True)
    assert_typed_by_the_schema(con)


def test_a_synthetic_folder_without_chartevents_names_the_missing_table(synthetic_folder: Path, tmp_path: Path):
    folder = tmp_path / "mimic"
    for path in synthetic_folder.rglob("*.csv*"):
        if not path.name.startswith("chartevents."):
            link = folder / path.relative_to(synthetic_folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    (tmp_path / "out").mkdir()
    with pytest.raises(LoadError, match=r"missing: chartevents .*--allow-missing"):
        load_mimic(folder, tmp_path / "out" / "x.duckdb")
    assert list((tmp_path / "out").iterdir()) == []


def test_allow_missing_creates_the_absent_table_empty(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    (root / "icu" / "chartevents.csv.gz").unlink()
    report = load_mimic(root, tmp_path / "db.duckdb", allow_missing=True)
    assert report.missing == ["chartevents"] and report.rows["patients"] == 1
    con = duckdb.connect(str(tmp_path / "db.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM chartevents").fetchone()[0] == 0


def test_plain_csv_and_reordered_upper_case_header_load_by_name(tmp_path: Path):
    root = make_folder(tmp_path / "mimic")
    (root / "hosp" / "patients.csv.gz").unlink()
    write_table(
        root,
        "patients",
        ["2014 - 2016,52,F,10000032,,2180"],
        header="ANCHOR_YEAR_GROUP,anchor_age,Gender,subject_id,dod,anchor_year",
        gz=False,
    )
    load_mimic(root, tmp_path / "db.duckdb")
    con = duckdb.connect(str(tmp_path / "db.duckdb"), read_only=True)
    assert con.execute("SELECT subject_id, gender, anchor_age, anchor_year FROM patients").fetchall() == [
        (10000032, "F", 52, 2180)
    ]


def _assert_refused(root: Path, db: Path, pattern: str, **kwargs) -> None:
    before = sorted(p.name for p in db.parent.iterdir())
    with pytest.raises(LoadError, match=pattern):
        load_mimic(root, db, **kwargs)
    assert sorted(p.name for p in db.parent.iterdir()) == before, "a failed load left a file behind"


def test_bad_value_names_file_line_and_column(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT, "10000033,M,old,2180,2014 - 2016,"]})
    (tmp_path / "out").mkdir()
    _assert_refused(
        root,
        tmp_path / "out" / "db.duckdb",
        r"patients\.csv\.gz: line 3: column 'anchor_age' \(SMALLINT\): Could not convert string \"old\"",
    )


def test_bad_timestamp_names_file_line_and_column(tmp_path: Path):
    admission = (
        "10000032,22595853,2180-05-06 22:23:00,not-a-time,,URGENT,P874LG,TRANSFER,HOME,Other,ENGLISH,WIDOWED,WHITE,,,0"
    )
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT], "admissions": [admission]})
    (tmp_path / "out").mkdir()
    _assert_refused(
        root, tmp_path / "out" / "db.duckdb", r"admissions\.csv\.gz: line 2: column 'dischtime' \(TIMESTAMP\)"
    )


def test_wrong_header_names_the_missing_and_unexpected_columns(tmp_path: Path):
    root = make_folder(tmp_path / "mimic")
    header = ",".join(c if c != "valuenum" else "value_num" for c in load_schema()["labevents"].column_names)
    write_table(root, "labevents", [], header=header)
    (tmp_path / "out").mkdir()
    _assert_refused(
        root,
        tmp_path / "out" / "db.duckdb",
        r"labevents\.csv\.gz: line 1: wrong header for table 'labevents': missing column\(s\) \['valuenum'\]; "
        r"unexpected column\(s\) \['value_num'\]",
    )


def test_corrupt_gzip_header_is_named(tmp_path: Path):
    root = make_folder(tmp_path / "mimic")
    (root / "hosp" / "omr.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate")
    (tmp_path / "out").mkdir()
    _assert_refused(
        root, tmp_path / "out" / "db.duckdb", r"omr\.csv\.gz: cannot read the file \(corrupt or not gzip\?\)"
    )


def test_truncated_gzip_is_named(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    path = write_table(root, "omr", [f"10000032,2180-07-23,{i},Weight (Lbs),{100 + i % 50}" for i in range(200_000)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    (tmp_path / "out").mkdir()
    _assert_refused(root, tmp_path / "out" / "db.duckdb", r"omr\.csv\.gz: corrupt gzip stream")


def test_checksum_mismatch_names_the_file_and_both_digests(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    write_checksums(root)
    write_table(root, "patients", [PATIENT.replace(",F,", ",M,")])
    (tmp_path / "out").mkdir()
    _assert_refused(
        root,
        tmp_path / "out" / "db.duckdb",
        r"hosp/patients\.csv\.gz: checksum mismatch: SHA256SUMS\.txt lists [0-9a-f]{64}, the file has [0-9a-f]{64}",
    )


def test_matching_checksums_are_verified(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    write_checksums(root)
    assert load_mimic(root, tmp_path / "db.duckdb").checksums_verified == 31


def test_unknown_substitute_table_is_refused(tmp_path: Path):
    root = make_folder(tmp_path / "mimic")
    with pytest.raises(LoadError, match=r"--table names unknown table\(s\) \['chartevent'\]"):
        load_mimic(root, tmp_path / "db.duckdb", substitutes={"chartevent": root / "icu" / "chartevents.csv.gz"})


def test_existing_database_is_never_overwritten(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    db = tmp_path / "db.duckdb"
    db.write_bytes(b"published")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        load_mimic(root, db)
    assert db.read_bytes() == b"published"


def test_overwrite_replaces_only_after_success(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT, "1,X,bad,1,2,"]})
    db = tmp_path / "db.duckdb"
    db.write_bytes(b"published")
    with pytest.raises(LoadError):
        load_mimic(root, db, overwrite=True)
    assert db.read_bytes() == b"published"


def test_cli_load_reports_error_and_exit_code(tmp_path: Path):
    root = make_folder(tmp_path / "mimic")
    (root / "hosp" / "admissions.csv.gz").unlink()
    result = CliRunner().invoke(app, ["load", str(root), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 2
    assert "missing: admissions" in result.output


def test_cli_load_prints_rows_per_table(tmp_path: Path):
    root = make_folder(tmp_path / "mimic", {"patients": [PATIENT]})
    result = CliRunner().invoke(app, ["load", str(root), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 0, result.output
    assert "patients" in result.output and "labevents" in result.output
