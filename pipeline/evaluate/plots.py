"""The report's figures as inline SVG strings (matplotlib Agg; fixed hash salt and no date, so reruns give the same
bytes)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "ehrgym-eval", "svg.fonttype": "none", "font.size": 9})
CONDITION_COLOURS = {"clean": "#4c78a8", "noise": "#e45756"}


def svg_text(fig) -> str:
    """A figure as inline SVG text (the figure is closed)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: the SVG goes inline into HTML


def _pct(value: float | None) -> float:
    return 0.0 if value is None else 100.0 * value


def overall_bars(agents: dict[str, dict]) -> str:
    """Pass@1 Clean and Pass@1 Noise of every agent, side by side."""
    names = list(agents)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(names), 3.2))
    for offset, condition in ((-0.2, "clean"), (0.2, "noise")):
        values = [_pct(agents[a]["overall"][f"pass1_{condition}"]) for a in names]
        bars = ax.bar(
            [i + offset for i in range(len(names))],
            values,
            0.4,
            label=f"Pass@1 {condition.title()}",
            color=CONDITION_COLOURS[condition],
        )
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 110)
    ax.set_ylabel("%")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Pass@1 Clean vs Noise")
    return svg_text(fig)


def breakdown_bars(agents: dict[str, dict], field: str) -> str:
    """One panel per condition; one row per value of `field`, one bar per agent."""
    values = sorted({v for metrics in agents.values() for v in metrics["by"][field]})
    names, height = list(agents), 0.8 / max(len(agents), 1)
    fig, axes = plt.subplots(1, 2, sharey=True, figsize=(9, 0.9 + 0.28 * len(values) * max(len(names), 2)))
    for ax, condition in zip(axes, ("clean", "noise")):
        for i, agent in enumerate(names):
            groups = agents[agent]["by"][field]
            scores = [_pct(groups.get(v, {}).get(f"pass1_{condition}")) for v in values]
            ax.barh([j + i * height for j in range(len(values))], scores, height, label=agent)
        ax.set_yticks([j + height * (len(names) - 1) / 2 for j in range(len(values))], values)
        ax.set_xlim(0, 105)
        ax.set_xlabel("Pass@1 %")
        ax.set_title(f"{condition.title()} by {field}")
    axes[0].invert_yaxis()  # the axes share y: inverting both would undo it; first value and first agent on top
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return svg_text(fig)


def pass_hat_k_curves(agents: dict[str, dict], k: int) -> str:
    """pass^j for j = 1..k: solid Clean, dashed Noise, one colour per agent."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    js = list(range(1, k + 1))
    for i, (agent, metrics) in enumerate(agents.items()):
        for condition, style in (("clean", "-"), ("noise", "--")):
            curve = metrics["overall"][condition]["pass_hat_k"]
            ax.plot(
                js, [_pct(curve[str(j)]) for j in js], style, marker="o", color=f"C{i}", label=f"{agent} {condition}"
            )
    ax.set_xticks(js)
    ax.set_xlabel("k")
    ax.set_ylabel("pass^k %")
    ax.set_ylim(-5, 105)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("pass^k (all k trials pass)")
    return svg_text(fig)


def rs_bars(agents: dict[str, dict]) -> str:
    """RS(0), RS(5), RS(10) over all episodes of every agent."""
    names = list(agents)
    penalties = sorted(next(iter(agents.values()))["overall"]["all"]["rs"], key=float) if agents else []
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(names), 3.2))
    width = 0.8 / max(len(penalties), 1)
    for i, c in enumerate(penalties):
        scores = [agents[a]["overall"]["all"]["rs"][c] or 0.0 for a in names]
        ax.bar([j + (i - (len(penalties) - 1) / 2) * width for j in range(len(names))], scores, width, label=f"RS({c})")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("mean score per episode")
    ax.legend(fontsize=8)
    ax.set_title("Reliability score RS(c)")
    return svg_text(fig)
