"""The pure half of ``evaluate(..., compare_dtype=...)``: flip counts and log-likelihood differences, as data."""

from __future__ import annotations

import pytest

from flasheval.evaluation.dtype_comparison import check_compare_dtype, compare_records
from flasheval.evaluation.example_records import ExampleRecord
from flasheval.errors import InputError


def _row(task: str, example_id: str, logprobs: tuple[float, ...], correct: bool, prediction: str | None = None) -> ExampleRecord:
    best = max(range(len(logprobs)), key=logprobs.__getitem__, default=-1)
    return ExampleRecord(task_name=task, example_id=example_id, category=None, fewshot_ids=(),
                         choice_logprob_sum=logprobs, choice_n_tokens=(1,) * len(logprobs),
                         prediction=str(best) if prediction is None else prediction, correct=correct,
                         score=float(correct))


# (run rows, reference rows, expected figures of task "t")
CASES = [
    pytest.param(  # nothing moves
        [_row("t", "a", (-1.0, -2.0), True)], [_row("t", "a", (-1.0, -2.0), True)],
        {"n_prediction_changed": 0, "n_correct_to_wrong": 0, "n_wrong_to_correct": 0, "n_choices": 2,
         "max_abs_delta_logprob": 0.0, "median_abs_delta_logprob": 0.0}, id="identical"),
    pytest.param(  # a: correct in the reference, wrong in the run; b: the reverse; c: wrong -> another wrong
        [_row("t", "a", (-2.0, -1.9), False), _row("t", "b", (-1.0, -1.5), True), _row("t", "c", (-3.0, -1.0, -2.0), False)],
        [_row("t", "a", (-2.0, -2.1), True), _row("t", "b", (-1.0, -0.5), False), _row("t", "c", (-3.0, -2.0, -1.0), False)],
        {"n_prediction_changed": 3, "n_correct_to_wrong": 1, "n_wrong_to_correct": 1, "n_choices": 7,
         "max_abs_delta_logprob": 1.0, "median_abs_delta_logprob": 0.2}, id="flips-both-ways"),
    pytest.param(  # generation: predictions are texts, no log-likelihoods
        [_row("t", "a", (), True, prediction="42")], [_row("t", "a", (), False, prediction="41")],
        {"n_prediction_changed": 1, "n_correct_to_wrong": 0, "n_wrong_to_correct": 1, "n_choices": 0,
         "max_abs_delta_logprob": None, "median_abs_delta_logprob": None}, id="generation"),
]


@pytest.mark.parametrize(("ours", "reference", "expected"), CASES)
def test_compare_records_table(ours, reference, expected):
    got = compare_records(ours, list(reversed(reference)))["t"]  # the reference's order does not matter
    assert got["n_examples"] == len(ours)
    for key, value in expected.items():
        assert got[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_compare_records_keeps_tasks_apart_and_refuses_other_examples():
    ours = [_row("x", "1", (-1.0,), True), _row("y", "1", (-1.0,), False)]
    theirs = [_row("x", "1", (-1.5,), True), _row("y", "1", (-1.25,), False)]
    got = compare_records(ours, theirs)
    assert list(got) == ["x", "y"] and got["x"]["max_abs_delta_logprob"] == 0.5 and got["y"]["n_choices"] == 1
    with pytest.raises(ValueError, match="same examples"):
        compare_records(ours, theirs[:1])
    with pytest.raises(ValueError, match="same examples"):
        compare_records(ours, [theirs[0], _row("y", "2", (-1.0,), False)])


@pytest.mark.parametrize(("value", "dtype", "kind", "message"), [
    ("float64", "bfloat16", "spec", "unknown dtype 'float64' (allowed: float32, bfloat16, float16)"),
    ("auto", "bfloat16", "spec", "unknown dtype 'auto'"),
    ("float32", "auto", "replay", "replay: models serve recorded scores"),
    ("float32", "auto", "in-memory", "an in-memory model runs as it is"),
    ("bfloat16", "bfloat16", "spec", "the run is already in bfloat16"),
])
def test_check_compare_dtype_refuses_in_one_line(value, dtype, kind, message):
    with pytest.raises(InputError, match="--compare-dtype") as caught:
        check_compare_dtype(value, dtype=dtype, kind=kind)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    check_compare_dtype(None, dtype=dtype, kind=kind)  # no comparison: nothing to refuse
