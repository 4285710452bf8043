"""The blind-audit tools (benchmarks/blind_audit.py): the picked tasks spread over sub-types and templates, the
auditors' files hold nothing of the labels, and peek shows exactly the task's episode."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

from pipeline import jsonl
from pipeline.release.records import LabelRecord

TOOL = Path(__file__).resolve().parents[1] / "benchmarks" / "blind_audit.py"
_spec = importlib.util.spec_from_file_location("blind_audit", TOOL)
assert _spec and _spec.loader
blind_audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blind_audit)


def test_picked_tasks_spread_over_sub_types_and_templates(synthetic_release_dir: Path):
    labels = jsonl.read(synthetic_release_dir / "labels.jsonl", LabelRecord, ValueError)
    picked = blind_audit.pick_tasks(labels, per_subtype=2, seed=0)
    assert picked == blind_audit.pick_tasks(labels, per_subtype=2, seed=0)
    noisy = Counter(lab.subtype for lab in labels if lab.condition == "noise")
    by_subtype = Counter(lab.subtype for lab in picked)
    assert by_subtype == {name: min(2, n) for name, n in noisy.items()}
    assert all(lab.condition == "noise" for lab in picked)
    for name in by_subtype:
        templates = {lab.template_id for lab in labels if lab.subtype == name and lab.condition == "noise"}
        chosen = [lab.template_id for lab in picked if lab.subtype == name]
        assert len(set(chosen)) == min(len(chosen), len(templates)), name  # other templates first
        tests = [lab for lab in labels if lab.subtype == name and lab.condition == "noise" and lab.split == "test"]
        assert sum(lab.split == "test" for lab in picked if lab.subtype == name) >= min(len(tests), 1), name


def test_auditors_files_hold_no_label_and_peek_is_the_episode(
    synthetic_release_dir: Path, synthetic_db: Path, tmp_path: Path
):
    prompts = blind_audit.write_audit(synthetic_release_dir, synthetic_db, tmp_path, 2, 2, seed=0)
    assert [p.name for p in prompts] == ["prompt_A.md", "prompt_B.md"]
    lists = [json.loads((tmp_path / f"tasks_{name}.json").read_text()) for name in "AB"]
    ids = [task["task_id"] for tasks in lists for task in tasks]
    key = json.loads((tmp_path / "key.json").read_text())
    assert len(ids) == len(set(ids)) == len(key) and abs(len(lists[0]) - len(lists[1])) <= 1
    assert all(set(task) == {"task_id", "question", "answer_format"} for tasks in lists for task in tasks)
    assert "tasks_A.json" in prompts[0].read_text() and "answers_A.md" in prompts[0].read_text()
    task_id = ids[0]
    count = blind_audit.peek(synthetic_release_dir, synthetic_db, task_id, "SELECT count(*) AS n FROM patients")
    assert count.splitlines()[0].strip() == "n" and int(count.splitlines()[1]) > 0
    refused = blind_audit.peek(synthetic_release_dir, synthetic_db, task_id, "SELECT * FROM read_csv('/etc/passwd')")
    assert "root:" not in refused  # the agent's sandbox, not a plain connection
    revealed = blind_audit.reveal(synthetic_release_dir, task_id)
    assert f'"subtype": "{key[task_id]["subtype"]}"' in revealed and "patch:" in revealed
