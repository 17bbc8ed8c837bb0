"""``HFBackend.loglikelihood_tokens``: already tokenized pairs (how the lm-eval bridge calls the
engine) scored with shared contexts equal an independent plain full forward."""

from __future__ import annotations

import pytest

from flasheval.errors import BackendError
from tests.engine.conftest import tiny_model_and_tokenizer

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=1)


def _full_forward(model, context: list[int], continuation: list[int]) -> tuple[float, bool]:
    with torch.no_grad():
        logprobs = model(torch.tensor([context + continuation])).logits[0].float().log_softmax(-1)
    rows = logprobs[len(context) - 1 : -1]
    return (sum(rows[j, t].item() for j, t in enumerate(continuation)),
            all(rows[j].argmax().item() == t for j, t in enumerate(continuation)))


def test_token_pairs_equal_a_full_forward_and_report_every_batch(tiny):
    from flasheval.engine.hf.backend import HFBackend

    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, fingerprint="tiny", batch_size=3)
    contexts = [[256, 72, 105, 33], [256, 72, 105, 33], [65], [66, 67, 68, 69, 70, 71]]
    continuations = [[32, 97], [32, 98, 99], [101], [102, 103, 104, 105]]
    pairs = list(zip(contexts, continuations))
    seen = []
    got = backend.loglikelihood_tokens(pairs, on_results=seen.extend)
    for (context, continuation), (logprob, greedy) in zip(pairs, got, strict=True):
        expected = _full_forward(model, context, continuation)
        assert logprob == pytest.approx(expected[0], abs=1e-5) and greedy == expected[1]
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3]
    assert sorted(i for batch in backend.plan_token_batches(pairs) for i in batch) == [0, 1, 2, 3]
    assert backend.tokenizer is tokenizer
    with pytest.raises(BackendError, match="empty"):
        backend.loglikelihood_tokens([([], [1])])
