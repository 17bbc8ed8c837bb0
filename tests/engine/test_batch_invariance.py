"""A request's log-likelihood does not depend on what else is in its batch, in reduced precision too.

Each request is scored alone (batch of one), then in batches with other companions, other padding
lengths and another order, and the two are compared. Without the padded-width rounding of
:func:`~flasheval.engine.hf.forward.padded_width` (``pad_multiple=1``) the CPU attention kernels add a
row's terms up in another order whenever its padding changes, and bf16 makes that visible: 0.12 to
0.22 nats per choice on SmolLM2-135M, 6e-4 to 3e-3 on the tiny Llamas below. In float32 the effect is
below the tolerance, and float32 runs without the rounding by default
(:func:`~flasheval.engine.hf.forward.default_pad_multiple`): the float32 case below checks that default.
"""

from __future__ import annotations

import random

import pytest

from flasheval.engine.hf.backend import HFBackend
from flasheval.types import LoglikelihoodRequest
from tests.engine.conftest import tiny_model_and_tokenizer

WORDS = "the a king queen sang over hills and rivers while seven small birds watched quietly from old trees".split()


def _requests(n_words: tuple[int, int], seed: int = 0) -> list[LoglikelihoodRequest]:
    """Five contexts of ``n_words`` words (a range), one to four choices each."""
    rng = random.Random(seed)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    requests = []
    for e in range(5):
        context = text(rng.randint(*n_words))
        for c in range(rng.randint(1, 4)):
            requests.append(LoglikelihoodRequest(task_name="t", example_id=str(e), choice_index=c, context=context,
                                                 continuation=" " + text(rng.randint(1, 4))))
    return requests


def largest_batch_effect(model, tokenizer, requests, **options) -> float:
    """Largest |log-likelihood in a batch - log-likelihood alone| over the requests and four batchings."""
    def run(batch_size: int, order: list[LoglikelihoodRequest]) -> dict[tuple[str, int], float]:
        backend = HFBackend(model, tokenizer, fingerprint="x", batch_size=batch_size, **options)
        return {(r.example_id, r.choice_index): x.logprob_sum for r, x in zip(order, backend.loglikelihood(order))}

    alone: dict[tuple[str, int], float] = {}
    for request in requests:
        alone.update(run(1, [request]))
    shuffled = list(requests)
    random.Random(1).shuffle(shuffled)
    batched = [run(16, requests), run(16, requests[::-1]), run(3, shuffled), run(5, shuffled[::-1])]
    return max(abs(b[key] - alone[key]) for b in batched for key in alone)


@pytest.fixture(scope="module")
def tiny_peaky():
    """The tiny Llama with its output layer scaled x4 (logits over several nats: rounding shows)."""
    import torch

    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=2048)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model, tokenizer


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_short_requests_score_the_same_alone_and_in_any_batch(tiny_peaky, dtype):
    import torch

    model, tokenizer = tiny_peaky
    model = model.to(getattr(torch, dtype))
    try:
        default = HFBackend(model, tokenizer, fingerprint="x")._pass.pad_multiple
        assert default == (1 if dtype == "float32" else 16)  # the rounding where a 2-byte type needs it
        assert largest_batch_effect(model, tokenizer, _requests((1, 12))) <= 1e-4
        if dtype == "bfloat16":  # the test can fail: without the rounding it does
            assert largest_batch_effect(model, tokenizer, _requests((1, 12)), pad_multiple=1) > 1e-4
    finally:
        model.to(torch.float32)


def test_long_requests_need_the_kernel_block_as_multiple(tiny_peaky):
    """Over 512 keys the CPU attention kernel blocks them by 512 from column 0: a multiple of 512 aligns those too."""
    import torch

    model, tokenizer = tiny_peaky
    model = model.to(torch.bfloat16)
    try:
        requests = _requests((130, 200))
        assert max(len(r.context) for r in requests) > 600  # byte tokens: well over one 512-key block
        assert largest_batch_effect(model, tokenizer, requests, pad_multiple=512) <= 1e-4
    finally:
        model.to(torch.float32)


@pytest.mark.slow
def test_smollm2_in_bf16_is_batch_invariant_within_a_hundredth_of_a_nat(smollm_hf):
    """The real SmolLM2-135M in bf16, natural prompts under 512 tokens: within 1e-2 nats (measured: 0). Its
    converted float32 folder loaded in bf16: the same weights as the GGUF's own bf16 load, without a second parse."""
    from flasheval.engine.hf.loading import load_hf_backend

    backend = load_hf_backend(str(smollm_hf), dtype="bfloat16", device="cpu")
    contexts = {
        "The capital of France is": [" Paris", " London", " a big city"],
        "Once upon a time, in a land far away, there lived a king who had three daughters. The youngest":
            [" was", " daughter", " loved to sing songs all day long"],
        "Q: What is 2 + 2?\nA:": [" 4", " four", " 22"],
        "A long time ago " * 12 + "the": [" end", " beginning"],
        "Water boils at": [" 100 degrees", " low temperatures"],
    }
    requests = [LoglikelihoodRequest(task_name="t", example_id=str(e), choice_index=c, context=context,
                                     continuation=continuation)
                for e, (context, choices) in enumerate(contexts.items()) for c, continuation in enumerate(choices)]
    effect = largest_batch_effect(backend.model, backend.tokenizer, requests)
    gemm = bf16_row_count_effect()
    if effect > 1e-2 and gemm > 0:
        # Padded widths cannot help where the matrix product itself depends on how many rows it is given.
        pytest.xfail(f"batch effect {effect:.3g} nats: this CPU's bf16 matrix product depends on the row count "
                     f"(a (32, 576) x (576, 1536) block differs by {gemm:.3g} alone and in a batch of 8; oneDNN "
                     "picks another kernel by size, e.g. on AMX CPUs); docs/engine.md, 'Batch invariance'")
    assert effect <= 1e-2


def bf16_row_count_effect() -> float:
    """Largest difference of a bf16 linear layer's output for one (32, 576) block alone and inside a batch of 8.

    An independent check of the kernel underneath (SmolLM2's widths): 0 where the CPU's bf16 matrix product
    does not depend on its row count, so the engine's padding is what the test above measures.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(1536, 576, generator=gen).bfloat16()
    x = torch.randn(8, 32, 576, generator=gen).bfloat16()
    with torch.no_grad():
        batched = torch.nn.functional.linear(x, weight)
        alone = torch.nn.functional.linear(x[:1], weight)
    return float((alone - batched[:1]).abs().max())
