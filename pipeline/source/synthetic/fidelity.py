"""Fidelity of a synthetic DB against the MIMIC-IV demo: rows per patient and top-lab medians, pass/fail."""

from __future__ import annotations

import html
from pathlib import Path

import duckdb

from ..schema import load_schema

BIG_TABLES = (
    "labevents",
    "chartevents",
    "emar",
    "emar_detail",
    "poe",
    "prescriptions",
    "pharmacy",
    "inputevents",
    "outputevents",
    "datetimeevents",
    "microbiologyevents",
    "diagnoses_icd",
)
ROW_RATIO_BOUNDS = (0.5, 2.0)
MEDIAN_TOLERANCE = 0.25
TOP_LABS = 20


def _demo_source(con: duckdb.DuckDBPyConnection, demo: Path) -> str:
    """Attach a demo DuckDB file, or expose a demo CSV folder (hosp/, icu/) as views; returns the schema name."""
    demo = Path(demo)
    if demo.is_file():
        con.execute(f"ATTACH '{demo}' AS demo (READ_ONLY)")
        return "demo"
    con.execute("CREATE SCHEMA demo")
    chartevents = demo.parent / "chartevents-from-meds" / "chartevents.csv.gz"
    for table in load_schema().values():
        path = demo / f"{table.relative_path}.csv.gz"
        if table.name == "chartevents" and not path.exists():
            path = chartevents
        if path.exists():
            con.execute(f"CREATE VIEW demo.{table.name} AS SELECT * FROM read_csv('{path}', sample_size=-1)")
    return "demo"


def _rows_per_patient(con, schema: str, table: str) -> float:
    return con.execute(
        f"SELECT (SELECT count(*) FROM {schema}.{table}) / (SELECT count(*) FROM {schema}.patients)"
    ).fetchone()[0]


def _ratio_entry(demo_value: float, synthetic_value: float, passed: bool) -> dict:
    ratio = synthetic_value / demo_value if demo_value else None
    return {"demo": demo_value, "synthetic": synthetic_value, "ratio": ratio, "pass": passed}


def _row_ratios(con, demo: str) -> dict:
    low, high = ROW_RATIO_BOUNDS
    out = {}
    for table in BIG_TABLES:
        d, s = _rows_per_patient(con, demo, table), _rows_per_patient(con, "synth", table)
        out[table] = _ratio_entry(d, s, bool(d and low <= s / d <= high))
    return out


def _lab_medians(con, demo: str) -> dict:
    top = [
        r[0]
        for r in con.execute(f"""SELECT itemid FROM {demo}.labevents WHERE valuenum IS NOT NULL
                                         GROUP BY itemid ORDER BY count(*) DESC, itemid LIMIT {TOP_LABS}""").fetchall()
    ]
    query = f"""SELECT itemid, median(valuenum) FROM {{}}.labevents
                WHERE itemid IN ({", ".join(map(str, top))}) AND valuenum IS NOT NULL GROUP BY itemid"""
    demo_medians, synthetic_medians = (dict(con.execute(query.format(side)).fetchall()) for side in (demo, "synth"))
    out = {}
    for itemid in top:
        d, s = demo_medians[itemid], synthetic_medians.get(itemid)
        close = s is not None and abs(s - d) <= MEDIAN_TOLERANCE * abs(d)
        out[str(itemid)] = _ratio_entry(d, s if s is not None else float("nan"), bool(close))
    return out


def fidelity_report(synthetic_db: Path, demo_db_or_dir: Path) -> dict:
    """Rows per patient for the big tables and medians of the top demo labs, synthetic vs demo, with pass/fail."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{synthetic_db}' AS synth (READ_ONLY)")
        demo = _demo_source(con, Path(demo_db_or_dir))
        rows, labs = _row_ratios(con, demo), _lab_medians(con, demo)
    finally:
        con.close()
    return {
        "rows_per_patient": rows,
        "lab_medians": labs,
        "bounds": {"rows_per_patient_ratio": ROW_RATIO_BOUNDS, "lab_median_tolerance": MEDIAN_TOLERANCE},
        "pass": all(e["pass"] for e in (*rows.values(), *labs.values())),
    }


def write_fidelity_html(report: dict, path: Path) -> None:
    sections = [("Rows per patient", report["rows_per_patient"]), ("Lab medians (itemid)", report["lab_medians"])]
    parts = [f"<h1>Synthetic vs demo fidelity: {'PASS' if report['pass'] else 'FAIL'}</h1>"]
    for title, entries in sections:
        parts.append(
            f"<h2>{html.escape(title)}</h2><table border='1'>"
            "<tr><th>name</th><th>demo</th><th>synthetic</th><th>ratio</th><th>pass</th></tr>"
        )
        parts += [
            f"<tr><td>{html.escape(name)}</td><td>{_fmt(e['demo'])}</td><td>{_fmt(e['synthetic'])}</td>"
            f"<td>{_fmt(e['ratio'])}</td><td>{'yes' if e['pass'] else 'NO'}</td></tr>"
            for name, e in entries.items()
        ]
        parts.append("</table>")
    Path(path).write_text("<!doctype html><html><body>" + "".join(parts) + "</body></html>\n")


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"
