"""A model held in memory computes as its weights are: a training's mixed-precision autocast is off while it is
scored, and put back after.

The wrapper is accelerate's own (``Accelerator(mixed_precision="bf16").prepare``, what the Trainer's ``bf16=True``
uses) and the block is a real ``torch.autocast``; the expected numbers come from an independent float32 copy of the
weights, never wrapped.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from flasheval.engine.hf.in_memory import scoring_mode  # noqa: E402
from flasheval.engine.hf.mixed_precision import autocast_wrapped, without_autocast  # noqa: E402
from tests.engine.conftest import tiny_model_and_tokenizer  # noqa: E402

IDS = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 61]])


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.fixture
def bf16_prepared():
    """A tiny Llama prepared by a real bf16 Accelerator on the CPU, and a float32 copy of its weights made before;
    accelerate's process-wide state is reset after (it is a singleton)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    model, _ = tiny_model_and_tokenizer(0, max_positions=64)
    plain = copy.deepcopy(model).eval()
    AcceleratorState._reset_state(True)  # another test of this process may have made one already
    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    prepared = accelerator.prepare(model).eval()
    yield prepared, plain
    AcceleratorState._reset_state(True)


def test_accelerates_bf16_wrapper_is_off_while_scoring_and_back_after(bf16_prepared):
    prepared, plain = bf16_prepared
    assert next(prepared.parameters()).dtype == torch.float32  # the parameters say float32 ...
    wrapped = _logits(prepared)
    reference = _logits(plain)
    assert not torch.equal(wrapped, reference)  # ... but the wrapper computes in bf16 (the bug's premise)
    forward, dtype = autocast_wrapped(prepared)
    assert dtype == "bfloat16"
    with scoring_mode(prepared):
        assert torch.equal(prepared(input_ids=IDS).logits, reference)  # exactly the float32 weights' numbers
    assert prepared.forward is not None and "forward" in vars(prepared)  # the wrapper is put back ...
    assert torch.equal(_logits(prepared), wrapped)  # ... and computes in bf16 again, as training expects


def test_an_autocast_block_around_the_call_is_off_while_scoring_and_on_after():
    model, _ = tiny_model_and_tokenizer(1, max_positions=64)
    model.eval()
    reference = _logits(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not torch.equal(_logits(model), reference)
        with without_autocast(model) as found:
            assert torch.equal(_logits(model), reference)
        assert found.ambient == "bfloat16" and found.wrapped == []
        assert torch.is_autocast_enabled("cpu")  # the caller's block is as it was
        assert not torch.equal(_logits(model), reference)


def test_a_model_without_autocast_is_left_alone():
    model, _ = tiny_model_and_tokenizer(2, max_positions=64)
    before = dict(vars(model))
    with without_autocast(model) as found:
        pass
    assert (found.wrapped, found.ambient) == ([], None)
    assert "forward" not in vars(model) and vars(model).keys() == before.keys()


def test_the_wrapper_is_put_back_when_scoring_fails(bf16_prepared):
    prepared, _ = bf16_prepared
    wrapper = vars(prepared)["forward"]
    with pytest.raises(RuntimeError, match="boom"):
        with without_autocast(prepared):
            assert vars(prepared)["forward"] is not wrapper
            raise RuntimeError("boom")
    assert vars(prepared)["forward"] is wrapper


def test_an_fp16_wrapper_built_as_accelerate_builds_it_on_a_gpu_is_off_while_scoring():
    # On the CPU accelerate's fp16 leaves the forward alone (no native AMP there); on a GPU it wraps it as below:
    # accelerate's own convert_outputs_to_fp32 over a torch.autocast decorator of the class's forward.
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    model, _ = tiny_model_and_tokenizer(3, max_positions=64)
    model.eval()
    reference = _logits(model)
    model.forward = MethodType(convert_outputs_to_fp32(torch.autocast("cpu", dtype=torch.float16)(
        model.forward.__func__)), model)
    wrapped = _logits(model)
    assert not torch.equal(wrapped, reference)
    with without_autocast(model) as found:
        assert torch.equal(_logits(model), reference)
    assert found.wrapped == ["float16"]
    assert torch.equal(_logits(model), wrapped)
