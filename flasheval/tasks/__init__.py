"""Tasks: DCLM / llm-foundry task suites, example loading, prompts and the scoring of an example.

One step of the method per private module, the public API re-exported here:

* ``_suites``  — task definitions and suites (YAML data under ``suites/``): :func:`task_spec`, :func:`load_suite`;
* ``_formats`` — task file → validated :class:`Example` values: :func:`load_examples`, :func:`load_live_tasks`;
* ``_prompts`` — example → requests (few-shot sets, prompt strings), and their digests: :func:`build_task_requests`;
* ``_scoring`` — results → an example's score → task accuracy → suite aggregates: :func:`score_example`;
* ``_score_table`` — a CSV of per-task accuracies → suite aggregates per model (``flasheval aggregate``);
* ``_heldout`` — held-out text → rolling log-likelihood requests (validation loss).

Public API::

    spec = task_spec("arc_easy")                       # TaskSpec (frozen)
    examples = load_examples(spec, task_dir)           # tuple[Example, ...], validated
    requests = build_requests(spec, examples, examples[0], seed=1234)
    score = score_example(spec, examples[0], results)  # ExampleScore
    suite = load_suite("dclm-core")                    # Suite; suite_names() lists them

See ``docs/tasks.md`` for the prompt and scoring conventions.
"""

from flasheval.tasks._formats import (
    Example,
    LiveTask,
    TaskFile,
    load_examples,
    load_live_tasks,
    load_task_file,
    parse_examples,
    resolve_task_file,
)
from flasheval.tasks._heldout import heldout_requests
from flasheval.tasks._prompts import (
    PromptPlan,
    build_example_requests,
    build_requests,
    build_task_requests,
    fewshot_preamble,
    plan_prompts,
    prompt_digest,
    select_fewshot,
    task_prompt_digest,
)
from flasheval.tasks._score_table import aggregate_table, read_scores
from flasheval.tasks._scoring import (
    ExampleScore,
    SuiteAggregate,
    ValidationLoss,
    centered_accuracy,
    normalize_answer,
    score_example,
    suite_aggregate,
    task_accuracy,
    task_standard_error,
    validation_loss,
)
from flasheval.tasks._suites import (
    BASELINE_VERSIONS,
    ICL_TYPES,
    Suite,
    TaskSpec,
    load_suite,
    suite_names,
    task_names,
    task_spec,
)

__all__ = [
    "BASELINE_VERSIONS",
    "ICL_TYPES",
    "aggregate_table",
    "read_scores",
    "Example",
    "ExampleScore",
    "LiveTask",
    "PromptPlan",
    "Suite",
    "SuiteAggregate",
    "TaskFile",
    "TaskSpec",
    "ValidationLoss",
    "build_example_requests",
    "build_requests",
    "build_task_requests",
    "centered_accuracy",
    "fewshot_preamble",
    "heldout_requests",
    "load_examples",
    "load_live_tasks",
    "load_suite",
    "load_task_file",
    "normalize_answer",
    "parse_examples",
    "plan_prompts",
    "prompt_digest",
    "resolve_task_file",
    "score_example",
    "select_fewshot",
    "suite_aggregate",
    "suite_names",
    "task_accuracy",
    "task_standard_error",
    "task_names",
    "task_prompt_digest",
    "task_spec",
    "validation_loss",
]
