"""report.html of a release: what it holds (pairs by intent and sub-type, the test split's balance, traps) and
what was rejected, as inline SVG plots with their tables; deterministic, like every other release file."""

from __future__ import annotations

from collections import Counter
from typing import Any

import jinja2

from pipeline.report_style import REPORT_CSS

TEMPLATE = jinja2.Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>EHR-RobustGym release {{ version }}</title>
<style>
{{ css|safe }}</style></head><body>
<h1>Release {{ version }}</h1>
<p>{{ published }} Clean-Noise pairs published ({{ splits|join(", ") }}) of {{ verified }} verified, from
{{ clean_tasks }} clean tasks; seed {{ seed }}. Every count below is read from <code>manifest.json</code> and
<code>labels.jsonl</code>.</p>
<h2>Published pairs by intent and sub-type</h2>
<div class="figs">{{ figs.cells|safe }}</div>
<table><tr><th>intent</th>{% for s in subtypes %}<th>{{ s }}</th>{% endfor %}<th>all</th></tr>
{% for i in intents %}<tr><td>{{ i }}</td>{% for s in subtypes %}<td>{{ cells[(i, s)] }}</td>{% endfor %}
<td>{{ row_totals[i] }}</td></tr>{% endfor %}</table>
<h2>Splits by scope and level</h2>
<div class="figs">{{ figs.splits|safe }}</div>
<table><tr><th>split</th>{% for c in split_cells %}<th>{{ c }}</th>{% endfor %}</tr>
{% for split in splits %}<tr><td>{{ split }}</td>{% for c in split_cells %}"""
    """<td>{{ by_split[(split, c)] }}</td>{% endfor %}</tr>{% endfor %}</table>
<h2>Traps and contracts by sub-type</h2>
<p>A trap is a noisy task whose naive reading (the clean gold SQL on the noisy data) gives a plausible, wrong
answer. Contracts: abstain (expected NULL) or repair (the answer over the valid records).</p>
<div class="figs">{{ figs.traps|safe }}</div>
<table><tr><th>sub-type</th><th>pairs</th><th>traps</th><th>abstain</th><th>repair</th></tr>
{% for s in subtypes %}<tr><td>{{ s }}</td><td>{{ per_subtype[s] }}</td><td>{{ traps[s] }}</td>
<td>{{ contracts[(s, "abstain")] }}</td><td>{{ contracts[(s, "repair")] }}</td></tr>{% endfor %}</table>
<h2>Rejected candidate pairs by sub-type and reason</h2>
<div class="figs">{{ figs.rejections|safe }}</div>
<table><tr><th>sub-type</th><th>reason</th><th>count</th></tr>
{% for (s, r), n in rejections %}<tr><td>{{ s }}</td><td>{{ r }}</td><td>{{ n }}</td></tr>{% endfor %}</table>
</body></html>
""",
    undefined=jinja2.StrictUndefined,
    autoescape=True,
)


def release_report(version: str, manifest: dict[str, Any], labels: list[dict[str, Any]]) -> str:
    """The release's report.html (`labels`: label records as dicts)."""
    noise = [lab for lab in labels if lab["condition"] == "noise"]
    cells = Counter((lab["intent"], lab["subtype"]) for lab in noise)
    intents, subtypes = sorted({i for i, _ in cells}), sorted({s for _, s in cells})
    by_split = Counter((lab["split"], f"{lab['scope']}/{lab['level']}") for lab in noise)
    rejected: Counter[tuple[str, str]] = Counter()
    for key, count in manifest.get("rejections", {}).items():
        _, subtype, reason = key.split("/", 2)
        rejected[(subtype, reason)] += count
    facts = {
        "version": version,
        "published": len(noise),
        "verified": manifest["pairs"]["verified"],
        "clean_tasks": manifest["clean_tasks"]["kept"],
        "seed": manifest["seed"],
        "splits": sorted({lab["split"] for lab in noise}),
        "intents": intents,
        "subtypes": subtypes,
        "cells": cells,
        "row_totals": Counter(lab["intent"] for lab in noise),
        "split_cells": sorted({c for _, c in by_split}),
        "by_split": by_split,
        "per_subtype": Counter(lab["subtype"] for lab in noise),
        "traps": Counter(lab["subtype"] for lab in noise if lab["trap"]),
        "contracts": Counter((lab["subtype"], lab["contract"]) for lab in noise),
        "rejections": sorted(rejected.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])),
    }
    return TEMPLATE.render(css=REPORT_CSS, **facts, figs=_figures(facts))


def _figures(facts: dict[str, Any]) -> dict[str, str]:
    from pipeline.release import report_plots  # matplotlib loads only when a release is written

    return {
        "cells": report_plots.cell_heatmap(facts["intents"], facts["subtypes"], facts["cells"]),
        "splits": report_plots.split_bars(facts["splits"], facts["split_cells"], facts["by_split"]),
        "traps": report_plots.trap_bars(facts["subtypes"], facts["per_subtype"], facts["traps"]),
        "rejections": report_plots.rejection_bars(facts["rejections"]),
    }
