"""Model objects handed to the API: wrappers looked through, every bad one refused in one line (issue 31, item 2).

A DistributedDataParallel model and an FSDP2 (``fully_shard``) one (each under a real one-process gloo group
the test makes and destroys) and a ``torch.compile`` module are scored as the model they wrap: same numbers,
same stored results. A bare
``LlamaModel``, a tokenizer larger than the model's vocabulary, a module that is not a transformers model,
something that is not a module at all: one line naming the model's class and what is needed.
"""

from __future__ import annotations

import pytest

from tests.engine.conftest import tiny_model_and_tokenizer

pytest.importorskip("torch")

TEXT = "Wrapped or not, the same weights give the same numbers.\n"


def _evaluate(model, tokenizer, tmp_path, identity="run/step-1"):
    import flasheval

    (tmp_path / "held.txt").write_text(TEXT)
    summary = flasheval.evaluate(model, tokenizer=tokenizer, identity=identity, heldout=[tmp_path / "held.txt"],
                                 output=tmp_path / "out", progress=False, force=True).summary.to_json()
    return summary["metrics"]["loss"], summary["n_requests_computed"]


def test_a_ddp_wrapped_model_is_scored_as_the_model_it_wraps(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    loss, computed = _evaluate(model, tokenizer, tmp_path)
    assert computed == 1
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        wrapped = DistributedDataParallel(model)
        assert _evaluate(wrapped, tokenizer, tmp_path) == (loss, 0)  # the same weights: the same stored results
        assert _evaluate(wrapped, tokenizer, tmp_path, identity="other")[0] == pytest.approx(loss, abs=1e-12)
        assert dist.is_initialized()  # the group this test made is left alone
    finally:
        dist.destroy_process_group()


def test_an_fsdp2_model_runs_through_its_sharding_and_digests_its_local_shard(tmp_path):
    import torch.distributed as dist

    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)")
    from torch.distributed.device_mesh import init_device_mesh

    from flasheval.engine.hf.in_memory import is_sharded
    from flasheval.engine.hf.weights_digest import weights_digest

    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    loss, computed = _evaluate(model, tokenizer, tmp_path)
    sharded, _ = tiny_model_and_tokenizer(seed=4)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        for layer in sharded.model.layers:
            fsdp.fully_shard(layer, mesh=mesh)
        fsdp.fully_shard(sharded, mesh=mesh)
        assert is_sharded(sharded) and weights_digest(sharded) == weights_digest(model)  # one process: all local
        assert _evaluate(sharded, tokenizer, tmp_path) == (loss, 0)
        # scored under torch.no_grad() (FSDP2's gathering cannot run under inference mode): the same numbers
        assert _evaluate(sharded, tokenizer, tmp_path, identity="other")[0] == pytest.approx(loss, abs=1e-12)
    finally:
        dist.destroy_process_group()


def test_a_compiled_model_runs_its_original_module(tmp_path):
    import torch

    from flasheval.engine.hf.in_memory import LoadedModel

    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    compiled = torch.compile(model)  # compiles lazily: nothing compiles here, the eager module is scored
    loaded = LoadedModel(model=compiled, tokenizer=tokenizer, identity="run/step-1")
    assert loaded.model is model and loaded.module is model
    loss, computed = _evaluate(model, tokenizer, tmp_path)
    assert computed == 1 and _evaluate(compiled, tokenizer, tmp_path) == (loss, 0)


def _bare_llama():
    from transformers import LlamaModel

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    return LlamaModel(model.config), tokenizer


def _small_vocabulary():
    from transformers import LlamaConfig, LlamaForCausalLM

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    config = LlamaConfig(**{**model.config.to_dict(), "vocab_size": 200})
    return LlamaForCausalLM(config), tokenizer


def _padded_vocabulary():
    from transformers import LlamaConfig, LlamaForCausalLM

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    return LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "vocab_size": 320})), tokenizer


def _plain_module():
    import torch

    return torch.nn.Linear(4, 4), tiny_model_and_tokenizer(seed=0)[1]


def _not_a_module():
    return {"weights": [1.0]}, tiny_model_and_tokenizer(seed=0)[1]


def _no_tokenizer():
    return tiny_model_and_tokenizer(seed=0)[0], None


BAD = [
    (_bare_llama, r"^field 'model': LlamaModel has no language-modelling head .*AutoModelForCausalLM"),
    (_small_vocabulary, r"^field 'tokenizer': the tokenizer has 258 tokens but LlamaForCausalLM has 200 embedding "
                        r"rows: pass the model's own tokenizer"),
    (_plain_module, r"^field 'model': Linear is not a transformers model \(no config\)"),
    (_not_a_module, r"^field 'model': expected a loaded transformers causal LM \(a torch.nn.Module\), got dict$"),
    (_no_tokenizer, r"^field 'tokenizer': LlamaForCausalLM needs its tokenizer \(tokenizer=\)$"),
]


@pytest.mark.parametrize(("make", "pattern"), BAD, ids=[make.__name__.strip("_") for make, _ in BAD])
@pytest.mark.parametrize("api", ["place", "evaluate"])
def test_a_bad_model_object_gets_one_line_naming_its_class(make, pattern, api, tmp_path):
    import flasheval

    model, tokenizer = make()
    with pytest.raises(flasheval.InputError) as raised:
        if api == "place":  # refused before the reference is read
            flasheval.place(model, tmp_path / "no-reference", tokenizer=tokenizer, identity="run/step-1")
        else:
            flasheval.evaluate(model, tokenizer=tokenizer, identity="run/step-1", heldout=[tmp_path / "none.txt"])
    message = str(raised.value)
    assert "\n" not in message
    assert __import__("re").search(pattern, message), message


def test_a_tokenizer_smaller_than_a_padded_vocabulary_is_fine(tmp_path):
    model, tokenizer = _padded_vocabulary()
    loss, computed = _evaluate(model, tokenizer, tmp_path)
    assert computed == 1 and loss > 0


def test_one_held_out_path_is_a_list_of_one(tmp_path):
    import flasheval

    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    (tmp_path / "held.txt").write_text(TEXT)
    runs = [flasheval.evaluate(model, tokenizer=tokenizer, identity="run/step-1", heldout=held, output=tmp_path / out,
                               progress=False).summary.to_json()
            for held, out in ((tmp_path / "held.txt", "one"), ([str(tmp_path / "held.txt")], "listed"))]
    assert runs[0]["metrics"]["loss"] == runs[1]["metrics"]["loss"] and runs[0]["metrics"]["loss"] > 0
    assert runs[0]["validation"] == runs[1]["validation"] and runs[0]["validation"]


def test_an_fsdp2_model_gathered_in_bf16_keeps_the_bf16_rounding(tmp_path):
    """float32 parameters that FSDP2 gathers in bf16 (``MixedPrecisionPolicy(param_dtype=bfloat16)``) compute in
    bf16: the batch-invariance rounding of a 2-byte type (pad multiple 16), not float32's 1, goes into the key."""
    import torch
    import torch.distributed as dist

    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)")
    from torch.distributed.device_mesh import init_device_mesh

    from flasheval.engine.hf.forward import compute_dtype
    from flasheval.engine.hf.in_memory import LoadedModel
    from flasheval.engine.loading import open_model

    plain, tokenizer = tiny_model_and_tokenizer(seed=4)
    sharded, _ = tiny_model_and_tokenizer(seed=4)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        policy = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16)
        fsdp.fully_shard(sharded, mesh=init_device_mesh("cpu", (1,)), mp_policy=policy)
        assert next(sharded.parameters()).dtype == torch.float32
        assert (compute_dtype(plain), compute_dtype(sharded)) == ("float32", "bfloat16")
        backends = [open_model(LoadedModel(model=m, tokenizer=tokenizer, identity="run/step-1"), dtype="auto")
                    for m in (plain, sharded)]
        assert [b._pass.pad_multiple for b in backends] == [1, 16]
        assert backends[0].fingerprint != backends[1].fingerprint
    finally:
        dist.destroy_process_group()
