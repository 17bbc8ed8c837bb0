"""``docs/api.md``'s examples and the training-loop example run, and say what they claim.

* every ```python block of ``docs/api.md`` runs, in order, in one namespace, in a scratch folder;
* ``docs/examples/train_and_place.py`` places a model in memory from its training loop on a live
  reference built in the same script; its last placement must equal, record for record (stages,
  ranks, intervals, every example asked and its score and tokens), ``flasheval place`` of the same
  weights saved to disk and loaded from there: an independent path (files, a spec, the CLI).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import flasheval
from flasheval.cli import main
from flasheval.records.run_record import read_record

ROOT = Path(__file__).resolve().parents[1]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_api_md_examples_run(tmp_path, monkeypatch, capsys):
    blocks = _blocks(ROOT / "docs" / "api.md")
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 - the documentation's own code
    printed = capsys.readouterr().out
    assert "field '--max-examples': must be a positive number, got nan" in printed
    assert "field '--batch-size': must be an integer >= 1, got 0" in printed
    assert not list(tmp_path.iterdir())  # no output= given: nothing was written


def _example():
    spec = importlib.util.spec_from_file_location("train_and_place", ROOT / "docs" / "examples" / "train_and_place.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_in_memory_placement_from_a_training_loop_equals_the_cli_on_saved_weights(tmp_path, task_dir):
    example = _example()
    placements = example.main(task_dir, tmp_path)
    assert sorted(placements) == [3, 6]
    last = placements[6]
    reference = tmp_path / "refs" / "tiny"
    out = tmp_path / "cli"
    assert main(["place", "--model", f"final=hf:{tmp_path / 'final'}", "--reference", str(reference),
                 "--tiers", str(tmp_path / "plan.yaml"), "--device", "cpu", "--output", str(out)]) == 0
    cli = read_record(out / "place.json").payload
    memory = read_record(tmp_path / "demo-run" / "checkpoints" / "step-6" / "place.json").payload
    returned = json.loads(json.dumps(last.to_json()))
    assert memory == returned | {"live": memory["live"]}  # the record written is the result returned
    for key in ("rank", "interval", "tier", "status", "stages", "compute"):
        assert memory[key] == cli[key], key
    assert memory["live"]["asked"] == cli["live"]["asked"]
    assert memory["live"]["examples"] == cli["live"]["examples"]  # per example: score, tokens, few-shot ids, prompt
    assert memory["live"]["spec"] == "memory:demo-run/step-6" and cli["live"]["spec"].startswith("hf:")
    assert len(last.placement.stages) > 1  # several looks, so the comparison covers escalation
    history = flasheval.read_run(tmp_path / "demo-run")  # one run folder holds both placements, by step
    assert [(c.step, c.rank, c.interval) for c in history.checkpoints] == [
        (step, placements[step].rank, placements[step].interval) for step in (3, 6)]
    # The two in-memory placements are different weights (training changed them), stored apart.
    assert placements[3].live.fingerprint != last.live.fingerprint

    # The same weights in memory once more: without an identity nothing is stored (results for this call
    # only), and in another dtype than the reference's the model is refused before anything is scored.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "final").train()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "final")
    plan = tmp_path / "plan.yaml"
    again = flasheval.place(model, reference, tokenizer=tokenizer, plan=plan, output=tmp_path / "no-identity")
    assert model.training  # handed back in train mode
    assert list(again.live.examples) == cli["live"]["examples"] and again.live.spec == "memory:(this call only)"
    assert sorted(p.name for p in (tmp_path / "no-identity").iterdir()) == ["place.json"]  # no store kept
    with pytest.raises(flasheval.InputError, match="the model is in bfloat16"):
        flasheval.place(model.to(torch.bfloat16), reference, tokenizer=tokenizer, identity="x", plan=plan)
    with pytest.raises(flasheval.InputError, match="field '--device'"):
        flasheval.place(model, reference, tokenizer=tokenizer, engine=flasheval.EngineOptions(device="cpu"), plan=plan)
