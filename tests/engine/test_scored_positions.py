"""Logits only where a token is scored: the same numbers as a plain full forward, and no logits for padding.

The packed passes keep the logits of the scored positions only (a hook on the output layer), the shared
continuation pass those of the columns up to the longest continuation (``logits_to_keep``), and only the scored positions are upcast and log-softmaxed; the unpadded pass keeps the continuation's
columns. Checked on the tiny seeded Llama against an independent computation (one plain forward over
``context + continuation``, every position's logits, a manual float32 log-softmax), against the path that
computes every column (a model without ``logits_to_keep``), and by counting the rows the output layer sees.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from flasheval.engine.planning import Group, Item
from flasheval.types import LoglikelihoodRequest
from tests.engine.conftest import tiny_model_and_tokenizer

torch = pytest.importorskip("torch")
hf = pytest.importorskip("flasheval.engine.hf.backend")
hf_forward = pytest.importorskip("flasheval.engine.hf.forward")

CONTEXTS = ["", "The sky is", "Which is larger, a cat or a horse?"]  # + continuation < 64 positions
CHOICES = [" blue", " a", " the ocean floor at night", "!"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=3)


def _requests() -> list[LoglikelihoodRequest]:
    return [LoglikelihoodRequest(task_name="t", example_id=str(e), choice_index=k, context=context, continuation=choice)
            for e, context in enumerate(CONTEXTS) for k, choice in enumerate(CHOICES)]


def _independent(model, tokenizer, request) -> float:
    """One plain forward over context + continuation, all logits, float32 log-softmax by hand."""
    context = tokenizer(request.context).input_ids or [tokenizer.bos_token_id]
    continuation = tokenizer(request.continuation, add_special_tokens=False).input_ids
    with torch.no_grad():
        logits = model(torch.tensor([context + continuation])).logits[0].float()
    logprobs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return sum(float(logprobs[len(context) - 1 + j, t]) for j, t in enumerate(continuation))


class _CountRows:
    """Records the positions the output layer computes logits for, per call."""

    def __init__(self, model) -> None:
        self.rows: list[int] = []
        self.handle = model.lm_head.register_forward_hook(lambda _m, inputs, _o: self.rows.append(
            inputs[0].shape[:-1].numel()))


def test_scored_positions_equal_a_full_forward_and_the_all_logits_path(tiny):
    model, tokenizer = tiny
    requests = _requests()
    backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=16)
    assert backend._pass.keep_one == {"logits_to_keep": 1}
    counter = _CountRows(model)
    try:
        scored = backend.loglikelihood(requests)
    finally:
        counter.handle.remove()
    everything = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=16)
    everything._pass = replace(everything._pass, keep_one={})  # a model without logits_to_keep: every column
    full = everything.loglikelihood(requests)
    for request, ours, theirs in zip(requests, scored, full):
        assert ours.logprob_sum == pytest.approx(_independent(model, tokenizer, request), abs=1e-5)
        assert ours.logprob_sum == pytest.approx(theirs.logprob_sum, abs=1e-6)
        assert ours.is_greedy == theirs.is_greedy
    # Packed (hf_packed.forward_packed). The long context (35 tokens with its BOS, over the tiny Llama's one-pass
    # limit of 33) in two passes: its whole context keeping only its last real column (it predicts each choice's
    # first token), repeated up to the 16 positions a matrix product needs for its rows' last bits; then its row of
    # choices keeping only the positions that hold a choice's input: every byte of a choice but its last
    # (4 + 1 + 24 + 0), not the padding between the segments nor a choice's last byte. The two short contexts in
    # one pass: their last columns and their choices' inputs, nothing else.
    assert backend._pass.packed and backend._pass.one_pass == 33
    inputs = sum(len(c.encode()) - 1 for c in CHOICES)
    assert counter.rows == [16, inputs, 2 + 2 * inputs]


def test_unpadded_pass_keeps_only_the_continuation_columns(tiny):
    model, tokenizer = tiny
    settings = hf_forward.pass_settings(model, pad_id=0)
    context = tuple(tokenizer("Question: which is larger?").input_ids)
    items = tuple(Item(index=k, context=context, continuation=tuple(tokenizer(c, add_special_tokens=False).input_ids))
                  for k, c in enumerate(CHOICES))
    counter = _CountRows(model)
    try:
        kept = hf_forward.forward_unpadded(model, Group(context=context, items=items), settings)
    finally:
        counter.handle.remove()
    every = hf_forward.forward_unpadded(model, Group(context=context, items=items), replace(settings, keep_one={}))
    # The continuation's columns, and at least 16 (the CPU matrix product's last bits change below 16 rows).
    assert counter.rows == [min(len(context) + len(item.continuation) - 1, max(len(item.continuation), 16))
                            for item in items]
    for (item, ours, greedy), (_, theirs, their_greedy) in zip(kept, every):
        request = LoglikelihoodRequest(task_name="t", example_id="0", choice_index=item.index,
                                       context="Question: which is larger?", continuation=CHOICES[item.index])
        assert ours == pytest.approx(_independent(model, tokenizer, request), abs=1e-5)
        assert ours == pytest.approx(theirs, abs=1e-6) and greedy == their_greedy


@pytest.mark.parametrize("context", ["Answer: the letter " * 3, "Answer: the letter"])
def test_single_token_choices_run_the_context_pass_only(tiny, context):
    """Choices of one token each (ARC's letters, say): the whole context's last column predicts them all, so
    the packed layout runs one pass, whose output layer sees the last 16 columns (the matrix product's rows):
    without a mask for a long context (two-pass layout, whose second pass is empty), under the context's causal
    mask for a short one (the one-pass layout)."""
    model, tokenizer = tiny
    requests = [LoglikelihoodRequest(task_name="t", example_id="0", choice_index=k, context=context,
                                     continuation=letter) for k, letter in enumerate(" ABCD")]
    backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=16)
    assert backend._pass.packed
    counter = _CountRows(model)
    masks: list = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kwargs: masks.append(kwargs.get("attention_mask")),
                                             with_kwargs=True)
    try:
        scored = backend.loglikelihood(requests)
    finally:
        counter.handle.remove()
        handle.remove()
    assert counter.rows == [16]
    n = len(tokenizer(context).input_ids)
    if n > backend._pass.one_pass:
        assert masks == [None]  # right-padded, no mask: the attention's causal path
    else:
        assert len(masks) == 1 and torch.equal(masks[0][0, 0, :n, :n], torch.ones(n, n, dtype=torch.bool).tril())
    for request, result in zip(requests, scored):
        assert result.logprob_sum == pytest.approx(_independent(model, tokenizer, request), abs=1e-5)
        assert result.n_tokens == 1


def test_packed_choices_under_eager_attention_equal_a_full_forward():
    """Eager attention adds the mask to the scores: the packed pass gives it an additive float mask, not a boolean."""
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    model.config._attn_implementation = "eager"  # this test's own model
    backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=16)
    assert backend._pass.packed
    requests = _requests()
    for request, result in zip(requests, backend.loglikelihood(requests)):
        assert result.logprob_sum == pytest.approx(_independent(model, tokenizer, request), abs=1e-5)
