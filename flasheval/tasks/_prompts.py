"""Few-shot selection and prompt building (pure functions).

Strings are built exactly as llm-foundry 0.9.0's ICL datasets build them (see docs/tasks.md):
the few-shot preamble is ``prompt_string`` followed by each shot rendered *with* its answer;
the scored example is rendered without an answer, prefixed by ``example_delimiter`` when a
preamble precedes it, and right-stripped. The continuation gets a leading space when the
tokenizer needs one (llm-foundry's ``prefix_space`` test; true for DCLM's GPT-NeoX tokenizer).

One deliberate difference from llm-foundry: each example gets its own few-shot set, drawn
from ``(seed, task_name, example_id)`` out of the examples of its category (excluding
itself), so any example's requests can be rebuilt alone, in any process, in any stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.errors import InputError
from flasheval.hashing import derive_seed, stable_hash
from flasheval.tasks._formats import Example, LiveTask
from flasheval.tasks._suites import TaskSpec
from flasheval.types import GenerationRequest, LoglikelihoodRequest, Request

__all__ = ["PromptPlan", "plan_prompts", "select_fewshot", "build_requests", "build_task_requests",
           "build_example_requests", "prompt_digest", "task_prompt_digest"]

# llm-foundry adds this many tokens of head-room to the longest answer when a task has a CoT delimiter.
_COT_ANSWER_BUFFER = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptPlan:
    """What prompt building needs from the whole task file, computed once per task."""

    spec: TaskSpec
    """The task."""
    pools: tuple[tuple[str | None, tuple[Example, ...]], ...]
    """Few-shot pools: ``(category, examples sorted by id)``; one pool ``(None, ...)`` without categories."""
    has_cot: bool
    """Whether the file has chain-of-thought solutions (llm-foundry's ``has_cot``)."""
    max_new_tokens: int
    """Generation budget: UTF-8 bytes of the longest answer (an upper bound on its byte-level BPE tokens)."""

    def pool(self, example: Example) -> tuple[Example, ...]:
        """The few-shot pool ``example`` draws from."""
        key = example.category if self.spec.has_categories else None
        for category, members in self.pools:
            if category == key:
                return members
        raise ValueError(f"example {example.example_id} has category {key!r}, which is not in the task file")


def _answer_texts(spec: TaskSpec, example: Example, has_cot: bool) -> list[str]:
    answers = [example.answer, *example.aliases]
    if has_cot:
        return [f"{example.chain_of_thought}{spec.cot_delimiter}{a}" for a in answers]
    return answers


def plan_prompts(spec: TaskSpec, examples: Sequence[Example]) -> PromptPlan:
    """Group ``examples`` (the whole task file) into few-shot pools and derive per-task settings."""
    groups: dict[str | None, list[Example]] = {}
    for example in examples:
        groups.setdefault(example.category if spec.has_categories else None, []).append(example)
    pools = tuple(
        (category, tuple(sorted(members, key=lambda e: e.example_id)))
        for category, members in sorted(groups.items(), key=lambda kv: "" if kv[0] is None else kv[0])
    )
    has_cot = any(e.chain_of_thought for e in examples)
    max_new_tokens = 1
    if spec.icl_type == "generation_task_with_answers":
        longest = max(len(t.encode("utf-8")) for e in examples for t in _answer_texts(spec, e, has_cot))
        max_new_tokens = max(1, longest + (_COT_ANSWER_BUFFER if spec.cot_delimiter else 0))
    return PromptPlan(spec=spec, pools=pools, has_cot=has_cot, max_new_tokens=max_new_tokens)


def select_fewshot(plan: PromptPlan, example: Example, *, seed: int) -> tuple[Example, ...]:
    """The few-shot examples for ``example``: ``n_shots`` distinct others from its pool.

    Drawn by a generator seeded from ``(seed, task_name, example_id)`` over the pool sorted by
    id, so the set depends only on those and on the task file, never on which other examples
    are evaluated. ``k + 1`` positions are drawn and the example itself dropped, which gives
    every ``k``-subset of the other examples the same probability.
    """
    pool = plan.pool(example)
    n_shots = min(plan.spec.n_shots, len(pool) - 1)
    if n_shots <= 0:
        return ()
    rng = np.random.default_rng(derive_seed(seed, plan.spec.name, example.example_id))
    drawn = rng.choice(len(pool), size=min(n_shots + 1, len(pool)), replace=False)
    others = [pool[int(i)] for i in drawn if pool[int(i)].example_id != example.example_id]
    return tuple(others[:n_shots])


def _render(plan: PromptPlan, example: Example, *, preceded: bool, with_answer: bool) -> str:
    """llm-foundry's ``construct_context``: one example as text, optionally with its answer."""
    spec = plan.spec
    if spec.icl_type == "schema":
        # Few-shot schema examples show the gold context option, the delimiter and the continuation.
        # (llm-foundry puts question_prelimiter before the example delimiter here.)
        text = example.choices[example.gold or 0]
        text = f"{spec.example_delimiter}{text}" if preceded else text
        return f"{spec.question_prelimiter}{text}{spec.continuation_delimiter}{example.continuation}"
    body = example.query if spec.icl_type == "multiple_choice" else example.context
    text = f"{spec.question_prelimiter}{body}"
    if preceded:
        text = f"{spec.example_delimiter}{text}"
    text = f"{text}{spec.continuation_delimiter}"
    if with_answer:
        text += _answer(plan, example)
    return text


def _answer(plan: PromptPlan, example: Example) -> str:
    """The answer shown after a few-shot example (no prefix space in context)."""
    icl_type = plan.spec.icl_type
    if icl_type == "multiple_choice":
        return example.choices[example.gold or 0]
    if icl_type == "language_modeling":
        return example.continuation
    if plan.has_cot:
        return f"{example.chain_of_thought}{plan.spec.cot_delimiter}{example.answer}"
    return example.answer


def fewshot_preamble(plan: PromptPlan, shots: Iterable[Example]) -> str:
    """``prompt_string`` followed by every shot rendered with its answer."""
    text = plan.spec.prompt_string
    for shot in shots:
        text += _render(plan, shot, preceded=len(text) > 0, with_answer=True)
    return text


def _with_prefix_space(text: str, prefix_space: bool) -> str:
    return f" {text}" if prefix_space and not text.startswith(" ") else text


def _requests_for(plan: PromptPlan, example: Example, *, seed: int, prefix_space: bool) -> tuple[Request, ...]:
    spec = plan.spec
    shots = select_fewshot(plan, example, seed=seed)
    preamble = fewshot_preamble(plan, shots)
    ids = {"task_name": spec.name, "example_id": example.example_id,
           "fewshot_ids": tuple(s.example_id for s in shots)}
    if spec.icl_type == "schema":
        if preamble:
            delimiter = spec.continuation_delimiter.rstrip()
            contexts = [f"{spec.question_prelimiter}{spec.example_delimiter}{c}{delimiter}" for c in example.choices]
        else:
            contexts = [f"{spec.question_prelimiter}{c}" for c in example.choices]
        continuation = _with_prefix_space(example.continuation, prefix_space)
        return tuple(
            LoglikelihoodRequest(choice_index=i, context=preamble + c, continuation=continuation, **ids)
            for i, c in enumerate(contexts)
        )
    context = preamble + _render(plan, example, preceded=len(preamble) > 0, with_answer=False).rstrip()
    if spec.icl_type == "multiple_choice":
        return tuple(
            LoglikelihoodRequest(choice_index=i, context=context, continuation=_with_prefix_space(c, prefix_space),
                                 **ids)
            for i, c in enumerate(example.choices)
        )
    if spec.icl_type == "language_modeling":
        continuation = _with_prefix_space(example.continuation, prefix_space)
        return (LoglikelihoodRequest(choice_index=0, context=context, continuation=continuation, **ids),)
    return (GenerationRequest(context=context, stop_sequences=spec.early_stopping_criteria,
                              max_new_tokens=plan.max_new_tokens, **ids),)


def build_requests(
    spec: TaskSpec,
    examples: Sequence[Example],
    example: Example,
    *,
    seed: int,
    prefix_space: bool = True,
) -> tuple[Request, ...]:
    """The backend requests that score ``example``.

    Parameters
    ----------
    spec
        The task.
    examples
        Every example of the task file (the few-shot pool), as :func:`load_examples` returns them.
    example
        The example to score (one of ``examples``).
    seed
        Run seed; with the task name and example id it fixes the few-shot set.
    prefix_space
        Whether continuations get a leading space: llm-foundry's test "does the tokenizer encode
        ``' a'`` as one token" (true for GPT-NeoX / GPT-2 / Llama-3 BPE, false for SentencePiece).

    Returns
    -------
    tuple of requests
        multiple_choice / schema: one :class:`LoglikelihoodRequest` per choice (``choice_index``
        = position); language_modeling: one; generation: one :class:`GenerationRequest`. Each
        carries ``fewshot_ids``.

    Notes
    -----
    Building the pools costs O(len(examples)); to build many examples of one task use
    :func:`build_task_requests`, which does it once.
    """
    return _requests_for(plan_prompts(spec, examples), example, seed=seed, prefix_space=prefix_space)


def build_task_requests(
    spec: TaskSpec,
    examples: Sequence[Example],
    *,
    seed: int,
    example_ids: Iterable[str] | None = None,
    prefix_space: bool = True,
) -> dict[str, tuple[Request, ...]]:
    """Requests for many examples of one task at once: ``{example_id: requests}``.

    Same result as calling :func:`build_requests` for each id in ``example_ids`` (default: all),
    in that order.
    """
    plan = plan_prompts(spec, examples)
    by_id = {e.example_id: e for e in examples}
    wanted = list(by_id) if example_ids is None else list(example_ids)
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise ValueError(f"task {spec.name!r} has no examples {missing[:5]}")
    return {i: _requests_for(plan, by_id[i], seed=seed, prefix_space=prefix_space) for i in wanted}


def build_example_requests(task: LiveTask, example_ids: Sequence[str], *, seed: int,
                           prefix_space: bool) -> dict[str, tuple[Request, ...]]:
    """``{example_id: requests}`` for ``example_ids`` (in that order); unknown ids are refused."""
    known = set(task.example_ids)
    unknown = [i for i in example_ids if i not in known]
    if unknown:
        raise InputError(f"task {task.name!r} has no examples {unknown[:5]} (task file changed?)", field="example_id")
    return build_task_requests(task.spec, task.examples, seed=seed, example_ids=example_ids, prefix_space=prefix_space)


def prompt_digest(requests: Sequence[Request]) -> str:
    """Digest of an example's requests: their content keys and few-shot ids, in request order.

    Examples
    --------
    >>> r = LoglikelihoodRequest(task_name="t", example_id="1", choice_index=0, context="Q", continuation=" A")
    >>> prompt_digest([r]) == prompt_digest([r])
    True
    >>> prompt_digest([r]) == prompt_digest([r, r])
    False
    """
    return stable_hash([(r.key, list(getattr(r, "fewshot_ids", ()))) for r in requests])


def task_prompt_digest(requests_by_id: Mapping[str, Sequence[Request]]) -> str:
    """One digest for a task: every example's :func:`prompt_digest`, by sorted example id."""
    return stable_hash([(i, prompt_digest(requests_by_id[i])) for i in sorted(requests_by_id)])
