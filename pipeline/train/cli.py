"""`ehrgym sft`: turn the passing trajectories of an `ehrgym eval` folder into SFT records (OpenAI chat JSONL)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True)


def sft_command(
    run: Annotated[Path, typer.Option(help="an `ehrgym eval` output folder")],
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    agent: Annotated[
        list[str], typer.Option("--agent", help="only these agents (repeat or comma list); default: all")
    ] = [],
    split: Annotated[list[str], typer.Option("--split", help="splits to use (repeatable)")] = ["train"],
    all_splits: Annotated[
        bool, typer.Option(help="use every split, test included (contaminates a test evaluation)")
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="replace an existing --out file")] = False,
) -> None:
    """Write one SFT record per distinct passing trajectory (train split by default)."""
    from pipeline.train.sft import SftError, run_agents, sft_records, write_sft

    def fail(message: str) -> None:
        console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)

    names = [n.strip() for v in agent for n in v.split(",") if n.strip()]
    try:
        known = run_agents(run)
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"{run} holds no trajectories of agent(s) {', '.join(unknown)}; it has: {', '.join(known)}")
        records = sft_records(run, names or None, None if all_splits else tuple(split))
        write_sft(records, out, overwrite)
    except (SftError, FileExistsError) as exc:
        fail(str(exc))
    console.print(f"{len(records)} SFT record(s) written to {out}")
