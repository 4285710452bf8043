"""Readable terminal rendering of a gate report (rules that failed or were tolerated, per suite)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pipeline.quality.gx_runner import GateReport

_STATUS = {"pass": "[green]pass", "fail": "[bold red]FAIL", "known_exception": "[yellow]known exception"}


def print_gate_report(report: GateReport, console: Console) -> None:
    """One line per suite, then every rule that did not simply pass, with counts and sample keys."""
    summary = Table(title=f"{report.gate} gate on {report.target}")
    for column in ("suite", "rows", "rules", "failed", "known exceptions"):
        summary.add_column(column, justify="left" if column == "suite" else "right")
    for suite in report.suites:
        failed = sum(o.status == "fail" for o in suite.outcomes)
        known = sum(o.status == "known_exception" for o in suite.outcomes)
        summary.add_row(suite.suite, f"{suite.rows:,}", str(len(suite.outcomes)), str(failed), str(known))
    console.print(summary)
    details = Table(title="rules not simply passing")
    for column in ("suite", "rule", "status", "unexpected", "sample", "note"):
        details.add_column(column)
    for suite in report.suites:
        for o in suite.outcomes:
            if o.status == "pass":
                continue
            note = ""
            if o.exception:
                note = f"tolerated up to {o.exception['max_unexpected_percent']}%: {o.exception['reason'][:80]}..."
            details.add_row(
                suite.suite,
                o.rule,
                _STATUS[o.status],
                f"{o.unexpected_count:,} of {o.element_count:,} ({o.unexpected_percent:.2f}%)",
                ", ".join(map(str, o.sample[:5])),
                note,
            )
    if details.row_count:
        console.print(details)
    verdict = "[bold green]PASSED" if report.success else "[bold red]FAILED"
    console.print(f"{report.gate} gate: {verdict}")
