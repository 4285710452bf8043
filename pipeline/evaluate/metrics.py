"""Tiny metric functions (pass@k, pass^k, Pass@1 Clean/Noise and the gap, EHRSQL's RS(c)) and their breakdowns.

>>> pass_at_k(n=4, c=1, k=2)
0.5
>>> pass_hat_k(n=4, c=2, k=2)
0.16666666666666666
>>> rs_episode(answerable=False, abstained=True, correct=True, penalty=10)
1.0
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from statistics import fmean

from pipeline.evaluate.records import GROUP_FIELDS, EpisodeResult

RS_PENALTIES = (0, 5, 10)  # EHRSQL 2024 reports RS(0), RS(5), RS(10)


def _check_counts(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 trials and 0 <= c <= n correct ones, got n={n}, c={c}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the n={n} trials run: run at least k trials per task")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one of k trials drawn from n passes) = 1 - C(n-c, k) / C(n, k)."""
    _check_counts(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased P(all k trials drawn from n pass) = C(c, k) / C(n, k) (tau-bench's pass^k)."""
    _check_counts(n, c, k)
    return comb(c, k) / comb(n, k)


def rs_episode(answerable: bool, abstained: bool, correct: bool, penalty: float, answered: bool = True) -> float:
    """EHRSQL 2024's per-question reliability score.

    Answerable: +1 correct answer, 0 abstention, -penalty wrong answer. Unanswerable: +1 abstention,
    -penalty any answer. An episode that never called `answer` neither answered nor abstained: 0.
    """
    if not answered:
        return 0.0
    if abstained:
        return 0.0 if answerable else 1.0
    return 1.0 if answerable and correct else -float(penalty)


def reliability_score(results: Iterable[EpisodeResult], penalty: float) -> float | None:
    """RS(c): the mean per-episode score; None for no episodes."""
    scores = [rs_episode(r.answerable, r.abstained, r.passed, penalty, r.answered) for r in results]
    return fmean(scores) if scores else None


def task_counts(results: Iterable[EpisodeResult]) -> dict[str, tuple[int, int]]:
    """(trials n, passed c) per task id, in first-seen order."""
    counts: dict[str, list[int]] = {}
    for r in results:
        n_c = counts.setdefault(r.task_id, [0, 0])
        n_c[0] += 1
        n_c[1] += r.passed
    return {task: (n, c) for task, (n, c) in counts.items()}


def mean_over_tasks(counts: dict[str, tuple[int, int]], k: int, estimator) -> float | None:
    """The estimator averaged over tasks (every task weighs the same whatever its trial count)."""
    return fmean(estimator(n, c, k) for n, c in counts.values()) if counts else None


def pass1(results: Sequence[EpisodeResult]) -> float | None:
    """Pass@1: the per-task share of passing trials, averaged over tasks."""
    return mean_over_tasks(task_counts(results), 1, pass_at_k)


def gap(clean: float | None, noise: float | None) -> float | None:
    """Pass@1 Clean minus Pass@1 Noise: how much the noise costs the agent."""
    return None if clean is None or noise is None else clean - noise


def condition_stats(results: Sequence[EpisodeResult], k: int) -> dict:
    """Pass@1, pass@j and pass^j for j = 1..k, and RS(c), over one set of episodes."""
    counts = task_counts(results)
    return {
        "tasks": len(counts),
        "episodes": len(results),
        "pass1": mean_over_tasks(counts, 1, pass_at_k),
        "pass_at_k": {str(j): mean_over_tasks(counts, j, pass_at_k) for j in range(1, k + 1)},
        "pass_hat_k": {str(j): mean_over_tasks(counts, j, pass_hat_k) for j in range(1, k + 1)},
        "rs": {str(c): reliability_score(results, c) for c in RS_PENALTIES},
    }


def group_stats(results: Sequence[EpisodeResult], k: int) -> dict:
    """Clean, noise and all episodes of one group, plus Pass@1 Clean, Pass@1 Noise and the gap."""
    clean = [r for r in results if r.condition == "clean"]
    noise = [r for r in results if r.condition == "noise"]
    stats = {name: condition_stats(part, k) for name, part in (("clean", clean), ("noise", noise), ("all", results))}
    p_clean, p_noise = stats["clean"]["pass1"], stats["noise"]["pass1"]
    return {"pass1_clean": p_clean, "pass1_noise": p_noise, "gap": gap(p_clean, p_noise), **stats}


def breakdown(results: Sequence[EpisodeResult], field: str, k: int) -> dict[str, dict]:
    """group_stats per value of a label field (a clean task counts under its pair's level and sub-type)."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[getattr(r, field)].append(r)
    return {value: group_stats(groups[value], k) for value in sorted(groups)}


def agent_metrics(results: Sequence[EpisodeResult], k: int) -> dict:
    """Everything metrics.json holds for one agent: overall, then by intent, scope, level and sub-type."""
    return {"overall": group_stats(results, k), "by": {field: breakdown(results, field, k) for field in GROUP_FIELDS}}


def trials_per_task(results: Sequence[EpisodeResult]) -> int:
    """The k every task was run with; raises when tasks differ (pass@k would mix estimators)."""
    ns = {n for n, _ in task_counts(results).values()}
    if len(ns) != 1:
        raise ValueError(f"tasks have different trial counts {sorted(ns)}; every task needs the same k")
    return ns.pop()
