"""metrics.json and a self-contained report.html (inline SVG plots and tables) for one or several agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from pipeline.evaluate import plots
from pipeline.evaluate.records import GROUP_FIELDS
from pipeline.report_style import REPORT_CSS

TEMPLATE = jinja2.Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>EHR-RobustGym evaluation: {{ run.release_version }}</title>
<style>
{{ css }}</style></head><body>
<h1>Evaluation of {{ agents|join(", ") }}</h1>
<p>Release <code>{{ run.release_version }}</code> ({{ run.release_dir }}), split <code>{{ run.split }}</code>,
{{ run.tasks }} tasks x k = {{ run.k }} trials, seed {{ run.seed }}. Pass@1 and pass@k/pass^k use the unbiased
estimators over the k trials of each task; RS(c) is EHRSQL 2024's reliability score (+1 correct answer or justified
abstention, 0 abstention on an answerable task, -c a wrong answer or an answer to an unanswerable task), averaged over
episodes. A clean task counts under its pair's level and sub-type.</p>
<h2>Overview</h2>
<div class="figs">{{ figs.overall }}{{ figs.rs }}{{ figs.pass_hat_k }}</div>
<table><tr><th>agent</th><th>Pass@1 Clean</th><th>Pass@1 Noise</th><th>gap</th>
{% for j in ks %}<th>pass@{{ j }} Noise</th>{% endfor %}{% for j in ks %}<th>pass^{{ j }} Noise</th>{% endfor %}
{% for c in penalties %}<th>RS({{ c }})</th>{% endfor %}<th>tasks</th></tr>
{% for name, m in metrics.items() %}{% set o = m.overall %}<tr><td>{{ name }}</td><td>{{ pct(o.pass1_clean) }}</td>
<td>{{ pct(o.pass1_noise) }}</td><td>{{ pct(o.gap) }}</td>
{% for j in ks %}<td>{{ pct(o.noise.pass_at_k[j|string]) }}</td>{% endfor %}
{% for j in ks %}<td>{{ pct(o.noise.pass_hat_k[j|string]) }}</td>{% endfor %}
{% for c in penalties %}<td>{{ num(o.all.rs[c]) }}</td>{% endfor %}<td>{{ o.all.tasks }}</td></tr>{% endfor %}
</table>
{% for field in fields %}<h2>By {{ field }}</h2>
<div class="figs">{{ figs[field] }}</div>
<table><tr><th>{{ field }}</th>{% for name in agents %}<th>{{ name }} Clean</th><th>{{ name }} Noise</th>
<th>{{ name }} gap</th><th>{{ name }} RS(10)</th>{% endfor %}<th>tasks (clean/noise)</th></tr>
{% for value in values[field] %}<tr><td>{{ value }}</td>{% for name in agents %}"""
    """{% set g = metrics[name].by[field].get(value) %}
<td>{{ pct(g and g.pass1_clean) }}</td><td>{{ pct(g and g.pass1_noise) }}</td><td>{{ pct(g and g.gap) }}</td>
<td>{{ num(g and g.all.rs["10"]) }}</td>{% endfor %}{% set g0 = metrics[agents[0]].by[field].get(value) %}
<td>{{ g0.clean.tasks if g0 else 0 }}/{{ g0.noise.tasks if g0 else 0 }}</td></tr>{% endfor %}
</table>{% endfor %}
</body></html>
""",
    undefined=jinja2.StrictUndefined,
    autoescape=False,
)


def pct(value: float | None) -> str:
    """A share as a percentage; a dash for a group without tasks."""
    return "–" if value is None else f"{100 * value:.1f}%"


def num(value: float | None) -> str:
    """A score with three decimals; a dash for a group without tasks."""
    return "–" if value is None else f"{value:.3f}"


def figures(agents: dict[str, dict], k: int) -> dict[str, str]:
    """Every figure of the report, by name."""
    figs = {
        "overall": plots.overall_bars(agents),
        "rs": plots.rs_bars(agents),
        "pass_hat_k": plots.pass_hat_k_curves(agents, k),
    }
    figs.update({field: plots.breakdown_bars(agents, field) for field in GROUP_FIELDS})
    return figs


def render_report(metrics: dict[str, Any]) -> str:
    """The HTML page for a metrics.json document ({"run": ..., "agents": {name: agent_metrics}})."""
    run = metrics["run"]
    agents = {name: metrics["agents"][name] for name in run["agents"]}  # the order agents were given in
    if not agents:
        raise ValueError("metrics hold no agent: nothing to report")
    values = {f: sorted({v for m in agents.values() for v in m["by"][f]}) for f in GROUP_FIELDS}
    penalties = sorted(next(iter(agents.values()))["overall"]["all"]["rs"], key=float)  # "10" after "5"
    return TEMPLATE.render(
        css=REPORT_CSS,
        run=run,
        agents=list(agents),
        metrics=agents,
        figs=figures(agents, run["k"]),
        fields=GROUP_FIELDS,
        values=values,
        ks=range(1, run["k"] + 1),
        penalties=penalties,
        pct=pct,
        num=num,
    )


def metrics_json(metrics: dict[str, Any]) -> str:
    """The canonical text of metrics.json (sorted keys: same metrics, same bytes)."""
    return json.dumps(metrics, indent=1, sort_keys=True) + "\n"


def write_report(metrics: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write metrics.json and report.html into `folder` (the caller makes the folder appear atomically)."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, html_path = folder / "metrics.json", folder / "report.html"
    json_path.write_text(metrics_json(metrics))
    html_path.write_text(render_report(metrics))
    return json_path, html_path
