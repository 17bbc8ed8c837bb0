"""Bad input a new user met, one row per case: ONE line on stderr (``flasheval: error: ...``, exit 1, no
traceback) naming the file, line or row, and field; plus the cases that must not refuse (a continuous
metric, a replaced record said in a note) and what a failed import must leave behind (nothing).

Every row runs ``flasheval.cli.main(argv)`` in-process as a user would, except where only another
process can show the problem: an unreadable file (this suite may run as root, whom permissions do not
stop: the process drops its file-access capabilities with ``setpriv``) and a closed pipe on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flasheval.cli import main
from flasheval.errors import InputError
from flasheval.reference import load_reference, write_reference

ERROR = re.compile(r"^flasheval: error: ")


def _long(n_models=4, datasets=(("a", 30), ("b", 30)), *, prefix="m", seed=0, tokens=False) -> pd.DataFrame:
    """A long table of 0/1 scores (model ``m{i}`` better with ``i``), optionally with token counts."""
    rng = np.random.default_rng(seed)
    rows = [{"model": f"{prefix}{m}", "dataset": d, "example_id": str(e), "score": float(rng.random() < 0.2 + 0.2 * m),
             **({"n_tokens": 40 + e} if tokens else {})}
            for d, n in datasets for m in range(n_models) for e in range(n)]
    return pd.DataFrame(rows)


def _parquet(tmp_path: Path, name: str, frame: pd.DataFrame) -> str:
    frame.to_parquet(tmp_path / name)
    return str(tmp_path / name)


def _reference(tmp_path: Path, **kw) -> str:
    out = tmp_path / "refs" / "mine"
    write_reference(out, _long(**kw), name="mine", source="test", licence="none", metric="per-example 0/1")
    return str(out)


def _centered_without_a_baseline(tmp_path: Path) -> str:
    """A centered reference whose manifest then loses dataset a's random baseline (an edit by hand)."""
    out = tmp_path / "refs" / "centred"
    write_reference(out, _long(), name="centred", source="test", licence="none", metric="per-example 0/1",
                    aggregate="centered", random_baselines={"a": 0.25, "b": 0.5})
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["random_baselines"]["a"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return str(out)


def _model_dir(tmp_path: Path) -> str:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return f"hf:{tmp_path / 'model'}"


def _samples(tmp_path: Path, *, cut: dict | None = None, n_samples: int | None = None,
             results: dict | None = None) -> Path:
    """An lm-eval ``--log_samples`` folder of two models x one task (3 docs); ``cut`` edits a model's log text,
    ``results`` the second model's results file."""
    root = tmp_path / "lm"
    edits = results or {}
    for model, correct in (("org__small", [1, 0, 0]), ("org__big", [1, 1, 0])):
        d = root / model
        d.mkdir(parents=True)
        results = {"model_name": model.replace("__", "/")}
        if n_samples is not None:
            results["n-samples"] = {"piqa": {"original": 3, "effective": n_samples}}
        (d / "results_2024-05-01T10-00-00.123.json").write_text(json.dumps(
            {**results, **(edits if model == "org__big" else {})}))
        text = "".join(json.dumps({"doc_id": i, "target": 0, "acc": float(c)}) + "\n" for i, c in enumerate(correct))
        if cut and model in cut:
            text = cut[model](text)
        (d / "samples_piqa_2024-05-01T10-00-00.123.jsonl").write_text(text)
    return root


def _drop_last_line(text: str) -> str:
    return "".join(text.splitlines(keepends=True)[:-1])


def _import(source, *extra: str) -> list[str]:
    fmt = "lm-eval-samples" if Path(source).is_dir() else "long-parquet"
    return ["reference", "import", "--format", fmt, str(source), "--name", "new", "--output-dir",
            str(Path(source).parent / "refs"), *extra]


def _seven(tmp_path: Path, *, metric: bool) -> str:
    frame = _long()
    frame.loc[3, "score"] = 7.0
    if metric:
        frame["metric"] = "exact_match"
    return _parquet(tmp_path, "seven.parquet", frame)


def _nan(tmp_path: Path) -> str:
    frame = _long()
    frame.loc[5, "score"] = np.nan
    return _parquet(tmp_path, "nan.parquet", frame)


def _two_suites(tmp_path: Path) -> str:
    """Two suites with other models and other datasets in one file (as helm_lite_glue's instances.parquet)."""
    first = _long().assign(suite="s1")
    second = _long(datasets=(("c", 10),), prefix="other").assign(suite="s2")
    return _parquet(tmp_path, "two_suites.parquet", pd.concat([first, second], ignore_index=True))


def _edited_manifest(tmp_path: Path, **changes) -> str:
    """A written reference whose manifest then gets ``changes`` by hand (``None``: the key removed)."""
    out = Path(_reference(tmp_path))
    manifest = json.loads((out / "manifest.json").read_text())
    for key, value in changes.items():
        manifest[key] = value
    (out / "manifest.json").write_text(json.dumps(manifest))
    return str(out)


def _digest_int(tmp_path: Path) -> str:
    out = Path(_reference(tmp_path))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] = {name: 12345 for name in manifest["files"]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return str(out)


def _plan_with(tmp_path: Path, **changes) -> str:
    import yaml
    from flasheval.placement.tiers import resolve_tier_plan

    plan = {**yaml.safe_load(resolve_tier_plan("default").read_text()), **changes}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    return str(tmp_path / "plan.yaml")


def _binary(tmp_path: Path) -> str:
    (tmp_path / "models.bin").write_bytes(bytes(range(128, 256)) * 4)
    return str(tmp_path / "models.bin")


_REPLAY_LIVE_OPTIONS = [("--dtype", "float32"), ("--device", "cpu"), ("--task-dir", "."), ("--batch-size", "4"),
                        ("--include-path", "."), ("--num-fewshot", "1"), ("--device-map", "auto")]
_SWEEP = ["sweep", "--models", "replay:meta/llama-3-70b", "--budget-examples", "500"]
_EVALUATE_REPLAY = ["evaluate", "--model", "replay:helm_lite/meta/llama-3-70b", "--tasks", "gsm"]
_EVALUATE_REPLAY_LIVE_OPTIONS = [("--dtype", "float32"), ("--device", "cpu"), ("--task-dir", "."),
                                 ("--batch-size", "4"), ("--max-length", "64"), ("--store", "st"),
                                 ("--device-map", "auto")]

# (case, set-up -> argv, the one expected line: a regex matched from "flasheval: error: " on)
CASES = [
    ("2-cuda-on-cpu-build", lambda t: ["place", "--model", _model_dir(t), "--device", _cuda_if_cpu_build()],
     r"field '--device': cuda: this torch build has no CUDA \(torch .+\); use --device cpu or install the CUDA "
     r"build, see docs/install\.md$"),
    ("2-cuda-index", lambda t: ["place", "--model", _model_dir(t), "--device", "cuda:99"],
     r"field '--device': cuda:99: (this torch build has no CUDA|this machine has \d+ GPU)"),
    ("2-unknown-device", lambda t: ["sweep", "--models", _model_dir(t), "--budget-examples", "100", "--device", "gpu",
                                    "--output", str(t / "sweep")],
     r"field '--device': unknown device 'gpu' \(allowed: auto, cpu, cuda, cuda:N, mps\)"),
    ("2-evaluate-cuda", lambda t: ["evaluate", "--model", _model_dir(t), "--heldout", __file__, "--device",
                                   _cuda_if_cpu_build(),
                                   "--output", str(t / "eval")],
     r"field '--device': cuda: this torch build has no CUDA"),
    ("3-no-score-column", lambda t: _import(_parquet(t, "noscore.parquet", _long().rename(columns={"score": "value"}))),
     r"noscore\.parquet: field 'score': missing column 'score' \(columns found: model, dataset, example_id, value\)"),
    ("3-no-dataset-column", lambda t: _import(_parquet(t, "nodata.parquet", _long().drop(columns="dataset"))),
     r"nodata\.parquet: field 'dataset': missing column 'dataset' \(columns found: model, example_id, score\)"),
    ("4-output-under-a-file", lambda t: ["place", "--output", str(_touch(t / "file") / "run")],
     r"file/run: field '--output': .*file is a file, not a folder; choose another folder"),
    ("4-output-in-proc", lambda t: ["place", "--output", "/proc/flasheval-nowhere"],
     r"/proc/flasheval-nowhere: field '--output': cannot write the output here \("),
    ("4-sweep-output", lambda t: [*_SWEEP, "--output", str(_touch(t / "file") / "run")],
     r"file/run: field '--output': .*is a file, not a folder"),
    ("4-backtest-output", lambda t: ["backtest", "--reference", _reference(t), "--output",
                                     str(_touch(t / "file") / "b.json")],
     r"field '--output': .*is a file, not a folder"),
    ("6-max-tokens-no-counts", lambda t: ["place", "--max-tokens", "1"],
     r"field '--max-tokens': reference 'helm_lite' records no token counts, so a token budget cannot bind "
     r".*--max-examples"),
    ("6-max-flops-no-counts", lambda t: ["place", "--max-flops", "1"],
     r"field '--max-flops': reference 'helm_lite' records no token counts, so a FLOPs budget cannot bind"),
    ("6-max-flops-no-parameters", lambda t: ["place", "--reference", _reference(t, tokens=True), "--model",
                                             "replay:m1", "--max-flops", "1e12"],
     r"field '--max-flops': a FLOPs budget needs the parameter count .*--n-parameters"),
    ("7-max-examples-below-first-stage", lambda t: ["place", "--max-examples", "50"],
     r"field '--max-examples': 50 is below the first stage of plan default \(120 examples: 20 per dataset x 6 "
     r"datasets\); give at least 120$"),
    ("7-max-tokens-below-first-stage", lambda t: ["place", "--reference", _reference(t, tokens=True), "--model",
                                                  "replay:m1", "--max-tokens", "100"],
     r"field '--max-tokens': 100 is below the first stage of plan default \(40 examples: 20 per dataset x 2 "
     r"datasets, \d+ tokens\); give at least \d+$"),
    *[(f"8-place-replay{option}", lambda t, o=option, v=value: ["place", o, v],
       rf"field '{option}': applies to live models only") for option, value in _REPLAY_LIVE_OPTIONS],
    *[(f"8-sweep-replay{option}", lambda t, o=option, v=value: [*_SWEEP, o, v, "--output", str(t / "s")],
       rf"field '{option}': applies to live specs only") for option, value in _REPLAY_LIVE_OPTIONS],
    *[(f"8-evaluate-replay{option}", lambda t, o=option, v=value: [*_EVALUATE_REPLAY, o, v, "--output", str(t / "e")],
       rf"field '{option}': applies to live models only") for option, value in _EVALUATE_REPLAY_LIVE_OPTIONS],
    ("manifest-without-a-baseline-show", lambda t: ["reference", "show", _centered_without_a_baseline(t)],
     r"centred/manifest\.json: field 'random_baselines': no random baseline for datasets \['a'\]: the centered "
     r"aggregate needs one per dataset; add them to the manifest, or set its 'aggregate' to another one$"),
    ("manifest-without-a-baseline-place", lambda t: ["place", "--reference", _centered_without_a_baseline(t),
                                                     "--model", "replay:m1"],
     r"centred/manifest\.json: field 'random_baselines': no random baseline for datasets \['a'\]"),
    ("import-centered-without-baselines", lambda t: _import(_parquet(t, "c.parquet", _long()), "--aggregate",
                                                            "centered"),
     r"field '--random-baselines': the centered aggregate needs random baselines for every dataset"),
    ("sweep-budget-named-as-typed", lambda t: [*_SWEEP[:3], "--budget-examples", "-1", "--output", str(t / "s")],
     r"^field '--budget-examples': must be a positive number, got -1$"),
    ("import-an-empty-table", lambda t: _import(_parquet(t, "empty.parquet", _long().iloc[:0])),
     r"empty\.parquet: no rows: a reference needs scores of at least 2 models$"),
    ("9-mixed-suites-no-suite", lambda t: _import(_two_suites(t)),
     r"two_suites\.parquet: reference 'new' needs at least 2 models with every dataset; the 'complete-models' "
     r"policy keeps 0 of 8 \(dropped 8: m0 lacks c; m1 lacks c; m2 lacks c; and 5 more\); no dataset has every "
     r"model either: .*--suite\); the file's suites: s1, s2$"),
    ("11-seven-in-exact-match", lambda t: _import(_seven(t, metric=True)),
     r"seven\.parquet: field 'score': row 4: score 7\.0 for m0 / a / 3 is outside \[0, 1\] \(metric "
     r"'exact_match' is per-example 0/1 or accuracy; 1 such row\)"),
    ("11-seven-in-a-0/1-table", lambda t: _import(_seven(t, metric=False)),
     r"seven\.parquet: field 'score': row 4: score 7\.0 .*outside \[0, 1\] \(every other score is 0 or 1"),
    ("12-nan-names-the-input", lambda t: _import(_nan(t)),
     r"nan\.parquet: field 'score': row 6: non-numeric or non-finite score for m0 / a / 5: nan \(1 such row\)$"),
    ("13-log-cut-at-a-line", lambda t: _import(_samples(t, cut={"org__big": _drop_last_line})),
     r"org__big/samples_piqa_[^:]+\.jsonl: 2 samples of task 'piqa' for model 'org/big', but .*org__small/"
     r"samples_piqa_.*has 3 .*lacks doc_id 2; last line 2, doc_id 1"),
    ("13-log-fewer-than-results-say", lambda t: _import(_samples(t, n_samples=4)),
     r"org__(big|small)/samples_piqa_[^:]+\.jsonl: 3 samples of task 'piqa' \(last line 3\), but "
     r"results_.*\.json says 4 \('n-samples'\)"),
    ("13-log-cut-mid-line", lambda t: _import(_samples(t, cut={"org__big": lambda s: s[:-9]})),
     r"org__big/samples_piqa_[^:]+\.jsonl:3: not valid JSON \(.*\); the file looks cut short$"),
    ("13-last-line-without-doc-id", lambda t: _import(_samples(t, cut={"org__big": lambda s: s + '{"acc": 1.0}\n'})),
     r"org__big/samples_piqa_[^:]+\.jsonl:4: field 'doc_id': missing key$"),
    # issue 33: every input checked where it enters
    *[(f"33-manifest-{key}", lambda t, k=key, v=value: ["reference", "show", _edited_manifest(t, **{k: v})],
       rf"mine/manifest\.json: field '{key}': {re.escape(repr(value))} is not ")
      for key, value in (("files", ["scores.parquet"]), ("example_counts", "lots"), ("name", 42),
                         ("random_baselines", "x"), ("source", ["a"]), ("build", "built"))],
    ("33-manifest-digest-int", lambda t: ["reference", "show", _digest_int(t)],
     r"mine/manifest\.json: field 'files': \{'scores\.parquet': 12345\} is not an object of file name -> sha256"),
    ("33-manifest-dropped-model-not-in-scores", lambda t: [
        "place", "--model", "replay:m1", "--reference",
        _edited_manifest(t, dropped_models=[{"model": "ghost", "missing": 3, "first_missing": "a/0"}])],
     r"mine/manifest\.json: field 'dropped_models': model 'ghost' is not in scores\.parquet, but the manifest's "
     r"dropped_models lists it \(1 such\)$"),
    *[(f"33-import-name-{label}", lambda t, n=name: [*_import(_parquet(t, "ok.parquet", _long()))[:5], "--name", n,
                                                      "--output-dir", str(t / "refs")],
       rf"field '--name': a reference name must be one folder name .*got {re.escape(repr(name))}$")
      for label, name in (("parent", "../escaped"), ("absolute", "/tmp/escaped"), ("empty", ""), ("dot", "."))],
    ("33-seeds-unbounded", lambda t: ["backtest", "--reference", _reference(t), "--seeds", "0-99999999"],
     r"field '--seeds': 100000000 seeds in '0-99999999': at most 10000 \(each seed is a whole backtest\)$"),
    ("33-seeds-twice", lambda t: ["backtest", "--reference", _reference(t), "--seeds", "0-4,3"],
     r"field '--seeds': seed 3 listed twice in '0-4,3'$"),
    ("33-n-resamples-validate", lambda t: ["tiers", "validate", _plan_with(t, n_resamples=10**9)],
     r"plan\.yaml: field 'n_resamples': must be an integer from 100 to 100000 \(the ceiling keeps the bootstrap's "
     r"memory sane\), got 1000000000$"),
    ("33-n-resamples-place", lambda t: ["place", "--tiers", _plan_with(t, n_resamples=10**9)],
     r"plan\.yaml: field 'n_resamples': must be an integer from 100 to 100000"),
    ("33-models-from-binary", lambda t: ["sweep", "--models-from", _binary(t), "--budget-examples", "500",
                                         "--output", str(t / "s")],
     r"models\.bin: field '--models-from': not a text file of model specs \(byte 0: not UTF-8\)$"),
    *[(f"33-lm-eval-limit{limit}", lambda t, v=limit: ["lm-eval", "--model", _model_dir(t), "--tasks", "piqa",
                                                        f"--limit={v}"],
       r"field '--limit': must be an integer >= 1 \(examples per task\) or a fraction in \(0, 1\]")
      for limit in ("-1", "0", "2.5")],
    ("33-evaluate-max-length", lambda t: ["evaluate", "--model", _model_dir(t), "--heldout", __file__,
                                          "--max-length", "-5", "--output", str(t / "e")],
     r"field '--max-length': must be an integer >= 1, got -5$"),
    ("33-empty-model-name", lambda t: ["place", "--model", "=" + _model_dir(t)],
     r"^field '--model': '=hf:.*': the NAME before '=' is empty or has spaces around it"),
    ("33-empty-model-id", lambda t: [*_EVALUATE_REPLAY[:3], "--tasks", "helm_lite/gsm8k", "--model-id", "",
                                     "--output", str(t / "e")],
     r"^field '--model-id': expected a non-empty name, got ''$"),
    ("33-empty-reference", lambda t: ["place", "--reference", ""],
     r"^field '--reference': expected a reference name or folder, got ''$"),
    ("33-empty-seed-list", lambda t: ["backtest", "--reference", _reference(t), "--seeds", ""],
     r"^field '--seeds': bad seed list ''"),
    *[(f"33-empty-output-{cmd[0]}", lambda t, c=cmd: [*c, "--output", ""], r"field '--output': empty path")
      for cmd in (["place"], _SWEEP, [*_EVALUATE_REPLAY[:3], "--tasks", "helm_lite/gsm8k"], ["backtest"])],
    # a record is replaced only by a run of the same model, command and settings (or --force)
    ("33-place-other-seed", lambda t: _after(["place", "-q", "--reference", _reference(t), "--model", "replay:m1",
                                              "--output", str(t / "p")], "--seed", "1"),
     r"p: field '--output': holds the place record place\.json written with seed 0, not 1; choose another --output, "
     r"or --force"),
    ("33-backtest-other-seeds", lambda t: _after(["backtest", "--reference", _reference(t), "--methods", "adaptive",
                                                  "--output", str(t / "b.json")], "--seeds", "0-1"),
     r"field '--output': holds the backtest record b\.json written with seeds \[0\], not \[0, 1\]"),
    # every record read back through its kind's schema; lm-eval results files through theirs
    ("33-record-payload-field", lambda t: ["report", _edited_record(t, lambda p: p["stages"][0].update(interval="x"))],
     r"place\.json: field 'payload\.stages\[0\]\.interval': 'x' is not \[low, high\] ranks"),
    ("33-record-payload-missing", lambda t: ["report", _edited_record(t, lambda p: p.pop("compute"))],
     r"place\.json: field 'payload\.compute': missing field$"),
    *[(f"33-lm-eval-results-{key}", lambda t, k=key, v=value: _import(_samples(t, results={k: v})),
       rf"results_[^:]+\.json: field '{re.escape(field)}': {re.escape(shown)} is not {allowed}$")
      for key, value, field, shown, allowed in (
          ("config", [1], "config", "[1]", r"an object \(or null\)"), ("n-samples", {"piqa": 3}, "n-samples[piqa]", "3", "an object"),
          ("n-shot", {"piqa": "x"}, "n-shot[piqa]", "'x'", "an integer"), ("versions", [], "versions", "[]",
                                                                            r"an object \(or null\)"))],
    # names: one rule for references, models and runs
    ("33-model-name-escapes", lambda t: ["place", "--model", "../x=" + _model_dir(t)],
     r"field '--model': a model name is one name or ORG/NAME, each part a folder name .*got '\.\./x'$"),
    ("33-run-name-root", lambda t: ["place", "--run", "/", "--step", "1", "--model", "replay:m1"],
     r"field 'run': a run name \(the run folder's name\) must be one folder name .*got ''$"),
    ("33-dior-sizes-twice", lambda t: ["dior", "--sizes", "10", "10", "--output", str(t / "d")],
     r"^field '--sizes': 10 listed twice in \[10, 10\]$"),
    ("33-dior-instantiations-huge", lambda t: ["dior", "--n-instantiations", "99999999999", "--output", str(t / "d")],
     r"^field '--n-instantiations': must be an integer from 20 to 100000"),
    ("33-report-empty-path", lambda t: ["report", ""], r"^field 'PATH': expected a run folder or record, got ''$"),
    ("33-watch-simultaneous-0", lambda t: ["watch", str(t), "--reference", "helm_lite", "--simultaneous", "0", "--once"],
     r"^field 'simultaneous': the planned number of checkpoints must be a whole number >= 1, got 0$"),
    ("33-device-map-binary", lambda t: ["place", "--model", _model_dir(t), "--device-map", _binary(t)],
     r"models\.bin: field '--device-map': cannot read the device map \('utf-8' codec can't decode"),
    # round 38: dior keeps its settings; ceilings; every empty path; names as typed
    ("33-dior-other-seed", lambda t: _after([*_DIOR(t), "--output", str(t / "d")], "--seed", "1"),
     r"d: field '--output': holds the dior record dior\.json written with seed 0, not 1; choose another --output, "
     r"or --force"),
    ("33-dior-dataset-counts-huge", lambda t: [*_DIOR(t, "datasets"), "--dataset-counts", "99999999999999999999"],
     r"^field '--dataset-counts': dataset counts must be integers >= 1 and <= 1000000, got \[99999999999999999999\]$"),
    ("33-backtest-method-twice", lambda t: ["backtest", "--reference", _reference(t), "--methods", "adaptive,adaptive"],
     r"^field '--methods': method listed twice in \['adaptive', 'adaptive'\]$"),
    ("33-backtest-method-unknown", lambda t: _backtest_then(t, "--methods", "bogus"),  # not a settings mismatch
     r"^field '--methods': unknown backtest method 'bogus' \(allowed: adaptive, flash_helm, uniform, fluid\)$"),
    ("33-intervals-resamples-huge", lambda t: ["reference", "show", _reference(t), "--intervals", "--n-resamples",
                                               "99999999999"],
     r"^field '--n-resamples': must be an integer from 100 to 100000 \(the ceiling keeps the bootstrap's memory"),
    *[(f"33-scaling-{label}", lambda t, e=extra: ["scaling", "fit", "--runs", str(t / "runs.csv"), "--predict", "r1",
                                                   *[a.replace("$T", str(t)) for a in e]], pattern)
      for label, extra, pattern in (
          ("seed", ["--seed", "-1"], r"^field '--seed': must be an integer >= 0, got -1$"),
          ("output-folder", ["--output", "$T"], r"field '--output': is a folder; give the record's file name"),
          ("plot-folder", ["--output", "$T/s.json", "--plot", "$T"], r"field '--plot': is a folder; give the PNG's"),
          ("plot-not-png", ["--output", "$T/s.json", "--plot", "$T/fig"], r"^field '--plot': '.*fig' does not end "
                                                                           r"in \.png"))],
    ("33-scaling-predict-twice", lambda t: ["scaling", "fit", "--runs", str(t / "runs.csv"), "--predict", "r1", "r1"],
     r"^field '--predict': run listed twice in \['r1', 'r1'\]$"),
    ("33-watch-empty-dir", lambda t: ["watch", "", "--reference", "helm_lite", "--once"],
     r"^field 'DIR': expected the folder the checkpoints are saved into, got ''$"),
    ("33-watch-empty-run", lambda t: ["watch", str(t), "--reference", "helm_lite", "--once", "--run", ""],
     r"^field 'run': expected a run folder \(str or Path\), got ''$"),
    ("33-tasks-check-empty", lambda t: ["tasks", "check", ""], r"^field 'DIR': expected a task folder, got ''$"),
    ("33-evaluate-empty-task-dir", lambda t: ["evaluate", "--model", _model_dir(t), "--tasks", "copa", "--task-dir", "",
                                              "--output", str(t / "e")],
     r"^field '--task-dir': empty path; name the folder of the task files$"),
    ("33-place-empty-task-dir", lambda t: ["place", "--model", _model_dir(t), "--task-dir", ""],
     r"^field '--task-dir': empty path; name a folder$"),
    ("33-import-empty-random-baselines", lambda t: [*_import(_parquet(t, "ok.parquet", _long())), "--random-baselines",
                                                    ""],
     r"^field '--random-baselines': empty path; name a JSON file"),
    ("33-aggregate-suite-twice", lambda t: ["aggregate", "--suite", "gadre-17", "--suite", "gadre-17", "--scores",
                                            str(t / "a.csv")],
     r"^field '--suite': suite listed twice in \['gadre-17', 'gadre-17'\]$"),
    ("33-evaluate-suite-twice", lambda t: ["evaluate", "--model", _model_dir(t), "--suite", "gadre-17", "--suite",
                                           "gadre-17", "--task-dir", str(t), "--output", str(t / "e")],
     r"^field '--suite': suite listed twice in \['gadre-17', 'gadre-17'\]$"),
    *[(f"33-aggregate-{label}", lambda t, o=option, v=value: ["aggregate", "--suite", "gadre-17", "--scores",
                                                               str(t / "a.csv"), o, v.replace("$T", str(t))], pattern)
      for label, option, value, pattern in (
          ("empty-output", "--output", "", r"^field '--output': empty path"),
          ("output-folder", "--output", "$T", r"field '--output': is a folder; give the CSV's file name$"))],
    ("33-aggregate-empty-scores", lambda t: ["aggregate", "--suite", "gadre-17", "--scores", ""],
     r"^field '--scores': empty path"),
    *[(f"33-build-lm-eval{option}", lambda t, o=option: (lambda m: [
        "reference", "build", "--models", m, "b=" + m, "--engine", "lm-eval", "--tasks", "piqa", o, "-2", "--name", "b",
        "--output-root", str(t)])(_model_dir(t)),
       rf"^field '{option}': must be an integer >= 0, got -2$") for option in ("--fewshot_seed", "--num-fewshot")],
    *[(f"33-lm-eval-named-as-typed{option}", lambda t, o=option: ["lm-eval", "--model", _model_dir(t), "--tasks", "piqa",
                                                                  o, "-1"],
       rf"^field '{option}': must be an integer >= 0, got -1$")
      for option in ("--fewshot_seed", "--fewshot-seed", "--num_fewshot", "--num-fewshot")],
]


def _backtest_then(tmp_path: Path, *options: str) -> list[str]:
    """A backtest record written, then a backtest into it with ``options`` instead of ``--methods adaptive``."""
    argv = ["backtest", "--reference", _reference(tmp_path), "--output", str(tmp_path / "b.json")]
    assert main([*argv, "--methods", "adaptive"]) == 0
    return [*argv, *options]


def _DIOR(tmp_path: Path, decision: str = "examples") -> list[str]:
    """A quick dior run on the small reference (20 instantiations)."""
    return ["dior", "--reference", _reference(tmp_path), "--decision", decision, "--n-instantiations", "20"]


def _after(argv: list[str], *extra: str) -> list[str]:
    """Run ``argv`` (it must succeed), then return it with ``extra`` options: the second run of a row."""
    assert main(argv) == 0
    return [*argv, *extra]


def _edited_record(tmp_path: Path, edit) -> str:
    """A place record written by ``place``, its payload then changed by ``edit`` (by hand)."""
    out = tmp_path / "p"
    assert main(["place", "-q", "--reference", _reference(tmp_path), "--model", "replay:m1", "--output", str(out)]) == 0
    data = json.loads((out / "place.json").read_text())
    edit(data["payload"])
    (out / "place.json").write_text(json.dumps(data))
    return str(out / "place.json")


def _cuda_if_cpu_build() -> str:
    """``cuda``, where this torch build has no CUDA (the case the row is about); skip the row elsewhere."""
    import torch

    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        pytest.skip("a CUDA (or ROCm) build of torch accepts --device cuda")
    return "cuda"


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


def _one_error_line(err: str, pattern: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert ERROR.match(lines[0]), lines[0]
    assert re.search(pattern, lines[0][len("flasheval: error: "):]), lines[0]


@pytest.mark.parametrize("setup, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line(setup, pattern, tmp_path, capsys):
    argv = setup(tmp_path)
    capsys.readouterr()
    assert main(argv) == 1
    _one_error_line(capsys.readouterr().err, pattern)


def test_a_refused_sweep_budget_writes_no_run_folder(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--models", "replay:meta/llama-3-70b", "--budget-examples", "50", "--output", str(out)]) == 1
    _one_error_line(capsys.readouterr().err, r"field '--budget-examples': budget of 50 examples is smaller than one "
                                             r"stage for every checkpoint \(1 x 120 = 120 examples")
    assert not out.exists()


def test_a_continuous_metric_may_leave_0_1(tmp_path, capsys):
    source = _seven(tmp_path, metric=False)
    assert main(_import(source, "--metric-description", "continuous: log-likelihood per example")) == 0
    assert load_reference(tmp_path / "refs" / "new").n_models == 4


def test_a_failed_import_leaves_nothing_and_the_rerun_works(tmp_path, capsys):
    source = _two_suites(tmp_path)
    assert main(_import(source)) == 1
    assert not (tmp_path / "refs").exists() or not any((tmp_path / "refs").iterdir())
    assert main(_import(source, "--suite", "s1")) == 0
    assert load_reference(tmp_path / "refs" / "new").model_ids == ("m0", "m1", "m2", "m3")
    # a failed import over an existing reference (--force) keeps the old one whole
    assert main(_import(_nan(tmp_path), "--force")) == 1
    assert main(_import(_seven(tmp_path, metric=True), "--force")) == 1
    assert load_reference(tmp_path / "refs" / "new").model_ids == ("m0", "m1", "m2", "m3")
    assert sorted(p.name for p in (tmp_path / "refs").iterdir()) == ["new"]


def test_write_reference_refuses_before_writing_a_folder(tmp_path):
    frame = _long()
    frame.loc[0, "score"] = np.inf
    with pytest.raises(InputError, match=r"^x\.parquet: field 'score': row 1: "):
        write_reference(tmp_path / "out", frame, name="out", source="s", licence="l", metric="acc",
                        input_path="x.parquet")
    assert not (tmp_path / "out").exists()


def test_replacing_a_record_says_so(tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.chdir(tmp_path)
    record = Path("runs") / "place-helm_lite-meta-llama-3-70b-e1f3e635" / "place.json"
    with caplog.at_level(logging.WARNING, logger="flasheval"):
        assert main(["place"]) == 0
        assert not [r for r in caplog.records if "replacing" in r.getMessage()]
        assert main(["place"]) == 0
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "replacing" in r.getMessage()]
    assert len(notes) == 1 and re.fullmatch(
        rf"note: replacing the earlier record {re.escape(str(record))} \(written \d{{4}}-\d\d-\d\d \d\d:\d\d UTC\)",
        notes[0]), notes
    assert json.loads(record.read_text())["kind"] == "place"
    caplog.clear()
    ref = _reference(tmp_path)
    with caplog.at_level(logging.WARNING, logger="flasheval"):
        for _ in range(2):
            assert main(["sweep", "--reference", ref, "--models", "replay:m1", "--budget-examples", "100",
                         "--output", "sw"]) == 0
            assert main(["backtest", "--reference", ref, "--methods", "adaptive", "--output", "bt.json"]) == 0
    notes = [r.getMessage() for r in caplog.records if "replacing" in r.getMessage()]
    assert [n.split(" (written")[0] for n in notes] == [
        f"note: replacing the earlier record {Path('sw') / 'sweep.json'}", "note: replacing the earlier record bt.json"]


def test_a_summary_never_shows_none(tmp_path):
    from flasheval.cli.place import format_summary
    from flasheval.placement.controller import place
    from flasheval.reference.scoring.replay import ReplayScorer
    from flasheval.placement.results import Budget
    from flasheval.placement.tiers import load_tier_plan

    ref = load_reference(_reference(tmp_path))
    result = place(ref.without("m1"), ReplayScorer(ref, "m1"), load_tier_plan("default"), model_id="m1",
                   budget=Budget(max_examples=1))
    assert result.rank is None
    text = format_summary(result)
    assert "None" not in text and "not placed: no stage ran within the budget" in text and "(none scored)" in text


def _without_file_access() -> list[str] | None:
    """A command prefix under which file permissions hold (root drops its capabilities); ``None`` if none can."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]


_DRIVER = """
import contextlib, io, json, sys
from flasheval.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def test_an_unreadable_file_gets_one_line(tmp_path):
    prefix = _without_file_access()
    if prefix is None:
        pytest.skip("running as root without setpriv: no way to make a file unreadable")
    from flasheval.placement.tiers import resolve_tier_plan

    plan = tmp_path / "plan.yaml"
    shutil.copy(resolve_tier_plan("default"), plan)
    ref = Path(_reference(tmp_path))
    source = Path(_seven(tmp_path, metric=False))
    for path in (plan, ref / "manifest.json", source):
        path.chmod(0)
    unreadable_plan = rf"{re.escape(str(plan))}: cannot read the tier plan \(Permission denied\)$"
    cases = [(["tiers", "validate", str(plan)], unreadable_plan),
             (["place", "--tiers", str(plan)], unreadable_plan),
             (["reference", "show", str(ref)], r"mine/manifest\.json: cannot read \(Permission denied\)"),
             (_import(source), r"seven\.parquet: cannot read \(.*Permission denied")]
    done = subprocess.run([*prefix, sys.executable, "-c", _DRIVER, json.dumps([argv for argv, _ in cases])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    for (code, err), (argv, pattern) in zip(json.loads(done.stdout), cases):
        assert code == 1, (argv, err)
        _one_error_line(err, pattern)


def test_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "flasheval", "reference", "show", "helm_lite"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    proc.stdout.close()  # the reader goes away before a line is written (`| head` after its lines)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert err == b"", err.decode()


@pytest.mark.parametrize("argv, pattern", [
    (["place", "--seed", "abc"], r"^flasheval place: error: argument --seed: invalid int value: 'abc' "
                                 r"\(see: flasheval place --help\)$"),
    (["place", "--aggregate", "meen"], r"^flasheval place: error: argument --aggregate: invalid choice: 'meen'"),
    (["plac"], r"^flasheval: error: argument COMMAND: invalid choice: 'plac' \(choose from .*'place'"),
    (["place", "--modle", "x"], r"^flasheval: error: unrecognized arguments: --modle x"),
    (["place", "--model", "replay:a", "--model=replay:b"], r"^flasheval place: error: argument --model: given twice "
     r"\(--model 'replay:a', then --model 'replay:b'\); give it once \(see: flasheval place --help\)$"),
    (["lm-eval", "--model", "m", "--tasks", "t", "--num-fewshot", "1", "--num_fewshot", "2"],
     r"^flasheval lm-eval: error: argument --num_fewshot: given twice \(--num-fewshot 1, then --num_fewshot 2\)"),
    (["dior", "--sizes", "10", "20", "--sizes", "30"], r"argument --sizes: given twice \(--sizes \[10, 20\], then "
                                                        r"--sizes \[30\]\)"),
    (["reference", "import", "x", "--format", "long-parquet", "--name", "a", "--name", "a"],
     r"^flasheval reference import: error: argument --name: given twice"),
    (["scaling", "fit", "--plot", "--plot", "a.png"], r"argument --plot: given twice"),
], ids=["not-an-int", "unknown-choice", "unknown-command", "unknown-option", "model-twice", "both-spellings-twice",
        "a-list-twice", "nested-command-twice", "optional-value-twice"])
def test_a_malformed_command_line_gets_one_line_and_exit_code_2(argv, pattern, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.search(pattern, lines[0]), lines


def test_repeatable_options_stay_repeatable():
    from flasheval.cli import build_parser

    args = build_parser().parse_args(["evaluate", "--model", "m", "--output", "o", "--suite", "a", "--suite", "b",
                                      "--heldout", "x", "--heldout", "y", "-q", "-q"])
    assert args.suite == ["a", "b"] and [str(h) for h in args.heldout] == ["x", "y"] and args.quiet


def test_dior_keeps_its_settings_and_notes_what_it_clips(tmp_path, caplog, capsys):
    """A dior rerun with the same settings replaces its record with a note, other settings need --force; sizes past
    the largest dataset (30 examples) and a sweep's --low-rank past the pool are said in a note, not dropped."""
    argv = [*_DIOR(tmp_path), "--sizes", "5", "99999999999", "--output", str(tmp_path / "d")]
    with caplog.at_level(logging.WARNING, logger="flasheval"):
        assert main(argv) == 0 and main(argv) == 0
        assert main([*argv, "--seed", "3", "--force"]) == 0
        assert main(["sweep", "--reference", str(tmp_path / "refs" / "mine"), "--models", "replay:m1",
                     "--budget-examples", "100", "--low-rank", "99999", "--output", str(tmp_path / "s")]) == 0
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert notes.count("note: --sizes 99999999999: past the largest dataset of mine (30 examples), tried as 30 "
                       "(every dataset whole)") == 3, notes
    assert sum(n.startswith("note: replacing the earlier record") for n in notes) == 2, notes
    assert "note: --low-rank 99999 is past the 4 ranks a checkpoint can take against the 3 models of mine: racing " \
           "is off" in notes, notes
    record = json.loads((tmp_path / "d" / "dior.json").read_text())
    assert record["settings"]["seed"] == 3 and record["settings"]["sizes"] == [5, 30]
    assert [row["size"] for row in record["payload"]["examples"]] == [5, 30]


def test_default_folders_are_unique_per_model_and_settings_and_another_models_record_is_kept(tmp_path, monkeypatch,
                                                                                              capsys):
    """issue 33: ``org/m``, ``org-m`` and ``org m`` all slug to ``org-m``: each gets its own default folder (so does a
    placement with another seed), and a run that would replace another model's (or another command's) record is
    refused without --force."""
    monkeypatch.chdir(tmp_path)
    frame = _long(n_models=5)
    frame["model"] = frame["model"].map({"m0": "org/m", "m1": "org-m", "m2": "org m", "m3": "x", "m4": "y"})
    write_reference(tmp_path / "ref", frame, name="ref", source="test", licence="none", metric="per-example 0/1")
    models = ("org/m", "org-m", "org m")
    for model in models:
        assert main(["place", "-q", "--reference", "ref", "--model", f"replay:{model}"]) == 0
    records = sorted(Path("runs").glob("place-*/place.json"))
    assert len(records) == 3, records
    assert sorted(json.loads(r.read_text())["payload"]["model_id"] for r in records) == sorted(models)
    assert Path("runs/place-ref-org-m/place.json") in records  # a name slug keeps as it is stays readable
    for _ in range(2):  # other settings: a folder of their own, found again by the same command
        assert main(["place", "-q", "--reference", "ref", "--model", "replay:org-m", "--seed", "1"]) == 0
    seeded = sorted(set(Path("runs").glob("place-*/place.json")) - set(records))
    assert len(seeded) == 1 and seeded[0].parent.name.startswith("place-ref-org-m-"), seeded
    assert json.loads(seeded[0].read_text())["settings"]["seed"] == 1
    assert json.loads(Path("runs/place-ref-org-m/place.json").read_text())["settings"]["seed"] == 0
    capsys.readouterr()
    taken = next(r.parent for r in records if json.loads(r.read_text())["payload"]["model_id"] == "org/m")
    assert main(["place", "-q", "--reference", "ref", "--model", "replay:org m", "--output", str(taken)]) == 1
    _one_error_line(capsys.readouterr().err, rf"{re.escape(str(taken))}: field '--output': holds the place record of "
                                             r"model 'org/m', not 'org m'; choose another --output, or --force")
    assert json.loads((taken / "place.json").read_text())["payload"]["model_id"] == "org/m"
    assert main(["evaluate", "--model", "replay:helm_lite/meta/llama-3-70b", "--tasks", "helm_lite/gsm8k",
                 "--n-examples", "5", "--output", "e"]) == 0
    Path("e/summary.json").rename("e/place.json")  # another command's record where a placement would go
    assert main(["place", "-q", "--reference", "ref", "--model", "replay:x", "--output", "e"]) == 1
    _one_error_line(capsys.readouterr().err, r"^e: field '--output': holds a 'evaluate' record \(place\.json\), "
                                             r"not a 'place' one")
    assert main(["place", "-q", "--reference", "ref", "--model", "replay:org m", "--output", str(taken),
                 "--force"]) == 0
    assert json.loads((taken / "place.json").read_text())["payload"]["model_id"] == "org m"


@pytest.mark.parametrize("entry", [[1, 2], "constant-0.5", "constant-nan", "constant-string", "no-pocock"])
def test_a_bad_calibration_cache_entry_is_recomputed_with_a_warning(entry, tmp_path, monkeypatch, caplog, capsys):
    """issue 33: an entry of the wrong shape, or with a constant outside [lower_bound, pocock], is never trusted."""
    from collections import OrderedDict

    from flasheval.placement import calibration

    monkeypatch.setenv("FLASHEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    ref = _reference(tmp_path)
    assert main(["place", "-q", "--reference", ref, "--model", "replay:m1", "--output", str(tmp_path / "p")]) == 0
    (path,) = (tmp_path / "cache").rglob("*.json")
    good = json.loads(path.read_text())
    expected = json.loads((tmp_path / "p" / "place.json").read_text())["payload"]["interval"]
    bad = entry if isinstance(entry, list) else dict(good)
    if isinstance(entry, str):
        change = {"constant-0.5": ("constant", 0.5), "constant-nan": ("constant", float("nan")),
                  "constant-string": ("constant", "2.6"), "no-pocock": ("pocock", None)}[entry]
        bad[change[0]] = change[1]
        if change[1] is None:
            del bad[change[0]]
    path.write_text(json.dumps(bad))
    monkeypatch.setattr(calibration, "_MEMO", OrderedDict())
    with caplog.at_level(logging.WARNING, logger="flasheval"):
        assert main(["place", "-q", "--reference", ref, "--model", "replay:m1", "--output", str(tmp_path / "p")]) == 0
    warnings = [r.getMessage() for r in caplog.records if "cached calibration" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: unusable cached calibration ("), warnings
    assert json.loads((tmp_path / "p" / "place.json").read_text())["payload"]["interval"] == expected
    assert json.loads(path.read_text()) == good  # recomputed and rewritten
