"""conflicting_duplicate (record level): a second row for the same record, with a different value.

One record = the rows sharing the table's group columns (`duplicates.yaml`: a lab's subject, specimen, item and
time; a chart value's stay, item and time; an admission's hadm_id...). The value is a measurement's number, or
the template's value column elsewhere. Patient scope abstains (an evidence row's record holds more than one
distinct value); population scope repairs by leaving out every conflicting record (all its rows).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import polars as pl

from pipeline.noise.base import NoiseSubtype, Rejected, register
from pipeline.noise.code_fit import fitting_codes, sex_ranges
from pipeline.noise.cohort import Cohort
from pipeline.noise.exclusion import reading_from
from pipeline.noise.fresh_ids import fresh_ids
from pipeline.noise.id_order import ID_ORDER, in_id_order
from pipeline.noise.measurements import item_precision, item_span, measurement_tables
from pipeline.noise.overlay import less_source_records, source_catalog
from pipeline.noise.patch import Patch, TablePatch
from pipeline.noise.rules import (
    Evidence,
    Rule,
    duplicate_rules,
    flagged_on_source,
    is_patient,
    left_out_a_few,
    pick,
    read_value_column,
    scoped_twin,
    table_evidence,
    time_shift,
)
from pipeline.noise.siblings import companions, kept_elsewhere, sibling_patch, states_too
from pipeline.templates.render import sql_literal

FACTORS = (1.1, 1.2, 1.25, 1.5)  # a numeric duplicate: the original times one of these


@dataclass(frozen=True)
class Record:
    """How rows of a table make one record: group columns, the conflicting value, an optional item filter."""

    table: str
    group: list[str]
    value: str
    item: str | None
    fresh_id: str | None
    alike: tuple[str, ...] = ()
    position: str | None = None  # a group column that only orders the encounter's rows (a code's seq_num)
    family: int | None = None  # a code's leading characters that name its family (an ICD category)
    named_by: dict | None = None  # a table that speaks to the value at one position (the DRG: the principal)
    settled: tuple = ()  # values the record states elsewhere too (a death: its time, flag and date of death)
    history: str | None = None  # the column naming whose other encounters a code recurs in (subject_id)
    lead: int | None = None  # the position of the encounter's principal code (seq_num 1)
    lead_chapters: dict | None = None  # {icd_version: chapter starts or prefix length}: a principal copy's chapter


def record_of(table: str | None, gold_sql: str) -> Record | None:
    if table is None:
        return None
    spec, facts = duplicate_rules().get(table), measurement_tables().get(table)
    if spec is None:
        return None
    if facts is not None:
        return Record(table, spec["group"], facts.number, facts.item, spec.get("fresh_id"))
    value = read_value_column(table, gold_sql)
    if not value:
        return None
    return Record(
        table,
        spec["group"],
        value,
        None,
        spec.get("fresh_id"),
        tuple(spec.get("alike", [])),
        spec.get("position"),
        spec.get("family"),
        spec.get("named_by"),
        tuple(spec.get("settled", {}).get(value, [])),
        spec.get("history"),
        spec.get("lead"),
        spec.get("lead_chapters"),
    )


def conflict_rule(record: Record, rows: Cohort) -> Rule:
    """True for a row whose record (group) holds more than one distinct value (a measurement: of the evidence's
    items)."""
    columns, value = ", ".join(record.group), record.value
    items = sorted(rows.distinct(record.item)) if record.item else []
    where = f" WHERE {record.item} IN ({', '.join(sql_literal(i) for i in items)})" if items else ""
    sql = (
        f"({columns}) IN (SELECT {columns} FROM {record.table}{where} GROUP BY ALL HAVING count(DISTINCT {value}) > 1)"
    )
    conflicting = pl.col(value).drop_nulls().n_unique().over(record.group) > 1
    expr = pl.all_horizontal([pl.col(c).is_not_null() for c in record.group]) & conflicting
    return Rule(sql, expr, pl.col(record.item).is_in(items) if record.item and items else None)


Centre = tuple[float, float]  # a population cohort's mean and median of the conflicting value


def cohort_centre(values: pl.Series) -> Centre | None:
    """The mean and median of a cohort's numeric values (None for other values)."""
    numbers = values.drop_nulls()
    if not numbers.dtype.is_numeric() or numbers.dtype == pl.Boolean or numbers.is_empty():
        return None
    return float(numbers.mean()), float(numbers.median())  # type: ignore[arg-type]


def toward_centre(value, candidate, centre: Centre | None) -> bool:
    """`candidate` lies between `value` and the cohort's centre (at or beyond its mean and median), or there is no
    centre to heed. Counting both copies of such a record then pulls a mean or median past the original's reading,
    outside every careful one; a copy on the far side leaves the careless answer between the readings keeping
    either copy (blind audit 32: 87.18 between 87.15 and 87.23, `naive_within_accepted_range`)."""
    if centre is None:
        return True
    low, high = min(centre), max(centre)
    return bool(high <= candidate < value if value > high else value < candidate <= low if value < low else False)


def other_value(con, record: Record, row: dict, rng, centre: Centre | None = None):
    """A different value of the same kind, written like the record's own: a number scaled (at its item's
    precision), a time shifted (not by a round offset), a code that fits the patient, another text of the column
    that real rows alike in `alike` columns carry (a route the same product is given by: LR is not given nasally)."""
    value = row[record.value]
    if isinstance(value, bool) or (isinstance(value, int) and record.value.endswith("_flag")):
        return type(value)(not value)  # a flag flips
    if isinstance(value, int):  # a grade, a severity, a count: another value the column's real rows carry
        return _other_text(con, record, row, rng, centre)
    if isinstance(value, float):
        changed = round(value * float(rng.choice(FACTORS)), 2)
        return changed if changed != value else value + 1
    if isinstance(value, dt.datetime):
        return value + time_shift(con, record.table, record.value, rng)
    return _other_text(con, record, row, rng)


def _other_text(con, record: Record, row: dict, rng, centre: Centre | None = None):
    others = _other_texts(con, record, row)
    if not others:
        raise Rejected("no_plausible_conflict")
    others = [other for other in others if toward_centre(row[record.value], other, centre)]
    if not others:
        raise Rejected("no_conflict_toward_the_cohort")
    return others[int(rng.integers(len(others)))]


def _other_texts(con, record: Record, row: dict) -> list:
    """Candidate other values: none of a family the encounter already carries at another position or at this one (a
    code listed twice in one admission, or beside another of its category, gives the copy away: blind audits 22, 23
    and 41).
    Rejected at a position another table speaks to, where the encounter has a row in it (a DRG is grouped on the
    principal diagnosis: it settles which copy is true)."""
    if _spoken_to(con, record, row):
        raise Rejected("value_named_elsewhere")
    if record.value == "icd_code" and record.table in sex_ranges():
        at = None  # at the principal position, a code real rows hold there (duplicates.yaml `lead`)
        if record.position is not None and record.lead is not None and row[record.position] == record.lead:
            at = {record.position: record.lead}
        found = fitting_codes(con, record.table, row["subject_id"], row["icd_version"], row["icd_code"], at)
        if at and record.lead_chapters:  # of the original's chapter, or the admission's story settles it
            starts = record.lead_chapters[row["icd_version"]]
            found = [code for code in found if chapter(starts, code) == chapter(starts, row["icd_code"])]
    else:
        alike = "".join(f" AND {c} = ?" for c in record.alike)
        found = [
            r[0]
            for r in con.execute(
                f"SELECT {record.value} FROM {record.table} "
                f"WHERE {record.value} IS NOT NULL AND {record.value} <> ?{alike} "
                f"GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 50",
                [row[record.value], *(row[c] for c in record.alike)],
            ).fetchall()
        ]
    # nor of the original's own category: a code one digit from it reads as a coding variant of one diagnosis, not a
    # second one (blind audit 41: 78062 postprocedural fever beside 78052 insomnia)
    taken = {_family(record, value) for value in {*_carried_elsewhere(con, record, row), row[record.value]}}
    found = [value for value in found if _family(record, value) not in taken and value not in record.settled]
    if record.history:  # as familiar from the patient's other encounters as the original, or the history settles it
        familiar = _recurring(con, record, row)
        found = [
            value
            for value in found
            if (_family(record, value) in familiar) == (_family(record, row[record.value]) in familiar)
        ]
    return found


def chapter(starts: list[str] | int, code: str) -> str:
    """The chapter of an ICD code: the last of the sorted chapter `starts` it does not precede, or its first
    `starts` characters (an ICD-10-PCS section and body system)."""
    if isinstance(starts, int):
        return code[:starts]
    return next((start for start in reversed(starts) if code[: len(start)] >= start), "")


def _family(record: Record, value):
    return value[: record.family] if record.family and isinstance(value, str) else value


def _spoken_to(con, record: Record, row: dict) -> bool:
    """The row lies at the position `named_by` speaks to, and the encounter has a row in that table."""
    named = record.named_by
    if not named or record.position is None or row[record.position] != named["at"]:
        return False
    encounter = [c for c in record.group if c != record.position]
    where = " AND ".join(f"{c} = ?" for c in encounter)
    sql = f"SELECT count(*) FROM {named['table']} WHERE {where}"
    return con.execute(sql, [row[c] for c in encounter]).fetchall()[0][0] > 0


def _recurring(con, record: Record, row: dict) -> set:
    """The value families the same `history` owner (the patient) carries in its other encounters."""
    encounter = [c for c in record.group if c != record.position]
    apart = " OR ".join(f"{c} IS DISTINCT FROM ?" for c in encounter)
    sql = f"SELECT DISTINCT {record.value} FROM {record.table} WHERE {record.history} = ? AND ({apart})"
    rows = con.execute(sql, [row[record.history], *(row[c] for c in encounter)]).fetchall()
    return {_family(record, value) for (value,) in rows}


def _carried_elsewhere(con, record: Record, row: dict) -> set:
    """The values of the row's encounter (its group but the position) at other positions."""
    if record.position is None:
        return set()
    encounter = [c for c in record.group if c != record.position]
    where = " AND ".join(f"{c} = ?" for c in encounter)
    sql = f"SELECT DISTINCT {record.value} FROM {record.table} WHERE {where} AND {record.position} <> ?"
    return {r[0] for r in con.execute(sql, [*(row[c] for c in encounter), row[record.position]]).fetchall()}


def followers(con, record: Record, row: dict, value) -> dict:
    """The columns that state `record.value` (duplicates.yaml `follow`), as the most frequent real row alike that
    carries `value` has them, so the copy agrees with itself (an R reading with a resistant MIC); the row's NULL
    columns stay NULL. Rejected when no real row alike has them (the copy's own columns would settle it)."""
    rule = duplicate_rules()[record.table].get("follow", {}).get(record.value)
    columns = [c for c in (rule or {}).get("columns", []) if row[c] is not None]
    if not columns:
        return {}
    alike = "".join(f" AND {c} = ?" for c in rule["alike"])
    listed, present = ", ".join(columns), " AND ".join(f"{c} IS NOT NULL" for c in columns)
    found = con.execute(
        f"SELECT {listed} FROM {record.table} WHERE {record.value} = ?{alike} AND {present} "
        f"GROUP BY ALL ORDER BY count(*) DESC, {listed} LIMIT 1",
        [value, *(row[c] for c in rule["alike"])],
    ).fetchall()
    if not found:
        raise Rejected("no_plausible_conflict")
    return dict(zip(columns, found[0], strict=True))


def measured_other(con, ev: Evidence, row: dict, rng, centre: Centre | None = None) -> dict:
    """A measurement's conflicting number and text, at the precision its item's real rows use, and inside the
    range its real readings take (`item_span`): both rows must be believable, or the conflict resolves itself.
    A population copy lies toward the cohort's `centre` (`toward_centre`)."""
    facts = ev.measurement
    precision, (low, high) = item_precision(con, facts, row[facts.item]), item_span(con, facts, row[facts.item])
    value = precision.number_of(row[facts.number])
    scaled = [value * f for f in FACTORS] + [value / f for f in FACTORS]
    believable = [
        candidate
        for candidate in (precision.number_of(scaled[i]) for i in rng.permutation(len(scaled)))
        if candidate != value and low <= candidate <= high
    ]
    if not believable:
        raise Rejected("no_plausible_conflict")
    toward = [candidate for candidate in believable if toward_centre(value, candidate, centre)]
    if not toward:
        raise Rejected("no_conflict_toward_the_cohort")
    text = {facts.text: precision.text_of(toward[0])} if facts.text else {}
    return {facts.number: toward[0], **text, **facts.flagged(row, toward[0])}


def conflicting_copies(
    con, ev: Evidence, record: Record, rows: list[dict], rng, centre: Centre | None = None
) -> list[dict]:
    """The rows again, each with a different value (a measurement's text follows its number; the companions that
    state the same value follow it, siblings.yaml: a stay's last unit where it is its first; a text value the
    columns that state it: `follow` in duplicates.yaml)."""
    copies = []
    for row in rows:
        if ev.facts:
            changed = measured_other(con, ev, row, rng, centre)
            number = ev.facts.number
            # a companion that states the same number (a bolus's total and original amount) states the copy's
            changed |= {c: changed[number] for c in companions(ev.table, number) if row.get(c) == row[number]}
        else:
            if row[record.value] in record.settled:
                raise Rejected("value_settled_elsewhere")  # the record states it again (a death: its time, the dod)
            value = other_value(con, record, row, rng, centre)
            changed = {record.value: value, **followers(con, record, row, value)}
            # a column of the row that states the same value states the copy's (a stay of one unit ends in it)
            changed |= {
                c: value
                for c in companions(ev.table, record.value)
                if row.get(c) == row[record.value] and states_too(con, ev.table, c, row)
            }
        copies.append({**row, **changed})
    if record.fresh_id and ev.table not in ID_ORDER:  # else the copy keeps its original's id until in_id_order
        for copy, new_id in zip(copies, fresh_ids(con, ev.table, record.fresh_id, rows, rng), strict=True):
            copy[record.fresh_id] = new_id
    return copies


@register
class ConflictingDuplicate(NoiseSubtype):
    name = "conflicting_duplicate"
    level = "record"
    requires = (
        "evidence in a table with duplicate rules (duplicates.yaml) whose record the gold SQL reads, and its "
        "position (seq_num) where the table has one"
    )
    version = 19  # 19: no copy of a red cell index, hemoglobin, hematocrit or red count beside the two others of
    # its formula (siblings.yaml derivations: the formula says which copy is true)
    # 18: a dose copy takes the dispensed amount real orders of its product carry at that dose
    # (duplicates.yaml `follow`: blind audit 41 settled an 80 UNIT insulin copy by the 0.015 VIAL it kept); a code's
    # copy is of another category than the original (blind audit 41: 78062 beside 78052, a one-digit variant)
    # 17: a lab or microbiology copy is numbered beside its original, the patient's later rows making
    # room (id_order.py; blind audits 38-40 sorted copies out by their highest id, or by a reused microevent_id); a
    # susceptibility is its specimen, test, organism, isolate and antibiotic; no organism conflicts (duplicates.yaml)
    # 16: a copy of a principal code is of the original's ICD chapter (duplicates.yaml
    # `lead_chapters`; blind audit 34: brain metastases beside a psychosis in a patient without cancer); no abstention
    # where a yes stays recorded (verify.py `yes_still_recorded`: an R beside its S copy); a stay copy's last unit
    # follows its first only for a stay of one transfer (siblings.yaml `companion_when`: blind audit 35)
    # 15: an order's copy is added once (its own-table sibling rule no longer copies it again); a
    # population copy of a number lies toward the cohort's centre, so counting both copies moves the answer past every
    # careful reading (`toward_centre`; blind audit 32: 87.18 between the one-copy readings 87.15 and 87.23); nor a
    # susceptibility its panel implies by the row's shape (siblings.yaml `panels` `shape`); at patient scope not a
    # blood gas's saturation or pO2 beside the other (derivations: blind audit 33 settled 98 vs 89 by a pO2 of 254)
    # 14: a copy of a principal code is a code some admission holds as its principal (duplicates.yaml
    # `lead`; blind audit 28: 'Long-term use of insulin' beside a psychosis); not a stop time the admission's other
    # orders discontinued at discharge share (siblings.yaml `implied`); not a susceptibility its isolate's other
    # results imply (`panels`: blind audit 30 settled an S copy of erythromycin R by the isolate's clindamycin R);
    # an order's other route or dose is one its product's real orders carry (blind audit 31: an IM tablet); a
    # population conflict touches less than a third of the cohort's rows (`cohort_mostly_changed`, blind audit 31)
    # 13: at patient scope, not a result of a relation its sample completes (blind audit 27: a
    # diastolic copy of 94 above its sample's mean of 91; a sodium copy beside its anion gap, chloride, bicarbonate)
    # 12: a column that states the value in the same row follows the copy (blind audit 26: a stay
    # of one transfer, SICU to SICU, whose copy began in another unit but still ended in the SICU)
    # 11: nor one of a category it carries; no copy of the principal code of an admission with a DRG;
    # no death copied or contradicted (`settled`: blind audit 24 settled a DIED copy by its expire flag of 0);
    # not a route the order's pharmacy type implies (siblings.yaml `implied`); a code as familiar from the patient's
    # other admissions as the original (`history`: blind audit 24 read a pseudocyst coded in every other admission)
    # (blind audit 23: an AF copy beside another AF code, under a DRG of a postoperative infection)
    # 10: a code's other value is none the encounter carries at another position (blind audit 22)
    # 9: an ICU stay conflicts on its unit, not on its end (the transfers and los keep it); a copy's
    # companions that state its number follow it (blind audit 21: a 583 mL bolus copy kept its total of 700)
    # 8: not a result its sample computes (an anion gap from its electrolytes); the copy's columns that
    # state its value follow it (duplicates.yaml `follow`: an R reading takes a resistant MIC, blind audit 16; an APR
    # severity its usual mortality risk, blind audit 17)
    # 2: the Python rule counts conflicts among the evidence items only, as the SQL rule does
    # 3: no tells: numbers at the item's precision, non-round time shifts, sex-fitting codes, ids beside the patient's
    # (a code's second row at its position conflicts only for a question that reads the position);
    # 4: a prescription record is its pharmacy_id, drug_type and drug (an order's base and main rows differ);
    # 5: a measurement's second value lies inside the item's real range (up or down), or the candidate is rejected
    # 6: a sibling row that keeps the same fact (an order's pharmacy row: its times and route) gets the conflicting
    # copy too, so the conflict is in the record, not only in one table (siblings.yaml); a text's other value is one
    # that rows alike carry (`alike`: a route of the same drug), or none is made (no_plausible_conflict);
    # 7: an integer outside the measurement tables (a DRG severity) takes another value its column holds (1-4), not
    # a scaled one (a severity of 5 resolves itself: a blind audit)

    def applies(self, template):
        table = template.evidence_table
        position = duplicate_rules().get(table or "", {}).get("position")
        reads_position = position is None or re.search(rf"\b{position}\b", template.gold_sql) is not None
        return super().applies(template) and reads_position and record_of(table, template.gold_sql) is not None

    def make(self, con, task, template, rng):
        ev = table_evidence(con, task)
        record = record_of(ev.table, task.gold_sql)
        if record is None:
            raise Rejected("no_duplicate_rule")
        if ev.rows.null_count(record.value):
            raise Rejected("evidence_not_clean")
        rule = conflict_rule(record, ev.rows)
        if flagged_on_source(con, ev, rule):
            raise Rejected("evidence_already_conflicting")
        originals = pick(ev.rows, is_patient(template), rng)
        flag = record.value.endswith("_flag")
        centre = None if is_patient(template) or flag else cohort_centre(ev.rows.values(record.value))
        if centre is not None:  # the subject's rows a copy toward the centre can conflict with
            originals = [row for row in originals if not min(centre) <= row[record.value] <= max(centre)]
            if not originals:
                raise Rejected("no_conflict_toward_the_cohort")
        if not is_patient(template):
            left_out_a_few(originals, ev.rows)
        # another table or the sample settles which copy is true; a population label accepts the true reading anyway
        kept_elsewhere(con, ev.table, originals, record.value, conflict=is_patient(template))
        copies = conflicting_copies(con, ev, record, originals, rng, centre)
        patch = Patch(tables={ev.table: TablePatch(key_columns=ev.key_columns, add=copies)})
        patch = sibling_patch(con, ev.table, originals, copies, patch, replace=False)  # the order's pharmacy row too
        patch = in_id_order(con, patch)  # a lab copy's id beside its original's, not the patient's highest
        twin = scoped_twin(task, template, ev, patch, rule)
        if not is_patient(template):  # leaving the conflicting records out is one reading; keeping either copy too
            twin.accepts_clean, twin.readings = True, (copies_only_sql(con, task.gold_sql, record, originals),)
        return twin


def copies_only_sql(con, gold_sql: str, record: Record, originals: list[dict]) -> str:
    """The gold SQL reading each conflicting record by its added copy alone (its source rows left out)."""
    source = f'"{source_catalog(con)}".main.{record.table}'
    return reading_from(gold_sql, {record.table: less_source_records(record.table, source, record.group, originals)})
