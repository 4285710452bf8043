"""Metric functions against hand-computed examples: pass@k, pass^k, Pass@1 Clean/Noise, the gap, RS(c), breakdowns."""

from __future__ import annotations

import doctest

import pytest

from pipeline.evaluate import metrics
from pipeline.evaluate.metrics import (
    agent_metrics,
    breakdown,
    gap,
    pass1,
    pass_at_k,
    pass_hat_k,
    reliability_score,
    rs_episode,
    trials_per_task,
)
from pipeline.evaluate.records import EpisodeResult


def result(
    task: str,
    passed: bool,
    *,
    condition="noise",
    answerable=False,
    abstained=False,
    answered=True,
    trial=0,
    level="record",
    subtype="missing_record",
    intent="laboratory",
    scope="patient",
) -> EpisodeResult:
    contract = "answer" if condition == "clean" else ("repair" if answerable else "abstain")
    return EpisodeResult(
        agent="a",
        task_id=task,
        trial=trial,
        split="test",
        condition=condition,
        intent=intent,
        scope=scope,
        level=level,
        subtype=subtype,
        contract=contract,
        answerable=answerable,
        answered=answered,
        abstained=abstained,
        passed=passed,
    )


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),
        (5, 5, 3, 1.0),
        (5, 2, 1, 0.4),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 4, 1.0),  # fewer than 4 failures: any 4 draws include a pass
        (10, 3, 3, 1 - 35 / 120),  # C(7,3) = 35, C(10,3) = 120
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 5, 5, 1.0),
        (5, 0, 1, 0.0),
        (5, 2, 1, 0.4),
        (4, 2, 2, 1 / 6),  # C(2,2)/C(4,2)
        (5, 3, 2, 0.3),  # C(3,2)/C(5,2) = 3/10
        (5, 2, 3, 0.0),  # cannot draw 3 passes from 2
        (10, 7, 3, 35 / 120),
    ],
)
def test_pass_hat_k(n, c, k, expected):
    assert pass_hat_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
def test_k_above_n_raises(fn):
    with pytest.raises(ValueError, match="k=4 exceeds the n=3 trials"):
        fn(3, 1, 4)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0)])
def test_bad_counts_raise(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("answerable", "abstained", "correct", "answered", "expected"),
    [
        (True, False, True, True, 1.0),  # right answer to an answerable question
        (True, True, False, True, 0.0),  # abstaining on an answerable question
        (True, False, False, True, -10.0),  # wrong answer
        (False, False, False, True, -10.0),  # answering an unanswerable question
        (False, True, True, True, 1.0),  # abstaining on an unanswerable question
        (False, True, False, True, 1.0),  # RS scores the answer only, like EHRSQL (not the verifier's evidence check)
        (True, False, False, False, 0.0),  # never answered: neither answer nor abstention
        (False, False, False, False, 0.0),
    ],
)
def test_rs_episode(answerable, abstained, correct, answered, expected):
    assert rs_episode(answerable, abstained, correct, 10, answered) == expected


def test_reliability_score_hand_computed():
    episodes = [
        result("c1", True, condition="clean", answerable=True),  # +1
        result("c2", False, condition="clean", answerable=True),  # wrong: -c
        result("c3", False, condition="clean", answerable=True, abstained=True),  # 0
        result("n1", True, abstained=True),  # +1
        result("n2", False),  # answered an unanswerable: -c
    ]
    assert reliability_score(episodes, 0) == pytest.approx(2 / 5)
    assert reliability_score(episodes, 5) == pytest.approx((1 - 5 + 0 + 1 - 5) / 5)
    assert reliability_score(episodes, 10) == pytest.approx((1 - 10 + 0 + 1 - 10) / 5)
    assert reliability_score([], 10) is None


def test_pass1_averages_per_task_and_gap():
    episodes = [result("c1", True, condition="clean", trial=t) for t in range(4)]
    episodes += [result("c2", t < 2, condition="clean", trial=t) for t in range(4)]
    episodes += [result("n1", t == 0, trial=t) for t in range(4)]
    clean = [e for e in episodes if e.condition == "clean"]
    noise = [e for e in episodes if e.condition == "noise"]
    assert pass1(clean) == pytest.approx((1.0 + 0.5) / 2)
    assert pass1(noise) == pytest.approx(0.25)
    assert gap(pass1(clean), pass1(noise)) == pytest.approx(0.5)
    assert gap(None, 0.3) is None and pass1([]) is None
    stats = agent_metrics(episodes, k=4)["overall"]
    assert stats["pass1_clean"] == pytest.approx(0.75) and stats["gap"] == pytest.approx(0.5)
    assert stats["noise"]["pass_at_k"]["2"] == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert stats["clean"]["pass_hat_k"]["2"] == pytest.approx((1 + 1 / 6) / 2)
    assert stats["noise"]["pass_hat_k"]["4"] == 0.0


def test_clean_task_counts_under_its_pairs_level_and_subtype():
    episodes = [
        result("c1", True, condition="clean", answerable=True, level="value", subtype="null_value"),
        result("n1", False, level="value", subtype="null_value"),
        result(
            "c2", True, condition="clean", answerable=True, level="query", subtype="false_premise", intent="encounter"
        ),
        result("n2", True, abstained=True, level="query", subtype="false_premise", intent="encounter"),
    ]
    by_level = breakdown(episodes, "level", k=1)
    assert sorted(by_level) == ["query", "value"]
    assert by_level["value"]["pass1_clean"] == 1.0 and by_level["value"]["pass1_noise"] == 0.0
    assert by_level["value"]["gap"] == 1.0 and by_level["query"]["gap"] == 0.0
    by_intent = agent_metrics(episodes, 1)["by"]["intent"]
    assert by_intent["encounter"]["all"]["tasks"] == 2 and by_intent["laboratory"]["noise"]["rs"]["10"] == -10.0


def test_empty_condition_gives_none_not_zero():
    stats = agent_metrics([result("c1", True, condition="clean", answerable=True)], k=1)["overall"]
    assert stats["pass1_noise"] is None and stats["gap"] is None and stats["noise"]["tasks"] == 0


def test_trials_per_task_requires_one_k():
    assert trials_per_task([result("a", True, trial=0), result("a", True, trial=1)]) == 2
    with pytest.raises(ValueError, match="different trial counts"):
        trials_per_task([result("a", True, trial=0), result("a", True, trial=1), result("b", True)])


def test_doctests():
    assert doctest.testmod(metrics).failed == 0
