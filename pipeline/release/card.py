"""The dataset card (README.md with a Hugging Face YAML header) of a release."""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

SPLITS = ("train", "test")


def _header(version: str) -> str:
    configs = [
        {
            "config_name": name,
            "default": name == "tasks",
            "data_files": [{"split": split, "path": f"{name}/{split}.parquet"} for split in SPLITS],
        }
        for name in ("tasks", "labels")
    ]
    meta = {
        "license": "odbl",
        "pretty_name": f"EHR-RobustGym {version}",
        "language": ["en"],
        "task_categories": ["question-answering", "table-question-answering"],
        "tags": ["ehr", "mimic-iv", "robustness", "noise", "text-to-sql", "clinical"],
        "configs": configs,
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _table(cells: Counter, rows: list[str], columns: list[str], title: str) -> str:
    lines = [f"| {title} | " + " | ".join(columns) + " | total |", "|---" * (len(columns) + 2) + "|"]
    for row in rows:
        values = [cells[(row, c)] for c in columns]
        lines.append(f"| {row} | " + " | ".join(str(v) for v in values) + f" | {sum(values)} |")
    return "\n".join(lines)


def dataset_card(version: str, manifest: dict[str, Any], labels: list[dict[str, Any]]) -> str:
    noise = [lab for lab in labels if lab["condition"] == "noise"]
    by_intent = Counter((lab["intent"], f"{lab['scope']}/{lab['level']}") for lab in noise)
    columns = [f"{s}/{lv}" for s in ("patient", "population") for lv in ("record", "value", "query")]
    intents = sorted({lab["intent"] for lab in noise})
    splits = Counter(lab["split"] for lab in noise)
    source = manifest["source"]
    return (
        f"""{_header(version)}
# EHR-RobustGym {version}

Clean-Noise pairs over an EHR in the MIMIC-IV layout. Each pair is a clean question whose answer the record supports
and its noisy twin, whose record (or question) was altered so that the answer is unsupported (the expected answer is
NULL: abstain) or must be repaired (invalid records excluded). Every pair was verified by executing reference SQL and
reference Python on the clean data and on a copy-on-write overlay of the noisy data.

- pairs: {len(noise)} ({splits["train"]} train, {splits["test"]} test); tasks: {2 * len(noise)}
- source: `{source["database"]}` ({source["patients"]:,} patients), fingerprint `{source["fingerprint"]}`
- seed {manifest["seed"]}; built by ehrgym {manifest["ehrgym_version"]}

## Pairs by intent, scope and noise level

{_table(by_intent, intents, columns, "intent")}

## Files

- `tasks.jsonl`, `tasks/{{train,test}}.parquet`: what an agent may see: `task_id`, `question`, `scope`, `intent`,
  `split` and `answer_format` (answer type, the unit to give the value in, whether a list's order matters, the
  record fields the question asks for: exactly what is scored). Clean and noisy tasks are interleaved under opaque
  ids and the two tasks of a pair show one format; nothing tells the condition or the partner.
- `labels.jsonl`, `labels/{{train,test}}.parquet`: hidden labels: `condition` (clean/noise), `pair_id`, `level`,
  `subtype` (of the pair: a clean task carries its noisy twin's, so results compare by pair), `contract`
  (answer/abstain/repair), `expected` answer (value, unit, associated records), gold and reference SQL, the
  `evidence` keys (inline up to 1,000 rows; `evidence_sql` returns them on the source database, `evidence_rows`
  counts them), the evidence an agent must `inspect`, the `naive_answer` (clean SQL on noisy data) and `trap` (the
  naive reading answers, wrongly). In Parquet, fields whose shape varies (slots, answers, evidence)
  are JSON text (`*_json` columns); the JSONL files keep them as structures.
- `patches/patches.jsonl`: per pair, the patch (rows hidden/added per table, or changed question slots) from which
  the noisy episode is rebuilt on the source database.
- `scoring/`: what scoring needs, as it was at build time: the templates the labels use
  (`templates/<intent>/<id>.*`: spec with the answer format and slot vocabularies, gold SQL, gold Python, evidence
  SQL), the unit tables the verifier reads, and `rules.json` (the verifier's rule version); the environment scores
  the release with these templates however the checkout's templates have changed since.
- `manifest.json`: version, seed, configuration, source fingerprint and path, template and sub-type versions, the
  scoring entry, counts per intent x scope x level x sub-type, and the sha256 of every file.
- `report.html`: plots and tables of the pairs by intent and sub-type, the splits, traps and contracts, and the
  rejected candidates by sub-type and reason.

Load with `datasets.load_dataset("parquet", data_files={{"train": "tasks/train.parquet","""
        f""" "test": "tasks/test.parquet"}})`.

## Licence and sources

Built on data in the MIMIC-IV layout. Vocabularies and distributions derive from the MIMIC-IV Clinical Database Demo
v2.2 (Johnson et al., PhysioNet, doi 10.13026/dp1f-ex47) and the MIMIC-IV demo in MEDS format (van de Water et al.,
PhysioNet 2025, doi 10.13026/t2y8-ea41), both under the Open Database License (ODbL 1.0); this release is shared
under the same licence. A release built on credentialed MIMIC-IV must be shared only under its PhysioNet terms.
"""
    )
