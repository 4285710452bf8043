"""Sibling facts (pipeline/noise/siblings.py) on small hand-made records: where the record keeps a fact a noise
changes, the patch changes it alike, or the candidate is refused (no ../shared data needed)."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.siblings import derivable, ends_before_start, one_concept, sibling_patch, witnessed

T0 = dt.datetime(2150, 1, 1, 8, 0)


def _rows(con, sql: str) -> list[dict]:
    found = con.execute(sql)
    names = [d[0] for d in found.description]
    return [dict(zip(names, values, strict=True)) for values in found.fetchall()]


@pytest.fixture()
def stay_record():
    """One admission: the ED (08:00-14:00), then an ICU stay (14:00-20:00, one transfer), then a ward."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE transfers (transfer_id INT, hadm_id INT, careunit TEXT, intime TIMESTAMP, outtime TIMESTAMP)"
    )
    hour = dt.timedelta(hours=1)
    con.execute(
        "INSERT INTO transfers VALUES (1, 7, 'ED', ?, ?), (2, 7, 'MICU', ?, ?), (3, 7, 'Med', ?, ?)",
        [T0, T0 + 6 * hour, T0 + 6 * hour, T0 + 12 * hour, T0 + 12 * hour, T0 + 40 * hour],
    )
    stay = {"stay_id": 5, "hadm_id": 7, "first_careunit": "MICU", "intime": T0 + 6 * hour, "outtime": T0 + 12 * hour}
    yield con, stay
    con.close()


def _moved(con, stay: dict, **shift: dt.timedelta) -> Patch:
    moved = {**stay, **{column: stay[column] + delta for column, delta in shift.items()}}
    own = Patch(tables={"icustays": TablePatch(key_columns=["stay_id"], hide=[{"stay_id": 5}], add=[moved])})
    return sibling_patch(con, "icustays", [stay], [moved], own)


def test_a_moved_icu_start_moves_the_icu_transfer_and_the_end_of_the_one_before(stay_record):
    con, stay = stay_record
    patch = _moved(con, stay, intime=dt.timedelta(minutes=-30))
    changed = {row["transfer_id"]: row for row in patch.tables["transfers"].add}
    assert sorted(changed) == [1, 2]  # the ward transfer is untouched: the stay's end did not move
    assert changed[2]["intime"] == stay["intime"] - dt.timedelta(minutes=30)
    assert changed[1]["outtime"] == stay["intime"] - dt.timedelta(minutes=30)
    assert changed[2]["outtime"] == stay["outtime"] and changed[1]["intime"] == T0
    assert not ends_before_start(patch, "icustays")  # 30 min earlier: the ED stay still ends after it begins


def test_a_stay_moved_past_the_transfer_before_it_is_refused(stay_record):
    con, stay = stay_record
    patch = _moved(con, stay, intime=dt.timedelta(hours=-9))  # before the ED transfer began
    assert ends_before_start(patch, "icustays")


def test_one_transfer_found_by_two_rules_takes_both_changes(stay_record):
    """The stay's only ICU transfer starts and ends with it: moving both ends moves both of its times (one copy)."""
    con, stay = stay_record
    shift = dt.timedelta(minutes=-45)
    patch = _moved(con, stay, intime=shift, outtime=shift)
    copies = [row for row in patch.tables["transfers"].add if row["transfer_id"] == 2]
    assert len(copies) == 1 and (copies[0]["intime"], copies[0]["outtime"]) == (
        stay["intime"] + shift,
        stay["outtime"] + shift,
    )
    assert sorted(k["transfer_id"] for k in patch.tables["transfers"].hide) == [1, 2, 3]


def _order_tables():
    """Empty prescriptions, pharmacy and poe tables with the columns the order sibling rules read."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE prescriptions (pharmacy_id INT, poe_id TEXT, drug_type TEXT, drug TEXT, starttime TIMESTAMP, "
        "stoptime TIMESTAMP, route TEXT)"
    )
    con.execute("CREATE TABLE pharmacy (pharmacy_id INT, starttime TIMESTAMP, stoptime TIMESTAMP, route TEXT)")
    con.execute("CREATE TABLE poe (poe_id TEXT, ordertime TIMESTAMP, discontinue_of_poe_id TEXT)")
    return con


def test_a_conflicting_copy_of_an_order_is_added_once_beside_its_base_row():
    """A conflicting duplicate (`replace=False`) of an order's MAIN row: its BASE row gets one copy, and the MAIN
    row, which the order's own-table rule also finds, is not copied a second time (session 16's hand check)."""
    con = _order_tables()
    stop = T0 + dt.timedelta(hours=17)
    con.execute(
        "INSERT INTO prescriptions VALUES (9, 'p-1', 'MAIN', 'Haloperidol', ?, ?, 'IV'), "
        "(9, 'p-1', 'BASE', 'NS', ?, ?, 'IV')",
        [T0, stop, T0, stop],
    )
    main = _rows(con, "SELECT * FROM prescriptions WHERE drug_type = 'MAIN'")[0]
    copy = {**main, "stoptime": T0 + dt.timedelta(hours=40)}
    own = Patch(tables={"prescriptions": TablePatch(key_columns=["pharmacy_id", "drug_type", "drug"], add=[copy])})
    added = sibling_patch(con, "prescriptions", [main], [copy], own, replace=False).tables["prescriptions"]
    assert sorted(row["drug_type"] for row in added.add) == ["BASE", "MAIN"]
    assert [row["stoptime"] for row in added.add] == [copy["stoptime"]] * 2 and not added.hide


def test_a_moved_stop_time_moves_the_order_that_discontinued_it():
    """Blind audit 33: a provider's D/C order (poe) dates an order's stop; a stop time moved alone is given away."""
    con = _order_tables()
    stop = T0 + dt.timedelta(hours=29)
    con.execute("INSERT INTO prescriptions VALUES (4, 'p-4', 'MAIN', 'Acetaminophen', ?, ?, 'PO')", [T0, stop])
    con.execute(
        "INSERT INTO poe VALUES ('p-4', ?, NULL), ('p-5', ?, 'p-4'), ('p-6', ?, 'p-9')",
        [T0, stop + dt.timedelta(minutes=51), stop],
    )
    order = _rows(con, "SELECT * FROM prescriptions")[0]
    moved = {**order, "stoptime": stop + dt.timedelta(hours=30)}
    own = Patch(tables={"prescriptions": TablePatch(key_columns=["pharmacy_id", "drug_type", "drug"], add=[moved])})
    poe = sibling_patch(con, "prescriptions", [order], [moved], own).tables["poe"]
    assert [row["poe_id"] for row in poe.add] == ["p-5"] and poe.hide == [{"poe_id": "p-5"}]
    assert poe.add[0]["ordertime"] == stop + dt.timedelta(hours=30, minutes=51)


def test_an_icu_dose_the_emar_charted_within_an_hour_is_witnessed():
    con = duckdb.connect()
    con.execute("CREATE TABLE d_items (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_items VALUES (1, 'Dextrose 50%'), (2, 'Fentanyl')")
    con.execute("CREATE TABLE emar (hadm_id INT, medication TEXT, charttime TIMESTAMP)")
    con.execute("INSERT INTO emar VALUES (7, 'Dextrose 50% ', ?), (7, 'Heparin', ?)", [T0, T0])
    dose = {"hadm_id": 7, "itemid": 1, "starttime": T0 + dt.timedelta(minutes=13)}
    assert witnessed(con, "inputevents", [dose])
    assert not witnessed(con, "inputevents", [{**dose, "starttime": T0 + dt.timedelta(hours=2)}])  # too far apart
    assert not witnessed(con, "inputevents", [{**dose, "itemid": 2}])  # fentanyl: no eMAR row of it
    assert not witnessed(con, "inputevents", [{**dose, "hadm_id": 8}])  # another admission's eMAR


def test_an_emar_dose_the_icu_charted_as_an_input_within_an_hour_is_witnessed():
    con = duckdb.connect()
    con.execute("CREATE TABLE d_items (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_items VALUES (1, 'Insulin - Regular'), (2, 'Fentanyl')")
    con.execute("CREATE TABLE inputevents (hadm_id INT, itemid INT, starttime TIMESTAMP)")
    con.execute("INSERT INTO inputevents VALUES (7, 1, ?), (7, 2, ?)", [T0, T0])
    dose = {"hadm_id": 7, "medication": "Insulin", "charttime": T0 + dt.timedelta(minutes=5)}
    assert witnessed(con, "emar", [dose])
    assert not witnessed(con, "emar", [{**dose, "charttime": T0 + dt.timedelta(hours=3)}])
    assert not witnessed(con, "emar", [{**dose, "medication": "Heparin"}])
    assert not witnessed(con, "emar", [{**dose, "hadm_id": 8}])


def test_a_result_its_sample_computes_is_derivable():
    """An anion gap whose specimen has sodium, chloride and bicarbonate is recomputed by a careful analyst, so
    null_value, implausible_value and conflicting_duplicate refuse it (derivable_from_sample); without a number for
    its bicarbonate it is not computable."""
    con = duckdb.connect()
    con.execute("CREATE TABLE d_labitems (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_labitems VALUES (1, 'Anion Gap'), (2, 'Sodium'), (3, ' chloride'), (4, 'Bicarbonate')")
    con.execute("CREATE TABLE labevents (labevent_id INT, specimen_id INT, itemid INT, valuenum DOUBLE)")
    con.execute(
        "INSERT INTO labevents VALUES (1, 10, 1, 14), (2, 10, 2, 140), (3, 10, 3, 102), (4, 10, 4, 24),"
        " (5, 20, 1, 14), (6, 20, 2, 140), (7, 20, 3, 102), (8, 20, 4, NULL)"
    )
    rows = {row["labevent_id"]: row for row in _rows(con, "SELECT * FROM labevents")}
    assert derivable(con, "labevents", [rows[1]])  # the whole panel (a label in another case and spacing)
    assert not derivable(con, "labevents", [rows[5]])  # its bicarbonate has no number
    # the relation is `solvable`: its gap, chloride and bicarbonate give the sodium too (blind audit 37 rebuilt a
    # bicarbonate so), and say which of two sodiums is true
    assert derivable(con, "labevents", [rows[2]]) and derivable(con, "labevents", [rows[2]], any_member=True)
    assert not derivable(con, "labevents", [rows[6]], any_member=True)  # its bicarbonate has no number
    assert not derivable(con, "labevents", [rows[6]])


def test_the_red_cell_indices_solve_from_their_specimen(source):
    """MCH = Hgb x 10 / RBC, MCV = Hct x 10 / RBC and MCHC = Hgb x 100 / Hct hold on the real demo to the reported
    precision, so any member of a triple beside the other two of its specimen is derivable (an impossible MCH of
    447.7 beside Hgb 12.4 and RBC 4.27 is 29.0); a specimen without the others computes nothing."""
    formulas = source.sql(
        """WITH s AS (SELECT specimen_id, max(valuenum) FILTER (WHERE itemid = 51222) AS hgb,
             max(valuenum) FILTER (WHERE itemid = 51279) AS rbc, max(valuenum) FILTER (WHERE itemid = 51221) AS hct,
             max(valuenum) FILTER (WHERE itemid = 51248) AS mch, max(valuenum) FILTER (WHERE itemid = 51250) AS mcv,
             max(valuenum) FILTER (WHERE itemid = 51249) AS mchc
           FROM labevents GROUP BY specimen_id)
           SELECT count(mch + hgb + rbc), count(*) FILTER (WHERE abs(mch - hgb * 10 / rbc) <= 0.6),
             count(mcv + hct + rbc), count(*) FILTER (WHERE abs(mcv - hct * 10 / rbc) <= 1.5),
             count(mchc + hgb + hct), count(*) FILTER (WHERE abs(mchc - hgb * 100 / hct) <= 0.6) FROM s"""
    ).fetchall()[0]
    for complete, agreeing in zip(formulas[::2], formulas[1::2], strict=True):
        assert complete > 1000 and agreeing >= 0.99 * complete
    rows = _rows(source, "SELECT * FROM labevents WHERE specimen_id = 85552203 ORDER BY labevent_id")
    members = {"MCH": 51248, "MCV": 51250, "MCHC": 51249, "Hemoglobin": 51222, "Hematocrit": 51221, "RBC": 51279}
    for label, itemid in members.items():
        (row,) = [r for r in rows if r["itemid"] == itemid]
        assert derivable(source, "labevents", [row]), label
        assert not derivable(source, "labevents", [{**row, "specimen_id": -1}]), label


def test_a_blood_pressure_sample_settles_a_conflicting_component():
    """Blind audit 27: a diastolic copy of 94 beside its sample's mean of 91 and systolic is settled by the sample
    (the mean lies between the two); the sample is the stay and charting time, and a component charted alone
    settles nothing. A removed diastolic is not computed from the other two (the mean is measured)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE d_items (itemid INT, label TEXT)")
    con.execute(
        "INSERT INTO d_items VALUES (1, 'Non Invasive Blood Pressure systolic'),"
        " (2, 'Non Invasive Blood Pressure diastolic'), (3, 'Non Invasive Blood Pressure mean')"
    )
    con.execute("CREATE TABLE chartevents (stay_id INT, charttime TIMESTAMP, itemid INT, valuenum DOUBLE)")
    con.execute(
        "INSERT INTO chartevents VALUES (7, '2150-01-01 08:00', 1, 128), (7, '2150-01-01 08:00', 2, 78),"
        " (7, '2150-01-01 08:00', 3, 91), (7, '2150-01-01 09:00', 2, 70), (7, '2150-01-01 09:00', 1, 120),"
        " (8, '2150-01-01 09:00', 3, 88)"
    )
    rows = _rows(con, "SELECT * FROM chartevents ORDER BY stay_id, charttime, itemid")
    assert derivable(con, "chartevents", [rows[1]], any_member=True)  # 08:00 diastolic, with its mean
    assert not derivable(con, "chartevents", [rows[1]])
    assert derivable(con, "chartevents", [rows[2]])  # the mean of its own sample's components
    assert not derivable(con, "chartevents", [rows[4]], any_member=True)  # 09:00: the mean was charted in stay 8


def test_a_conflicting_reading_takes_the_mic_a_real_reading_alike_has():
    """A copy of an S reading turned R carries the MIC real R readings of that organism and antibiotic have
    (the MIC would settle the conflict otherwise); a row without an MIC keeps none; no R reading alike, no copy."""
    from pipeline.noise.base import Rejected
    from pipeline.noise.subtypes.conflicting_duplicate import followers, record_of

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE microbiologyevents (microevent_id INT, org_name TEXT, ab_name TEXT, interpretation TEXT,"
        " dilution_text TEXT, dilution_comparison TEXT, dilution_value DOUBLE)"
    )
    con.execute(
        "INSERT INTO microbiologyevents VALUES (1, 'ESCHERICHIA COLI', 'TRIMETHOPRIM/SULFA', 'S', '<=1', '<=', 1),"
        " (2, 'ESCHERICHIA COLI', 'TRIMETHOPRIM/SULFA', 'R', '=>16', '=>', 16),"
        " (3, 'ESCHERICHIA COLI', 'TRIMETHOPRIM/SULFA', 'R', '=>16', '=>', 16),"
        " (4, 'ESCHERICHIA COLI', 'GENTAMICIN', 'S', '<=1', '<=', 1)"
    )
    record = record_of("microbiologyevents", "SELECT interpretation FROM microbiologyevents")
    rows = {row["microevent_id"]: row for row in _rows(con, "SELECT * FROM microbiologyevents")}
    assert followers(con, record, rows[1], "R") == {
        "dilution_text": "=>16",
        "dilution_comparison": "=>",
        "dilution_value": 16,
    }
    no_mic = {**rows[1], "dilution_text": None, "dilution_comparison": None, "dilution_value": None}
    assert followers(con, record, no_mic, "R") == {}
    with pytest.raises(Rejected, match="no_plausible_conflict"):
        followers(con, record, rows[4], "R")  # no gentamicin-resistant E. coli to take an MIC from


def test_an_icu_lab_charted_in_chartevents_is_witnessed():
    """A lab charted at its time under a chartevents Labs item of the same name (a bracketed qualifier aside)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE d_labitems (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_labitems VALUES (50902, 'Chloride'), (50909, 'Cortisol'), (50971, 'Potassium')")
    con.execute("CREATE TABLE d_items (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_items VALUES (220602, 'Chloride (serum)'), (227463, 'Cortisol'), (220045, 'Heart Rate')")
    con.execute("CREATE TABLE chartevents (subject_id INT, itemid INT, charttime TIMESTAMP)")
    con.execute("INSERT INTO chartevents VALUES (1, 220602, ?), (1, 227463, ?), (1, 220045, ?)", [T0, T0, T0])
    lab = {"subject_id": 1, "itemid": 50902, "charttime": T0 + dt.timedelta(minutes=20)}
    assert witnessed(con, "labevents", [lab])  # 'Chloride (serum)' charts the chloride
    assert witnessed(con, "labevents", [{**lab, "itemid": 50909}])
    assert not witnessed(con, "labevents", [{**lab, "itemid": 50971}])  # no potassium charted
    assert not witnessed(con, "labevents", [{**lab, "charttime": T0 + dt.timedelta(hours=3)}])  # charted hours apart
    assert not witnessed(con, "labevents", [{**lab, "subject_id": 2}])


@pytest.mark.parametrize(
    ("lab", "chart", "same"),
    [
        ("potassium, whole blood", "potassium (whole blood)", True),  # blind audit 22
        ("potassium", "potassium (serum)", True),
        ("creatinine, serum", "creatinine (serum)", True),
        ("bilirubin, total", "total bilirubin", True),
        ("calcium, total", "calcium non-ionized", False),
        ("potassium", "phosphorous", False),
        ("chloride, whole blood", "hco3 (serum)", False),
    ],
)
def test_one_concept_drops_a_qualifier_in_brackets_or_after_a_comma(lab, chart, same):
    assert one_concept(lab, chart) is same
    assert one_concept(chart, lab) is same


def test_a_whole_blood_lab_charted_with_a_bracketed_specimen_is_witnessed():
    """'Potassium, Whole Blood' in the labs is the chart's 'Potassium (whole blood)' at the same minute."""
    con = duckdb.connect()
    con.execute("CREATE TABLE d_labitems (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_labitems VALUES (50822, 'Potassium, Whole Blood'), (50821, 'pO2')")
    con.execute("CREATE TABLE d_items (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_items VALUES (227464, 'Potassium (whole blood)')")
    con.execute("CREATE TABLE chartevents (subject_id INT, itemid INT, charttime TIMESTAMP)")
    con.execute("INSERT INTO chartevents VALUES (1, 227464, ?)", [T0])
    lab = {"subject_id": 1, "itemid": 50822, "charttime": T0}
    assert witnessed(con, "labevents", [lab])
    assert not witnessed(con, "labevents", [{**lab, "itemid": 50821}])


def test_an_absolute_white_cell_count_is_derivable_from_the_count_and_the_differential():
    con = duckdb.connect()
    con.execute("CREATE TABLE d_labitems (itemid INT, label TEXT)")
    con.execute(
        "INSERT INTO d_labitems VALUES (1, 'Absolute Lymphocyte Count'), (2, 'White Blood Cells'), (3, 'Lymphocytes')"
    )
    con.execute("CREATE TABLE labevents (labevent_id INT, specimen_id INT, itemid INT, valuenum DOUBLE)")
    con.execute(
        "INSERT INTO labevents VALUES (1, 10, 1, 0.57), (2, 10, 2, 15.5), (3, 10, 3, 3.7), (4, 20, 1, 0.6), (5, 20, 2, 9.1)"
    )
    rows = {row["labevent_id"]: row for row in _rows(con, "SELECT * FROM labevents")}
    assert derivable(con, "labevents", [rows[1]])  # 15.5 K/uL x 3.7 %
    assert not derivable(con, "labevents", [rows[4]])  # no differential in its specimen


def test_a_blood_gas_saturation_is_settled_by_its_samples_po2():
    """Blind audit 33: an oxygen saturation copy of 89 beside 98 was settled by the same blood gas's pO2 of 254
    (the analyser calculates the saturation from it); a saturation without a pO2 in its specimen is not."""
    con = duckdb.connect()
    con.execute("CREATE TABLE d_labitems (itemid INT, label TEXT)")
    con.execute("INSERT INTO d_labitems VALUES (50817, 'Oxygen Saturation'), (50821, 'pO2'), (50820, 'pH')")
    con.execute("CREATE TABLE labevents (labevent_id INT, specimen_id INT, itemid INT, valuenum DOUBLE)")
    con.execute(
        "INSERT INTO labevents VALUES (1, 10, 50817, 98), (2, 10, 50821, 254), (3, 20, 50817, 71), (4, 20, 50820, 7.3)"
    )
    rows = {row["labevent_id"]: row for row in _rows(con, "SELECT * FROM labevents")}
    assert derivable(con, "labevents", [rows[1]], any_member=True)
    assert derivable(con, "labevents", [rows[2]], any_member=True)  # and a pO2 copy beside its saturation
    assert not derivable(con, "labevents", [rows[3]], any_member=True)  # a venous gas without a pO2


def test_companion_rules_name_real_columns_and_their_conditions_are_rules():
    """Blind audit 36 found a nulled susceptibility that kept its MIC of 1: an edit had moved the MIC companions
    under `companion_when`, where nothing read them. Each section holds the shape its reader expects."""
    from pipeline.noise.siblings import sibling_rules
    from pipeline.source.schema import load_schema

    schema, rules = load_schema(), sibling_rules()
    for table, columns in rules["companions"].items():
        for column, stating in columns.items():
            assert isinstance(stating, list) and {column, *stating} <= set(schema[table].column_names), table
    for table, columns in rules["companion_when"].items():
        for column, rule in columns.items():
            assert column in set().union(*rules["companions"][table].values()), (table, column)
            assert isinstance(rule, dict) and rule["table"] in schema and rule["match"], (table, column)
    assert rules["companions"]["microbiologyevents"]["interpretation"] == [
        "dilution_text",
        "dilution_comparison",
        "dilution_value",
    ]
