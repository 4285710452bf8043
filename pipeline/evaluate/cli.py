"""`ehrgym eval`: run agents on a release for k trials and write trajectories, verdicts, metrics.json and
report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True)


def _fail(message: str) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def parse_agents(values: list[str]) -> list[str]:
    """--agent a --agent b,c -> [a, b, c] (first occurrence order, no repeats); unknown names are an error."""
    from pipeline.agents import agent_names

    names = list(dict.fromkeys(n.strip() for v in values for n in v.split(",") if n.strip()))
    if not names:
        _fail("give at least one --agent")
    unknown = [n for n in names if n not in agent_names()]
    if unknown:
        _fail(f"unknown agent(s) {', '.join(unknown)}; registered agents: {', '.join(sorted(agent_names()))}")
    return names


def parse_options(values: list[str], agents: list[str]) -> dict[str, dict[str, Any]]:
    """--agent-option llm.model=NAME -> {"llm": {"model": "NAME"}} (values parsed as JSON when they are JSON)."""
    import json

    options: dict[str, dict[str, Any]] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        agent, dot, option = key.partition(".")
        if not sep or not dot or not option:
            _fail(f"--agent-option expects AGENT.OPTION=VALUE (e.g. llm.model=gpt-4o-mini), got {value!r}")
        if agent not in agents:
            _fail(f"--agent-option {value!r} names agent {agent!r}, which is not among --agent {', '.join(agents)}")
        try:
            options.setdefault(agent, {})[option] = json.loads(raw)
        except ValueError:
            options.setdefault(agent, {})[option] = raw
    return options


def source_of(release_dir: Path, db: Path | None) -> Path:
    """--db, or the source path the release's manifest recorded; errors say which path was tried and what to pass."""
    from pipeline.env.release import ReleaseError, release_source

    if not (release_dir / "manifest.json").is_file():
        _fail(f"{release_dir}: not a release folder (no manifest.json); build one with `ehrgym build`")
    if db is not None and not db.is_file():
        _fail(f"--db {db}: no such source database file")
    try:
        return release_source(release_dir, db)
    except ReleaseError as exc:
        _fail(str(exc))


def open_release(release_dir: Path, db: Path, isolate: bool = True):
    """Release.open with errors that name the folder or file: missing release, missing DB, fingerprint mismatch."""
    from pipeline.env.release import Release

    db = source_of(release_dir, db)
    try:
        return Release.open(release_dir, db, isolate=isolate)
    except Exception as exc:  # the environment raises its own errors (fingerprint, row counts, hashes); show them
        _fail(f"cannot open release {release_dir} on {db}: {exc}")


def print_summary(metrics: dict, out: Path) -> None:
    from pipeline.evaluate.report import num, pct

    table = Table(
        title=f"{out} (split {metrics['run']['split']}, {metrics['run']['tasks']} tasks, k={metrics['run']['k']})"
    )
    for column in ("agent", "Pass@1 Clean", "Pass@1 Noise", "gap", "RS(0)", "RS(10)"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    for name, m in metrics["agents"].items():
        o = m["overall"]
        table.add_row(
            name,
            pct(o["pass1_clean"]),
            pct(o["pass1_noise"]),
            pct(o["gap"]),
            num(o["all"]["rs"]["0"]),
            num(o["all"]["rs"]["10"]),
        )
    Console().print(table)


def _run_with_progress(opened, config, out: Path, overwrite: bool) -> dict:
    from pipeline.evaluate.evaluation import evaluate

    try:
        total = len(opened.tasks(config.split)) * config.k * len(config.agents)
    except ValueError as exc:  # an unknown split: the message lists the release's splits
        _fail(str(exc))
    with Progress(
        TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        job = bar.add_task("episodes", total=total)
        try:
            return evaluate(
                opened, config, out, overwrite, on_task=lambda name, n: bar.update(job, advance=n, description=name)
            )
        except (ValueError, FileExistsError) as exc:
            _fail(str(exc))


def eval_command(
    release: Annotated[Path, typer.Option(help="release folder (RELEASES_DIR/VERSION)")],
    out: Annotated[Path, typer.Option(help="folder to write (refused when it exists and is not empty)")],
    agent: Annotated[list[str], typer.Option("--agent", help="agent name; repeat it or give a comma list")],
    db: Annotated[
        Path | None,
        typer.Option(
            help="the source DuckDB file the release was built from (default: the path its manifest recorded)"
        ),
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="trials per task")] = 1,
    split: Annotated[str | None, typer.Option(help="only this split (train or test); default: every task")] = None,
    seed: Annotated[int, typer.Option(help="trial t runs with seed + t")] = 0,
    workers: Annotated[int, typer.Option(min=1, help="worker processes (each opens its own release)")] = 2,
    max_turns: Annotated[int, typer.Option(min=1, help="tool calls an agent may make per episode")] = 30,
    agent_option: Annotated[list[str], typer.Option("--agent-option", help="AGENT.OPTION=VALUE for get_agent")] = [],
    overwrite: Annotated[bool, typer.Option(help="replace a non-empty --out folder")] = False,
    isolate: Annotated[
        bool,
        typer.Option(
            help="run agents' SQL in a child process, so a crashing query costs a "
            "restart, not the evaluation (--no-isolate: in process)"
        ),
    ] = True,
) -> None:
    """Run agents x tasks x k trials; write trajectories, verdicts, metrics.json and report.html into --out."""
    from pipeline.evaluate.runner import EvalConfig

    names = parse_agents(agent)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        _fail(f"--out {out} exists and is not empty; pass --overwrite to replace it")
    db = source_of(release, db)
    config = EvalConfig(
        release_dir=release,
        db=db,
        agents=names,
        agent_options=parse_options(agent_option, names),
        k=k,
        split=split,
        seed=seed,
        max_turns=max_turns,
        workers=workers,
        isolate=isolate,
    )
    opened = open_release(release, db, isolate)
    for note in opened.scoring_drift():
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    try:
        metrics = _run_with_progress(opened, config, out, overwrite)
    finally:
        opened.close()
    print_summary(metrics, out)
    console.print(f"report: {out / 'report.html'}")
