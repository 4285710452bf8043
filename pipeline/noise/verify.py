"""Verify a noisy twin by execution: keep a pair only when its outputs diverge exactly as the contract says."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import duckdb
import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict

from pipeline.db import scalar
from pipeline.noise.base import NoiseSubtype, NoisyTwin, Rejected
from pipeline.noise.cohort import drop_cohort
from pipeline.noise.evidence import as_a_set, impossible_among, keyed_rows
from pipeline.noise.measurements import has_plausible_ranges
from pipeline.noise.overlay import overlay, overlay_diff, polars_overlay
from pipeline.noise.patch import Patch
from pipeline.noise.recovery import check_recovery
from pipeline.noise.recovery.case import Case
from pipeline.templates.answers import (
    AnswerShapeError,
    AnswerValue,
    answers_agree,
    canonical_answer,
    first_reading,
    is_empty,
)
from pipeline.templates.instantiate import CleanTask, typed_slots
from pipeline.templates.matching import between_readings, scores_as
from pipeline.templates.programs import Tables, run_sql, tables_for
from pipeline.templates.render import render
from pipeline.templates.spec import AnswerType, Template

# Words that would tell the agent what the noise is; a noisy question may not add any of them.
REVEALING = re.compile(
    r"\b(missing|null|empty|duplicat\w*|conflict\w*|implausible|impossible|invalid|error|placeholder|wrong unit"
    r"|nonexist\w*)\b",
    re.I,
)


class NoisePair(BaseModel):
    """A verified Clean-Noise pair: the clean task, its noisy twin and what a careful and a naive reader say."""

    model_config = ConfigDict(extra="forbid")
    pair_id: str
    subtype: str
    subtype_version: int
    level: str
    contract: str
    clean: CleanTask
    noisy_question: str
    noisy_slots: dict[str, Any]
    patch: Patch
    expected: AnswerValue
    reference_sql: str
    naive_answer: AnswerValue | None
    trap: bool  # the naive reading answers, and wrongly
    inspect: dict[str, Any]
    accepted: list[AnswerValue] = []  # other answers a careful analyst may give (NoisyTwin.readings, accepts_clean)
    answer_unit: str | None = None  # the noisy task's answer unit where the question names another concept


def _answer(frame_fn, template: Template, reason: str) -> AnswerValue:
    try:
        return canonical_answer(frame_fn(), template.spec.answer)
    except (duckdb.Error, pl.exceptions.PolarsError, AnswerShapeError, ValueError, TypeError) as exc:
        raise Rejected(f"{reason}: {type(exc).__name__}") from exc


def _same(a: AnswerValue, b: AnswerValue, template: Template) -> bool:
    if is_empty(a) or is_empty(b):
        return is_empty(a) and is_empty(b)
    return answers_agree(a, b, template.spec.answer)


def _still_answers_yes(naive: AnswerValue | None, clean: AnswerValue, template: Template) -> bool:
    """A boolean question the careless reading of the noisy record answers yes, as the clean record does."""
    if naive is None or template.spec.answer.type is not AnswerType.boolean or naive.value is not True:
        return False
    return _reads_alike(naive, clean, template)


def _reads_alike(naive: AnswerValue, expected: AnswerValue, template: Template) -> bool:
    """The verifier would pass the careless reading as `expected` (the one answer matcher: asked records only,
    text and times normalised). The answer format fixes the unit, so a unit the rows happen to carry (a
    respiratory rate in 'bpm') does not make another answer (a blind audit)."""
    return scores_as(naive.model_copy(update={"unit": expected.unit}), expected, template.spec.answer)


def _check_references(
    con, tables: Tables, twin: NoisyTwin, template: Template, slots: dict, expected: AnswerValue | None, where: str
) -> AnswerValue:
    """Both reference programs must give `expected`; with None (a repair) they must agree on an answer."""
    expected = _check_reference_sql(con, twin, template, expected, where)
    _check_reference_python(tables, twin, template, slots, expected, where)
    return expected


def _check_reference_sql(con, twin: NoisyTwin, template: Template, expected: AnswerValue | None, where: str):
    """The reference SQL's answer, which must be `expected` (None, a repair: any answer)."""
    sql_answer = _answer(lambda: con.sql(twin.reference_sql).pl(), template, f"reference_sql_error_{where}")
    if expected is None:
        if is_empty(sql_answer):
            raise Rejected("repair_has_no_answer")
        expected = sql_answer
    if not _same(sql_answer, expected, template):
        raise Rejected(f"reference_sql_differs_{where}")
    return expected


def _check_reference_python(tables: Tables, twin: NoisyTwin, template: Template, slots: dict, expected, where: str):
    python_answer = _answer(
        lambda: twin.reference_python(tables, dict(slots)), template, f"reference_python_error_{where}"
    )
    if not _same(python_answer, expected, template):
        raise Rejected(f"reference_python_differs_{where}")


def _naive_answer(con, template: Template, slots: dict) -> AnswerValue | None:
    """The clean gold SQL on the noisy data, read carelessly (`first_reading`: of two rows for one value, the
    first). One thread: a duplicate that ties with its original under the gold's ORDER BY ... LIMIT 1 is then
    resolved the same way on every run (a parallel sort may pick either)."""
    threads = scalar(con, "SELECT current_setting('threads')")
    con.execute("SET threads = 1")
    try:
        return first_reading(run_sql(con, template.gold_sql, slots), template.spec.answer)
    except (duckdb.Error, AnswerShapeError):
        return None
    finally:
        con.execute(f"SET threads = {int(threads)}")


def _finds_nothing(answer: AnswerValue | None, template: Template) -> bool:
    """No answer, or a count of nothing (a count template says 0 where the rows are gone)."""
    if answer is None:
        return False
    return is_empty(answer) or (template.spec.answer.type is AnswerType.count and answer.value == 0)


def _check_diff(con, patch: Patch, matched: dict[str, int]) -> None:
    for table in patch.touched_tables:
        removed, added = overlay_diff(con, table, patch.tables[table])
        renumbered = patch.tables[table].renumbered
        if (removed, added) != (matched[table] + renumbered, len(patch.tables[table].add) + renumbered):
            raise Rejected("overlay_differs_beyond_patch")
        if removed == 0 and added == 0:
            raise Rejected("patch_changes_nothing")


def _matched_rows(con, patch: Patch) -> dict[str, int]:
    """Source rows each table patch hides (before the overlay exists)."""
    counts = {}
    for table in patch.touched_tables:
        keys = patch.tables[table].hide
        if not keys:
            counts[table] = 0
            continue
        with keyed_rows(con, table, keys) as rows:
            counts[table] = scalar(con, f"SELECT count(*) FROM ({rows()})")
    return counts


def _check_changed(subtype: NoiseSubtype, contract: str, naive, expected: AnswerValue, template: Template) -> None:
    """The careless reading of the noisy record must change the way the sub-type intends (checked before the
    costlier recovery and readings: most value-noise candidates that fail, fail here)."""
    if subtype.noisy_data_unanswerable and not _finds_nothing(naive, template):
        raise Rejected("noisy_data_still_answers")
    if contract == "repair" and naive is not None and _reads_alike(naive, expected, template):
        raise Rejected("no_divergence")  # the noise did not change what a naive reading answers


def _check_not_the_truth(contract: str, naive, clean: AnswerValue, template: Template) -> None:
    """The careless reading must not be the true answer that a label would punish."""
    if contract == "repair" and naive is not None and _reads_alike(naive, clean, template):
        # the careless reading still reports the true answer, so a repair away from it punishes the truth (blind
        # audit 28: a masked susceptibility that was S, an impossible diastolic whose original was also over 110)
        raise Rejected("naive_gives_the_clean_answer")
    if contract == "abstain" and _still_answers_yes(naive, clean, template):
        # every boolean question asks whether any row holds (bool_or): a yes the noisy record still shows by a row
        # is the true answer, not a guess (blind audit 34: an R ceftriaxone result beside an added S copy)
        raise Rejected("yes_still_recorded")


def verify_pair(
    con: duckdb.DuckDBPyConnection,
    tables: Tables,
    task: CleanTask,
    template: Template,
    subtype: NoiseSubtype,
    seed: int,
    evidence_possible: bool = False,
) -> NoisePair:
    """Build and verify one pair on the source `con`; raise Rejected(reason) when any check fails.
    `evidence_possible`: the caller has found the task's clean evidence free of impossible numbers (once for all
    its sub-types)."""
    rng = np.random.default_rng(
        [seed, int(hashlib.sha256(f"{task.task_id}/{subtype.name}".encode()).hexdigest()[:12], 16)]
    )
    if not evidence_possible and impossible_evidence(con, task):
        raise Rejected("clean_evidence_impossible")  # the clean record needs mending before it answers
    try:
        twin = subtype.make(con, task, template, rng)
    finally:
        drop_cohort(con)  # the evidence rows it drew from
    question = render(template.spec.questions[task.phrasing], {**task.slots, **twin.patch.slots}).strip()
    if len(REVEALING.findall(question)) > len(REVEALING.findall(task.question)):
        raise Rejected("question_reveals_noise")
    slots = typed_slots(template, {**task.slots, **twin.patch.slots})
    tables = tables_for(tables, template, slots)  # patient questions: that patient's rows only
    matched = _matched_rows(con, twin.patch)
    # the cheap checks first: a rejection spends no query it does not need (most candidates that fail, fail at
    # `_check_changed`, before the reference programs' polars side and their run on the clean data); the
    # overlay's own check comes last
    with overlay(con, twin.patch, ordered=False):  # no whole-table sort; each patient's rows in record order
        expected = _check_reference_sql(con, twin, template, twin.expected, "on_noisy")
        naive = _naive_answer(con, template, slots)
        _check_changed(subtype, twin.contract, naive, expected, template)
        noisy_tables = polars_overlay(tables, twin.patch, ordered=False)
        _check_reference_python(noisy_tables, twin, template, slots, expected, "on_noisy")
        check_recovery(con, Case(template, slots, twin.patch, twin.contract, expected, naive))  # careful analyst
        accepted = _accepted(con, twin, template, task.answer, expected)
        if naive is not None and any(_reads_alike(naive, other, template) for other in accepted):
            raise Rejected("naive_is_a_defensible_reading")  # the careless answer is one a careful analyst may give
        if naive is not None and between_readings(naive, [expected, *accepted], template.spec.answer):
            # between two answers a careful analyst may give (blind audit 32: a population mean counting both copies
            # of its conflicting records, 87.18, between the readings keeping either copy, 87.15 and 87.23)
            raise Rejected("naive_within_accepted_range")
        _check_not_the_truth(twin.contract, naive, task.answer, template)
        _check_diff(con, twin.patch, matched)
    if twin.patch.tables:  # the guarded reference must give the clean answer on the clean data
        _check_references(con, tables, twin, template, slots, task.answer, "on_clean")
    trap = naive is not None and not is_empty(naive) and not _reads_alike(naive, expected, template)
    return NoisePair(
        pair_id=f"{task.task_id}-{subtype.name}",
        subtype=subtype.name,
        subtype_version=subtype.version,
        level=subtype.level,
        contract=twin.contract,
        clean=task,
        noisy_question=question,
        noisy_slots={**task.slots, **twin.patch.slots},
        patch=twin.patch,
        expected=expected,
        reference_sql=twin.reference_sql,
        naive_answer=naive,
        trap=trap,
        inspect=twin.inspect,
        accepted=accepted,
        answer_unit=twin.answer_unit,
    )


def impossible_evidence(con, task: CleanTask) -> bool:
    """The task's evidence rows (one measurement table) already hold an impossible number in the clean source:
    found by its evidence query on the source, with no row brought into Python."""
    if not has_plausible_ranges(task.evidence[0]["table_name"]):
        return False  # no measurement table with ranges (and so none, or more than one table)
    evidence = as_a_set(task.evidence_sql)
    tables = con.execute(f"SELECT DISTINCT table_name FROM ({evidence})").fetchall()
    if len(tables) != 1:
        return False
    columns = [c for c in task.evidence[0] if c != "table_name"]
    return impossible_among(con, tables[0][0], f"SELECT {', '.join(columns)} FROM ({evidence})", columns)


def _accepted(con, twin: NoisyTwin, template: Template, clean: AnswerValue, expected: AnswerValue) -> list:
    """The other definite answers a careful analyst may give: the twin's readings on the overlay, and the clean
    answer where the twin accepts it; none equal to `expected` or to each other."""
    found = [clean] if twin.accepts_clean else []
    for sql in twin.readings:
        found.append(_answer(lambda sql=sql: con.sql(sql).pl(), template, "reading_error"))
    found = [answer for answer in found if not is_empty(answer)]
    found += [answer for answer in twin.also_accepted if answer.value is not None]  # "none" ([]) may be one
    accepted: list[AnswerValue] = []
    for answer in found:  # "none" is not an abstention here: the verifier scores [] as an answer
        if not any(scores_as(answer, a, template.spec.answer) for a in [expected, *accepted]):
            accepted.append(answer)
    return accepted
