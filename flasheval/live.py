"""Live scoring: run a real model on task examples for a reference build or a placement.

The same three steps serve ``flasheval reference build`` and ``flasheval place --model
gguf:...|hf:...``, so a placed model sees exactly the prompts the reference models saw:

1. :func:`build_example_requests` builds each example's requests with the tasks layer
   (:func:`flasheval.tasks.build_task_requests`) under the reference's ``seed`` and
   ``prefix_space``; the few-shot set of an example depends only on (seed, task, example id)
   and the task file, never on which other examples are scored;
2. :func:`flasheval.evaluation.score_requests` sends them, batch-first, through a backend (normally a
   :class:`~flasheval.backends.CachedBackend` over the results store, so a killed run resumes);
3. :func:`score_outcomes` scores each example with :func:`flasheval.tasks.score_example` and
   counts the tokens the model actually ran for it (:func:`example_tokens`).

:class:`LiveScorer` wraps the three steps in the placement controller's scorer protocol
(:class:`flasheval.scorer.ExampleScorer`). Every prompt has a digest (:func:`prompt_digest`):
a reference stores one digest per task over all its examples, and a live placement refuses to
run when its rebuilt prompts differ.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flasheval.backends.base import Backend
from flasheval.errors import InputError
from flasheval.evaluation import score_requests
from flasheval.hashing import stable_hash
from flasheval.scorer import ScoredExamples
from flasheval.scoring import score_example
from flasheval.tasks import Example, TaskSpec, build_task_requests, load_task_file, resolve_task_file, task_spec
from flasheval.types import (
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Request,
    Result,
)

__all__ = [
    "LiveTask",
    "ExampleOutcome",
    "LiveScorer",
    "load_live_tasks",
    "task_file_sha256",
    "build_example_requests",
    "prompt_digest",
    "task_prompt_digest",
    "example_tokens",
    "score_outcomes",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LiveTask:
    """One task's specification, every example of its file and the file's SHA-256."""

    spec: TaskSpec
    """The task."""
    examples: tuple[Example, ...]
    """Every example of the task file (the few-shot pool)."""
    sha256: str
    """SHA-256 of the task file's bytes (the zip member's container for GPQA)."""
    path: str
    """Where the file was found."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def example_ids(self) -> tuple[str, ...]:
        return tuple(e.example_id for e in self.examples)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleOutcome:
    """What scoring one example produced (one row of a build's or a placement's example log)."""

    task_name: str
    example_id: str
    score: float
    """1.0 if answered correctly, else 0.0."""
    n_tokens: int
    """Tokens the model ran for this example: each distinct context once plus every continuation
    (generation: the generated tokens)."""
    fewshot_ids: tuple[str, ...]
    """Ids of the few-shot examples in the prompt."""
    prompt_digest: str
    """:func:`prompt_digest` of the example's requests."""

    def to_json(self) -> dict[str, object]:
        return {"task_name": self.task_name, "example_id": self.example_id, "score": self.score,
                "n_tokens": self.n_tokens, "fewshot_ids": list(self.fewshot_ids), "prompt_digest": self.prompt_digest}


def task_file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_live_tasks(task_names: Sequence[str], task_dir: str | Path) -> tuple[LiveTask, ...]:
    """Load every named task from ``task_dir``; one error lists ALL tasks whose file is missing.

    Raises
    ------
    UnknownNameError
        A task name that is not defined.
    InputError
        ``task_dir`` does not exist, or lacks some of the tasks (all of them are listed).
    """
    root = Path(task_dir)
    if not root.is_dir():
        raise InputError("task directory does not exist", path=root, field="--task-dir")
    specs = [task_spec(name) for name in task_names]
    found = [(spec, resolve_task_file(spec, root)) for spec in specs]
    missing = [spec.name for spec, source in found if source is None]
    if missing:
        raise InputError(f"task directory lacks {len(missing)} of the {len(specs)} tasks: {', '.join(missing)}",
                         path=root, field="--task-dir")
    tasks = []
    for spec, source in found:
        tasks.append(LiveTask(spec=spec, examples=load_task_file(spec, source),  # type: ignore[arg-type]
                              sha256=task_file_sha256(source.path), path=str(source.path)))  # type: ignore[union-attr]
    return tuple(tasks)


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


def build_example_requests(task: LiveTask, example_ids: Sequence[str], *, seed: int,
                           prefix_space: bool) -> dict[str, tuple[Request, ...]]:
    """``{example_id: requests}`` for ``example_ids`` (in that order); unknown ids are refused."""
    known = set(task.example_ids)
    unknown = [i for i in example_ids if i not in known]
    if unknown:
        raise InputError(f"task {task.name!r} has no examples {unknown[:5]} (task file changed?)", field="example_id")
    return build_task_requests(task.spec, task.examples, seed=seed, example_ids=example_ids, prefix_space=prefix_space)


def example_tokens(requests: Sequence[Request], results: Sequence[Result]) -> int:
    """Tokens a shared-context backend ran for one example (``results`` answer ``requests``).

    Each distinct context is counted once (the choices of a multiple-choice example share it)
    plus every continuation; a generation counts its context and its generated tokens.

    Examples
    --------
    >>> req = lambda i: LoglikelihoodRequest(task_name="t", example_id="1", choice_index=i, context="Q",
    ...                                      continuation=f" {i}")
    >>> res = lambda i, n: LoglikelihoodResult(task_name="t", example_id="1", choice_index=i, logprob_sum=-1.0,
    ...                                        n_tokens=n, is_greedy=False, n_context_tokens=10)
    >>> example_tokens([req(0), req(1)], [res(0, 2), res(1, 3)])
    15
    """
    total, contexts = 0, set()
    for request, result in zip(requests, results, strict=True):
        if isinstance(result, LoglikelihoodResult):
            if request.context not in contexts:  # type: ignore[union-attr]
                contexts.add(request.context)  # type: ignore[union-attr]
                total += result.n_context_tokens
            total += result.n_tokens
        elif isinstance(result, GenerationResult):
            total += result.n_context_tokens + result.n_generated_tokens
        else:
            total += result.n_tokens
    return total


def score_outcomes(task: LiveTask, requests_by_id: Mapping[str, Sequence[Request]],
                   results: Sequence[Result]) -> list[ExampleOutcome]:
    """Score each example of ``requests_by_id`` (in its order) from ``results`` (flattened, same order)."""
    by_id = {e.example_id: e for e in task.examples}
    outcomes, start = [], 0
    for example_id, requests in requests_by_id.items():
        answers = results[start:start + len(requests)]
        start += len(requests)
        score = score_example(task.spec, by_id[example_id], answers)
        outcomes.append(ExampleOutcome(
            task_name=task.name, example_id=example_id, score=1.0 if score.correct else 0.0,
            n_tokens=example_tokens(requests, answers), fewshot_ids=tuple(getattr(requests[0], "fewshot_ids", ())),
            prompt_digest=prompt_digest(requests)))
    return outcomes


def score_examples(backend: Backend, task: LiveTask, example_ids: Sequence[str], *, seed: int,
                   prefix_space: bool) -> list[ExampleOutcome]:
    """Build, run and score ``example_ids`` of ``task`` (one batch-first backend call per request kind)."""
    requests_by_id = build_example_requests(task, example_ids, seed=seed, prefix_space=prefix_space)
    flat = [r for requests in requests_by_id.values() for r in requests]
    return score_outcomes(task, requests_by_id, score_requests(backend, flat))


class LiveScorer:
    """The placement controller's scorer for a model that runs now.

    Parameters
    ----------
    backend
        The model (normally a :class:`~flasheval.backends.CachedBackend` over a results store).
    tasks
        The reference's tasks, loaded from the task directory.
    seed, prefix_space
        The reference's build settings: they fix the few-shot sets and the continuation spacing.
    n_parameters
        Parameter count, for the FLOPs estimate.

    Attributes
    ----------
    requests
        Every ``(task_name, example_ids)`` the controller asked for, in order.
    outcomes
        Every scored example, in the order scored.
    """

    __slots__ = ("_backend", "_tasks", "seed", "prefix_space", "n_parameters", "requests", "outcomes")

    def __init__(self, backend: Backend, tasks: Sequence[LiveTask], *, seed: int, prefix_space: bool,
                 n_parameters: int | None = None) -> None:
        self._backend = backend
        self._tasks = {t.name: t for t in tasks}
        self.seed = seed
        self.prefix_space = prefix_space
        self.n_parameters = n_parameters
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        self.outcomes: list[ExampleOutcome] = []

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        """Scores and token counts of ``example_ids`` of ``task_name`` (same order)."""
        if task_name not in self._tasks:
            raise InputError(f"task {task_name!r} is not loaded", field="task_name", allowed=sorted(self._tasks))
        self.requests.append((task_name, tuple(example_ids)))
        outcomes = score_examples(self._backend, self._tasks[task_name], example_ids, seed=self.seed,
                                  prefix_space=self.prefix_space)
        self.outcomes.extend(outcomes)
        logger.info("scored %d examples of %s", len(outcomes), task_name)
        return ScoredExamples(scores=np.array([o.score for o in outcomes], dtype=np.float64),
                              n_tokens=np.array([o.n_tokens for o in outcomes], dtype=np.int64))
