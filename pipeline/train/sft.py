"""Passing trajectories of an evaluation folder -> SFT records in OpenAI chat format (tool calls and tool results),
JSONL.

A record is {"messages": [system, user, assistant tool_calls, tool result, ..., assistant answer call], "tools": [...],
"metadata": {task_id, agent, trial}}. Only the train split is used unless asked otherwise (test tasks must not leak
into training), and identical conversations are written once. Same folder and options, same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline import jsonl
from pipeline.agents.llm import SYSTEM_PROMPT, user_message  # the prompt the llm agent is evaluated with
from pipeline.env.records import ToolCall, Trajectory
from pipeline.evaluate.records import EpisodeResult


class SftError(ValueError):
    """The evaluation folder is incomplete or inconsistent; the message names the file."""


def _read_jsonl(path: Path, model):
    return jsonl.read(path, model, SftError, missing="expected an `ehrgym eval` output folder")


def load_run(folder: Path, agent: str) -> list[tuple[Trajectory, EpisodeResult]]:
    """The trajectories of one agent joined with their verdicts, in file order."""
    trajectories = _read_jsonl(folder / "trajectories" / f"{agent}.jsonl", Trajectory)
    verdicts = {(r.task_id, r.trial): r for r in _read_jsonl(folder / "verdicts" / f"{agent}.jsonl", EpisodeResult)}
    joined = []
    for trajectory in trajectories:
        result = verdicts.get((trajectory.task_id, trajectory.trial))
        if result is None:
            raise SftError(
                f"{folder / 'verdicts' / (agent + '.jsonl')}: no verdict for task {trajectory.task_id} "
                f"trial {trajectory.trial}"
            )
        joined.append((trajectory, result))
    return joined


def run_agents(folder: Path) -> list[str]:
    """The agents an evaluation folder holds trajectories of (sorted)."""
    found = sorted(p.stem for p in (folder / "trajectories").glob("*.jsonl"))
    if not found:
        raise SftError(f"{folder / 'trajectories'}: no trajectory file (expected an `ehrgym eval` output folder)")
    return found


def _call_message(index: int, call: ToolCall) -> dict[str, Any]:
    arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{index}", "type": "function", "function": {"name": call.tool, "arguments": arguments}}
        ],
    }


def messages_of(trajectory: Trajectory, result: EpisodeResult) -> list[dict[str, Any]]:
    """The conversation: every call with its result; the final `answer` call closes it (its receipt is not taught)."""
    user = user_message(trajectory.question, result.scope, result.intent, trajectory.answer_format)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    for index, call in enumerate(trajectory.calls):
        messages.append(_call_message(index, call))
        if call.tool == "answer" and call.result.ok:
            break
        messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": call.result.content})
    return messages


def tool_specs() -> list[dict[str, Any]]:
    """The environment's OpenAI tool specs (one typed source, pipeline.env.tools)."""
    from pipeline.env.tools import tool_specs as env_tool_specs

    return env_tool_specs()


def sft_records(
    folder: Path, agents: list[str] | None = None, splits: tuple[str, ...] | None = ("train",)
) -> list[dict]:
    """SFT records from the passing, answered trajectories of `agents` (default: all) in `splits` (None: all)."""
    tools, records, seen = tool_specs(), [], set()
    for agent in agents or run_agents(folder):
        for trajectory, result in load_run(folder, agent):
            if not (result.passed and result.answered) or (splits is not None and result.split not in splits):
                continue
            messages = messages_of(trajectory, result)
            key = json.dumps(messages, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            records.append(
                {
                    "messages": messages,
                    "tools": tools,
                    "metadata": {"task_id": trajectory.task_id, "agent": agent, "trial": trajectory.trial},
                }
            )
    return records


def write_sft(records: list[dict], path: Path, overwrite: bool = False) -> Path:
    """One JSON object per line, keys sorted; written atomically."""
    from pipeline.atomic import atomic_output

    with atomic_output(path, overwrite=overwrite) as tmp:
        tmp.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records))
    return path
