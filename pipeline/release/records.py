"""Release records: what an agent may see (TaskRecord) and the hidden labels (LabelRecord)."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipeline.noise.patch import Patch
from pipeline.noise.verify import NoisePair
from pipeline.release.splits import subject_of
from pipeline.templates.answers import AnswerFormat, AnswerValue, answer_format
from pipeline.templates.instantiate import EVIDENCE_INLINE_MAX
from pipeline.templates.spec import Answer


class TaskRecord(BaseModel):
    """Agent-visible: nothing here tells the condition, the pairing or the answer."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    question: str
    scope: str
    intent: str
    split: str
    # What the answer must hold; releases published before it existed load with None.
    answer_format: AnswerFormat | None = None


class LabelRecord(BaseModel):
    """Hidden: condition, pairing, programs, the expected answer and the evidence an agent must inspect."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    pair_id: str
    condition: Literal["clean", "noise"]
    split: str
    template_id: str
    template_version: int
    intent: str
    scope: str
    level: str
    subtype: str
    subtype_version: int
    contract: Literal["answer", "abstain", "repair"]
    subject_id: int | None
    slots: dict[str, Any]
    gold_sql: str  # the clean gold SQL (rendered with this task's slots)
    reference_sql: str  # the program whose answer is expected on this task's data
    expected: AnswerValue
    evidence: list[dict[str, Any]] | None  # the evidence rows inline, up to EVIDENCE_INLINE_MAX; else run evidence_sql
    # On the source database `evidence_sql` returns the evidence rows (the keys the answer rests on). Releases
    # published before these two fields existed load with None (they inline every evidence row).
    evidence_sql: str | None = None
    evidence_rows: int | None = None
    inspect: dict[str, Any] | None
    naive_answer: AnswerValue | None  # noise only: the clean program run on the noisy data
    trap: bool | None
    # noise only: other answers a careful analyst may give (a conflicting record's copies kept in turn; the true
    # time of a displaced event that other records corroborate); Answer Match passes on any of them too
    accepted: list[AnswerValue] = []


class PatchRecord(BaseModel):
    """Everything needed to rebuild a noisy episode on the source: the pair and its patch."""

    model_config = ConfigDict(extra="forbid")
    pair_id: str
    noise_task_id: str
    patch: Patch


# A population question's evidence can be most of a large table (every heart rate of every stay: 135,853 keys on
# 1,000 synthetic patients, 14 MB of JSON per label); above this many rows a label keeps the query, not the rows.


def opaque_id(pair_id: str, condition: str) -> str:
    """A task id that reveals neither the condition nor the partner task."""
    return "t" + hashlib.sha256(f"{pair_id}|{condition}".encode()).hexdigest()[:15]


def records_of(pair: NoisePair, split: str, spec: Answer) -> tuple[list[TaskRecord], list[LabelRecord], PatchRecord]:
    """The clean and the noisy task of a pair (one answer format, from the template's Answer `spec`, but for the
    unit of a concept the noisy question names instead), their labels and the patch."""
    clean, common = (
        pair.clean,
        {
            "pair_id": pair.pair_id,
            "split": split,
            "template_id": pair.clean.template_id,
            "template_version": pair.clean.template_version,
            "intent": pair.clean.intent,
            "scope": pair.clean.scope,
            "level": pair.level,
            "subtype": pair.subtype,
            "subtype_version": pair.subtype_version,
            "subject_id": subject_of(pair),
        },
    )
    common |= {
        "evidence_sql": clean.evidence_sql,
        "evidence_rows": len(clean.evidence) if clean.evidence_rows is None else clean.evidence_rows,
        "evidence": clean.evidence if (clean.evidence_rows or len(clean.evidence)) <= EVIDENCE_INLINE_MAX else None,
    }
    ids = {c: opaque_id(pair.pair_id, c) for c in ("clean", "noise")}
    visible = {
        "scope": clean.scope,
        "intent": clean.intent,
        "split": split,
        "answer_format": answer_format(spec, clean.answer),
    }
    # a question naming another concept shows that concept's unit, as the clean one shows the asked one's
    noisy_answer = clean.answer.model_copy(update={"unit": pair.answer_unit or clean.answer.unit})
    tasks = [
        TaskRecord(task_id=ids["clean"], question=clean.question, **visible),
        TaskRecord(
            task_id=ids["noise"],
            question=pair.noisy_question,
            **(visible | {"answer_format": answer_format(spec, noisy_answer)}),
        ),
    ]
    labels = [
        LabelRecord(
            task_id=ids["clean"],
            condition="clean",
            contract="answer",
            slots=clean.slots,
            gold_sql=clean.gold_sql,
            reference_sql=clean.gold_sql,
            expected=clean.answer,
            inspect=None,
            naive_answer=None,
            trap=None,
            **common,
        ),
        LabelRecord(
            task_id=ids["noise"],
            condition="noise",
            contract=pair.contract,
            slots=pair.noisy_slots,
            gold_sql=clean.gold_sql,
            reference_sql=pair.reference_sql,
            expected=pair.expected,
            inspect=pair.inspect,
            naive_answer=pair.naive_answer,
            trap=pair.trap,
            accepted=pair.accepted,
            **common,
        ),
    ]
    return tasks, labels, PatchRecord(pair_id=pair.pair_id, noise_task_id=ids["noise"], patch=pair.patch)
