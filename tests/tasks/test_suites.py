"""Suite definitions: sizes, baselines, provenance, lookups."""

from __future__ import annotations

import pytest

from flasheval.errors import UnknownNameError
from flasheval.tasks import load_suite, suite_names, task_names, task_spec


@pytest.mark.parametrize(("name", "n_tasks"), [
    ("dclm-core", 22), ("dclm-extended", 53), ("dclm-mmlu", 1), ("gadre-46", 46), ("gadre-17", 17),
])
def test_suite_sizes_and_members_are_defined(name: str, n_tasks: int) -> None:
    suite = load_suite(name)
    assert len(suite.task_names) == n_tasks
    assert all(t.name in task_names() for t in suite.tasks)
    assert suite.provenance


def test_suite_names_and_subsets() -> None:
    assert suite_names() == ("dclm-core", "dclm-extended", "dclm-mmlu", "gadre-17", "gadre-46")
    extended = set(load_suite("dclm-extended").task_names)
    assert set(load_suite("dclm-core").task_names) <= extended
    assert set(load_suite("gadre-17").task_names) <= set(load_suite("gadre-46").task_names)
    assert set(load_suite("gadre-46").task_names) == extended - {
        "gsm8k_cot", "agi_eval_sat_math_cot", "aqua_cot", "svamp_cot", "triviaqa_sm_sub", "gpqa_main", "gpqa_diamond"}
    assert load_suite("gadre-46").aliases("mmlu_fewshot") == ("mmlu",)


@pytest.mark.parametrize(("task", "v1", "v2", "gadre"), [
    ("siqa", 0.333, 0.5, 0.5), ("commonsense_qa", 0.2, 0.403, 0.25), ("boolq", 0.62, 0.62, 0.5),
    ("bigbench_language_identification", 0.091, 0.25, 0.25), ("jeopardy", 0.0, 0.0, 0.0),
])
def test_baseline_versions(task: str, v1: float, v2: float, gadre: float) -> None:
    spec = task_spec(task)
    assert spec.random_baseline("v1") == pytest.approx(v1)
    assert spec.random_baseline("v2") == pytest.approx(v2)
    assert spec.random_baseline("gadre") == pytest.approx(gadre)


def test_task_settings_converted_from_configs() -> None:
    mmlu = task_spec("mmlu")
    assert (mmlu.name, mmlu.n_shots, mmlu.has_categories, mmlu.continuation_delimiter) == (
        "mmlu_fewshot", 5, True, "\nAnswer: ")
    assert task_spec("mmlu_zeroshot").continuation_delimiter == "Answer: "
    gsm = task_spec("gsm8k_cot")
    assert (gsm.question_prelimiter, gsm.cot_delimiter, gsm.early_stopping_criteria) == (
        "Q: ", " #### ", ("\n\n", "Q:", "Q: "))
    assert task_spec("coqa").data_status == "missing"
    assert task_spec("gpqa_main").zip_file == "gpqa/gpqa_data_dclm_format.zip"


def test_unknown_names_list_the_allowed_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown suite 'core'.*allowed: dclm-core"):
        load_suite("core")
    with pytest.raises(UnknownNameError, match="unknown task 'arc'"):
        task_spec("arc")
    with pytest.raises(UnknownNameError, match="baseline version"):
        task_spec("arc_easy").random_baseline("v3")
