"""Task definitions and suites as data: ``flasheval/tasks/suites/*.yaml``.

The YAMLs are generated once by ``scripts/build_suites.py`` from DCLM's and Gadre et al.'s
configs and committed; every number there records its source file. This module only reads
and validates them (unknown keys are rejected) into frozen values. Task *text* never lives in
the package: :func:`flasheval.tasks.load_examples` reads it from the user's task directory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import yaml

from flasheval.errors import ConfigError, UnknownNameError

__all__ = [
    "ICL_TYPES",
    "BASELINE_VERSIONS",
    "AGGREGATES",
    "TaskSpec",
    "Suite",
    "task_spec",
    "task_names",
    "load_suite",
    "suite_names",
]

IclType = Literal["multiple_choice", "schema", "language_modeling", "generation_task_with_answers"]
ICL_TYPES: tuple[str, ...] = ("multiple_choice", "schema", "language_modeling", "generation_task_with_answers")
BASELINE_VERSIONS: tuple[str, ...] = ("v1", "v2", "gadre")
AGGREGATES: tuple[str, ...] = ("centered_mean", "accuracy", "top1_error")
DATA_STATUSES: tuple[str, ...] = ("original", "reconstructed", "missing", "zip")
_ICL_ALIASES = {"question_answering": "generation_task_with_answers"}
_SUITES_PACKAGE = "flasheval.tasks.suites"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    """One evaluation task (a DCLM label) and how llm-foundry prompts and scores it."""

    name: str
    """DCLM label, e.g. ``"arc_easy"``; also the task_name on requests and results."""
    icl_type: str
    """llm-foundry ``icl_task_type``: one of :data:`ICL_TYPES`."""
    dataset_uri: str
    """DCLM's ``dataset_uri`` (``local_data/<area>/<file>.jsonl`` or ``gpqa_data/<file>.jsonl``)."""
    n_shots: int
    """Number of few-shot examples in each prompt."""
    continuation_delimiter: str = " "
    """Appended to the query / context before the answer."""
    example_delimiter: str = "\n"
    """Joins the few-shot examples and the scored example."""
    prompt_string: str = ""
    """Text placed before the first few-shot example."""
    question_prelimiter: str = ""
    """Placed before every query / context (e.g. ``"Q: "`` for the CoT tasks)."""
    cot_delimiter: str = ""
    """Chain-of-thought delimiter; the prediction is the text after its last occurrence."""
    early_stopping_criteria: tuple[str, ...] = ()
    """Generation is cut at the first of these (generation tasks only)."""
    has_categories: bool = False
    """Few-shot examples come from the example's own category; accuracy is a macro-average over categories."""
    baseline_dclm_v1_pct: float = 0.0
    """DCLM paper random baseline, percent (``eval_meta_data_v1.csv``)."""
    baseline_dclm_v2_pct: float = 0.0
    """DCLM Sept-2025 random baseline, percent (``eval_meta_data.csv``; used by the published results)."""
    baseline_gadre_pct: float | None = None
    """Gadre et al. random baseline, percent (plotting only); ``None`` for tasks outside their list."""
    data_status: str = "original"
    """``original``, ``reconstructed``, ``missing`` (no data anywhere we know) or ``zip`` (GPQA)."""
    n_examples_expected: int | None = None
    """Rows in the known copy of the file (``tasks.csv`` ``n_in_file``); ``None`` when missing."""
    dclm_category: str = ""
    """DCLM's task area (world knowledge, ...)."""
    zip_file: str | None = None
    """Password-protected zip (relative to the task dir) holding ``dataset_uri`` (GPQA)."""

    def __post_init__(self) -> None:
        if self.icl_type not in ICL_TYPES:
            raise ConfigError(f"task {self.name!r}: unknown icl_type {self.icl_type!r}", allowed=ICL_TYPES)
        if self.n_shots < 0:
            raise ConfigError(f"task {self.name!r}: n_shots must be >= 0, got {self.n_shots}")
        if self.data_status not in DATA_STATUSES:
            raise ConfigError(f"task {self.name!r}: unknown data_status {self.data_status!r}", allowed=DATA_STATUSES)
        if not isinstance(self.early_stopping_criteria, tuple):
            raise ConfigError(f"task {self.name!r}: early_stopping_criteria must be a tuple")

    def random_baseline(self, version: str = "v2") -> float:
        """Random-guess accuracy as a fraction for baseline ``version`` (``v1``, ``v2`` or ``gadre``).

        Examples
        --------
        >>> task_spec("siqa").random_baseline("v1"), task_spec("siqa").random_baseline("v2")
        (0.33299999999999996, 0.5)
        """
        pct = {"v1": self.baseline_dclm_v1_pct, "v2": self.baseline_dclm_v2_pct, "gadre": self.baseline_gadre_pct}
        if version not in pct:
            raise UnknownNameError("baseline version", version, BASELINE_VERSIONS)
        value = pct[version]
        if value is None:
            raise ConfigError(f"task {self.name!r} has no {version} random baseline")
        return value / 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Suite:
    """A named list of tasks and the aggregate reported over them."""

    name: str
    """Suite name, e.g. ``"dclm-core"``."""
    description: str
    """One line for ``tasks list``."""
    aggregate: str
    """``centered_mean`` (CORE / EXTENDED), ``accuracy`` (MMLU) or ``top1_error`` (Gadre)."""
    task_names: tuple[str, ...]
    """Member tasks (DCLM labels), in the source's order."""
    column_aliases: tuple[tuple[str, str], ...] = ()
    """``(task_name, other label)`` pairs: another name the task goes by in score tables (Gadre's ``mmlu``)."""
    provenance: str = ""
    """Where the task list comes from."""

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"suite {self.name!r}: unknown aggregate {self.aggregate!r}", allowed=AGGREGATES)
        if len(set(self.task_names)) != len(self.task_names) or not self.task_names:
            raise ConfigError(f"suite {self.name!r}: task list is empty or has duplicates")

    @property
    def tasks(self) -> tuple[TaskSpec, ...]:
        """The member tasks' specs."""
        return tuple(task_spec(name) for name in self.task_names)

    def aliases(self, task_name: str) -> tuple[str, ...]:
        """Other labels ``task_name`` may have in a score table."""
        return tuple(alias for name, alias in self.column_aliases if name == task_name)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: the same documents, ~9x faster on ``tasks.yaml`` (which every
command that reads a task file parses once per process)."""


def _read_yaml(name: str) -> dict[str, Any]:
    text = resources.files(_SUITES_PACKAGE).joinpath(name).read_text(encoding="utf-8")
    data = yaml.load(text, Loader=_SAFE_LOADER)
    if not isinstance(data, dict):
        raise ConfigError("suite file is not a mapping", path=name)
    return data


def _build_spec(name: str, raw: dict[str, Any]) -> TaskSpec:
    raw = dict(raw)
    raw["icl_type"] = _ICL_ALIASES.get(raw.get("icl_type", ""), raw.get("icl_type", ""))
    raw["early_stopping_criteria"] = tuple(raw.get("early_stopping_criteria") or ())
    fields = set(TaskSpec.__dataclass_fields__) - {"name"}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ConfigError(f"task {name!r}: unknown keys {unknown}", path="tasks.yaml", allowed=sorted(fields))
    try:
        return TaskSpec(name=name, **raw)
    except TypeError as exc:
        raise ConfigError(f"task {name!r}: {exc}", path="tasks.yaml") from None


@functools.cache
def _all_specs() -> dict[str, TaskSpec]:
    tasks = _read_yaml("tasks.yaml")["tasks"]
    return {name: _build_spec(name, raw) for name, raw in tasks.items()}


def task_names() -> tuple[str, ...]:
    """Every task flasheval knows, in DCLM EXTENDED order."""
    return tuple(_all_specs())


def task_spec(name: str) -> TaskSpec:
    """The :class:`TaskSpec` of task ``name`` (a DCLM label; Gadre's ``mmlu`` means ``mmlu_fewshot``).

    Examples
    --------
    >>> spec = task_spec("arc_easy")
    >>> spec.icl_type, spec.n_shots, spec.continuation_delimiter
    ('multiple_choice', 10, '\\nAnswer: ')
    """
    specs = _all_specs()
    name = {"mmlu": "mmlu_fewshot"}.get(name, name)
    if name not in specs:
        raise UnknownNameError("task", name, specs)
    return specs[name]


def suite_names() -> tuple[str, ...]:
    """Names of the built-in suites."""
    files = resources.files(_SUITES_PACKAGE).iterdir()
    return tuple(sorted(f.name[: -len(".yaml")] for f in files if f.name.endswith(".yaml") and f.name != "tasks.yaml"))


@functools.cache
def load_suite(name: str) -> Suite:
    """The built-in suite ``name`` (see :func:`suite_names`)."""
    if name not in suite_names():
        raise UnknownNameError("suite", name, suite_names(), field="--suite")
    raw = _read_yaml(f"{name}.yaml")
    allowed = {"name", "description", "aggregate", "tasks", "column_aliases", "provenance"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"suite {name!r}: unknown keys {unknown}", path=f"{name}.yaml", allowed=sorted(allowed))
    suite = Suite(
        name=raw["name"],
        description=raw.get("description", ""),
        aggregate=raw["aggregate"],
        task_names=tuple(raw["tasks"]),
        column_aliases=tuple((k, v) for k, v in (raw.get("column_aliases") or {}).items()),
        provenance=raw.get("provenance", ""),
    )
    for task in suite.task_names:
        task_spec(task)  # every member must be defined
    return suite
