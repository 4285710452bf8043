"""Instantiate clean tasks: sample slots that exist, run gold SQL and gold Python, keep only agreeing answers."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict

from pipeline.atomic import atomic_output
from pipeline.concepts import concept_key, display_value
from pipeline.db import database_path, open_source, scalar
from pipeline.templates.answers import AnswerShapeError, AnswerValue, answers_agree, canonical_answer, is_empty
from pipeline.templates.programs import Tables, load_python_program, run_sql, tables_for
from pipeline.templates.render import render, render_sampler, render_sql
from pipeline.templates.spec import Template
from pipeline.workers import spawn_pool

OVERSAMPLE = 4  # candidates tried per wanted task, so that drops can be made up
# Evidence rows a task carries inline; a population question's can be every result of a lab in the database (40,000
# rows a task at 10,000 synthetic patients), so beyond this its evidence_sql is run again where all are needed.
EVIDENCE_INLINE_MAX = 1_000


class CleanTask(BaseModel):
    """One instantiated clean task: question, slots, gold SQL, both answers and the evidence keys."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    template_id: str
    template_version: int
    intent: str
    scope: str
    question: str
    phrasing: int = 0  # index of the question phrasing used (the noisy twin reuses it)
    slots: dict[str, Any]
    gold_sql: str
    answer: AnswerValue
    python_answer: AnswerValue
    evidence_sql: str  # the evidence query rendered with the slots: on the source it returns `evidence`
    evidence: list[dict[str, Any]]  # its first EVIDENCE_INLINE_MAX rows (sorted); `task_evidence` gives them all
    evidence_rows: int | None = None  # how many rows evidence_sql returns (None: all of them are inline)


class InstantiationReport(BaseModel):
    """Kept tasks per template and every dropped candidate counted by template and reason."""

    model_config = ConfigDict(extra="forbid")
    kept: dict[str, int] = {}
    dropped: dict[str, dict[str, int]] = {}
    shortfall: dict[str, int] = {}  # tasks wanted but not found (too few valid candidates)
    compared: int = 0  # candidates where both programs produced an answer
    agreed: int = 0

    @property
    def agreement_rate(self) -> float:
        return self.agreed / self.compared if self.compared else 1.0

    def take(self, template_id: str, kept: int, part: InstantiationReport) -> None:
        """Count a template's draw (`kept` tasks; `part`, the report of that draw alone)."""
        self.kept[template_id] = kept
        self.dropped[template_id] = part.dropped.get(template_id, {})
        self.compared += part.compared
        self.agreed += part.agreed


def _typed(value: Any, slot_type: str) -> Any:
    if slot_type == "datetime" and isinstance(value, str):
        return dt.datetime.fromisoformat(value)
    if slot_type == "date" and isinstance(value, str):
        return dt.date.fromisoformat(value)
    return value


def typed_slots(template: Template, slots: dict[str, Any]) -> dict[str, Any]:
    """JSON slot values back to their slot types (datetimes and dates from ISO text)."""
    return {name: _typed(value, template.spec.slots[name].type) for name, value in slots.items()}


def _jsonable(value: Any) -> Any:
    return (
        value.isoformat(sep=" ")
        if isinstance(value, dt.datetime)
        else value.isoformat()
        if isinstance(value, dt.date)
        else value
    )


def template_rng(template_id: str, seed: int) -> np.random.Generator:
    """A generator that depends only on the seed and the template id (stable across runs and machines)."""
    digest = int.from_bytes(hashlib.sha256(template_id.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, digest])


def sample_slots(
    con: duckdb.DuckDBPyConnection, template: Template, count: int, rng: np.random.Generator
) -> list[dict]:
    """Up to `count` candidate slot rows drawn without replacement from the sampler's distinct rows in sorted order,
    one per concept (`one_per_concept`). The candidates stay in DuckDB, numbered in a temporary table (which spills
    to disk under the memory limit), and only the drawn rows come into Python: a sampler can give tens of millions
    (every lab result at 10,000 patients; every patient x diagnosis pair took 3.8 GB as a frame)."""
    names = ", ".join(_quoted(name) for name in template.spec.slots)
    sampler = render_sampler(template.spec.sampler)
    try:
        con.execute(  # in sorted order (DuckDB keeps a query's order on insertion), so rowid numbers them
            f"CREATE OR REPLACE TEMP TABLE {_CANDIDATES} AS SELECT DISTINCT {names} FROM ({sampler}) ORDER BY ALL"
        )
        candidates = one_per_concept(con, template, _CANDIDATES)
        total = scalar(con, f"SELECT count(*) FROM {candidates}")
        picks = [int(i) for i in rng.choice(total, size=min(count, total), replace=False)] if total else []
        drawn = con.sql(
            f"SELECT rowid AS __i, * FROM {candidates} WHERE rowid IN ({', '.join(map(str, picks)) or 'NULL'})"
        ).pl()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_CANDIDATES}; DROP TABLE IF EXISTS {_KEPT}")
    position = {i: k for k, i in enumerate(drawn["__i"].to_list())}
    drawn = drawn.drop("__i")
    return [drawn.row(position[i], named=True) for i in picks]


_CANDIDATES, _KEPT = "__slot_candidates", "__slot_kept"  # temporary tables of one template's numbered candidates


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def one_per_concept(con: duckdb.DuckDBPyConnection, template: Template, candidates: str) -> str:
    """The table of the candidates with one row per concept: variants of a name ('LaMOTrigine', 'LamoTRIgine') are
    one candidate, shown as the first in the candidates' order shows it, in that order (numbered by rowid). Each
    distinct name is rewritten once, in Python (`display_value`), not once per row. Without a concept slot (a
    vocabulary slot of text), the candidates' own table."""
    slots = template.spec.slots
    relation = con.sql(f"FROM {candidates}")
    types = {column: str(kind) for column, kind in zip(relation.columns, relation.types, strict=True)}
    concepts = [name for name in slots if slots[name].vocabulary and types[name] == "VARCHAR"]
    if not concepts:
        return candidates
    shown, keys, joins = {}, [], []
    for k, name in enumerate(concepts):
        distinct = con.sql(f"SELECT DISTINCT {_quoted(name)} FROM {candidates} WHERE {_quoted(name)} IS NOT NULL")
        values = [row[0] for row in distinct.fetchall()]
        forms = [display_value(slots[name].vocabulary, value) for value in values]
        con.register(
            f"__forms{k}",
            pl.DataFrame(
                {"name": values, "shown": forms, "key": [concept_key(form) for form in forms]},
                schema={"name": pl.String, "shown": pl.String, "key": pl.String},
            ),
        )
        joins.append(f"LEFT JOIN __forms{k} f{k} ON f{k}.name = c.{_quoted(name)}")
        shown[name] = f"f{k}.shown"
        keys.append(f"f{k}.key")
    columns = ", ".join(f"{shown.get(name, 'c.' + _quoted(name))} AS {_quoted(name)}" for name in slots)
    same = ", ".join(keys + [f"c.{_quoted(name)}" for name in slots if name not in shown])
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {_KEPT} AS SELECT * EXCLUDE (__first, __was) FROM (SELECT {columns},"
            f" c.rowid AS __was, row_number() OVER (PARTITION BY {same} ORDER BY c.rowid) AS __first"
            f" FROM {candidates} c {' '.join(joins)}) WHERE __first = 1 ORDER BY __was"
        )
    finally:
        for k in range(len(concepts)):
            con.unregister(f"__forms{k}")
    return _KEPT


def task_id(template: Template, slots: dict[str, Any]) -> str:
    payload = json.dumps({k: _jsonable(v) for k, v in slots.items()}, sort_keys=True, default=str)
    return f"{template.id}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def _attempt(con, tables, template, gold_python, slots, report_drop) -> CleanTask | None:
    spec = template.spec
    try:
        sql_answer = canonical_answer(run_sql(con, template.gold_sql, slots), spec.answer)
    except (duckdb.Error, AnswerShapeError) as exc:
        return report_drop(f"sql_error: {type(exc).__name__}")
    try:
        python_answer = canonical_answer(gold_python(tables_for(tables, template, slots), dict(slots)), spec.answer)
    except Exception as exc:  # noqa: BLE001 - any failure of the program is a counted drop reason
        return report_drop(f"python_error: {type(exc).__name__}")
    if is_empty(sql_answer) and is_empty(python_answer):
        return report_drop("empty_answer")
    report_drop.compared()
    if not answers_agree(sql_answer, python_answer, spec.answer):
        return report_drop("sql_python_disagree")
    report_drop.agreed()
    evidence_sql = render_sql(template.evidence_sql, slots).strip()
    evidence = con.sql(f"SELECT * FROM ({evidence_sql}) ORDER BY ALL").pl()
    if evidence.is_empty():
        return report_drop("no_evidence")
    return CleanTask(
        task_id=task_id(template, slots),
        template_id=template.id,
        template_version=spec.version,
        intent=spec.intent,
        scope=spec.scope.value,
        question="",
        slots={k: _jsonable(v) for k, v in slots.items()},
        gold_sql=render_sql(template.gold_sql, slots).strip(),
        answer=sql_answer,
        python_answer=python_answer,
        evidence_sql=evidence_sql,
        evidence=jsonable_rows(evidence.head(EVIDENCE_INLINE_MAX)),
        evidence_rows=evidence.height,
    )


def jsonable_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts with times and dates as ISO text, as `_jsonable` writes them (the text is made
    column by column in polars: a population question's evidence can be 400,000 rows)."""
    texts = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if dtype == pl.Date:
            texts.append(column.dt.strftime("%Y-%m-%d"))
        elif isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
            whole = column.dt.strftime("%Y-%m-%d %H:%M:%S")
            texts.append(
                pl.when(column.dt.microsecond() == 0).then(whole).otherwise(whole + column.dt.strftime(".%6f"))
            )
    return frame.with_columns(texts).to_dicts() if texts else frame.to_dicts()


class _DropCounter:
    """Counts drops for one template; also counts compared/agreed candidates."""

    def __init__(self, report: InstantiationReport, template_id: str):
        self.report, self.counts = report, report.dropped.setdefault(template_id, {})

    def __call__(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        return None

    def compared(self) -> None:
        self.report.compared += 1

    def agreed(self) -> None:
        self.report.agreed += 1


def instantiate(
    con: duckdb.DuckDBPyConnection,
    templates: list[Template],
    per_template: int,
    seed: int,
    on_template: Callable[[Template, int], None] | None = None,
    workers: int = 1,
    snapshot: Path | None = None,
) -> tuple[list[CleanTask], InstantiationReport]:
    """Up to `per_template` agreeing tasks per template; everything dropped is counted by reason. With `workers`
    > 1, templates are instantiated in worker processes (each draws from its own seeded generator, so the tasks
    and the report are the same). `snapshot`: the source's Parquet snapshot (`Tables`)."""
    report, tasks = InstantiationReport(), []
    results = _per_template(con, templates, per_template, seed, workers, snapshot)
    for template, (kept, part) in zip(templates, results, strict=True):
        report.take(template.id, len(kept), part)
        if len(kept) < per_template:
            report.shortfall[template.id] = per_template - len(kept)
        tasks.extend(kept)
        if on_template:
            on_template(template, len(kept))
    return tasks, report


def _per_template(
    con, templates: list[Template], count: int, seed: int, workers: int, snapshot, known: dict | None = None
) -> Iterator:
    """(kept tasks, its own report) per template, in the templates' order; with `known` (task ids by template id),
    a further draw of each that skips them (`more_tasks`)."""
    owns = [None if known is None else known[template.id] for template in templates]
    if workers <= 1 or len(templates) <= 1:
        tables = Tables(con, snapshot=snapshot)
        for template, own in zip(templates, owns, strict=True):
            yield _one_template(con, tables, template, count, seed, own)
        return
    with spawn_pool(workers, _start_instantiator, (database_path(con), snapshot)) as pool:
        n = len(templates)
        yield from pool.map(_instantiate_in_worker, templates, [count] * n, [seed] * n, owns)


def _one_template(con, tables: Tables, template: Template, count: int, seed: int, own: set | None = None) -> tuple:
    """A template's first draw, or (`own`: its task ids known so far) a further draw of its own seeded generator."""
    part = InstantiationReport()
    rng = template_rng(template.id if own is None else f"{template.id}/more", seed)
    return instantiate_template(con, tables, template, count, rng, part, own or frozenset()), part


_instantiator: dict = {}


def _start_instantiator(db_path: str, snapshot: Path | None) -> None:
    con = open_source(db_path)
    _instantiator.update(con=con, tables=Tables(con, snapshot=snapshot))


def _instantiate_in_worker(template: Template, count: int, seed: int, own: set | None) -> tuple:
    return _one_template(_instantiator["con"], _instantiator["tables"], template, count, seed, own)


def more_tasks(
    con: duckdb.DuckDBPyConnection,
    templates: list[Template],
    count: int,
    seed: int,
    known: set[str],
    report: InstantiationReport,
    workers: int = 1,
    snapshot: Path | None = None,
) -> dict[str, list[CleanTask]]:
    """Up to `count` further agreeing tasks of each template (by template id), none of the `known` task ids, from a
    draw of its own (seeded by the template and the seed, apart from `instantiate`'s): the candidates that fill a
    cell. `report` counts them; `workers` processes draw them (the tasks do not depend on it)."""
    own = {t.id: {k for k in known if k.startswith(f"{t.id}-")} for t in templates}
    drawn: dict[str, list[CleanTask]] = {}
    for template, (kept, part) in zip(
        templates, _per_template(con, templates, count, seed, workers, snapshot, own), strict=True
    ):
        report.take(template.id, len(kept), part)
        drawn[template.id] = kept
    return drawn


def instantiate_template(
    con: duckdb.DuckDBPyConnection,
    tables: Tables,
    template: Template,
    count: int,
    rng: np.random.Generator,
    report: InstantiationReport,
    known: set[str] | frozenset[str] = frozenset(),
) -> list[CleanTask]:
    """Up to `count` agreeing tasks of one template from slots drawn by `rng`, skipping `known` task ids."""
    gold_python, drop = load_python_program(template), _DropCounter(report, template.id)
    kept: list[CleanTask] = []
    for raw in sample_slots(con, template, (count + len(known)) * OVERSAMPLE, rng):
        if len(kept) == count:
            break
        slots = typed_slots(template, raw)
        if task_id(template, slots) in known:
            continue
        task = _attempt(con, tables, template, gold_python, slots, drop)
        if task is not None:
            phrasing = int(rng.integers(len(template.spec.questions)))
            task.phrasing = phrasing
            task.question = render(template.spec.questions[phrasing], task.slots).strip()
            kept.append(task)
    return kept


def task_of(con: duckdb.DuckDBPyConnection, template: Template, slots: dict[str, Any]) -> CleanTask | None:
    """The clean task of given slots (one a blind audit or a test names), in its first phrasing; None when its
    gold programs drop it."""
    typed = typed_slots(template, slots)
    drop = _DropCounter(InstantiationReport(), template.id)
    task = _attempt(con, Tables(con), template, load_python_program(template), typed, drop)
    if task is not None:
        task.question = render(template.spec.questions[0], task.slots).strip()
    return task


def write_tasks(tasks: list[CleanTask], report: InstantiationReport, path: Path) -> None:
    """Tasks as JSONL and the report as `<path>.report.json`, each written atomically."""
    with atomic_output(Path(path), overwrite=True) as tmp:
        tmp.write_text("".join(task.model_dump_json() + "\n" for task in tasks))
    report_path = Path(path).with_name(Path(path).name + ".report.json")
    with atomic_output(report_path, overwrite=True) as tmp:
        tmp.write_text(report.model_dump_json(indent=1) + "\n")
