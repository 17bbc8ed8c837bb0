"""DCLM / llm-foundry task suites: task definitions, example loading, prompts and scoring.

Public API::

    spec = task_spec("arc_easy")                       # TaskSpec (frozen)
    examples = load_examples(spec, task_dir)           # tuple[Example, ...], validated
    requests = build_requests(spec, examples, examples[0], seed=1234)
    score = score_example(spec, examples[0], results)  # ExampleScore
    suite = load_suite("dclm-core")                    # Suite; suite_names() lists them

See ``docs/tasks.md`` for the prompt and scoring conventions.
"""

from flasheval.scoring import ExampleScore, score_example
from flasheval.tasks._formats import (
    Example,
    TaskFile,
    load_examples,
    load_task_file,
    parse_examples,
    resolve_task_file,
)
from flasheval.tasks._heldout import heldout_requests
from flasheval.tasks._prompts import (
    PromptPlan,
    build_requests,
    build_task_requests,
    fewshot_preamble,
    plan_prompts,
    select_fewshot,
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
    "Example",
    "ExampleScore",
    "PromptPlan",
    "Suite",
    "TaskFile",
    "TaskSpec",
    "build_requests",
    "build_task_requests",
    "fewshot_preamble",
    "heldout_requests",
    "load_examples",
    "load_suite",
    "load_task_file",
    "parse_examples",
    "plan_prompts",
    "resolve_task_file",
    "score_example",
    "select_fewshot",
    "suite_names",
    "task_names",
    "task_spec",
]
