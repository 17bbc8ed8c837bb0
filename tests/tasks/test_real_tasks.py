"""The real DCLM / llm-foundry task files: documented counts, and request invariants on every task."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import (
    Example,
    build_task_requests,
    load_examples,
    resolve_task_file,
    task_names,
    task_spec,
)
from flasheval.types import GenerationRequest, LoglikelihoodRequest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_examples(task_dir: Path) -> dict[str, tuple[Example, ...]]:
    found = {}
    for name in task_names():
        spec = task_spec(name)
        if resolve_task_file(spec, task_dir) is not None:
            found[name] = load_examples(spec, task_dir)
    return found


def test_every_real_task_file_loads_with_the_documented_count(
    task_dir: Path, real_examples: dict[str, tuple[Example, ...]]
) -> None:
    with (task_dir / "tasks.csv").open(newline="", encoding="utf-8") as handle:
        expected = {row["label"]: row for row in csv.DictReader(handle)}
    assert sorted(set(task_names()) - set(real_examples)) == ["bbq", "bigbench_elementary_math_qa", "coqa"]
    for name, examples in real_examples.items():
        assert len(examples) == int(expected[name]["n_in_file"]), name
        if task_spec(name).has_categories:
            assert len({e.category for e in examples}) == int(expected[name]["n_categories"]), name


def test_requests_on_every_real_task(real_examples: dict[str, tuple[Example, ...]]) -> None:
    for name, examples in real_examples.items():
        spec = task_spec(name)
        ids = nested_prefix(example_order([e.example_id for e in examples], seed=0, task_name=name), 5)
        by_id = {e.example_id: e for e in examples}
        for example_id, requests in build_task_requests(spec, examples, seed=0, example_ids=ids).items():
            example = by_id[example_id]
            shots = requests[0].fewshot_ids
            assert len(shots) == spec.n_shots and example_id not in shots, name
            if spec.has_categories:
                assert {by_id[s].category for s in shots} <= {example.category}, name
            for request in requests:
                assert request.fewshot_ids == shots and request.context == request.context.rstrip(), name
                if isinstance(request, LoglikelihoodRequest):
                    assert request.continuation.startswith(" "), name
            if spec.icl_type == "generation_task_with_answers":
                assert len(requests) == 1 and isinstance(requests[0], GenerationRequest), name
            elif spec.icl_type == "language_modeling":
                assert len(requests) == 1, name
            else:
                assert [r.choice_index for r in requests] == list(range(len(example.choices))), name
