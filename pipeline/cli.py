"""The `ehrgym` command line: load, synthesise and validate sources, instantiate tasks, build releases, serve the
environment, evaluate agents and export SFT records."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from pipeline.stage_table import FILL_TASKS

app = typer.Typer(help="EHR-RobustGym: Clean-Noise pair benchmarks over MIMIC-IV.", no_args_is_help=True)
console = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def parse_substitutes(values: list[str]) -> dict[str, Path]:
    substitutes = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            fail(f"--table expects NAME=FILE (e.g. chartevents=chartevents.csv.gz), got {value!r}")
        substitutes[name.strip()] = Path(path)
    return substitutes


def print_rows(rows: dict[str, int], title: str) -> None:
    table = RichTable(title=title)
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in rows.items():
        table.add_row(name, f"{count:,}")
    table.add_row("[bold]total", f"[bold]{sum(rows.values()):,}")
    out.print(table)


@app.command()
def load(
    mimic_dir: Annotated[Path, typer.Argument(help="MIMIC-IV folder (PhysioNet layout: hosp/, icu/)")],
    db: Annotated[Path, typer.Option(help="DuckDB file to create")],
    table: Annotated[list[str], typer.Option("--table", help="substitute file for a table: NAME=FILE")] = [],
    allow_missing: Annotated[bool, typer.Option(help="create absent tables empty instead of refusing")] = False,
    overwrite: Annotated[bool, typer.Option(help="replace an existing database file")] = False,
) -> None:
    """Load a MIMIC-IV folder into one DuckDB file (typed by the schema, checksums verified)."""
    from pipeline.source.loader import LoadError, load_mimic, total_bytes

    substitutes = parse_substitutes(table)
    try:
        size = total_bytes(mimic_dir, substitutes)
        with Progress(
            TextColumn("{task.description:<20}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("loading", total=size)
            report = load_mimic(
                mimic_dir,
                db,
                substitutes=substitutes,
                allow_missing=allow_missing,
                overwrite=overwrite,
                on_table=lambda name, rows, nbytes: progress.update(task, advance=nbytes, description=name),
            )
    except (LoadError, FileExistsError) as exc:
        fail(str(exc))
    print_rows(report.rows, f"{db} ({report.seconds:.1f} s, {report.total_rows / report.seconds:,.0f} rows/s)")
    if report.missing:
        console.print(f"[yellow]absent tables created empty:[/] {', '.join(report.missing)}")
    console.print(f"checksums verified: {report.checksums_verified} file(s)")


@app.command()
def synth(
    db: Annotated[Path, typer.Option(help="DuckDB file to create")],
    patients: Annotated[int, typer.Option(min=1, help="number of patients")] = 1000,
    seed: Annotated[int, typer.Option(help="random seed (same patients and seed, same tables)")] = 0,
) -> None:
    """Generate a synthetic MIMIC-IV (all 31 tables, the official schema) into a new DuckDB file."""
    import time

    from pipeline.source.synthetic import generate_synthetic

    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} patients"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        job = progress.add_task("generating", total=patients)

        def on_progress(stage: str, done: int) -> None:
            progress.update(job, description=stage, completed=done if stage == "patients" else 0)

        try:
            rows = generate_synthetic(db, patients, seed, progress=on_progress)
        except FileExistsError as exc:
            fail(str(exc))
    seconds = time.perf_counter() - started
    print_rows(rows, f"{db} ({patients:,} patients, seed {seed}, {seconds:.1f} s)")


@app.command()
def fidelity(
    db: Annotated[Path, typer.Option(help="synthetic DuckDB file")],
    demo: Annotated[Path, typer.Option(help="the MIMIC-IV demo folder or a DuckDB file loaded from it")],
    out_html: Annotated[Path, typer.Option("--out", help="HTML report to write (JSON beside it)")],
) -> None:
    """Compare a synthetic database with the demo: rows per patient per table and the top-20 lab medians."""
    import json

    from pipeline.atomic import atomic_output
    from pipeline.source.synthetic.fidelity import fidelity_report, write_fidelity_html

    report = fidelity_report(db, demo)
    write_fidelity_html(report, out_html)
    with atomic_output(out_html.with_suffix(".json"), overwrite=True) as tmp:
        tmp.write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
    failing = [
        k for section in ("rows_per_patient", "lab_medians") for k, v in report[section].items() if not v["pass"]
    ]
    out.print(
        f"fidelity report: {out_html} ({len(failing)} check(s) outside bounds"
        f"{': ' + ', '.join(failing) if failing else ''})"
    )
    if failing:
        raise typer.Exit(1)


@app.command("validate-source")
def validate_source_cmd(
    db: Annotated[Path, typer.Option(help="DuckDB file with the 31 MIMIC-IV tables")],
    out_json: Annotated[Path | None, typer.Option("--out", help="where to write the GX result JSON")] = None,
    suites: Annotated[Path | None, typer.Option(help="folder of suite JSON files")] = None,
) -> None:
    """Run the source quality gate (Great Expectations); exit 1 when a suite fails."""
    from pipeline.quality.report import print_gate_report
    from pipeline.quality.source_gate import DEFAULT_SUITES, validate_source

    with console.status("validating (Great Expectations)...") as status:
        try:
            report = validate_source(
                db, suites or DEFAULT_SUITES, on_suite=lambda s: status.update(f"validated {s.suite}")
            )
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
    print_gate_report(report, out)
    target = out_json or db.with_name(db.stem + ".source-gate.json")
    report.write_json(target)
    console.print(f"GX result JSON: {target}")
    if not report.success:
        raise typer.Exit(1)


templates_app = typer.Typer(help="Question templates.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")


@templates_app.command("check")
def templates_check(
    root: Annotated[Path | None, typer.Option(help="templates folder (default: the project's)")] = None,
) -> None:
    """Lint every template (YAML schema, slots, Jinja, SQL against the schema, gold Python); exit 1 on problems."""
    from pipeline.templates.lint import lint_all
    from pipeline.templates.registry import DEFAULT_TEMPLATES

    results = lint_all(root or DEFAULT_TEMPLATES)
    for result in results:
        for problem in result.problems:
            out.print(f"[red]{result.path}[/]: {problem}", highlight=False)
    bad = sum(not r.ok for r in results)
    out.print(f"{len(results)} template(s) checked, {bad} with problems")
    if bad or not results:
        raise typer.Exit(1)


@app.command()
def tasks(
    db: Annotated[Path, typer.Option(help="source DuckDB file")],
    out_file: Annotated[Path, typer.Option("--out", help="JSONL file of clean tasks to write")],
    per_template: Annotated[int, typer.Option(help="tasks wanted per template")] = 5,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    templates_root: Annotated[Path | None, typer.Option("--templates", help="templates folder")] = None,
) -> None:
    """Instantiate clean tasks: gold SQL and gold Python must agree; every drop is counted by reason."""
    from pipeline.db import open_source
    from pipeline.templates.instantiate import instantiate, write_tasks
    from pipeline.templates.registry import DEFAULT_TEMPLATES, load_templates
    from pipeline.templates.spec import TemplateError

    try:
        templates = load_templates(templates_root or DEFAULT_TEMPLATES)
    except TemplateError as exc:
        fail(f"{exc} (run `ehrgym templates check` for every problem)")
    if not db.is_file():
        fail(f"{db}: no such database file")
    con = open_source(db)
    with Progress(TextColumn("{task.description:<36}"), BarColumn(), TimeElapsedColumn(), console=console) as bar:
        job = bar.add_task("instantiating", total=len(templates))
        try:
            found, report = instantiate(
                con,
                templates,
                per_template,
                seed,
                on_template=lambda t, n: bar.update(job, advance=1, description=t.id),
            )
        finally:
            con.close()
    write_tasks(found, report, out_file)
    summary = RichTable(title=f"{len(found)} clean tasks -> {out_file}")
    for column in ("template", "kept", "dropped (reason: count)"):
        summary.add_column(column)
    for template in templates:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(report.dropped.get(template.id, {}).items()))
        summary.add_row(template.id, str(report.kept[template.id]), reasons)
    out.print(summary)
    out.print(f"SQL/Python agreement: {report.agreed}/{report.compared} = {report.agreement_rate:.1%}")


def _split_option(values: list[str] | None) -> list[str] | None:
    """`--levels a,b --levels c` and repeated options both work."""
    if not values:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


@app.command()
def build(
    db: Annotated[Path, typer.Option(help="source DuckDB file")],
    out_dir: Annotated[Path, typer.Option("--out", help="releases folder; the release goes to OUT/VERSION")],
    version: Annotated[str, typer.Option(help="release version (never overwritten)")],
    seed: Annotated[int, typer.Option(help="seed for sampling, noise and splits")] = 0,
    per_template: Annotated[int, typer.Option(help="clean tasks per template")] = 5,
    levels: Annotated[list[str] | None, typer.Option(help="noise levels: record,value,query")] = None,
    subtypes: Annotated[list[str] | None, typer.Option(help="noise sub-types (default: all of the levels)")] = None,
    intents: Annotated[list[str] | None, typer.Option(help="intents (default: all six)")] = None,
    scopes: Annotated[list[str] | None, typer.Option(help="patient,population")] = None,
    test_size: Annotated[int, typer.Option(help="test pairs wanted (balanced over scope x level)")] = 1008,
    pairs_per_cell: Annotated[int | None, typer.Option(help="cap per intent x scope x level x sub-type")] = None,
    fill_tasks: Annotated[
        int, typer.Option(help="further tasks per template tried for an intent x sub-type cell with no pair")
    ] = FILL_TASKS,
    workers: Annotated[int, typer.Option(help="processes making tasks and pairs (the files do not depend on it)")] = 1,
    skip_source_gate: Annotated[
        bool, typer.Option(help="leave out the source database's gate (run by default)")
    ] = False,
) -> None:
    """Build a release: source gate -> clean tasks -> verified Clean-Noise pairs -> splits -> pair gate -> files."""
    from pipeline.build import BuildConfig
    from pipeline.quality.pair_gate import GateFailed
    from pipeline.quality.report import print_gate_report
    from pipeline.stages import run_build

    options = {
        k: v
        for k, v in {
            "levels": _split_option(levels),
            "subtypes": _split_option(subtypes),
            "intents": _split_option(intents),
            "scopes": _split_option(scopes),
        }.items()
        if v
    }
    try:
        config = BuildConfig(
            db=db,
            releases_dir=out_dir,
            version=version,
            seed=seed,
            per_template=per_template,
            test_size=test_size,
            pairs_per_cell=pairs_per_cell,
            fill_tasks=fill_tasks,
            **options,
        )
    except ValueError as exc:
        fail(str(exc))
    with Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        jobs: dict[str, TaskID] = {}

        def on_progress(stage: str, done: int, total: int) -> None:
            if stage not in jobs:
                jobs[stage] = bar.add_task(stage, total=total)
            bar.update(jobs[stage], completed=done, total=total)  # planned pairs: the total grows by wave

        try:
            release = run_build(config, progress=on_progress, workers=workers, skip_source_gate=skip_source_gate)
        except GateFailed as exc:
            print_gate_report(exc.report, out)
            target = out_dir / f"{version}.gate-failure.json"
            exc.report.write_json(target)
            fail(f"the {exc.report.gate} gate failed; nothing was published (report: {target})", code=1)
        except FileExistsError as exc:
            fail(str(exc))
    _print_release(release)


def _print_release(release: Path) -> None:
    import json

    manifest = json.loads((release / "manifest.json").read_text())
    pairs = manifest["pairs"]
    out.print(f"release: {release}")
    out.print(
        f"pairs verified {pairs['verified']:,}, published {pairs['published']:,} "
        f"(test {pairs['split']['test']:,}, train {pairs['split']['train']:,}, "
        f"{pairs['split']['per_cell']} per test cell); {pairs['verifications']:,} verifications, "
        f"{pairs['verifications_per_published']} per published pair"
    )
    unfilled = sorted(cell for cell, fill in pairs.get("filled_cells", {}).items() if not fill["kept"])
    if unfilled:
        out.print(f"intent/sub-type cells with no pair: {', '.join(unfilled)}")


def _register_tool_commands() -> None:
    """Commands whose modules live beside their subsystem (environment, evaluation, training)."""
    from pipeline.env.cli import serve_command
    from pipeline.evaluate.cli import eval_command
    from pipeline.train.cli import sft_command

    app.command("serve")(serve_command)
    app.command("eval")(eval_command)
    app.command("sft")(sft_command)


_register_tool_commands()

if __name__ == "__main__":  # pragma: no cover
    app()
