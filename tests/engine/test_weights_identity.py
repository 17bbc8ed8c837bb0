"""The weights digest covers what computes: adapters, offloaded weights, parametrizations and hooks.

An in-memory model's results are keyed by its identity and :func:`weights_digest`. Each case here is a model
whose parameters as ``named_parameters`` reads them stay the same (or sit on the ``meta`` device) while the
numbers it computes change: another active PEFT adapter, adapters disabled, weights offloaded to disk, a
parametrization, a hook that replaces a weight. Each must be scored afresh under the same identity, and its
numbers must equal an independent evaluation of the same computation under an identity of its own.
"""

from __future__ import annotations

import logging

import pytest

from tests.engine.conftest import tiny_model_and_tokenizer
from tests.engine.test_in_memory_identity import _loss

torch = pytest.importorskip("torch")

LORA = {"r": 4, "target_modules": ["q_proj", "v_proj"], "init_lora_weights": False}


def _alone(model, tokenizer, identity: str, tmp_path) -> float:
    """The loss of ``model`` under an identity and a store of its own: the independent evaluation."""
    return _loss(model, tokenizer, identity, tmp_path, output=f"independent-{identity}")[0]


def _adapted(seeds: tuple[int, ...], *, names: tuple[str, ...] = ("a", "b")):
    """The tiny Llama (seed 5) with a LoRA adapter per seed (random, non-zero weights), the first active."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = tiny_model_and_tokenizer(seed=5)
    torch.manual_seed(seeds[0])  # test fixture only: the adapters' initial weights
    adapted = get_peft_model(model, LoraConfig(**LORA), adapter_name=names[0])
    for seed, name in zip(seeds[1:], names[1:]):
        torch.manual_seed(seed)
        adapted.add_adapter(name, LoraConfig(**LORA))
    return adapted.eval(), tokenizer


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_switching_or_disabling_adapters_is_scored_afresh_with_that_adapters_numbers(tmp_path):
    pytest.importorskip("peft")
    model, tokenizer = _adapted((1, 2))
    with_a, computed, key_a = _loss(model, tokenizer, "run/step-1", tmp_path)
    assert computed == 1

    model.set_adapter("b")  # the same parameters (both adapters' weights), another adapter computes
    with_b, computed, key_b = _loss(model, tokenizer, "run/step-1", tmp_path)
    assert computed == 1 and key_b != key_a and abs(with_b - with_a) > 1e-3
    alone, _ = _adapted((2,), names=("b",))  # adapter b alone, built afresh: the independent evaluation
    assert with_b == pytest.approx(_alone(alone, tokenizer, "b-alone", tmp_path), abs=1e-6)

    with model.disable_adapter():  # the base model computes
        without, computed, key_off = _loss(model, tokenizer, "run/step-1", tmp_path)
    assert computed == 1 and key_off not in (key_a, key_b)
    base, _ = tiny_model_and_tokenizer(seed=5)
    assert without == pytest.approx(_alone(base, tokenizer, "base", tmp_path), abs=1e-6)

    model.set_adapter("a")  # back to a: its stored results serve
    assert _loss(model, tokenizer, "run/step-1", tmp_path) == (with_a, 0, key_a)


def _offloaded(folder, tmp_path, name: str):
    """``folder``'s model loaded with layer 0 and the head offloaded to disk (accelerate's hooks), the rest on CPU."""
    from transformers import AutoModelForCausalLM

    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "disk", "model.layers.1": "cpu", "model.norm": "cpu",
                  "model.rotary_emb": "cpu", "lm_head": "disk"}
    model = AutoModelForCausalLM.from_pretrained(folder, device_map=device_map, offload_folder=tmp_path / name)
    assert model.model.layers[0].mlp.down_proj.weight.device.type == "meta"  # what the old digest could not read
    return model.eval()


def test_models_offloaded_to_disk_are_digested_from_where_their_weights_live(tmp_path):
    pytest.importorskip("accelerate")

    from flasheval.engine.hf.weights_digest import weights_digest

    first, tokenizer = tiny_model_and_tokenizer(seed=3)
    second, _ = tiny_model_and_tokenizer(seed=3)
    with torch.no_grad():  # other weights only where they are offloaded: every tensor left on the CPU is equal
        second.model.layers[0].mlp.down_proj.weight[5, 3] += 0.5
        second.lm_head.weight.mul_(8.0)
    first.save_pretrained(tmp_path / "first")
    second.save_pretrained(tmp_path / "second")
    off_first, off_second = _offloaded(tmp_path / "first", tmp_path, "o1"), _offloaded(tmp_path / "second", tmp_path,
                                                                                         "o2")
    assert weights_digest(off_first) == weights_digest(first)  # read from the offload folder: the same digest
    assert weights_digest(off_second) == weights_digest(second) != weights_digest(first)

    loss_first, computed, key = _loss(off_first, tokenizer, "run/step-9", tmp_path)
    assert computed == 1
    loss_second, computed, other_key = _loss(off_second, tokenizer, "run/step-9", tmp_path)
    assert computed == 1 and other_key != key and abs(loss_second - loss_first) > 1e-3
    independent = _alone(second, tokenizer, "second-on-cpu", tmp_path)
    assert loss_second == pytest.approx(independent, abs=1e-5)


def test_cpu_offload_is_read_from_its_hooks_and_an_unreadable_weight_is_refused_in_one_line(tmp_path):
    pytest.importorskip("accelerate")
    from accelerate import cpu_offload

    import flasheval
    from flasheval.engine.hf.weights_digest import weights_digest

    model, tokenizer = tiny_model_and_tokenizer(seed=4)
    digest = weights_digest(model)
    cpu_offload(model, execution_device=torch.device("cpu"))
    assert model.lm_head.weight.device.type == "meta" and weights_digest(model) == digest

    lost, _ = tiny_model_and_tokenizer(seed=4)
    lost.lm_head.to("meta")  # no hook holds its values: nothing can read them
    (tmp_path / "held.txt").write_text("Some text.\n")
    with pytest.raises(flasheval.InputError) as caught:
        flasheval.evaluate(lost, tokenizer=tokenizer, identity="run/step-2", heldout=[tmp_path / "held.txt"],
                           output=tmp_path / "out", progress=False)
    message = str(caught.value)
    assert "'lm_head.weight' is on the meta device" in message and "hf:PATH" in message and "\n" not in message


class Scale(torch.nn.Module):
    """A parametrization whose factor is a plain number, not a parameter: only the computed weight shows it."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, weight):
        return weight * self.factor


def test_parametrizations_and_hooks_that_replace_weights_change_the_digest(tmp_path):
    from torch.nn.utils import parametrize

    from flasheval.engine.hf.weights_digest import weights_digest

    model, tokenizer = tiny_model_and_tokenizer(seed=6)
    parametrize.register_parametrization(model.lm_head, "weight", Scale(1.0))
    once, computed, key = _loss(model, tokenizer, "run/step-4", tmp_path)
    assert computed == 1
    twice, _ = tiny_model_and_tokenizer(seed=6)  # the same parameters, a parametrization computing other weights
    parametrize.register_parametrization(twice.lm_head, "weight", Scale(8.0))
    assert [t.tolist() for t in model.parameters()] == [t.tolist() for t in twice.parameters()]
    scaled, computed, other_key = _loss(twice, tokenizer, "run/step-4", tmp_path)
    assert computed == 1 and other_key != key and abs(scaled - once) > 1e-3
    plain, _ = tiny_model_and_tokenizer(seed=6)
    with torch.no_grad():
        plain.lm_head.weight.mul_(8.0)
    assert scaled == pytest.approx(_alone(plain, tokenizer, "plain", tmp_path), abs=1e-6)

    def hooked(replacement):
        """A model whose forward pre-hook writes ``replacement`` into a weight before every pass."""
        held, _ = tiny_model_and_tokenizer(seed=6)

        def replace(module, args):
            module.weight.data = replacement

        held.model.layers[1].mlp.up_proj.register_forward_pre_hook(replace)
        return held

    weight = plain.model.layers[1].mlp.up_proj.weight.detach()
    assert weights_digest(hooked(weight.clone())) == weights_digest(hooked(weight.clone()))
    assert weights_digest(hooked(weight.clone())) != weights_digest(hooked(weight * 2))
    assert weights_digest(hooked(weight.clone())) != weights_digest(tiny_model_and_tokenizer(seed=6)[0])


def test_a_model_edited_in_place_between_placements_is_scored_afresh(tmp_path, caplog):

    model, tokenizer = tiny_model_and_tokenizer(seed=7)
    before, computed, key = _loss(model, tokenizer, "run/step-5", tmp_path)
    assert computed == 1
    weight = model.model.layers[0].self_attn.o_proj.weight
    with torch.no_grad():
        weight.view(-1)[weight.numel() // 3] += 1.0  # one element, between two placements of the same object
    with caplog.at_level(logging.WARNING, logger="flasheval.engine.hf.weights_digest"):
        after, computed, other_key = _loss(model, tokenizer, "run/step-5", tmp_path)
    assert computed == 1 and other_key != key and after != before
    assert "weights differ from those stored under it" in caplog.text
    twin, _ = tiny_model_and_tokenizer(seed=7)
    with torch.no_grad():
        twin.model.layers[0].self_attn.o_proj.weight.view(-1)[weight.numel() // 3] += 1.0
    assert after == pytest.approx(_alone(twin, tokenizer, "twin", tmp_path), abs=1e-6)


def _example():
    """``docs/examples/train_and_place.py``: the tiny Llama, its byte tokenizer, the small live reference and plan."""
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("train_and_place", REPO_ROOT / "docs/examples/train_and_place.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # builds a small live reference: about 10 s
def test_the_saved_copy_of_weights_placed_in_memory_is_told_the_same_weights(tmp_path, task_dir, caplog):
    import flasheval
    from flasheval.cli import main
    from flasheval.engine.hf.weights_digest import weights_digest
    from flasheval.records.run_record import read_record

    example = _example()
    reference = example.build_small_reference(task_dir, tmp_path)
    (tmp_path / "plan.yaml").write_text(example.PLAN, encoding="utf-8")
    model, tokenizer = example.tiny_llama(20), example.byte_tokenizer()
    run, record = tmp_path / "run", tmp_path / "run" / "checkpoints" / "step-10" / "place.json"
    placed = flasheval.place_checkpoint(model, run=run, step=10, tokenizer=tokenizer, reference=reference,
                                        plan=tmp_path / "plan.yaml")
    in_memory = read_record(record).payload["live"]
    assert in_memory["spec"] == "memory:run/step-10" and in_memory["weights_digest"] == weights_digest(model)
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")

    with caplog.at_level(logging.WARNING):
        assert main(["place", "--model", f"hf:{tmp_path / 'saved'}", "--run", str(run), "--step", "10",
                     "--tiers", str(tmp_path / "plan.yaml")]) == 0
    notes = [r.getMessage() for r in caplog.records if "step 10 of run" in r.getMessage()]
    assert len(notes) == 1 and "with the same weights (weights digest " in notes[0]
    assert "as memory:run/step-10) under another key" in notes[0]
    assert "other weights" not in notes[0] and notes[0].endswith("its record is replaced")
    saved = read_record(record).payload
    assert saved["live"]["spec"].startswith("hf:") and saved["live"]["weights_digest"] == in_memory["weights_digest"]
    assert saved["live"]["fingerprint"] != in_memory["fingerprint"]  # keyed apart: scored afresh, as the note says
    assert saved["live"]["requests_computed"] == placed.live.requests_computed > 0
    assert saved["live"]["examples"] == in_memory["examples"]  # the same weights' numbers

    other = example.tiny_llama(21)  # other weights back in memory at the same step
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        flasheval.place_checkpoint(other, run=run, step=10, tokenizer=tokenizer, plan=tmp_path / "plan.yaml")
    notes = [r.getMessage() for r in caplog.records if "step 10 of run" in r.getMessage()]
    assert len(notes) == 1 and "with other weights (weights digest " in notes[0]
    assert f"weights digest {in_memory['weights_digest'][:12]}, now {weights_digest(other)[:12]}" in notes[0]
