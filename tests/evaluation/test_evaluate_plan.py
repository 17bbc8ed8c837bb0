"""``flasheval.evaluation.selection``'s run planning on the real task files: which tasks a suite run
scores, which it cannot (no data); and ``flasheval.evaluation.heldout``'s held-out file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flasheval.evaluation.heldout import load_heldout
from flasheval.evaluation.selection import plan_tasks
from flasheval.errors import InputError


def _task_lists(task_dir: Path) -> dict[str, list[str]]:
    return json.loads((task_dir / "task_lists.json").read_text(encoding="utf-8"))


def test_suite_plans_leave_out_exactly_the_tasks_without_data(task_dir: Path) -> None:
    lists = _task_lists(task_dir)  # the data's own machine-readable task lists, not flasheval's YAML
    core = plan_tasks(["dclm-core"], None, task_dir)
    assert core.without_data == ("coqa",)
    assert set(core.task_names) == set(lists["dclm_core_22"]) - {"coqa"} and len(core.task_names) == 21
    both = plan_tasks(["gadre-46", "gadre-17"], None, task_dir)
    assert set(both.without_data) == {"coqa", "bbq", "bigbench_elementary_math_qa"}
    gadre_46 = {"mmlu_fewshot" if t == "mmlu" else t for t in lists["gadre_46"]}
    assert set(both.task_names) | set(both.without_data) == gadre_46  # the 17 are a subset: each task once
    assert len(both.task_names) == len(set(both.task_names)) == 43
    extended = plan_tasks(["dclm-extended", "dclm-mmlu"], None, task_dir)  # GPQA read from its zip
    assert set(extended.without_data) == {"coqa", "bbq", "bigbench_elementary_math_qa"}
    assert set(extended.task_names) == set(lists["dclm_extended_53"]) - set(extended.without_data)


def test_tasks_narrow_a_suite_and_must_belong_to_it(task_dir: Path) -> None:
    plan = plan_tasks(["dclm-core", "gadre-17"], ["winograd", "copa", "pubmed_qa_labeled"], task_dir)
    assert plan.task_names == ("copa", "winograd", "pubmed_qa_labeled")  # suite order
    assert plan_tasks(["gadre-46"], ["mmlu"], task_dir).task_names == ("mmlu_fewshot",)  # Gadre's label
    with pytest.raises(InputError, match="field '--tasks': gsm8k_cot not in suite"):
        plan_tasks(["dclm-core"], ["copa", "gsm8k_cot"], task_dir)
    with pytest.raises(InputError, match="suite 'dclm-mmlu': none of its tasks is selected"):
        plan_tasks(["dclm-core", "dclm-mmlu"], ["copa"], task_dir)
    with pytest.raises(InputError, match="nothing to evaluate"):
        plan_tasks([], None, task_dir)
    assert plan_tasks([], ["copa"], task_dir).without_data == ()


def test_heldout_files_are_named_by_stem(tmp_path: Path) -> None:
    (tmp_path / "c4_val.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n', encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "c4_val.txt").write_text("plain text", encoding="utf-8")
    (heldout,) = load_heldout([tmp_path / "c4_val.jsonl"])
    assert heldout.name == "c4_val" and [r.task_name for r in heldout.requests] == ["heldout/c4_val"] * 2
    with pytest.raises(InputError, match="two held-out files named 'c4_val'"):
        load_heldout([tmp_path / "c4_val.jsonl", tmp_path / "other" / "c4_val.txt"])
