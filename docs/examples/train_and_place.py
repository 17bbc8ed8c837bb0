"""Place a model from inside its training loop, in memory, every few steps.

A tiny random Llama is built in code and "trained" for a few steps on byte text; every
``PLACE_EVERY`` steps it is placed on a small live reference built in this same script from
three other tiny models (DCLM-format tasks copa and winograd, 12 examples each). Nothing is
written to disk for the model being trained: ``flasheval.place_checkpoint`` (the hook for training
loops) takes the model object, its tokenizer, the run folder and the step, scores the model in eval
mode under ``torch.inference_mode()`` and hands it back in train mode. Every placement lands in the
run folder ``WORK_DIR/demo-run`` (``run.json``, ``checkpoints/step-<N>/place.json``, one results store
keyed by the identity ``demo-run/step-<N>``), so rerunning the script resumes instead of recomputing,
and ``flasheval report WORK_DIR/demo-run`` draws rank against step.

Run: ``python docs/examples/train_and_place.py [TASK_DIR] [WORK_DIR]`` (default ``../shared/data/tasks``
and a temporary folder). ``tests/test_api_docs.py`` runs it and checks that the last in-memory
placement equals, record for record, ``flasheval place`` of the same weights saved to disk.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import flasheval

TASKS = ("copa", "winograd")
STEPS, PLACE_EVERY = 6, 3
PLAN = """name: escalating
stop_rule: interval
confidence_level: 0.95
correction: none
estimator: control-variate
n_resamples: 200
stages: [3, 6, 9, all]
tiers:
  - {ranks: [1, 1], resolution: maximal}
  - {ranks: [2, null], resolution: maximal}
"""


def byte_tokenizer():
    """A byte-level tokenizer: 256 byte tokens plus BOS (256) and EOS (257)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<s>"], vocab["</s>"] = 256, 257
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")


def tiny_llama(seed: int):
    """A 2-layer Llama over the byte tokenizer, initialised from ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=258, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=256, eos_token_id=257)
    torch.manual_seed(seed)  # a script's own model init; flasheval never touches global RNG state
    return LlamaForCausalLM(config)


def build_small_reference(task_dir: Path, root: Path):
    """Three tiny models saved as Hugging Face folders and scored into the reference ``tiny``."""
    tokenizer = byte_tokenizer()
    specs = []
    for seed in (10, 11, 12):
        folder = root / "pool" / f"m{seed}"
        tiny_llama(seed).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        specs.append(f"m{seed}=hf:{folder}")
    built = flasheval.build_reference(specs, name="tiny", suite="dclm-core", tasks=list(TASKS), task_dir=task_dir,
                                      n_examples=12, seed=7, engine=flasheval.EngineOptions(device="cpu"),
                                      output=root / "refs",
                                      work_dir=root / "build", force=True)
    return built.path


def main(task_dir: Path, root: Path) -> dict[int, flasheval.PlaceRun]:
    """Train, placing every ``PLACE_EVERY`` steps; the last weights are saved to ``root/final`` for comparison."""
    import torch

    reference = flasheval.load_reference(build_small_reference(task_dir, root))
    plan_file = root / "plan.yaml"
    plan_file.write_text(PLAN, encoding="utf-8")
    plan = flasheval.load_plan(plan_file)

    tokenizer, model = byte_tokenizer(), tiny_llama(0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    text = "The cat sat on the mat because it was warm. " * 8
    batch = torch.tensor([tokenizer(text).input_ids[:128]])
    placements = {}
    for step in range(1, STEPS + 1):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % PLACE_EVERY == 0:
            run = flasheval.place_checkpoint(model, run=root / "demo-run", step=step, tokenizer=tokenizer,
                                             reference=reference, plan=plan)
            assert model.training, "place hands the model back in the mode it came in"
            placements[step] = run
            print(f"step {step}: loss {loss.item():.3f}, rank {run.rank} of {run.placement.n_models + 1}, "
                  f"interval {list(run.interval)}, {run.placement.compute.n_examples} examples")
    model.save_pretrained(root / "final")
    tokenizer.save_pretrained(root / "final")
    return placements


if __name__ == "__main__":
    tasks = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/data/tasks")
    with tempfile.TemporaryDirectory() as scratch:
        main(tasks, Path(sys.argv[2]) if len(sys.argv) > 2 else Path(scratch))
