"""The release report's figures as inline SVG (matplotlib, deterministic through the evaluation plots' settings)."""

from __future__ import annotations

from collections import Counter

from pipeline.evaluate.plots import plt, svg_text


def cell_heatmap(intents: list[str], subtypes: list[str], cells: Counter) -> str:
    """Published pairs per intent x sub-type, the count written in every cell."""
    grid = [[cells[(i, s)] for s in subtypes] for i in intents]
    fig, ax = plt.subplots(figsize=(1.2 + 0.62 * len(subtypes), 1.2 + 0.42 * len(intents)))
    ax.imshow(grid, cmap="Blues", aspect="auto")
    for r, row in enumerate(grid):
        for c, n in enumerate(row):
            ax.text(c, r, str(n), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(subtypes)), subtypes, rotation=45, ha="right")
    ax.set_yticks(range(len(intents)), intents)
    ax.set_title("Published pairs by intent and sub-type")
    return svg_text(fig)


def split_bars(splits: list[str], cells: list[str], counts: Counter) -> str:
    """Pairs per scope/level cell, one bar per split (the test split is balanced over these cells)."""
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(cells), 3.2))
    width = 0.8 / max(len(splits), 1)
    for i, split in enumerate(splits):
        ax.bar(
            [j + (i - (len(splits) - 1) / 2) * width for j in range(len(cells))],
            [counts[(split, c)] for c in cells],
            width,
            label=split,
        )
    ax.set_xticks(range(len(cells)), cells, rotation=30, ha="right")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=8)
    ax.set_title("Pairs by split, scope and level")
    return svg_text(fig)


def trap_bars(subtypes: list[str], pairs: Counter, traps: Counter) -> str:
    """Per sub-type: pairs, and how many of them are traps."""
    fig, ax = plt.subplots(figsize=(6.5, 0.9 + 0.3 * len(subtypes)))
    ys = range(len(subtypes))
    ax.barh(list(ys), [pairs[s] for s in subtypes], color="#bbbbbb", label="pairs")
    ax.barh(list(ys), [traps[s] for s in subtypes], color="#e45756", label="traps")
    ax.set_yticks(list(ys), subtypes)
    ax.invert_yaxis()
    ax.set_xlabel("pairs")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Traps among published pairs")
    return svg_text(fig)


def rejection_bars(rejections: list[tuple[tuple[str, str], int]]) -> str:
    """Rejected candidates, one bar per (sub-type, reason)."""
    labels = [f"{s}: {r}" for (s, r), _ in rejections] or ["none"]
    counts = [n for _, n in rejections] or [0]
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.25 * len(labels)))
    ax.barh(range(len(labels)), counts, color="#4c78a8")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("rejected candidates")
    ax.set_title("Rejections by sub-type and reason")
    return svg_text(fig)
