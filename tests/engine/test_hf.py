"""The Hugging Face backend on a tiny seeded Llama built in code: exact mechanics, fast."""

from __future__ import annotations

import pytest

from flasheval.errors import BackendError
from flasheval.types import GenerationRequest, LoglikelihoodRequest, RollingLoglikelihoodRequest
from tests.engine.conftest import tiny_model_and_tokenizer

torch = pytest.importorskip("torch")
hf = pytest.importorskip("flasheval.engine.hf.backend")

CONTEXTS = ["", "Q", "Question: which is larger?\nAnswer:", "The sky is", "x" * 30]
CHOICES = [" blue", " a", " the ocean floor", "!"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=0)


def _requests(contexts=CONTEXTS, choices=CHOICES) -> list[LoglikelihoodRequest]:
    return [
        LoglikelihoodRequest(task_name="t", example_id=f"e{e}", choice_index=k, context=context, continuation=choice)
        for e, context in enumerate(contexts)
        for k, choice in enumerate(choices)
    ]


def _backend(tiny, **options) -> hf.HFBackend:
    model, tokenizer = tiny
    return hf.HFBackend(model, tokenizer, fingerprint="tiny", **options)


def _reference(tiny, request: LoglikelihoodRequest, max_length: int = 64) -> tuple[float, bool]:
    """Plain full forward over context+continuation, full logits: the independent scoring."""
    model, tokenizer = tiny
    context = tokenizer(request.context).input_ids or [tokenizer.bos_token_id]
    continuation = tokenizer(request.continuation, add_special_tokens=False).input_ids
    context = context[-(max_length - len(continuation)) :]
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = model(ids).logits[0].float().log_softmax(-1)
    rows = logprobs[len(context) - 1 : -1]
    total = sum(rows[j, t].item() for j, t in enumerate(continuation))
    greedy = all(rows[j].argmax().item() == t for j, t in enumerate(continuation))
    return total, greedy


def test_shared_context_equals_independent_full_forward(tiny):
    requests = _requests()
    results = _backend(tiny, batch_size=8).loglikelihood(requests)
    for request, result in zip(requests, results):
        expected, greedy = _reference(tiny, request)
        assert result.logprob_sum == pytest.approx(expected, abs=1e-5)
        assert result.is_greedy == greedy
        assert (result.task_name, result.example_id, result.choice_index) == (
            request.task_name,
            request.example_id,
            request.choice_index,
        )
        assert result.n_tokens == len(request.continuation.encode())  # byte tokenizer: one token per byte


def test_batched_equals_unbatched_and_unshared(tiny):
    requests = _requests()
    batched = _backend(tiny, batch_size=32).loglikelihood(requests)
    single = _backend(tiny, batch_size=1, share_context=False).loglikelihood(requests)
    for a, b in zip(batched, single):
        assert a.logprob_sum == pytest.approx(b.logprob_sum, abs=1e-5)
        assert a.is_greedy == b.is_greedy


def test_plan_is_longest_first_and_keeps_choices_together(tiny):
    requests = _requests()
    plan = _backend(tiny, batch_size=8).plan_batches(requests)
    assert sorted(i for batch in plan for i in batch) == list(range(len(requests)))
    first = {requests[i].example_id for i in plan[0]}
    assert first == {"e2"}  # the longest context (35 tokens with its BOS) runs first, in two passes
    # then the contexts short enough for one pass (the tiny Llama's limit: 33 tokens), never in a batch with it
    assert _backend(tiny)._pass.one_pass == 33
    assert "e4" in {requests[i].example_id for i in plan[1]}  # the widest of them ("x" * 30) first
    for batch in plan:  # all choices of an example land in the same batch
        for example_id in {requests[i].example_id for i in batch}:
            assert sum(requests[i].example_id == example_id for i in batch) == len(CHOICES)


def test_context_truncated_from_the_left_never_the_continuation(tiny):
    long_context = "abcdefghij" * 10  # 100 bytes > max_length 64
    request = LoglikelihoodRequest(task_name="t", example_id="l", choice_index=0, context=long_context, continuation=" end")
    result = _backend(tiny).loglikelihood([request])[0]
    expected, _ = _reference(tiny, request, max_length=64)
    assert result.logprob_sum == pytest.approx(expected, abs=1e-5)
    assert result.n_context_tokens == 64 - 4
    too_long = LoglikelihoodRequest(task_name="t", example_id="l", choice_index=0, context="a", continuation="z" * 64)
    with pytest.raises(BackendError, match="never truncated"):
        _backend(tiny).loglikelihood([too_long])


class _OutOfMemoryOnce:
    """Fault injection: the wrapped real model raises an OOM error the first time a batch has more than ``limit`` rows."""

    def __init__(self, model, limit: int) -> None:
        self.model, self.limit, self.raised = model, limit, 0

    def __call__(self, **kwargs):
        if kwargs["input_ids"].shape[0] > self.limit:
            self.raised += 1
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.model(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def _layout(backend: hf.HFBackend, packed: bool) -> hf.HFBackend:
    """The backend with its choices packed in one row per group (the default here) or one row per choice."""
    from dataclasses import replace

    assert backend._pass.packed  # the tiny Llama packs by default
    backend._pass = replace(backend._pass, packed=packed, one_pass=backend._pass.one_pass if packed else 0)
    return backend


@pytest.mark.parametrize("packed", [True, False])
def test_out_of_memory_halves_the_batch_and_keeps_results(tiny, packed):
    requests = _requests()
    expected = _backend(tiny, batch_size=32).loglikelihood(requests)
    backend = _layout(_backend(tiny, batch_size=32), packed)
    limit = 2 if packed else 5  # rows per pass: the 5 contexts packed, the 20 choices in rows of their own
    faulty = _OutOfMemoryOnce(tiny[0], limit=limit)
    backend._model = faulty
    results = backend.loglikelihood(requests)
    assert faulty.raised >= 1
    assert backend.info.batch_size <= limit
    assert [r.logprob_sum for r in results] == pytest.approx([r.logprob_sum for r in expected], abs=1e-5)
    backend._model = _OutOfMemoryOnce(tiny[0], limit=0)
    with pytest.raises(BackendError, match="out of memory"):
        backend.loglikelihood(requests[:1])


def test_other_runtime_errors_are_not_swallowed(tiny):
    backend = _backend(tiny)

    class Broken:  # the real model, whose forward fails
        def __call__(self, **kwargs):
            raise RuntimeError("shape mismatch")

        def __getattr__(self, name):
            return getattr(tiny[0], name)

    backend._model = Broken()
    with pytest.raises(RuntimeError, match="shape mismatch"):
        backend.loglikelihood(_requests()[:2])


def test_rolling_matches_loglikelihood_of_short_text_and_windows_long_text(tiny):
    backend = _backend(tiny)
    text = "Validation text, short."
    rolling = backend.loglikelihood_rolling([RollingLoglikelihoodRequest(task_name="v", example_id="0", text=text)])[0]
    as_continuation = backend.loglikelihood(
        [LoglikelihoodRequest(task_name="v", example_id="0", choice_index=0, context="", continuation=text)]
    )[0]
    assert rolling.logprob_sum == pytest.approx(as_continuation.logprob_sum, abs=1e-5)
    assert rolling.n_tokens == len(text) and rolling.n_bytes == len(text)
    long_text = "lorem ipsum dolor sit amet " * 8  # 216 bytes, 4 windows of 63 tokens
    long = backend.loglikelihood_rolling([RollingLoglikelihoodRequest(task_name="v", example_id="1", text=long_text)])[0]
    assert long.n_tokens == len(long_text)
    assert long.logprob_sum < rolling.logprob_sum < 0


def test_generation_is_greedy_and_cut_at_stop_sequence(tiny):
    model, tokenizer = tiny
    backend = _backend(tiny, batch_size=4)
    contexts = ["The sky is", "Q"]
    plain = backend.generate([GenerationRequest(task_name="g", example_id=str(i), context=c, max_new_tokens=6) for i, c in enumerate(contexts)])
    for context, result in zip(contexts, plain):
        ids = tokenizer(context).input_ids
        with torch.no_grad():
            for _ in range(6):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        expected = tokenizer.decode(ids[-6:], skip_special_tokens=True)
        assert result.text == expected
    stop = plain[0].text[2:4]
    if not stop or plain[0].text.find(stop) != 2:
        pytest.skip("generated text too short to place a stop sequence")
    cut = backend.generate([GenerationRequest(task_name="g", example_id="0", context=contexts[0], stop_sequences=(stop,), max_new_tokens=6)])[0]
    assert cut.text == plain[0].text[:2]


def _padded_tokens(requests, batch, tokenizer, packed: bool, one_pass: int) -> int:
    """Rows x padded length of a planned batch, recomputed from the requests (independent of the planner), in
    float32 (no rounding: pad multiple 1).

    A row per choice: context + continuation. Packed: a row per context, its choices' inputs (all tokens but the
    last) side by side, after the context when it has at most ``one_pass`` tokens, else in a row of their own."""
    def n(text: str, **kw) -> int:
        return len(tokenizer(text, **kw).input_ids)

    if not packed:
        return len(batch) * max((n(requests[i].context) or 1) + n(requests[i].continuation) for i in batch)
    contexts = {requests[i].context for i in batch}
    inputs = {c: sum(n(requests[i].continuation, add_special_tokens=False) - 1 for i in batch
                     if requests[i].context == c) for c in contexts}
    widths = [(n(c) or 1) + inputs[c] if (n(c) or 1) <= one_pass else max(n(c) or 1, inputs[c]) for c in contexts]
    return len(contexts) * max(widths)


@pytest.mark.parametrize("packed", [True, False])
def test_token_budget_bounds_every_batch_and_keeps_results(tiny, packed):
    requests = _requests()
    roomy = _backend(tiny, batch_size=32).loglikelihood(requests)
    # one 4-choice group of the longest sequences (35 context + 15 continuation bytes); packed: 2 such contexts
    budget = 4 * 50 if not packed else 2 * 48
    backend = _layout(_backend(tiny, batch_size=32, max_batch_tokens=budget), packed)
    assert backend._pass.pad_multiple == 1  # float32's default: no rounding
    plan = backend.plan_batches(requests)
    assert len(plan) > 1 and any(len({requests[i].example_id for i in batch}) > 1 for batch in plan)
    for batch in plan:  # a group is never split, so only a group over the budget by itself may exceed it
        assert _padded_tokens(requests, batch, tiny[1], packed, backend._pass.one_pass) <= budget
    assert sorted(i for batch in plan for i in batch) == list(range(len(requests)))
    results = backend.loglikelihood(requests)
    assert [r.logprob_sum for r in results] == pytest.approx([r.logprob_sum for r in roomy], abs=1e-5)
    assert [r.is_greedy for r in results] == [r.is_greedy for r in roomy]


class _GenerateSpy:
    """The wrapped real model; records the rows of each ``generate`` call and raises an OOM error above ``limit`` rows."""

    def __init__(self, model, limit: int = 10**9) -> None:
        self.model, self.limit, self.calls, self.raised = model, limit, [], 0

    def generate(self, **kwargs):
        rows, width = kwargs["input_ids"].shape
        if rows > self.limit:
            self.raised += 1
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        self.calls.append((rows, width + kwargs["max_new_tokens"]))
        return self.model.generate(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def _generation_requests() -> list[GenerationRequest]:
    return [GenerationRequest(task_name="g", example_id=str(i), context=c, max_new_tokens=5) for i, c in enumerate(CONTEXTS)]


def test_generation_batches_respect_the_token_budget_and_back_off_on_oom(tiny):
    requests = _generation_requests()
    one_by_one = _backend(tiny, batch_size=1).generate(requests)
    backend = _backend(tiny, batch_size=8, max_batch_tokens=3 * 40)
    spy = _GenerateSpy(tiny[0])
    backend._model = spy
    assert [r.text for r in backend.generate(requests)] == [r.text for r in one_by_one]
    assert len(spy.calls) > 1 and all(rows * length <= 3 * 40 or rows == 1 for rows, length in spy.calls)
    backend = _backend(tiny, batch_size=8)
    backend._model = spy = _GenerateSpy(tiny[0], limit=2)
    assert [r.text for r in backend.generate(requests)] == [r.text for r in one_by_one]
    assert spy.raised >= 1 and backend.info.batch_size <= 2 and max(rows for rows, _ in spy.calls) <= 2
    backend._model = _GenerateSpy(tiny[0], limit=0)
    with pytest.raises(BackendError, match="out of memory"):
        backend.generate(requests[:1])


def test_limits_chosen_for_the_device_unless_given(tiny):
    from flasheval.engine.batching import CPU_ROWS, CPU_TOKENS

    auto = _backend(tiny)
    assert (auto.info.batch_size, auto.max_batch_tokens) == (CPU_ROWS, CPU_TOKENS)
    assert (_backend(tiny, batch_size=4).info.batch_size, _backend(tiny, batch_size=4).max_batch_tokens) == (4, 4096)
    assert (_backend(tiny, max_batch_tokens=100).info.batch_size, _backend(tiny, max_batch_tokens=100).max_batch_tokens) \
        == (CPU_ROWS, 100)
