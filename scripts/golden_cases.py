"""The cases of ``scripts/golden_outputs.py`` and the inputs they run on (standard library only).

Each case is ``flasheval`` arguments with ``{work}``, ``{inputs}``, ``{models}``, ``{shared}`` placeholders; they run
in order in one working folder ``{work}`` (later cases read what earlier ones wrote: ``report`` the sweep's folder,
the live ``place`` / ``sweep`` the reference built before them). :func:`make_inputs` writes the inputs the same way
every time: five tiny Llamas (seeds 0-4, byte-level tokenizer, made by the project's interpreter in a subprocess,
independent of the checkout under test), a long-table parquet file, a bad tier plan, a held-out text, and the
lm-eval task fixtures of ``tests/lmeval/_tasks.py`` read from the script's own checkout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    """File name of the case's record: unique, stable across captures."""
    argv: tuple[str, ...]
    """Arguments after ``python -m flasheval``, with ``{work}``-style placeholders."""
    note: str = ""
    timeout_s: float = 600.0


_TINY_MODELS = r'''
import sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
torch.set_num_threads(1)
vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
vocab["<s>"], vocab["</s>"] = 256, 257
core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
core.decoder = decoders.ByteLevel()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")
for seed in map(int, sys.argv[2:]):
    config = LlamaConfig(vocab_size=258, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=256, eos_token_id=257)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(Path(sys.argv[1]) / f"m{seed}")
    tokenizer.save_pretrained(Path(sys.argv[1]) / f"m{seed}")
'''

_LONG_TABLE = r'''
import random, sys
import pandas as pd
rng = random.Random(0)
rows = [{"model": f"org/model-{m}", "dataset": d, "example_id": f"{d}-{i:02d}", "score": float(rng.random() < 0.2 + 0.12 * m),
         "n_tokens": 40 + (i * 7) % 23}
        for m in range(6) for d in ("alpha", "beta", "gamma") for i in range(40)]
pd.DataFrame(rows).to_parquet(sys.argv[1], index=False)
'''

_BAD_PLAN = """name: bad
description: a plan with a confidence level above 1
stop_rule: window
confidence_level: 1.5
correction: pocock
stages: [20, 40, all]
tiers:
  - {ranks: [1, null], resolution: 2}
"""

_HELDOUT = "\n".join(f'{{"text": "Line {i}: the quick brown fox jumps over the lazy dog {i} times."}}' for i in range(6))


def _hash_tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def make_inputs(paths: dict[str, Path], env: dict[str, str], script_repo: Path) -> dict[str, str]:
    """Write every input; return the tiny models' file hashes (the comparison checks both captures used the same)."""
    inputs, models = paths["inputs"], paths["models"]
    for code, args in ((_TINY_MODELS, [str(models), "0", "1", "2", "3", "4"]),
                       (_LONG_TABLE, [str(inputs / "long.parquet")])):
        subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, cwd=paths["tmp"])
    (inputs / "bad_plan.yaml").write_text(_BAD_PLAN, encoding="utf-8")
    (inputs / "heldout.jsonl").write_text(_HELDOUT + "\n", encoding="utf-8")
    (inputs / "not_json.json").write_text("{ this is not json\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("_golden_lmeval_tasks", script_repo / "tests" / "lmeval" / "_tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    tasks.write_tasks(inputs / "lmeval_tasks")
    return _hash_tree(models)


def _help_cases() -> list[Case]:
    commands = ["", "place", "sweep", "backtest", "evaluate", "reference", "reference import", "reference build",
                "reference show", "tiers", "tiers validate", "dior", "report", "aggregate", "scaling", "scaling fit",
                "tasks", "tasks list", "tasks check", "lm-eval"]
    return [Case(name="help-" + (c.replace(" ", "-") or "main"), argv=(*c.split(), "--help")) for c in commands]


def _replay_cases() -> list[Case]:
    return [
        Case(name="place-default", argv=("place", "--output", "{work}/place-default")),
        Case(name="place-max-examples-600", argv=("place", "--max-examples", "600", "--output", "{work}/place-600")),
        Case(name="place-tiers-lean", argv=("place", "--tiers", "lean", "--output", "{work}/place-lean")),
        Case(name="place-other-model", argv=("place", "--model", "replay:openai/gpt-4o-mini-2024-07-18", "--tiers",
                                             "flash_helm", "--aggregate", "win_rate", "--output", "{work}/place-other")),
        Case(name="backtest-seed0", argv=("backtest", "--reference", "helm_lite", "--seeds", "0", "--output",
                                          "{work}/backtest.json")),
        Case(name="sweep-backtest3", argv=("sweep", "--backtest", "3", "--budget-examples", "3000", "--output",
                                           "{work}/sweep-replay")),
        Case(name="sweep-backtest3-resume", note="the same sweep again: resumed from its run folder",
             argv=("sweep", "--backtest", "3", "--budget-examples", "3000", "--output", "{work}/sweep-replay")),
        Case(name="dior-small", argv=("dior", "--n-instantiations", "20", "--sizes", "10", "50", "--dataset-counts",
                                      "2", "4", "--output", "{work}/dior")),
        Case(name="report-sweep", argv=("report", "{work}/sweep-replay")),
        Case(name="reference-show-helm_lite", argv=("reference", "show", "helm_lite")),
        Case(name="reference-show-helm_lite-centered", argv=("reference", "show", "helm_lite", "--aggregate",
                                                             "centered", "--missing", "common-datasets")),
        *[Case(name=f"tiers-validate-{p}", argv=("tiers", "validate", f"{{repo}}/tiers/{p}.yaml"))
          for p in ("default", "flash_helm", "lean")],
    ]


def _data_cases() -> list[Case]:
    agg = "{shared}/data/reference/aggregate"
    return [
        Case(name="aggregate-dclm-core", argv=("aggregate", "--suite", "dclm-core", "--scores",
                                               f"{agg}/dclm/dclm_icl_wide.csv.gz", "--output", "{work}/core.csv")),
        Case(name="aggregate-extended-partial-stdout", argv=("aggregate", "--suite", "dclm-extended", "--partial",
                                                             "--scores", f"{agg}/dclm/dclm_icl_wide.csv.gz")),
        Case(name="scaling-fit-gadre", argv=("scaling", "fit", "--runs", f"{agg}/scaling_gadre2024/models.csv",
                                             "--fit-column", "paper_fit_eq4_loss", "--error-fit-column",
                                             "paper_fit_eq5_error", "--predict", "rpj-open_lm_1b-32.0",
                                             "rpj-open_lm_7b-1.0", "--n-resamples", "200", "--output",
                                             "{work}/scaling.json")),
        Case(name="tasks-list", argv=("tasks", "list")),
        Case(name="tasks-list-dclm-core", argv=("tasks", "list", "--suite", "dclm-core")),
        Case(name="tasks-check", argv=("tasks", "check", "{shared}/data/tasks")),
        Case(name="reference-import-long-parquet", argv=(
            "reference", "import", "{inputs}/long.parquet", "--format", "long-parquet", "--name", "longref",
            "--output-dir", "{work}/refs", "--source", "golden_outputs synthetic table", "--metric-description",
            "0/1 accuracy")),
        Case(name="reference-show-imported", argv=("reference", "show", "{work}/refs/longref")),
        Case(name="place-on-imported", argv=("place", "--model", "replay:org/model-3", "--reference",
                                             "{work}/refs/longref", "--tiers", "lean", "--output", "{work}/place-long")),
    ]


_CPU = ("--device", "cpu")


def _live_cases() -> list[Case]:
    ref = "{work}/refs/tiny"
    build = ("reference", "build", "--models", "m0=hf:{models}/m0", "m1=hf:{models}/m1", "m2=hf:{models}/m2",
             "--suite", "dclm-core", "--task-dir", "{shared}/data/tasks", "--tasks", "copa,winograd", "--n-examples",
             "12", "--seed", "7", "--name", "tiny", "--output-root", "{work}/refs", "--work-dir", "{work}/build-tiny")
    return [
        Case(name="evaluate-tiny", argv=("evaluate", "--model", "hf:{models}/m3", "--model-id", "m3", "--task-dir",
                                         "{shared}/data/tasks", "--tasks", "copa,winograd,winogrande", "--n-examples",
                                         "4", "--heldout", "{inputs}/heldout.jsonl", "--output", "{work}/evaluate",
                                         *_CPU)),
        Case(name="evaluate-tiny-rerun", note="served from the store",
             argv=("evaluate", "--model", "hf:{models}/m3", "--model-id", "m3", "--task-dir", "{shared}/data/tasks",
                   "--tasks", "copa,winograd,winogrande", "--n-examples", "4", "--heldout", "{inputs}/heldout.jsonl",
                   "--output", "{work}/evaluate", *_CPU)),
        Case(name="reference-build-tiny", argv=(*build, *_CPU)),
        Case(name="reference-show-tiny", argv=("reference", "show", ref)),
        Case(name="place-live-tiny", argv=("place", "--model", "m3=hf:{models}/m3", "--reference", ref, "--output",
                                           "{work}/place-live", *_CPU)),
        Case(name="sweep-live-tiny", argv=("sweep", "--models", "a=hf:{models}/m3", "b=hf:{models}/m4", "--reference",
                                           ref, "--budget-examples", "60", "--output", "{work}/sweep-live", *_CPU)),
        Case(name="report-place-live", argv=("report", "{work}/place-live")),
    ]


_LMEVAL_TASKS = "synth_arith,synth_story"


def _lmeval_cases() -> list[Case]:
    return [
        Case(name="lm-eval-tiny", argv=("lm-eval", "--model", "m3=hf:{models}/m3", "--tasks", _LMEVAL_TASKS,
                                        "--include_path", "{inputs}/lmeval_tasks", "--limit", "4", "--log_samples",
                                        "--output_path", "{work}/lm-eval", "--batch_size", "8", *_CPU)),
        Case(name="reference-build-lm-eval", argv=(
            "reference", "build", "--engine", "lm-eval", "--models", "m0=hf:{models}/m0", "m1=hf:{models}/m1",
            "--tasks", _LMEVAL_TASKS, "--include_path", "{inputs}/lmeval_tasks", "--n-examples", "6", "--name",
            "lmbuilt", "--output-root", "{work}/refs", "--work-dir", "{work}/build-lmeval", *_CPU)),
    ]


def _bad_cases() -> list[Case]:
    return [
        Case(name="bad-unknown-reference", argv=("place", "--reference", "no_such_reference")),
        Case(name="bad-unknown-replay-model", argv=("place", "--model", "replay:no/such-model")),
        Case(name="bad-model-spec", argv=("place", "--model", "bogus:thing", "--reference", "{work}/refs/tiny")),
        Case(name="bad-evaluate-model-spec", argv=("evaluate", "--model", "nope:x", "--output", "{work}/bad-eval")),
        Case(name="bad-tier-file", argv=("tiers", "validate", "{inputs}/bad_plan.yaml")),
        Case(name="bad-place-tier-file", argv=("place", "--tiers", "{inputs}/bad_plan.yaml")),
        Case(name="bad-missing-tier-file", argv=("tiers", "validate", "{inputs}/no_such_plan.yaml")),
        Case(name="bad-dior-decision", argv=("dior", "--decision", "bogus")),
        Case(name="bad-report-not-json", argv=("report", "{inputs}/not_json.json")),
        Case(name="bad-sweep-no-budget", argv=("sweep", "--backtest", "3", "--output", "{work}/bad-sweep")),
        Case(name="bad-live-dtype", argv=("place", "--model", "m3=hf:{models}/m3", "--reference", "{work}/refs/tiny",
                                          "--dtype", "bfloat16", "--output", "{work}/bad-dtype", *_CPU)),
        Case(name="bad-aggregate-unknown-suite", argv=("aggregate", "--suite", "no-suite", "--scores",
                                                       "{shared}/data/reference/aggregate/dclm/dclm_icl_wide.csv.gz")),
    ]


def cases() -> list[Case]:
    """Every case, in the order they run."""
    return [*_help_cases(), *_replay_cases(), *_data_cases(), *_live_cases(), *_lmeval_cases(), *_bad_cases()]
