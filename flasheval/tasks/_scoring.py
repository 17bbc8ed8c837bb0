"""Scoring, pure: backend results → per-example scores → per-task accuracy → suite aggregates.

Per-example rules are llm-foundry 0.9.0's ICL metrics; aggregates are DCLM's (centered
accuracy, CORE, EXTENDED, MMLU) and Gadre et al.'s (average top-1 error). No I/O here.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.errors import InputError
from flasheval.tasks._formats import Example
from flasheval.tasks._suites import Suite, TaskSpec
from flasheval.types import GenerationResult, LoglikelihoodResult, RollingLoglikelihoodResult

__all__ = [
    "ExampleScore",
    "score_example",
    "normalize_answer",
    "task_accuracy",
    "task_standard_error",
    "centered_accuracy",
    "SuiteAggregate",
    "suite_aggregate",
    "ValidationLoss",
    "validation_loss",
]

_PUNCTUATION = frozenset(string.punctuation + "‘’´`")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleScore:
    """The score of one example."""

    task_name: str
    """Task (DCLM label)."""
    example_id: str
    """Example id within the task."""
    category: str | None
    """Category for tasks with categories (macro-averaging), else ``None``."""
    correct: bool
    """Whether the model got it right under llm-foundry's rule for the task type."""
    prediction: int | str
    """Chosen choice index (multiple choice / schema), ``-1`` (language modelling) or the cut answer text."""
    choice_mean_nll: tuple[float, ...] = ()
    """Mean per-token cross-entropy (nats) of each choice's continuation (multiple choice / schema)."""


def normalize_answer(text: str) -> str:
    """TriviaQA-style answer normalization used by llm-foundry's exact-match metric.

    ``_`` becomes a space, text is lower-cased, punctuation (plus ‘ ’ ´ `) becomes a space,
    the articles a / an / the are removed and whitespace is collapsed.

    Examples
    --------
    >>> normalize_answer("The  Tower_of London!")
    'tower of london'
    >>> normalize_answer("U.S.A.")  # the lone "a" is an article once punctuation is gone
    'u s'
    """
    text = text.replace("_", " ").lower()
    text = "".join(" " if ch in _PUNCTUATION else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split()).strip()


def _check_results(example: Example, results: Sequence[object], kind: type, n_expected: int) -> None:
    if len(results) != n_expected:
        raise ValueError(f"{example.task_name}/{example.example_id}: expected {n_expected} results, got {len(results)}")
    for result in results:
        if not isinstance(result, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(result).__name__}")
        if (result.task_name, result.example_id) != (example.task_name, example.example_id):  # type: ignore[attr-defined]
            raise ValueError(f"result for {result.task_name}/{result.example_id} "  # type: ignore[attr-defined]
                             f"given for {example.task_name}/{example.example_id}")


def _score_choices(example: Example, results: Sequence[LoglikelihoodResult]) -> ExampleScore:
    _check_results(example, results, LoglikelihoodResult, len(example.choices))
    by_index = {r.choice_index: r for r in results}
    if sorted(by_index) != list(range(len(example.choices))):
        raise ValueError(f"{example.task_name}/{example.example_id}: choice indices {sorted(by_index)} incomplete")
    nll = tuple(by_index[i].mean_nll for i in range(len(example.choices)))
    # llm-foundry takes the first choice with the lowest perplexity exp(mean nll); argmin of nll is the same.
    prediction = int(np.argmin(nll))
    return ExampleScore(task_name=example.task_name, example_id=example.example_id, category=example.category,
                        correct=prediction == example.gold, prediction=prediction, choice_mean_nll=nll)


def _cut_generation(spec: TaskSpec, text: str) -> str:
    # llm-foundry joins the stop sequences into one regular expression, keeps what precedes the
    # first match, then keeps what follows the last CoT delimiter.
    if spec.early_stopping_criteria:
        text = re.split("|".join(spec.early_stopping_criteria), text)[0]
    if spec.cot_delimiter:
        text = text.split(spec.cot_delimiter)[-1]
    return text


def score_example(spec: TaskSpec, example: Example, results: Sequence[object]) -> ExampleScore:
    """Score one example from its backend results, exactly as llm-foundry does.

    * multiple_choice / schema: the choice with the lowest mean per-token cross-entropy of its
      continuation (first one on ties) must be ``gold``;
    * language_modeling: the greedy token must equal the gold one at every continuation position;
    * generation: the output, cut at the first stop sequence and (CoT) after the last
      ``cot_delimiter``, normalized, must *start with* the normalized answer or an alias.

    Parameters
    ----------
    spec
        The task.
    example
        The example the results answer.
    results
        The backend results for the requests :func:`build_requests` made for ``example``
        (any order; one per choice, or a single one).
    """
    if spec.icl_type in ("multiple_choice", "schema"):
        return _score_choices(example, results)  # type: ignore[arg-type]
    if spec.icl_type == "language_modeling":
        _check_results(example, results, LoglikelihoodResult, 1)
        correct = bool(results[0].is_greedy)  # type: ignore[attr-defined]
        return ExampleScore(task_name=example.task_name, example_id=example.example_id, category=example.category,
                            correct=correct, prediction=-1)
    _check_results(example, results, GenerationResult, 1)
    answer = normalize_answer(_cut_generation(spec, results[0].text))  # type: ignore[attr-defined]
    labels = {normalize_answer(label) for label in (example.answer, *example.aliases)}
    correct = any(answer.startswith(label) for label in labels)
    return ExampleScore(task_name=example.task_name, example_id=example.example_id, category=example.category,
                        correct=correct, prediction=answer)


def task_accuracy(scores: Sequence[ExampleScore], *, has_categories: bool = False) -> float:
    """Per-task accuracy; with categories, the unweighted mean of per-category accuracies (DCLM).

    Examples
    --------
    >>> s = [ExampleScore(task_name="t", example_id=str(i), category=c, correct=ok, prediction=0)
    ...      for i, (c, ok) in enumerate([("a", True), ("a", False), ("b", True)])]
    >>> task_accuracy(s), task_accuracy(s, has_categories=True)
    (0.6666666666666666, 0.75)
    """
    if not scores:
        raise ValueError("no scores")
    if not has_categories:
        return float(np.mean([s.correct for s in scores]))
    by_category: dict[str | None, list[bool]] = {}
    for score in scores:
        by_category.setdefault(score.category, []).append(score.correct)
    return float(np.mean([np.mean(by_category[c]) for c in sorted(by_category, key=str)]))


def task_standard_error(scores: Sequence[ExampleScore], *, has_categories: bool = False) -> float | None:
    """Standard error of :func:`task_accuracy` over the examples scored (their sampling variability).

    Without categories: the standard error of a mean of 0/1 outcomes, ``sqrt(p (1 - p) / (n - 1))``
    (the sample standard deviation over ``sqrt(n)``). With categories the accuracy is the unweighted
    mean of ``C`` category means, so its variance is ``sum_c s_c**2 / n_c / C**2``. ``None`` when a
    mean rests on a single example (no variance estimate).

    Examples
    --------
    >>> s = [ExampleScore(task_name="t", example_id=str(i), category=None, correct=ok, prediction=0)
    ...      for i, ok in enumerate([True, True, False, False])]
    >>> round(task_standard_error(s), 6)  # sqrt(0.25 / 3)
    0.288675
    """
    if not scores:
        raise ValueError("no scores")
    groups: dict[str | None, list[bool]] = {}
    for score in scores:
        groups.setdefault(score.category if has_categories else None, []).append(score.correct)
    if any(len(g) < 2 for g in groups.values()):
        return None
    variance = sum(float(np.var(g, ddof=1)) / len(g) for g in groups.values()) / len(groups) ** 2
    return math.sqrt(variance)


def centered_accuracy(accuracy: float, baseline: float) -> float:
    """DCLM's centered accuracy ``(acc - b) / (1 - b)``; ``baseline`` as a fraction.

    Examples
    --------
    >>> centered_accuracy(0.625, 0.25)
    0.5
    """
    if not 0 <= baseline < 1:
        raise ValueError(f"baseline must be in [0, 1), got {baseline}")
    return (accuracy - baseline) / (1 - baseline)


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteAggregate:
    """A suite's aggregate for one model."""

    suite: str
    """Suite name."""
    value: float
    """CORE / EXTENDED (mean centered accuracy), MMLU (accuracy) or Gadre's mean top-1 error."""
    baselines: str
    """Random-baseline version used for centering (``v1`` / ``v2``; irrelevant for other aggregates)."""
    n_tasks: int
    """Tasks that entered the value."""
    missing: tuple[str, ...] = ()
    """Suite tasks without a score."""
    standard_error: float | None = None
    """Standard error of ``value`` from the tasks' standard errors (tasks independent); ``None``
    when not given for every task that entered the value."""

    @property
    def partial(self) -> bool:
        """Whether the value covers only part of the suite."""
        return bool(self.missing)


def suite_aggregate(
    suite: Suite,
    accuracies: Mapping[str, float],
    *,
    baselines: str = "v2",
    partial: bool = False,
    standard_errors: Mapping[str, float | None] | None = None,
) -> SuiteAggregate:
    """Aggregate per-task accuracies (fractions) over ``suite``.

    Tasks without a finite accuracy are *missing*: the aggregate is refused unless ``partial``
    is true, and a partial aggregate says which tasks it lacks. Every aggregate is a weighted
    sum of task accuracies, so with ``standard_errors`` (per task, e.g. from
    :func:`task_standard_error`) its standard error is ``sqrt(sum w_t**2 se_t**2)`` over the
    tasks present (tasks scored independently).

    Examples
    --------
    >>> from flasheval.tasks import load_suite
    >>> core = load_suite("dclm-core")
    >>> accs = {t.name: t.random_baseline("v2") for t in core.tasks}
    >>> suite_aggregate(core, accs).value
    0.0
    """
    if baselines not in ("v1", "v2"):
        raise InputError(f"unknown baseline version {baselines!r}", field="baselines", allowed=("v1", "v2"))
    present = [t for t in suite.tasks if t.name in accuracies and math.isfinite(accuracies[t.name])]
    missing = tuple(t.name for t in suite.tasks if t not in present)
    if missing and not partial:
        raise InputError(f"suite {suite.name!r} is incomplete: no score for {', '.join(missing)}; "
                         "pass partial=True (CLI: --partial) for an aggregate labelled partial")
    if not present:
        raise InputError(f"suite {suite.name!r}: no task has a score")
    accs = [accuracies[t.name] for t in present]
    if suite.aggregate == "centered_mean":
        value = float(np.mean([centered_accuracy(a, t.random_baseline(baselines)) for a, t in zip(accs, present)]))
        weights = [1 / (1 - t.random_baseline(baselines)) / len(present) for t in present]
    elif suite.aggregate == "top1_error":
        value = float(np.mean([1 - a for a in accs]))
        weights = [1 / len(present)] * len(present)
    else:
        value = float(np.mean(accs))
        weights = [1 / len(present)] * len(present)
    errors = [None if standard_errors is None else standard_errors.get(t.name) for t in present]
    standard_error = None
    if all(e is not None and math.isfinite(e) for e in errors):
        standard_error = math.sqrt(math.fsum((w * e) ** 2 for w, e in zip(weights, errors)))  # type: ignore[operator]
    return SuiteAggregate(suite=suite.name, value=value, baselines=baselines, n_tasks=len(present), missing=missing,
                          standard_error=standard_error)


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationLoss:
    """Loss on a held-out text (Gadre et al.'s validation loss)."""

    mean_nll: float
    """Mean per-token cross-entropy in nats: total negative log-likelihood / total tokens."""
    bits_per_byte: float
    """Total negative log-likelihood in bits / total UTF-8 bytes (comparable across tokenizers)."""
    n_tokens: int
    """Tokens scored."""
    n_bytes: int
    """UTF-8 bytes scored."""


def validation_loss(results: Sequence[RollingLoglikelihoodResult]) -> ValidationLoss:
    """Token-weighted loss and bits per byte over all documents of a held-out file.

    Examples
    --------
    >>> r = RollingLoglikelihoodResult(task_name="v", example_id="0", logprob_sum=-8 * math.log(2),
    ...                                n_tokens=4, n_bytes=16)
    >>> loss = validation_loss([r])
    >>> round(loss.mean_nll, 6), loss.bits_per_byte
    (1.386294, 0.5)
    """
    if not results:
        raise ValueError("no results")
    n_tokens = sum(r.n_tokens for r in results)
    n_bytes = sum(r.n_bytes for r in results)
    if n_tokens < 1 or n_bytes < 1:
        raise ValueError("results cover no tokens or no bytes")
    nll = -math.fsum(r.logprob_sum for r in results)
    return ValidationLoss(mean_nll=nll / n_tokens, bits_per_byte=nll / (math.log(2) * n_bytes),
                          n_tokens=n_tokens, n_bytes=n_bytes)
