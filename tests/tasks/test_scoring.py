"""Scoring: llm-foundry's per-example rules and DCLM / Gadre aggregates, as table-driven cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.tasks import (
    ExampleScore,
    TaskSpec,
    centered_accuracy,
    load_suite,
    normalize_answer,
    parse_examples,
    score_example,
    suite_aggregate,
    task_accuracy,
    task_spec,
    task_standard_error,
    validation_loss,
)
from flasheval.types import GenerationResult, LoglikelihoodResult, RollingLoglikelihoodResult


def _one(spec: TaskSpec, record: dict):
    (example,) = parse_examples(spec, json.dumps(record).encode(), where="t.jsonl")
    return example


def _ll(example, index: int, logprob_sum: float, n_tokens: int, is_greedy: bool = False) -> LoglikelihoodResult:
    return LoglikelihoodResult(task_name=example.task_name, example_id=example.example_id, choice_index=index,
                               logprob_sum=logprob_sum, n_tokens=n_tokens, is_greedy=is_greedy)


# (per-choice (logprob_sum, n_tokens), gold, expected prediction): length-normalized, first minimum wins.
MC_CASES = [
    ([(-4.0, 2), (-3.0, 1)], 0, 0),   # mean nll 2.0 vs 3.0: the longer choice wins despite a lower sum
    ([(-3.0, 1), (-4.0, 2)], 0, 1),
    ([(-2.0, 1), (-4.0, 2)], 1, 0),   # tie: the first choice
    ([(-9.0, 3), (-1.0, 1), (-5.0, 5)], 2, 1),
]


@pytest.mark.parametrize(("choices", "gold", "prediction"), MC_CASES)
def test_multiple_choice_picks_lowest_mean_nll(choices, gold, prediction) -> None:
    spec = task_spec("copa")
    example = _one(spec, {"query": "q", "choices": [f"c{i}" for i in range(len(choices))], "gold": gold})
    results = [_ll(example, i, s, n) for i, (s, n) in enumerate(choices)][::-1]  # order must not matter
    score = score_example(spec, example, results)
    assert score.prediction == prediction
    assert score.correct == (prediction == gold)
    assert score.choice_mean_nll == tuple(-s / n for s, n in choices)


def test_schema_scores_like_multiple_choice() -> None:
    spec = task_spec("winogrande")
    example = _one(spec, {"context_options": ["a", "b"], "continuation": "c", "gold": 1})
    assert score_example(spec, example, [_ll(example, 0, -5.0, 2), _ll(example, 1, -2.0, 2)]).correct


@pytest.mark.parametrize("is_greedy", [True, False])
def test_language_modeling_needs_every_token_greedy(is_greedy: bool) -> None:
    spec = task_spec("lambada_openai")
    example = _one(spec, {"context": "a b", "continuation": "c"})
    assert score_example(spec, example, [_ll(example, 0, -1.0, 1, is_greedy)]).correct is is_greedy


# (generated text, answer, aliases, correct) for triviaqa (no CoT, no stops) and gsm8k_cot.
GENERATION_CASES = [
    ("triviaqa_sm_sub", " The Tower of London.\nQuestion: next", "Tower of London", [], True),  # prefix match
    ("triviaqa_sm_sub", " Paris", "London", ["Paris"], True),
    ("triviaqa_sm_sub", " Lond", "London", [], False),
    ("triviaqa_sm_sub", " U.S.A", "USA", [], False),  # punctuation becomes a space: "u s a"
    ("gsm8k_cot", " 3 + 4 = 7 apples. #### 7\n\nQ: more", "7", [], True),
    ("gsm8k_cot", " 3 + 4 = 7 #### 8 #### 7", "7", [], True),  # the text after the LAST delimiter
    ("gsm8k_cot", " so 7. Q: next #### 7", "7", [], False),  # cut at the stop sequence "Q:" first
    ("gsm8k_cot", " the answer is 7", "7", [], False),  # no delimiter: whole text must start with 7
    ("gsm8k_cot", " 70 #### 180", "18", [], True),  # llm-foundry's prefix rule: "180" starts with "18"
]


@pytest.mark.parametrize(("task", "text", "answer", "aliases", "correct"), GENERATION_CASES)
def test_generation_exact_match(task, text, answer, aliases, correct) -> None:
    spec = task_spec(task)
    record = {"context": "q", "answer": answer, "aliases": aliases}
    if spec.cot_delimiter:
        record["chain_of_thought"] = "cot"
    example = _one(spec, record)
    result = GenerationResult(task_name=example.task_name, example_id=example.example_id, text=text)
    assert score_example(spec, example, [result]).correct is correct


@pytest.mark.parametrize(("raw", "normalized"), [
    ("The Beatles", "beatles"), ("an apple a day", "apple day"), ("Rock_and roll!", "rock and roll"),
    ("‘quoted’", "quoted"), ("  A  ", ""), ("Theatre", "theatre"),
])
def test_normalize_answer(raw: str, normalized: str) -> None:
    assert normalize_answer(raw) == normalized


def test_results_must_belong_to_the_example() -> None:
    spec = task_spec("copa")
    example = _one(spec, {"query": "q", "choices": ["a", "b"], "gold": 0})
    other = LoglikelihoodResult(task_name="copa", example_id="999999", choice_index=1, logprob_sum=-1.0,
                                n_tokens=1, is_greedy=False)
    with pytest.raises(ValueError, match="999999"):
        score_example(spec, example, [_ll(example, 0, -1.0, 1), other])
    with pytest.raises(ValueError, match="expected 2 results"):
        score_example(spec, example, [_ll(example, 0, -1.0, 1)])


def test_task_accuracy_macro_averages_categories() -> None:
    flags = [("a", True)] * 3 + [("a", False)] + [("b", False)]
    scores = [ExampleScore(task_name="t", example_id=f"{i}", category=c, correct=ok, prediction=0)
              for i, (c, ok) in enumerate(flags)]
    assert task_accuracy(scores) == pytest.approx(3 / 5)
    assert task_accuracy(scores, has_categories=True) == pytest.approx((3 / 4 + 0) / 2)


def _scores(flags: list[tuple[str | None, bool]]) -> list[ExampleScore]:
    return [ExampleScore(task_name="t", example_id=f"{i}", category=c, correct=ok, prediction=0)
            for i, (c, ok) in enumerate(flags)]


def test_task_standard_error_matches_scipy_sem() -> None:
    from scipy import stats

    rng = np.random.default_rng(5)
    for n in (2, 7, 40):
        correct = rng.random(n) < 0.6
        scores = _scores([(None, bool(c)) for c in correct])
        assert task_standard_error(scores) == pytest.approx(stats.sem(correct.astype(float)), rel=1e-12)
    # macro-average over categories: the mean of C independent means, variance sum(sem_c^2) / C^2
    a, b = [True, False, True, True], [False, False, True]
    scores = _scores([("a", x) for x in a] + [("b", x) for x in b])
    expected = math.sqrt(stats.sem(np.array(a, float)) ** 2 + stats.sem(np.array(b, float)) ** 2) / 2
    assert task_standard_error(scores, has_categories=True) == pytest.approx(expected, rel=1e-12)
    assert task_standard_error(_scores([("a", True), ("a", False), ("b", True)]), has_categories=True) is None
    assert task_standard_error(_scores([(None, True)])) is None


def test_standard_error_covers_the_true_accuracy_at_the_nominal_rate() -> None:
    """Coverage of accuracy +- 1.96 s.e. over simulated tasks of 200 examples (p = 0.3): about 95%."""
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(2000):
        scores = _scores([(None, bool(x)) for x in rng.random(200) < 0.3])
        acc, se = task_accuracy(scores), task_standard_error(scores)
        hits += abs(acc - 0.3) <= 1.96 * se
    assert 0.93 <= hits / 2000 <= 0.97


@pytest.mark.parametrize(("suite_name", "baselines"), [("dclm-core", "v2"), ("dclm-core", "v1"), ("gadre-17", "v2"),
                                                       ("dclm-mmlu", "v2")])
def test_suite_standard_error_is_the_linear_propagation(suite_name: str, baselines: str) -> None:
    """Every aggregate is linear in the task accuracies: its s.e. is sqrt(sum (d agg / d acc_t)^2 se_t^2),
    with the derivatives taken here by finite differences of the aggregate itself."""
    suite = load_suite(suite_name)
    rng = np.random.default_rng(3)
    accs = {t: float(rng.uniform(0.3, 0.7)) for t in suite.task_names if t != "coqa"}
    ses = {t: float(rng.uniform(0.01, 0.05)) for t in accs}
    result = suite_aggregate(suite, accs, baselines=baselines, partial=True, standard_errors=ses)
    h = 1e-6
    grads = {t: (suite_aggregate(suite, {**accs, t: accs[t] + h}, baselines=baselines, partial=True).value
                 - result.value) / h for t in accs}
    expected = math.sqrt(sum((grads[t] * ses[t]) ** 2 for t in accs))
    assert result.standard_error == pytest.approx(expected, rel=1e-6)
    assert suite_aggregate(suite, accs, baselines=baselines, partial=True,
                           standard_errors={**ses, next(iter(ses)): None}).standard_error is None


def test_centered_accuracy() -> None:
    assert centered_accuracy(0.25, 0.25) == 0.0
    assert centered_accuracy(1.0, 0.5) == 1.0
    assert centered_accuracy(0.4, 0.0) == 0.4


def test_suite_aggregates_and_partial_policy() -> None:
    core = load_suite("dclm-core")
    accs = {t.name: 0.5 for t in core.tasks}
    expected = sum((0.5 - t.random_baseline("v1")) / (1 - t.random_baseline("v1")) for t in core.tasks) / 22
    assert suite_aggregate(core, accs, baselines="v1").value == pytest.approx(expected, abs=1e-15)
    gadre = load_suite("gadre-17")
    assert suite_aggregate(gadre, {t: 0.75 for t in gadre.task_names}).value == pytest.approx(0.25)
    del accs["coqa"]
    with pytest.raises(InputError, match="incomplete: no score for coqa"):
        suite_aggregate(core, accs)
    partial = suite_aggregate(core, accs, partial=True)
    assert partial.partial and partial.missing == ("coqa",) and partial.n_tasks == 21


def test_validation_loss_is_token_and_byte_weighted() -> None:
    results = [
        RollingLoglikelihoodResult(task_name="v", example_id="0", logprob_sum=-10.0, n_tokens=5, n_bytes=20),
        RollingLoglikelihoodResult(task_name="v", example_id="1", logprob_sum=-2.0, n_tokens=3, n_bytes=12),
    ]
    loss = validation_loss(results)
    assert loss.mean_nll == pytest.approx(12 / 8)
    assert loss.bits_per_byte == pytest.approx(12 / math.log(2) / 32)
    assert (loss.n_tokens, loss.n_bytes) == (8, 32)
