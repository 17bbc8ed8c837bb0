"""The bridge follows lm-eval's request conventions: on the real SmolLM2 (fp32), every request's
log-likelihood equals lm-eval 0.4.13's own HF backend within 1e-4, every accuracy is identical
and perplexities agree within 1e-6 (relative), for 0-shot and 3-shot multiple choice, a rolling log-likelihood task and a generation task."""

from __future__ import annotations

import random

import pytest

from tests.lmeval.conftest import ALL_TASKS

pytestmark = pytest.mark.slow


def _responses(results, task):
    return [(row["doc_id"], [r[0] for r in row["resps"]]) for row in sorted(results["samples"][task],
                                                                              key=lambda r: r["doc_id"])]


@pytest.mark.parametrize("task", ["synth_arith", "synth_story", "synth_text"])
def test_every_request_loglikelihood_equals_lm_eval_hf(runs, task):
    theirs, ours = _responses(runs["hf"], task), _responses(runs["flasheval"], task)
    assert [d for d, _ in theirs] == [d for d, _ in ours] and len(theirs) >= 4
    diffs = []
    for (_, a), (_, b) in zip(theirs, ours):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, (tuple, list)):  # (log-likelihood, is_greedy)
                assert x[1] == y[1]
                x, y = x[0], y[0]
            diffs.append(abs(x - y))
    assert max(diffs) <= 1e-4


def test_generations_equal_lm_eval_hf(runs):
    theirs, ours = _responses(runs["hf"], "synth_gen"), _responses(runs["flasheval"], "synth_gen")
    assert theirs == ours
    assert any(text.strip() for _, texts in ours for text in texts)  # the model did generate something


@pytest.mark.parametrize("task", ALL_TASKS)
def test_task_metrics_are_identical(runs, task):
    theirs, ours = runs["hf"]["results"][task], runs["flasheval"]["results"][task]
    metrics = {k for k in theirs if "," in k and "stderr" not in k}
    assert metrics
    for metric in metrics:
        if metric.split(",")[0] in ("acc", "acc_norm", "exact_match"):
            assert ours[metric] == theirs[metric]  # counts of right answers: identical
        else:  # perplexities are smooth in the log-likelihoods, which agree within 1e-4 per request
            assert ours[metric] == pytest.approx(theirs[metric], rel=1e-6)
    assert runs["hf"]["n-shot"][task] == runs["flasheval"]["n-shot"][task]


def test_the_few_shot_prompts_are_lm_evals(runs):
    # Same prompts, same shots (lm-eval's sampler, seed 1234): the bridge only answers requests.
    for task in ALL_TASKS:
        a = {r["doc_id"]: r["arguments"] for r in runs["hf"]["samples"][task]}
        b = {r["doc_id"]: r["arguments"] for r in runs["flasheval"]["samples"][task]}
        assert a == b
    assert runs["flasheval"]["n-shot"]["synth_story"] == 3


STRINGS = ["Question: What is 2 plus 2?\nAnswer:", "A sentence that ends with spaces   ", "", "<|im_start|>user hi",
           "Tabs\tand\nnew lines ", "日本語のテキスト"]
CONTINUATIONS = [" 4", "yes", " the end.", "\n", "  two spaces", "テスト"]


def test_tokenization_equals_hflm(runs, bridge):
    # Trailing spaces move to the continuation, merges across the boundary, empty contexts, a BOS-text prefix.
    hf, conventions = runs["hf_lm"], bridge.cached._backend
    for context in STRINGS:
        for continuation in CONTINUATIONS:
            if context:
                expected = hf._encode_pair(context, continuation)
            else:
                cont = hf.tok_encode(continuation, add_special_tokens=False)
                expected = ([hf.prefix_token_id], cont)
            assert tuple(map(list, conventions.encode_pair(context, continuation))) == tuple(map(list, expected))


def test_rolling_windows_equal_lm_evals(lm_eval):
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    from flasheval.lmeval.conventions import rolling_windows

    rng = random.Random(0)
    for _ in range(200):
        tokens = [rng.randrange(100) for _ in range(rng.randrange(0, 40))]
        max_length = rng.randrange(1, 12)
        expected = [make_disjoint_window(w) for w in get_rolling_token_windows(tokens, prefix_token=-1,
                                                                               max_seq_len=max_length, context_len=1)]
        assert rolling_windows(tokens, prefix_token=-1, max_length=max_length) == expected
