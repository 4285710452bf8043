"""Tools for a blind audit of a release's noise labels: pick the tasks, query them blind, then reveal the labels.

An auditor (a person, or a helper session) answers each picked noisy task as a careful clinical data analyst
would, through `peek` only (the task's episode: the noisy record, as an agent sees it), writes the answers down,
and only then runs `reveal` to read the label and the patch and judge it CORRECT, WRONG or DEBATABLE.

Usage:
  python benchmarks/blind_audit.py pick RELEASE_DIR DB OUT_DIR [--per-subtype 2] [--auditors 2] [--seed 0]
  python benchmarks/blind_audit.py peek RELEASE_DIR DB TASK_ID "SELECT ..."
  python benchmarks/blind_audit.py reveal RELEASE_DIR TASK_ID
`pick` writes OUT_DIR/tasks_<A|B|...>.json (task id, question, answer format), OUT_DIR/prompt_<X>.md (the
auditor's instructions) and OUT_DIR/key.json (each task's sub-type and template, for whoever tallies the audit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import string
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipeline import jsonl
from pipeline.env.release import Release
from pipeline.release.records import LabelRecord, PatchRecord, TaskRecord

HERE = Path(__file__).resolve()
PROMPT = """# Blind audit of noisy EHR tasks ({count} tasks)

You are a careful clinical data analyst. Each task below is a question about a MIMIC-IV database (the real
MIMIC-IV demo layout, 31 tables). Some records may be noisy: a value missing, duplicated with another value,
in an odd unit, impossible, or the question may name something the record does not have. For each task,
decide what a careful analyst would answer: a value (with its unit where the format asks one), or that the
record does not let one answer (an abstention), and why.

Tasks: `{tasks}` (task id, question, answer format).

## Step 1: answer every task blind
Query a task's record only with
    {python} peek {release} {db} TASK_ID "SELECT ..."
(each task id shows its own record). Look at the record as an analyst would: check other tables that hold the
same fact, spelling variants, units, duplicates. Write each answer (value or abstain, one line of reasoning) to
`{answers}` before you go on. Do not read any source file of the project, any label, patch or release file.

## Step 2: only then reveal each label
    {python} reveal {release} TASK_ID
prints the label's contract (answer, abstain, repair), the expected and accepted answers, the noise sub-type,
the programs and the patch (the rows the noise hid or added). Judge each label:
- CORRECT: a careful analyst looking at the noisy record would agree with the expected answer (or abstention).
- WRONG: the noisy record still answers the question differently, and the label punishes that answer; or the
  label rewards an answer a careful analyst would not give.
- DEBATABLE: reasonable analysts could differ (say what the other reading is).
Also list any tell: anything in the record that gives the noise away other than its meaning (an artefact).

## Report
A table: task id | your blind answer | expected | verdict | one-line reason. Then a line
`TOTAL: CORRECT n, WRONG n, DEBATABLE n`, then the tells. Write it to `{report}` and return it as your answer.
"""


def _read(root: Path) -> tuple[dict[str, TaskRecord], list[LabelRecord]]:
    tasks = {t.task_id: t for t in jsonl.read(root / "tasks.jsonl", TaskRecord, ValueError)}
    return tasks, jsonl.read(root / "labels.jsonl", LabelRecord, ValueError)


def _order(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}|{key}".encode()).hexdigest()


def pick_tasks(labels: list[LabelRecord], per_subtype: int, seed: int) -> list[LabelRecord]:
    """`per_subtype` noisy tasks of each sub-type, spread over templates, in a seeded order: test tasks first,
    then train tasks where the test split holds too few of a sub-type."""
    by_subtype: dict[str, list[LabelRecord]] = defaultdict(list)
    for label in labels:
        if label.condition == "noise":
            by_subtype[label.subtype].append(label)
    picked: list[LabelRecord] = []
    for subtype in sorted(by_subtype):
        chosen: list[LabelRecord] = []
        ranked = sorted(by_subtype[subtype], key=lambda lab: (lab.split != "test", _order(lab.task_id, seed)))
        for spread in (True, False):  # other templates first; the same template again only if it must
            for label in ranked:
                new_template = label.template_id not in {c.template_id for c in chosen}
                if len(chosen) < per_subtype and label not in chosen and (new_template or not spread):
                    chosen.append(label)
        picked += chosen
    return sorted(picked, key=lambda lab: _order(lab.task_id, seed))


def write_audit(release: Path, db: Path, out: Path, per_subtype: int, auditors: int, seed: int) -> list[Path]:
    """The auditors' task lists and prompts, and the key; returns the prompt paths."""
    tasks, labels = _read(release)
    picked = pick_tasks(labels, per_subtype, seed)
    out.mkdir(parents=True, exist_ok=True)
    names = string.ascii_uppercase[:auditors]
    prompts = []
    for index, name in enumerate(names):
        mine = picked[index::auditors]
        listed = [
            {"task_id": lab.task_id, "question": tasks[lab.task_id].question, "answer_format": _format(tasks, lab)}
            for lab in mine
        ]
        (out / f"tasks_{name}.json").write_text(json.dumps(listed, indent=1) + "\n")
        prompt = PROMPT.format(
            count=len(mine),
            tasks=out / f"tasks_{name}.json",
            python=f"PYTHONPATH={HERE.parents[1]} {sys.executable} {HERE}",
            release=release.resolve(),
            db=db.resolve(),
            answers=out / f"answers_{name}.md",
            report=out / f"report_{name}.md",
        )
        prompts.append(out / f"prompt_{name}.md")
        prompts[-1].write_text(prompt)
    key = {
        lab.task_id: {"subtype": lab.subtype, "template": lab.template_id, "contract": lab.contract, "split": lab.split}
        for lab in picked
    }
    (out / "key.json").write_text(json.dumps(key, indent=1, sort_keys=True) + "\n")
    return prompts


def _format(tasks: dict[str, TaskRecord], label: LabelRecord) -> dict[str, Any] | None:
    answer_format = tasks[label.task_id].answer_format
    return None if answer_format is None else answer_format.model_dump()


def peek(release: Path, db: Path, task_id: str, sql: str) -> str:
    """The SQL tool's reply in the task's episode: exactly what an agent would see."""
    with Release.open(release, db) as opened, opened.episode(task_id) as episode:
        return str(episode.call("sql", {"query": sql}).content)


def reveal(release: Path, task_id: str) -> str:
    """The label of a task and its pair's patch, for step 2 of the audit."""
    _, labels = _read(release)
    label = next((lab for lab in labels if lab.task_id == task_id), None)
    if label is None:
        raise SystemExit(f"{release}: no task {task_id!r}")
    patches = jsonl.read(release / "patches" / "patches.jsonl", PatchRecord, ValueError)
    patch = next((p.patch for p in patches if p.noise_task_id == task_id), None)
    shown = label.model_dump(
        include={"contract", "subtype", "template_id", "slots", "expected", "accepted", "naive_answer", "trap"}
    )
    lines = [json.dumps(shown, indent=1, default=str), "gold SQL (clean):", label.gold_sql]
    lines += ["reference SQL (expected on this record):", label.reference_sql, "patch:"]
    lines.append(json.dumps(None if patch is None else patch.model_dump(), indent=1, default=str))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pick = commands.add_parser("pick")
    pick.add_argument("release", type=Path)
    pick.add_argument("db", type=Path)
    pick.add_argument("out", type=Path)
    pick.add_argument("--per-subtype", type=int, default=2)
    pick.add_argument("--auditors", type=int, default=2)
    pick.add_argument("--seed", type=int, default=0)
    peek_command = commands.add_parser("peek")
    for name, kind in (("release", Path), ("db", Path), ("task_id", str), ("sql", str)):
        peek_command.add_argument(name, type=kind)
    reveal_command = commands.add_parser("reveal")
    reveal_command.add_argument("release", type=Path)
    reveal_command.add_argument("task_id")
    args = parser.parse_args()
    if args.command == "pick":
        for path in write_audit(args.release, args.db, args.out, args.per_subtype, args.auditors, args.seed):
            print(path)
    elif args.command == "peek":
        print(peek(args.release, args.db, args.task_id, args.sql))
    else:
        print(reveal(args.release, args.task_id))


if __name__ == "__main__":
    main()
