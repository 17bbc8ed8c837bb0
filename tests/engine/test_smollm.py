"""The HF backend on the real SmolLM2-135M (GGUF, fp32): real log-likelihoods."""

from __future__ import annotations

import math

import pytest

from flasheval.types import LoglikelihoodRequest, RollingLoglikelihoodRequest

torch = pytest.importorskip("torch")

# Written for this test (not task text): ordinary English a language model should find likely.
TEXT = (
    "The museum opens at nine in the morning and closes at five in the afternoon. Visitors can buy "
    "tickets at the entrance or online, and children under twelve enter for free. On the first floor "
    "there is a small cafe where people often stop for coffee before walking through the galleries."
)
FEWSHOT = (
    "Question: What do plants need to make food?\nAnswer: sunlight\n"
    "Question: Which animal lays eggs?\nAnswer: a chicken\n"
    "Question: What is frozen water called?\nAnswer:"
)
CHOICES = (" ice", " steam", " a cloud of warm air", " sand")


def _mc_requests() -> list[LoglikelihoodRequest]:
    requests = [
        LoglikelihoodRequest(task_name="mc", example_id="0", choice_index=k, context=FEWSHOT, continuation=c) for k, c in enumerate(CHOICES)
    ]
    requests.append(LoglikelihoodRequest(task_name="mc", example_id="1", choice_index=0, context="The capital of France is", continuation=" Paris"))
    requests.append(LoglikelihoodRequest(task_name="mc", example_id="1", choice_index=1, context="The capital of France is", continuation=" a banana"))
    return requests


@pytest.mark.slow
def test_perplexity_of_real_text_far_below_random_twin(smollm_backend):
    from transformers import AutoModelForCausalLM

    from flasheval.engine.hf.backend import HFBackend

    request = [RollingLoglikelihoodRequest(task_name="v", example_id="0", text=TEXT)]
    real = smollm_backend.loglikelihood_rolling(request)[0]
    torch.manual_seed(0)  # test only: the twin's random initialisation
    twin_model = AutoModelForCausalLM.from_config(smollm_backend._model.config).eval()
    twin = HFBackend(twin_model, smollm_backend._tokenizer, fingerprint="random-twin").loglikelihood_rolling(request)[0]
    assert real.n_tokens == twin.n_tokens > 40
    real_ppl = math.exp(-real.logprob_sum / real.n_tokens)
    twin_ppl = math.exp(-twin.logprob_sum / twin.n_tokens)
    assert real_ppl < 100  # measured: about 30
    assert twin_ppl > 100 * real_ppl  # a random model is near uniform over the 49,152-token vocabulary


@pytest.mark.slow
def test_shared_context_equals_independent_scoring_within_1e_4(smollm_backend):
    requests = _mc_requests()
    shared = smollm_backend.loglikelihood(requests)
    model, tokenizer = smollm_backend._model, smollm_backend._tokenizer
    for request, result in zip(requests, shared):
        context = tokenizer(request.context).input_ids
        continuation = tokenizer(request.continuation, add_special_tokens=False).input_ids
        with torch.inference_mode():
            logprobs = model(torch.tensor([context + continuation])).logits[0].float().log_softmax(-1)
        expected = sum(logprobs[len(context) - 1 + j, t].item() for j, t in enumerate(continuation))
        assert result.logprob_sum == pytest.approx(expected, abs=1e-4)
        assert result.n_tokens == len(continuation)
    by_choice = {r.continuation: s for r, s in zip(requests, shared)}
    assert by_choice[" ice"].logprob_sum > by_choice[" sand"].logprob_sum
    assert by_choice[" Paris"].is_greedy and not by_choice[" a banana"].is_greedy


@pytest.mark.slow
def test_batched_equals_unbatched(smollm_backend):
    from flasheval.engine.hf.backend import HFBackend

    requests = _mc_requests()
    batched = smollm_backend.loglikelihood(requests)
    one_by_one = HFBackend(smollm_backend._model, smollm_backend._tokenizer, fingerprint="x", batch_size=1, share_context=False)
    for a, b in zip(batched, one_by_one.loglikelihood(requests)):
        assert a.logprob_sum == pytest.approx(b.logprob_sum, abs=1e-4)
        assert a.is_greedy == b.is_greedy


@pytest.mark.slow
def test_the_converted_folder_scores_exactly_as_the_gguf(smollm_backend, smollm_hf):
    # Other tests load SmolLM2 from the Hugging Face folder converted once per run (tests/conftest.py:
    # smollm_hf); here it must give the GGUF's results bit for bit, tokens and greedy flags included.
    from flasheval.engine.hf.loading import load_hf_backend
    from flasheval.engine.loading import n_parameters

    converted = load_hf_backend(str(smollm_hf), dtype="float32", device="cpu", batch_size=16)
    requests = _mc_requests()
    rolling = [RollingLoglikelihoodRequest(task_name="text", example_id="0", text=TEXT)]
    assert converted.loglikelihood(requests) == smollm_backend.loglikelihood(requests)
    assert converted.loglikelihood_rolling(rolling) == smollm_backend.loglikelihood_rolling(rolling)
    assert converted._tokenizer(TEXT)["input_ids"] == smollm_backend._tokenizer(TEXT)["input_ids"]
    assert n_parameters(converted) == n_parameters(smollm_backend) == 134_515_008
