"""Prompt building: hand-written expected prompts per task type, and few-shot selection rules."""

from __future__ import annotations

import dataclasses
import json

from flasheval.tasks import (
    TaskSpec,
    build_requests,
    build_task_requests,
    parse_examples,
    plan_prompts,
    select_fewshot,
)
from flasheval.types import GenerationRequest, LoglikelihoodRequest


def _spec(icl_type: str, **overrides: object) -> TaskSpec:
    fields: dict = {"n_shots": 1, **overrides}
    return TaskSpec(name="toy", icl_type=icl_type, dataset_uri="local_data/x/toy.jsonl", **fields)


def _examples(spec: TaskSpec, *records: dict) -> tuple:
    data = "\n".join(json.dumps(r) for r in records).encode("utf-8") + b"\n"
    return parse_examples(spec, data, where="toy.jsonl")


def test_multiple_choice_prompt_with_one_shot() -> None:
    spec = _spec("multiple_choice", continuation_delimiter="\nAnswer: ")
    examples = _examples(
        spec,
        {"query": "Q: What is red? ", "choices": ["fire", "ice"], "gold": 0},
        {"query": "  Q: What is cold?\nAnswer:", "choices": ["fire", " ice"], "gold": 1},
    )
    requests = build_requests(spec, examples, examples[1], seed=7)
    assert all(isinstance(r, LoglikelihoodRequest) for r in requests)
    # The cue already in the query is stripped, the delimiter appended, then the whole context rstripped.
    expected_context = "Q: What is red?\nAnswer: fire\nQ: What is cold?\nAnswer:\nAnswer:"
    assert [r.context for r in requests] == [expected_context, expected_context]
    assert [r.continuation for r in requests] == [" fire", " ice"]  # no second space before " ice"
    assert [r.choice_index for r in requests] == [0, 1]
    assert all(r.fewshot_ids == ("000000",) for r in requests)


def test_multiple_choice_without_prefix_space_and_zero_shot() -> None:
    spec = _spec("multiple_choice", n_shots=0)
    examples = _examples(spec, {"query": "The man turned on the faucet, therefore", "choices": ["a.", "b."], "gold": 1},
                         {"query": "x", "choices": ["c", "d"], "gold": 0})
    requests = build_requests(spec, examples, examples[0], seed=7, prefix_space=False)
    assert [r.context for r in requests] == ["The man turned on the faucet, therefore"] * 2
    assert [r.continuation for r in requests] == ["a.", "b."]
    assert requests[0].fewshot_ids == ()


def test_two_shot_order_follows_the_recorded_ids() -> None:
    spec = _spec("multiple_choice", n_shots=2)
    examples = _examples(spec, *({"query": f"q{i}", "choices": [f"a{i}", f"b{i}"], "gold": i % 2} for i in range(3)))
    (request, _) = build_requests(spec, examples, examples[2], seed=3)
    expected = {("000000", "000001"): "q0 a0\nq1 b1\nq2", ("000001", "000000"): "q1 b1\nq0 a0\nq2"}
    assert request.context == expected[request.fewshot_ids]


def test_schema_prompts_zero_and_one_shot() -> None:
    spec = _spec("schema", n_shots=0)
    records = [
        {"context_options": ["Sarah was better than Maria so Sarah", "Sarah was better than Maria so Maria"],
         "continuation": "got the easy cases. ", "gold": 1},
        {"context_options": ["The trophy did not fit because the trophy", "The trophy did not fit because the case"],
         "continuation": "was too big.", "gold": 0},
    ]
    examples = _examples(spec, *records)
    zero = build_requests(spec, examples, examples[1], seed=1)
    assert [r.context for r in zero] == records[1]["context_options"]
    assert [r.continuation for r in zero] == [" was too big."] * 2
    one = build_requests(dataclasses.replace(spec, n_shots=1), examples, examples[1], seed=1)
    shot = "Sarah was better than Maria so Maria got the easy cases."
    assert [r.context for r in one] == [
        f"{shot}\nThe trophy did not fit because the trophy",
        f"{shot}\nThe trophy did not fit because the case",
    ]
    assert one[0].fewshot_ids == ("000000",)


def test_language_modeling_prompt_uses_same_category_shots() -> None:
    spec = _spec("language_modeling", continuation_delimiter="\nAnswer: ", has_categories=True)
    examples = _examples(
        spec,
        {"context": "HISTORY: first", "continuation": "Byrd", "category": "history"},
        {"context": "SCIENCE: second", "continuation": "Neon", "category": "science"},
        {"context": "HISTORY: third", "continuation": "Tower of London", "category": "history"},
    )
    (request,) = build_requests(spec, examples, examples[2], seed=11)
    assert request.context == "HISTORY: first\nAnswer: Byrd\nHISTORY: third\nAnswer:"
    assert request.continuation == " Tower of London"
    assert request.fewshot_ids == ("000000",)


def test_generation_prompt_with_chain_of_thought() -> None:
    spec = _spec(
        "generation_task_with_answers",
        continuation_delimiter="\nA: Let's think step by step. ",
        question_prelimiter="Q: ",
        cot_delimiter=" #### ",
        early_stopping_criteria=("\n\n", "Q:", "Q: "),
    )
    examples = _examples(
        spec,
        {"context": "Two plus two?", "chain_of_thought": "2 + 2 = 4.", "answer": "4"},
        {"context": "Three plus one?", "chain_of_thought": "3 + 1 = 4.", "answer": "4"},
    )
    (request,) = build_requests(spec, examples, examples[1], seed=5)
    assert isinstance(request, GenerationRequest)
    assert request.context == (
        "Q: Two plus two?\nA: Let's think step by step. 2 + 2 = 4. #### 4\n"
        "Q: Three plus one?\nA: Let's think step by step."
    )
    assert request.stop_sequences == ("\n\n", "Q:", "Q: ")
    assert request.max_new_tokens == len("2 + 2 = 4. #### 4") + 10


def test_generation_prompt_without_chain_of_thought() -> None:
    spec = _spec("generation_task_with_answers")
    examples = _examples(
        spec,
        {"context": "Question: Capital of France?\nAnswer:", "answer": "Paris", "aliases": ["Paris, France"]},
        {"context": "Question: Capital of Peru?\nAnswer:", "answer": "Lima", "aliases": []},
    )
    (request,) = build_requests(spec, examples, examples[1], seed=5)
    assert request.context == "Question: Capital of France?\nAnswer: Paris\nQuestion: Capital of Peru?\nAnswer:"
    assert request.stop_sequences == ()
    assert request.max_new_tokens == len("Paris, France")


def test_fewshot_is_deterministic_excludes_self_and_stays_in_category() -> None:
    spec = _spec("language_modeling", n_shots=3, has_categories=True)
    records = [{"context": f"c{i}", "continuation": f"x{i}", "category": "ab"[i % 2]} for i in range(40)]
    examples = _examples(spec, *records)
    plan = plan_prompts(spec, examples)
    draws = {}
    for example in examples:
        shots = select_fewshot(plan, example, seed=9)
        assert len(shots) == 3 and len({s.example_id for s in shots}) == 3
        assert example.example_id not in {s.example_id for s in shots}
        assert {s.category for s in shots} == {example.category}
        assert shots == select_fewshot(plan_prompts(spec, examples[::-1]), example, seed=9)
        draws[example.example_id] = shots
    assert len({tuple(s.example_id for s in d) for d in draws.values()}) > 30  # one set per example
    assert any(select_fewshot(plan, e, seed=10) != draws[e.example_id] for e in examples)


def test_fewshot_uses_what_the_pool_has() -> None:
    spec = _spec("multiple_choice", n_shots=5)
    examples = _examples(spec, {"query": "a", "choices": ["x", "y"], "gold": 0},
                         {"query": "b", "choices": ["x", "y"], "gold": 1})
    assert [s.example_id for s in select_fewshot(plan_prompts(spec, examples), examples[0], seed=0)] == ["000001"]


def test_batch_builder_matches_single_builder() -> None:
    spec = _spec("multiple_choice", n_shots=2)
    examples = _examples(spec, *({"query": f"q{i}", "choices": ["x", "y"], "gold": i % 2} for i in range(12)))
    batch = build_task_requests(spec, examples, seed=4, example_ids=["000007", "000002"])
    assert list(batch) == ["000007", "000002"]
    for example_id, requests in batch.items():
        (example,) = [e for e in examples if e.example_id == example_id]
        assert requests == build_requests(spec, examples, example, seed=4)


def test_request_key_ignores_fewshot_ids() -> None:
    a = LoglikelihoodRequest(task_name="t", example_id="1", choice_index=0, context="c", continuation=" x")
    b = dataclasses.replace(a, fewshot_ids=("000003",))
    assert a.key == b.key
    assert a.key != dataclasses.replace(a, context="d").key
