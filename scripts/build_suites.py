"""Generate ``flasheval/tasks/suites/*.yaml`` from the DCLM / Gadre configs (run once, output committed).

Reads ``<tasks dir>/{tasks.csv, task_lists.json, configs/...}`` (default: ``$FLASHEVAL_SHARED/data/tasks``
or ``<repo root>/../shared/data/tasks``) and writes one ``tasks.yaml`` with every task definition
(file, icl type, shots, delimiters, categories, the three random baselines) and one YAML per suite.
Every number records the config file it was converted from. The package reads only the YAMLs.

Usage: ``python scripts/build_suites.py [TASKS_DIR [OUT_DIR]]`` (OUT_DIR defaults to the package's suites folder).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = REPO_ROOT / "flasheval" / "tasks" / "suites"

DCLM_COMMIT = "mlfoundations/dclm@361714bdd60bb9b7f4b2d8354cebbf0dec0c329e"
SCALING_COMMIT = "mlfoundations/scaling@a003c491"
# Keys of a DCLM icl_tasks entry that we carry over (everything else is rejected so nothing is lost silently).
_KNOWN_KEYS = {
    "label", "dataset_uri", "num_fewshot", "icl_task_type", "continuation_delimiter", "has_categories",
    "cot_delimiter", "question_prelimiter", "early_stopping_criteria", "example_delimiter", "prompt_string",
}
_GPQA_ZIP = "gpqa/gpqa_data_dclm_format.zip"


def _tasks_dir(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1])
    shared = os.environ.get("FLASHEVAL_SHARED") or str(REPO_ROOT.parent / "shared")
    return Path(shared) / "data" / "tasks"


def _baselines(path: Path) -> dict[str, float]:
    with path.open(newline="", encoding="utf-8") as handle:
        return {row["Eval Task"]: float(row["Random baseline"]) for row in csv.DictReader(handle)}


def _icl_tasks(path: Path) -> dict[str, dict]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))["icl_tasks"]
    out = {}
    for entry in entries:
        unknown = set(entry) - _KNOWN_KEYS
        if unknown:
            raise SystemExit(f"{path}: task {entry['label']}: keys not handled: {sorted(unknown)}")
        out[entry["label"]] = entry
    return out


def _task_entry(label: str, cfg: dict, row: dict, base: dict[str, dict[str, float]], core_cfg: dict) -> dict:
    uri = cfg["dataset_uri"]
    (n_shots,) = cfg["num_fewshot"]
    if label in core_cfg and core_cfg[label]["num_fewshot"] != cfg["num_fewshot"]:
        raise SystemExit(f"{label}: shots differ between heavy.yaml and mmlu_and_lowvar.yaml")
    status = row["data_status"]
    entry = {
        "icl_type": cfg["icl_task_type"],
        "dataset_uri": uri,
        "n_shots": int(n_shots),
        "continuation_delimiter": cfg.get("continuation_delimiter", " "),
        "example_delimiter": cfg.get("example_delimiter", "\n"),
        "prompt_string": cfg.get("prompt_string", ""),
        "question_prelimiter": cfg.get("question_prelimiter", ""),
        "cot_delimiter": cfg.get("cot_delimiter", ""),
        "early_stopping_criteria": list(cfg.get("early_stopping_criteria") or []),
        "has_categories": bool(cfg.get("has_categories", False)),
        "baseline_dclm_v1_pct": base["v1"][label],
        "baseline_dclm_v2_pct": base["v2"][label],
        "baseline_gadre_pct": base["gadre"].get(label),
        "data_status": {"original": "original", "RECONSTRUCTED": "reconstructed", "MISSING": "missing"}.get(
            status, "zip" if uri.startswith("gpqa_data/") else status
        ),
        "n_examples_expected": int(row["n_in_file"]) if row["n_in_file"] not in ("", "—") else None,
        "dclm_category": row["dclm_category"],
    }
    if uri.startswith("gpqa_data/"):
        entry["zip_file"] = _GPQA_ZIP
    return entry


def main(argv: list[str]) -> int:
    src = _tasks_dir(argv)
    out_dir = Path(argv[2]) if len(argv) > 2 else OUT_DIR
    cfg_dir = src / "configs"
    heavy = _icl_tasks(cfg_dir / "dclm" / "heavy.yaml")
    core_cfg = _icl_tasks(cfg_dir / "dclm" / "mmlu_and_lowvar.yaml")
    base = {
        "v1": _baselines(cfg_dir / "dclm" / "eval_meta_data_v1.csv"),
        "v2": _baselines(cfg_dir / "dclm" / "eval_meta_data.csv"),
        "gadre": _baselines(cfg_dir / "scaling" / "eval_metadata.csv"),
    }
    base["gadre"]["mmlu_fewshot"] = base["gadre"].get("mmlu", base["gadre"].get("mmlu_fewshot"))
    with (src / "tasks.csv").open(newline="", encoding="utf-8") as handle:
        rows = {row["label"]: row for row in csv.DictReader(handle)}
    lists = json.loads((src / "task_lists.json").read_text(encoding="utf-8"))
    if list(heavy) != lists["dclm_extended_53"]:
        raise SystemExit("heavy.yaml labels differ from task_lists.json dclm_extended_53")

    tasks = {label: _task_entry(label, heavy[label], rows[label], base, core_cfg) for label in heavy}
    provenance = {
        "task definitions (file, icl_type, shots, delimiters, has_categories)": f"{DCLM_COMMIT} eval/heavy.yaml "
        "(shots identical in eval/mmlu_and_lowvar.yaml; checked by this script)",
        "baseline_dclm_v1_pct": f"{DCLM_COMMIT} eval/eval_meta_data_v1.csv 'Random baseline' (paper, CORE/EXTENDED v1)",
        "baseline_dclm_v2_pct": f"{DCLM_COMMIT} eval/eval_meta_data.csv 'Random baseline' (Sept-2025 fix, PR #115; v2)",
        "baseline_gadre_pct": f"{SCALING_COMMIT} eval_metadata.csv 'Random baseline' (plotting only; no centering)",
        "data_status, n_examples_expected, dclm_category": "shared/data/tasks/tasks.csv (n_in_file)",
        "defaults": "llm-foundry 0.9.0: continuation_delimiter=' ', example_delimiter='\\n', prompt_string='', "
        "question_prelimiter='', cot_delimiter='', no early stopping",
    }
    _dump(out_dir / "tasks.yaml", {"provenance": provenance, "tasks": tasks})

    gadre_alias = {"mmlu_fewshot": "mmlu"}
    suites = {
        "dclm-core": ("centered_mean", lists["dclm_core_22"], {}, lists["_provenance"]["dclm_core_22"],
                      "DCLM CORE: mean centered accuracy over the 22 low-variance tasks"),
        "dclm-extended": ("centered_mean", lists["dclm_extended_53"], {}, lists["_provenance"]["dclm_extended_53"],
                          "DCLM EXTENDED: mean centered accuracy over all 53 tasks"),
        "dclm-mmlu": ("accuracy", lists["dclm_mmlu"], {}, lists["_provenance"]["dclm_mmlu"],
                      "DCLM MMLU: plain 5-shot accuracy, macro-averaged over the 57 subjects"),
        "gadre-46": ("top1_error", lists["gadre_46"], gadre_alias, lists["_provenance"]["gadre_46"],
                     "Gadre et al. 2024: average top-1 error (1 - accuracy) over 46 tasks"),
        "gadre-17": ("top1_error", lists["gadre_17_subset"], gadre_alias, lists["_provenance"]["gadre_17_subset"],
                     "Gadre et al. 2024: average top-1 error over the 17-task subset"),
    }
    for name, (aggregate, labels, aliases, prov, description) in suites.items():
        members = ["mmlu_fewshot" if label == "mmlu" else label for label in labels]
        unknown = [m for m in members if m not in tasks]
        if unknown:
            raise SystemExit(f"suite {name}: unknown tasks {unknown}")
        _dump(out_dir / f"{name}.yaml", {
            "name": name,
            "description": description,
            "aggregate": aggregate,
            "tasks": members,
            "column_aliases": {m: a for m, a in aliases.items() if m in members},
            "provenance": prov + (f"; label map {lists['_provenance']['label_map_gadre_to_dclm']}" if aliases else ""),
        })
    print(f"wrote {len(suites) + 1} files to {out_dir}")
    return 0


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Double-quote strings with control or edge whitespace so "\n" and "Answer: " read unambiguously.
    style = '"' if (value != value.strip() or "\n" in value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


yaml.SafeDumper.add_representer(str, _str_representer)


def _dump(path: Path, data: dict) -> None:
    header = "# Generated by scripts/build_suites.py from the DCLM / Gadre configs; do not edit by hand.\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
