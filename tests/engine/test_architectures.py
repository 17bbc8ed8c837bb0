"""Shared-context, padded batches equal one unpadded forward pass per request, on every causal-LM
family the engine shares contexts for, sliding windows and local/global hybrids included (those run
one row per choice, except the short groups that fit their window: one packed pass; families without
windows run each group's choices packed in one row).

Tiny random models are built from each family's transformers config with a sliding window of 8
tokens; prompts run several windows long and every batch mixes lengths. The reference is the
model's own plain forward pass over ``context + continuation`` (one request, no padding, no
cache), so the windows are applied by transformers itself, independently of the engine.
"""

from __future__ import annotations

import functools
import logging

import pytest

from flasheval.engine.planning import Group, runs_in_one_pass
from flasheval.types import LoglikelihoodRequest
from tests.engine.conftest import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("flasheval.engine.hf.backend")

WINDOW = 8
HYBRID = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
# Contexts of 0 (BOS only) to 61 bytes = tokens; continuations of 1 to 14 tokens (longer than a window).
CONTEXTS = ["", "Q", "abcdefghij" * 3, "The quick brown fox jumps over the lazy dog, twice", "x" * 61,
            "Question: which is larger, a mouse or a horse?\nAnswer:"]
CHOICES = [" yes", " no way at all", "!"]


def _config(family: str, window: int = WINDOW):
    """Tiny config of ``family``: 4 layers, sliding window ``window`` (8) where the family has one."""
    common = dict(vocab_size=258, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=256, eos_token_id=257,
                  pad_token_id=257)
    sliding = dict(sliding_window=window)
    hybrid = dict(sliding_window=window, layer_types=HYBRID)
    return {
        "llama": lambda: transformers.LlamaConfig(**common),
        "gemma": lambda: transformers.GemmaConfig(**common, head_dim=8),
        "mistral": lambda: transformers.MistralConfig(**common, **sliding),
        "phi3": lambda: transformers.Phi3Config(**common, **sliding),
        "qwen2": lambda: transformers.Qwen2Config(**common, use_sliding_window=True, **hybrid),
        "qwen3": lambda: transformers.Qwen3Config(**common, head_dim=8, use_sliding_window=True, **hybrid),
        "gemma2": lambda: transformers.Gemma2Config(**common, head_dim=8, **hybrid),
        "gemma3_text": lambda: transformers.Gemma3TextConfig(**common, head_dim=8, **hybrid),
    }[family]()


FAMILIES = ("llama", "gemma", "mistral", "phi3", "qwen2", "qwen3", "gemma2", "gemma3_text")


def _requests() -> list[LoglikelihoodRequest]:
    return [LoglikelihoodRequest(task_name="t", example_id=f"e{e}", choice_index=k, context=context, continuation=choice)
            for e, context in enumerate(CONTEXTS) for k, choice in enumerate(CHOICES)]


def _unpadded_reference(model, tokenizer, request: LoglikelihoodRequest) -> tuple[float, bool]:
    """One plain forward pass over context + continuation (no padding, no cache)."""
    context = tokenizer(request.context).input_ids or [tokenizer.bos_token_id]
    continuation = tokenizer(request.continuation, add_special_tokens=False).input_ids
    with torch.inference_mode():  # logits of the last len(continuation) + 1 positions only (large vocabularies)
        logits = model(torch.tensor([context + continuation]), logits_to_keep=len(continuation) + 1).logits
    rows = logits[0, :-1].float().log_softmax(-1)
    total = sum(rows[j, t].item() for j, t in enumerate(continuation))
    return total, all(rows[j].argmax().item() == t for j, t in enumerate(continuation))


def _worst_against_unpadded(backend, requests: list[LoglikelihoodRequest]) -> float:
    """The largest |engine - unpadded reference| over ``requests`` scored by ``backend``; every greedy flag equal."""
    worst = 0.0
    for request, result in zip(requests, backend.loglikelihood(requests)):
        expected, greedy = _unpadded_reference(backend._model, backend._tokenizer, request)
        worst = max(worst, abs(result.logprob_sum - expected))
        assert result.is_greedy == greedy
    return worst


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@functools.cache
def _family_case(family: str, window: int = WINDOW):
    """The seeded tiny model of ``family`` and its unpadded reference (log-likelihood, greedy) per request."""
    config = _config(family, window)
    torch.manual_seed(0)  # test fixture only
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    tokenizer = byte_tokenizer()
    return model, [_unpadded_reference(model, tokenizer, r) for r in _requests()]


@pytest.mark.parametrize("share_context", [True, False])
@pytest.mark.parametrize("family", FAMILIES)
def test_padded_batches_equal_one_unpadded_pass_per_request(family, share_context, tokenizer):
    model, references = _family_case(family)
    config = model.config
    assert config.model_type == family
    if family not in ("llama", "gemma"):  # the windows are really there (a config may drop them silently)
        assert config.sliding_window == WINDOW
        assert "sliding_attention" in (getattr(config, "layer_types", None) or ["sliding_attention"])
    requests = _requests()
    # Families without sliding windows run a group's choices packed in one row (hf_packed.forward_packed):
    # a row per context there, so fewer rows per batch for the batches to mix lengths all the same.
    packed = share_context and family in ("llama", "gemma")
    backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=2 if packed else 7,
                           share_context=share_context)
    assert backend.shares_context is share_context
    assert backend._pass.packed is (family in ("llama", "gemma"))
    plan = backend.plan_batches(requests)
    assert len(plan) > 2 and any(len({requests[i].context for i in batch}) > 1 for batch in plan)  # mixed lengths
    if not backend._pass.packed:  # a sliding model: the groups that fit the window run one packed pass
        groups = [g for batch in backend._batches(backend._items(requests)) for g in batch]
        alone = [runs_in_one_pass(g, backend._pass.one_pass, backend._pass.window) for g in groups]
        assert backend._pass.window == WINDOW and any(alone) and not all(alone)
    results = backend.loglikelihood(requests)
    worst = max(abs(result.logprob_sum - expected) for result, (expected, _) in zip(results, references))
    assert worst <= 1e-4, f"{family}: max |shared - unpadded| = {worst:.2e}"
    assert [r.is_greedy for r in results] == [greedy for _, greedy in references]


@pytest.mark.parametrize("family", ["mistral", "gemma3_text"])
def test_sliding_models_run_the_groups_that_fit_their_window_in_one_packed_pass(family, tokenizer):
    """Window 32: the choices that fit it with their context run one packed pass under one 4-D mask on every layer,
    the others one row per choice; both equal transformers' own windowed passes."""
    model, references = _family_case(family, 32)
    backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=2)
    assert not backend._pass.packed and backend._pass.window == 32 and backend._pass.one_pass > 32
    requests = _requests()
    batches = backend._batches(backend._items(requests))
    kinds = [{runs_in_one_pass(g, backend._pass.one_pass, 32) for g in batch} for batch in batches]
    assert {True} in kinds and {False} in kinds and all(len(k) == 1 for k in kinds)  # both, never in one batch
    assert sum(len(g.items) > 1 for batch, k in zip(batches, kinds) if k == {True} for g in batch) >= 2
    # a choice's layout is its own: planned with its siblings or alone, the same choices run one pass; and one
    # context has choices of both kinds (its group cut at the window: planning.split_at_window)
    one = {i.index for batch, k in zip(batches, kinds) if k == {True} for g in batch for i in g.items}
    alone = {i.index for i in backend._items(requests)
             if runs_in_one_pass(Group(context=i.context, items=(i,)), backend._pass.one_pass, 32)}
    assert one == alone
    assert any(0 < sum(r.context == context and i in one for i, r in enumerate(requests)) < len(CHOICES)
               for context in CONTEXTS)
    results = backend.loglikelihood(requests)
    worst = max(abs(result.logprob_sum - expected) for result, (expected, _) in zip(results, references))
    assert worst <= 1e-4, f"{family}: max |engine - unpadded| = {worst:.2e}"
    assert [r.is_greedy for r in results] == [greedy for _, greedy in references]


def test_untested_family_falls_back_to_exact_unpadded_scoring(tokenizer, caplog):
    config = transformers.MambaConfig(vocab_size=258, hidden_size=32, state_size=4, num_hidden_layers=2,
                                      bos_token_id=256, eos_token_id=257, pad_token_id=257)
    torch.manual_seed(0)  # test fixture only
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with caplog.at_level(logging.WARNING, logger="flasheval.engine.hf.backend"):
        backend = hf.HFBackend(model, tokenizer, fingerprint="x", batch_size=8)
    assert not backend.shares_context
    assert "'mamba'" in caplog.text and "unpadded forward pass" in caplog.text
    requests = _requests()[:9]
    assert all(len(batch) == 1 for batch in backend.plan_batches(requests))
    for request, result in zip(requests, backend.loglikelihood(requests)):
        expected, greedy = _unpadded_reference(model, tokenizer, request)
        assert result.logprob_sum == pytest.approx(expected, abs=1e-5)
        assert result.is_greedy == greedy


@pytest.mark.slow
def test_real_gemma3_long_prompts_equal_unpadded_passes(gemma3_backend, task_dir):
    """Gemma-3-270M (window 512), two HellaSwag 10-shot prompts of more than 512 tokens, one shared-context call."""
    from flasheval.evaluation.selection import select_examples, task_requests

    model, tokenizer = gemma3_backend._model, gemma3_backend._tokenizer
    assert model.config.sliding_window == 512 and "full_attention" in model.config.layer_types
    # loaded with the tokenizer class named (hf_loading.load_tokenizer): the ids and vocabulary that
    # AutoTokenizer.from_pretrained(folder, gguf_file=...) gives without it (transformers 5.24, 3 Dec 2026)
    assert type(tokenizer).__name__ == "GemmaTokenizer" and len(tokenizer) == 262144
    assert tokenizer("The capital of France is Paris.").input_ids == [2, 818, 5279, 529, 7001, 563, 9079, 236761]
    assert tokenizer(" \u00fcn\u00efcode \u2713 123\n\n  <start_of_turn>x").input_ids == [
        2, 174898, 238527, 3970, 71201, 236743, 236770, 236778, 236800, 108, 138, 105, 236781]
    selection = select_examples(["hellaswag"], task_dir, n_examples=12, seed=1234)[0]
    by_id = task_requests(selection, seed=1234, prefix_space=gemma3_backend.info.prefix_space)
    lengths = {i: len(tokenizer(rs[0].context).input_ids) for i, rs in by_id.items()}
    # the 2 shortest above the window (8 unpadded reference passes: a third example added 20 s on one core)
    chosen = sorted((i for i in by_id if lengths[i] > 512), key=lengths.get)[:2]
    assert len(chosen) == 2 and len({lengths[i] for i in chosen}) == 2  # mixed lengths: the batch is padded
    requests = [r for i in chosen for r in by_id[i]]
    assert len(gemma3_backend.plan_batches(requests)) == 1  # one batch: the shorter context padded to the longer
    worst = _worst_against_unpadded(gemma3_backend, requests)
    assert worst <= 1e-4, f"max |shared - unpadded| = {worst:.2e} over {len(requests)} choices"


@pytest.mark.slow
def test_real_gemma3_zero_shot_prompts_run_one_packed_pass_and_equal_unpadded_passes(gemma3_backend, task_dir):
    """Gemma-3-270M (window 512): 0-shot HellaSwag and ARC-Easy prompts fit the window and run one packed pass."""
    from dataclasses import replace

    from flasheval.evaluation.selection import select_examples, task_requests

    settings = gemma3_backend._pass
    assert not settings.packed and settings.window == 512 and settings.one_pass > 100
    requests = []
    for selection in select_examples(["hellaswag", "arc_easy"], task_dir, n_examples=3, seed=1234):
        selection = replace(selection, spec=replace(selection.spec, n_shots=0))
        by_id = task_requests(selection, seed=1234, prefix_space=gemma3_backend.info.prefix_space)
        requests.extend(r for rs in by_id.values() for r in rs)
    groups = [g for batch in gemma3_backend._batches(gemma3_backend._items(requests)) for g in batch]
    assert len(groups) == 6 and all(runs_in_one_pass(g, settings.one_pass, settings.window) for g in groups)
    worst = _worst_against_unpadded(gemma3_backend, requests)
    assert worst <= 1e-4, f"max |one pass - unpadded| = {worst:.2e} over {len(requests)} choices"
