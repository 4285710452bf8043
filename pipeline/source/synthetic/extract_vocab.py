"""Derive the generator's package data (vocabularies, distributions, rates) from the MIMIC-IV demo.

Usage: python -m pipeline.source.synthetic.extract_vocab DEMO_DIR CHARTEVENTS_FILE [OUT_DIR]
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import duckdb

from .sampling import QUANTILE_POINTS

TOP_PANELS = 400
TOP_DRUGS = 800
EXTRA_DICTIONARY_CODES = {"d_icd_diagnoses": 4000, "d_icd_procedures": 2000, "d_hcpcs": 1000}
OUT_DIR = Path(__file__).parent / "data"
BILLED = "hadm_id IN (SELECT hadm_id FROM drgcodes)"  # an admission the demo billed by a DRG
DRUG_COLUMNS = (
    "route",
    "dose_val_rx",
    "dose_unit_rx",
    "form_val_disp",
    "form_unit_disp",
    "prod_strength",
    "formulary_drug_cd",
    "gsn",
    "ndc",
)
# DuckDB's mode() breaks ties arbitrarily. Queries here write stable_mode(x), rewritten to
# list_stable_mode(list(x)): the most frequent non-NULL value, ties going to the smallest.
STABLE_MODE_MACRO = """CREATE MACRO list_stable_mode(values) AS (
    SELECT v FROM (SELECT unnest(values) AS v) WHERE v IS NOT NULL GROUP BY v ORDER BY count(*) DESC, v LIMIT 1)"""
STABLE_MODE_CALL = re.compile(r"stable_mode\(([^()]*)\)")


class Demo:
    """SQL access to the demo CSV folder plus the chartevents reconstruction."""

    def __init__(self, demo_dir: Path, chartevents_file: Path):
        self.con = duckdb.connect()
        self.con.execute(STABLE_MODE_MACRO)
        for path in sorted(demo_dir.glob("*/*.csv.gz")):
            self._view(path.name.removesuffix(".csv.gz"), path)
        self._view("chartevents", chartevents_file)
        self.con.execute("CREATE TABLE stay_hours AS SELECT sum(los) * 24 AS hours, count(*) AS stays FROM icustays")

    def _view(self, name: str, path: Path) -> None:
        self.con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_csv('{path}', sample_size=-1)")

    def execute(self, sql: str) -> duckdb.DuckDBPyConnection:
        return self.con.execute(STABLE_MODE_CALL.sub(r"list_stable_mode(list(\1))", sql))

    def rows(self, sql: str) -> list[tuple]:
        return self.execute(sql).fetchall()

    def scalar(self, sql: str):
        row = self.execute(sql).fetchone()
        if row is None:
            raise ValueError(f"no row from {sql}")
        return row[0]

    def weights(self, sql: str) -> dict:
        """`sql` yields (value..., count); returns {"values": [...], "p": [...]} sorted by count then value."""
        rows = sorted(self.rows(sql), key=lambda r: (-r[-1], str(r[:-1])))
        total = sum(r[-1] for r in rows)
        values = [r[0] if len(r) == 2 else list(r[:-1]) for r in rows]
        return {"values": values, "p": [r[-1] / total for r in rows]}

    def column_weights(self, table: str, column: str, where: str = "true") -> dict:
        return self.weights(f"SELECT {column}, count(*) FROM {table} WHERE {where} GROUP BY 1")

    def quantiles(self, expr: str, table: str, where: str = "true") -> list[float]:
        return self.scalar(f"SELECT quantile_cont({expr}, {QUANTILE_POINTS}) FROM {table} WHERE {where}")

    def histogram(self, counts_sql: str) -> dict:
        """`counts_sql` yields one count per parent; returns the weights of each count."""
        return self.weights(f"SELECT n, count(*) FROM ({counts_sql}) GROUP BY n")


def _modes(*columns: str) -> str:
    return ", ".join(f"stable_mode({c})" for c in columns)


def _qsql(expr: str) -> str:
    return f"quantile_cont({expr}, {QUANTILE_POINTS})"


def demographics(d: Demo) -> dict:
    adm = "admissions"
    los = "date_diff('minute', admittime, dischtime) / 1440.0"
    gaps = """SELECT date_diff('minute', lag(dischtime) OVER w, admittime) / 1440.0 AS g FROM admissions
              WINDOW w AS (PARTITION BY subject_id ORDER BY admittime)"""
    return {
        "gender": d.column_weights("patients", "gender"),
        "anchor_age": d.quantiles("anchor_age", "patients"),
        "anchor_year_group": d.column_weights("patients", "anchor_year_group"),
        "dod_fraction": d.scalar("SELECT avg((dod IS NOT NULL)::int) FROM patients"),
        "admissions_per_patient": d.histogram(
            "SELECT count(hadm_id) AS n FROM patients LEFT JOIN admissions USING (subject_id) GROUP BY subject_id"
        ),
        "los_days": d.quantiles(los, adm, "dischtime > admittime"),
        "gap_days": d.scalar(f"SELECT {_qsql('g')} FROM ({gaps}) WHERE g > 0"),
        "ed_fraction": d.scalar("SELECT avg((edregtime IS NOT NULL)::int) FROM admissions"),
        "ed_hours": d.quantiles("date_diff('minute', edregtime, admittime) / 60.0", adm, "edregtime < admittime"),
        "expire_fraction": d.scalar("SELECT avg(hospital_expire_flag) FROM admissions"),
        **{
            c: d.column_weights(adm, c, f"{c} IS NOT NULL")
            for c in (
                "admission_type",
                "admission_location",
                "discharge_location",
                "insurance",
                "language",
                "marital_status",
                "race",
            )
        },
    }


def encounters(d: Demo) -> dict:
    icu_units = "SELECT DISTINCT first_careunit FROM icustays UNION SELECT DISTINCT last_careunit FROM icustays"
    return {
        "icu_admission_fraction": d.scalar(
            "SELECT avg((hadm_id IN (SELECT hadm_id FROM icustays))::int) FROM admissions"
        ),
        "stays_per_icu_admission": d.histogram("SELECT count(*) AS n FROM icustays GROUP BY hadm_id"),
        "icu_los_days": d.quantiles("los", "icustays"),
        "icu_careunit": d.column_weights("icustays", "first_careunit"),
        "ward_careunit": d.column_weights(
            "transfers", "careunit", f"eventtype IN ('admit', 'transfer') AND careunit NOT IN ({icu_units})"
        ),
        "service": d.column_weights("services", "curr_service"),
        "services_per_admission": d.histogram("SELECT count(*) AS n FROM services GROUP BY hadm_id"),
    }


def coding(d: Demo) -> dict:
    per_adm = "SELECT count({t}.hadm_id) AS n FROM admissions a LEFT JOIN {t} USING (hadm_id) GROUP BY a.hadm_id"
    return {
        "diagnoses": d.weights("SELECT icd_code, icd_version, count(*) FROM diagnoses_icd GROUP BY ALL"),
        "diagnoses_per_admission": d.histogram(per_adm.format(t="diagnoses_icd")),
        "procedures": d.weights("SELECT icd_code, icd_version, count(*) FROM procedures_icd GROUP BY ALL"),
        "procedures_per_admission": d.histogram(per_adm.format(t="procedures_icd")),
        "drg": {
            t: d.weights(f"""SELECT drg_code, description, drg_severity, drg_mortality, count(*)
                                FROM drgcodes WHERE drg_type = '{t}' GROUP BY ALL""")
            for t in ("HCFA", "APR")
        },
        # an observation stay is not billed by DRG (demo: none of its 42 EU, direct or ambulatory observation
        # admissions has one, 233 of the other 233 have an HCFA DRG): the share is of the billed admissions
        "drg_unbilled_types": [
            t
            for (t,) in d.rows(f"""SELECT admission_type FROM admissions GROUP BY 1
                                    HAVING count(*) FILTER (WHERE {BILLED}) = 0 ORDER BY 1""")
        ],
        "drg_fraction": {
            t: d.scalar(f"""SELECT count(DISTINCT hadm_id) / (SELECT count(*) FROM admissions a WHERE {BILLED})
                                        FROM drgcodes WHERE drg_type = '{t}'""")
            for t in ("HCFA", "APR")
        },
        "hcpcs": d.weights("SELECT hcpcs_cd, short_description, count(*) FROM hcpcsevents GROUP BY ALL"),
        "hcpcs_per_admission": d.histogram(per_adm.format(t="hcpcsevents")),
    }


def labs(d: Demo) -> dict:
    items = d.rows(f"""
        SELECT itemid, count(*) AS n, {_modes("valueuom", "ref_range_lower", "ref_range_upper")},
               CASE WHEN count(valuenum) > 0.5 * count(*) THEN {_qsql("valuenum")} END,
               CASE WHEN count(valuenum) <= 0.5 * count(*) THEN list(value ORDER BY value) END,
               avg(coalesce(flag = 'abnormal', false)::int)
        FROM labevents GROUP BY itemid ORDER BY itemid""")
    panels = d.weights("""SELECT list(DISTINCT itemid ORDER BY itemid) AS panel, 1 FROM labevents
                          GROUP BY specimen_id""")
    panels = _top_weights(_merge_duplicates(panels), TOP_PANELS)
    return {
        "items": [_lab_item(row) for row in items],
        "panels": panels,
        "specimens_per_admission_day": _per_admission_day(d, "SELECT count(DISTINCT specimen_id) FROM labevents"),
        "priority": d.column_weights("labevents", "priority", "priority IS NOT NULL"),
    }


def _lab_item(row: tuple) -> dict:
    itemid, n, uom, lower, upper, quantiles, texts, abnormal = row
    text_weights = None
    if texts:
        counts: dict[str, int] = {}
        for t in texts:
            if t is not None:
                counts[t] = counts.get(t, 0) + 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
        text_weights = {"values": [k for k, _ in top], "p": [v / sum(c for _, c in top) for _, v in top]}
    return {
        "itemid": itemid,
        "n": n,
        "uom": uom,
        "lower": lower,
        "upper": upper,
        "quantiles": quantiles,
        "texts": text_weights,
        "abnormal_fraction": abnormal,
    }


def _merge_duplicates(weights: dict) -> dict:
    merged: dict[tuple, float] = {}
    for value, p in zip(weights["values"], weights["p"]):
        merged[tuple(value)] = merged.get(tuple(value), 0.0) + p
    rows = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"values": [list(k) for k, _ in rows], "p": [v for _, v in rows]}


def _top_weights(weights: dict, top: int) -> dict:
    values, p = weights["values"][:top], weights["p"][:top]
    return {"values": values, "p": [x / sum(p) for x in p]}


def _per_admission_day(d: Demo, count_sql: str) -> float:
    days = d.scalar("SELECT sum(date_diff('minute', admittime, dischtime) / 1440.0) FROM admissions")
    return d.scalar(count_sql) / days


def microbiology(d: Demo) -> dict:
    m = "microbiologyevents"
    org_abx = """SELECT count(ab_name) AS n FROM microbiologyevents WHERE org_name IS NOT NULL
                 GROUP BY micro_specimen_id, test_itemid, org_itemid, isolate_num"""
    return {
        "tests_per_admission_day": _per_admission_day(
            d, f"SELECT count(*) FROM (SELECT DISTINCT micro_specimen_id, test_itemid FROM {m})"
        ),
        "test": d.weights(f"""SELECT spec_itemid, spec_type_desc, test_itemid, test_name,
                                     count(DISTINCT micro_specimen_id) FROM {m} GROUP BY ALL"""),
        "organism_by_test": _organisms_by_test(d),
        "antibiotics_per_organism": d.histogram(org_abx),
        "antibiotic": d.weights(f"SELECT ab_itemid, ab_name, count(*) FROM {m} WHERE ab_name IS NOT NULL GROUP BY ALL"),
        "interpretation": d.column_weights(m, "interpretation", "interpretation IS NOT NULL"),
        "dilution_comparison": d.column_weights(m, "dilution_comparison", "dilution_comparison IS NOT NULL"),
        "dilution_value": d.weights(
            f"SELECT dilution_value, count(*) FROM {m} WHERE dilution_value IS NOT NULL GROUP BY 1"
        ),
        "quantity": d.column_weights(m, "quantity", "quantity IS NOT NULL"),
        "no_growth_comment": d.column_weights(m, "comments", "org_name IS NULL AND comments IS NOT NULL"),
    }


def _organisms_by_test(d: Demo) -> dict:
    """Per test itemid: the share of tests that grew an organism, and which organisms grew (per isolate)."""
    shares = d.rows("""SELECT test_itemid, avg((n_org > 0)::int) FROM (
                           SELECT test_itemid, count(org_name) AS n_org FROM microbiologyevents
                           WHERE test_itemid IS NOT NULL GROUP BY micro_specimen_id, test_itemid)
                       GROUP BY 1 ORDER BY 1""")
    out = {}
    for test_itemid, share in shares:
        organisms = d.weights(f"""SELECT org_itemid, org_name, count(DISTINCT (micro_specimen_id, isolate_num))
                                  FROM microbiologyevents WHERE test_itemid = {test_itemid} AND org_name IS NOT NULL
                                  GROUP BY ALL""")
        out[str(test_itemid)] = {"fraction": share, "organisms": organisms}
    return out


def medications(d: Demo) -> dict:
    # one entry per (drug, route): a drug keeps its real mix of routes (e.g. furosemide IV and PO)
    drugs = d.weights(f"""SELECT drug, route, {_modes(*DRUG_COLUMNS[1:])}, count(*)
                         FROM prescriptions WHERE drug_type = 'MAIN' GROUP BY drug, route""")
    pharm = d.weights(f"""SELECT medication, {_modes("proc_type", "frequency", "doses_per_24_hrs")}, count(*)
                         FROM pharmacy WHERE medication IS NOT NULL GROUP BY medication""")
    return {
        "drugs": _top_weights(drugs, TOP_DRUGS),
        "pharmacy_by_medication": {row[0]: row[1:] for row in pharm["values"]},
        "base_drugs": d.weights(f"""SELECT drug, {_modes(*DRUG_COLUMNS[:3])}, count(*)
                                   FROM prescriptions WHERE drug_type = 'BASE' GROUP BY drug"""),
        "base_fraction": d.scalar("""SELECT count(*) FILTER (drug_type = 'BASE')
                                            / count(*) FILTER (drug_type = 'MAIN')
                                     FROM prescriptions"""),
        "medication_orders_per_admission_day": _per_admission_day(
            d, "SELECT count(*) FROM poe WHERE order_type = 'Medications'"
        ),
        "pharmacy_fraction": d.scalar("""SELECT count(*) / (SELECT count(*) FROM poe WHERE order_type = 'Medications')
                                         FROM pharmacy"""),
        "prescription_duration_hours": d.quantiles(
            "date_diff('minute', starttime, stoptime) / 60.0", "prescriptions", "stoptime > starttime"
        ),
        "pharmacy_status": d.column_weights("pharmacy", "status", "status IS NOT NULL"),
        "emar_per_pharmacy": d.histogram("""SELECT count(e.emar_id) AS n FROM pharmacy p
                                            LEFT JOIN emar e USING (pharmacy_id) GROUP BY p.pharmacy_id"""),
        "emar_event": d.column_weights("emar", "event_txt", "event_txt IS NOT NULL"),
        "emar_detail_per_emar": d.histogram("SELECT count(*) - 1 AS n FROM emar_detail GROUP BY emar_id"),
        "emar_detail_ordinal": d.column_weights(
            "emar_detail", "parent_field_ordinal::varchar", "parent_field_ordinal IS NOT NULL"
        ),
        "emar_route": d.column_weights("emar_detail", "route", "route IS NOT NULL"),
        "other_orders_per_admission_day": _per_admission_day(
            d, "SELECT count(*) FROM poe WHERE order_type <> 'Medications'"
        ),
        "order_type": d.column_weights("poe", "order_type", "order_type <> 'Medications'"),
        "order_status": d.column_weights("poe", "order_status", "order_status IS NOT NULL"),
        "poe_detail": d.weights("""SELECT p.order_type, d.field_name, d.field_value, count(*)
                                   FROM poe_detail d JOIN poe p USING (poe_id) GROUP BY ALL"""),
        "poe_detail_fraction": d.scalar("SELECT count(DISTINCT poe_id) / (SELECT count(*) FROM poe) FROM poe_detail"),
    }


def omr(d: Demo) -> dict:
    numeric = "TRY_CAST(split_part(result_value, '/', {part}) AS DOUBLE)"
    return {
        "rows_per_patient": d.scalar("SELECT count(*) / (SELECT count(*) FROM patients) FROM omr"),
        "result_name": d.column_weights("omr", "result_name"),
        "quantiles": {
            name: [d.quantiles(numeric.format(part=p), "omr", f"result_name = '{name}'") for p in (1, 2)]
            for (name,) in d.rows("SELECT DISTINCT result_name FROM omr ORDER BY 1")
        },
    }


def icu_events(d: Demo) -> dict:
    rate = "count(*) / (SELECT hours FROM stay_hours)"
    return {
        "chart": d.rows(f"""SELECT itemid, {rate}, stable_mode(valueuom),
                                   CASE WHEN count(valuenum) > 0 THEN {_qsql("valuenum")} END
                            FROM chartevents GROUP BY itemid ORDER BY itemid"""),
        "datetime": d.rows(f"SELECT itemid, {rate}, stable_mode(valueuom) FROM datetimeevents GROUP BY 1 ORDER BY 1"),
        "output": d.rows(f"""SELECT itemid, {rate}, stable_mode(valueuom), {_qsql("value")}
                             FROM outputevents GROUP BY 1 ORDER BY 1"""),
        "input": d.rows(f"""SELECT itemid, {rate}, stable_mode(amountuom), {_qsql("amount")}, stable_mode(rateuom),
                                   CASE WHEN count(rate) > 0.5 * count(*) THEN {_qsql("rate")} END,
                                   stable_mode(ordercategoryname), stable_mode(secondaryordercategoryname),
                                   stable_mode(ordercomponenttypedescription), stable_mode(ordercategorydescription),
                                   {_qsql("date_diff('minute', starttime, endtime)")}
                            FROM inputevents GROUP BY 1 ORDER BY 1"""),
        "input_status": d.column_weights("inputevents", "statusdescription", "statusdescription IS NOT NULL"),
        "ingredients_per_input": d.scalar("SELECT (SELECT count(*) FROM ingredientevents) / count(*) FROM inputevents"),
        "ingredient": d.weights(f"""SELECT itemid, {_modes("amountuom", "rateuom")}, {_qsql("amount")}, count(*)
                                    FROM ingredientevents GROUP BY itemid"""),
        "procedure": d.rows(f"""SELECT itemid, count(*) / (SELECT stays FROM stay_hours), stable_mode(valueuom),
                                       {_modes("ordercategoryname", "ordercategorydescription", "location")},
                                       stable_mode(locationcategory), {_qsql("date_diff('minute', starttime, endtime)")}
                                FROM procedureevents GROUP BY 1 ORDER BY 1"""),
        "patientweight": d.quantiles("patientweight", "inputevents"),
    }


def dictionaries(d: Demo) -> dict:
    used = {
        "d_icd_diagnoses": "SELECT icd_code, icd_version FROM diagnoses_icd",
        "d_icd_procedures": "SELECT icd_code, icd_version FROM procedures_icd",
        "d_hcpcs": "SELECT hcpcs_cd AS code FROM hcpcsevents",
    }
    icd = "icd_code, icd_version"
    keys = {"d_icd_diagnoses": icd, "d_icd_procedures": icd, "d_hcpcs": "code"}
    out = {t: _columns(d, f"SELECT * FROM {t} ORDER BY itemid") for t in ("d_labitems", "d_items")}
    for table, extra in EXTRA_DICTIONARY_CODES.items():
        sql = f"""SELECT *, ({keys[table]}) IN ({used[table]}) AS used FROM {table}
                  QUALIFY used OR row_number() OVER (ORDER BY hash({keys[table]}), {keys[table]}) <= {extra}
                  ORDER BY {keys[table]}"""
        out[table] = _columns(d, sql)
    return out


def _columns(d: Demo, sql: str) -> dict:
    rel = d.con.execute(sql)
    names = [c[0] for c in rel.description]
    rows = rel.fetchall()
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}


def extract(demo_dir: Path, chartevents_file: Path, out_dir: Path = OUT_DIR) -> None:
    d = Demo(demo_dir, chartevents_file)
    vocab = {
        "demographics": demographics(d),
        "encounters": encounters(d),
        "coding": coding(d),
        "labs": labs(d),
        "microbiology": microbiology(d),
        "medications": medications(d),
        "omr": omr(d),
        "icu": icu_events(d),
    }
    _dump(vocab, out_dir / "vocab.json.gz")
    _dump(dictionaries(d), out_dir / "dictionaries.json.gz")


def _dump(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, default=_json_default, sort_keys=True, separators=(",", ":"))
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(text.encode())


def _json_default(value):
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return float(value)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    extract(Path(sys.argv[1]), Path(sys.argv[2]), *(Path(a) for a in sys.argv[3:]))
