"""Live references: what a built reference pins, and the one check that a live run reproduces it.

A reference built by ``flasheval reference build`` (:mod:`flasheval.reference.building`) records in
its manifest's ``build`` dict (:class:`BuildSettings`) everything a live placement must
reproduce for its comparison to be paired: the seed (example order and few-shot sets), the
continuation spacing, the dtype, the SHA-256 of every task file and, per task, a digest of
every reference example's prompts (:func:`prompt_digests`). ``place``, ``sweep`` and any other
command that scores a model now against such a reference call :func:`prepare_live`, which
checks all of it and refuses a mismatch in one line naming the option to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flasheval.version import __version__
from flasheval.engine.base import SCORING_VERSION
from flasheval.errors import InputError
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.tasks import LiveTask, build_example_requests, load_live_tasks, task_prompt_digest

__all__ = ["BUILD_KIND", "BuildSettings", "prompt_digests", "check_task_files", "check_prompts", "check_live_settings",
           "LiveSetup", "prepare_live"]

BUILD_KIND = "live"
"""``build["kind"]`` of a reference built from task suites by scoring models."""


def prompt_digests(tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *, seed: int,
                   prefix_space: bool) -> dict[str, str]:
    """Per task, :func:`flasheval.tasks.task_prompt_digest` of the given examples' requests."""
    return {t.name: task_prompt_digest(build_example_requests(t, example_ids[t.name], seed=seed,
                                                              prefix_space=prefix_space)) for t in tasks}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSettings:
    """The manifest's ``build`` dict of a built reference: what a placement must reproduce."""

    suite: str
    tasks: tuple[str, ...]
    seed: int
    """Fixes each task's example order and every example's few-shot set."""
    n_examples: int | None
    """Examples per task (first N of the seeded order); ``None`` = all."""
    prefix_space: bool
    dtype: str
    task_sha256: Mapping[str, str]
    """SHA-256 of each task file."""
    prompt_digests: Mapping[str, str]
    """Per task, the digest of every reference example's requests."""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per model: ``spec``, ``fingerprint``, ``n_parameters``."""
    task_dir: str = ""
    """Where the task files were read (a default for placements; the checksums decide)."""
    flasheval_version: str = __version__
    scoring_version: str = SCORING_VERSION

    def __post_init__(self) -> None:
        if self.n_examples is not None and self.n_examples < 1:
            raise InputError(f"must be >= 1, got {self.n_examples}", field="--n-examples")
        if set(self.task_sha256) != set(self.tasks) or set(self.prompt_digests) != set(self.tasks):
            raise ValueError("task_sha256 and prompt_digests must cover exactly the tasks")

    def to_json(self) -> dict[str, Any]:
        return {"kind": BUILD_KIND, "suite": self.suite, "tasks": list(self.tasks), "seed": self.seed,
                "n_examples": self.n_examples, "prefix_space": self.prefix_space, "dtype": self.dtype,
                "task_sha256": dict(self.task_sha256), "prompt_digests": dict(self.prompt_digests),
                "models": {k: dict(v) for k, v in self.models.items()}, "task_dir": self.task_dir,
                "flasheval_version": self.flasheval_version, "scoring_version": self.scoring_version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, *, where: str) -> BuildSettings:
        """Settings from a manifest's ``build`` dict; refuses references not built by scoring models."""
        if not data or data.get("kind") != BUILD_KIND:
            raise InputError(f"reference {where!r} was not built by 'flasheval reference build', so live models "
                             "cannot be placed on it (replay:MODEL places one of its own models)", field="--reference")
        try:
            return cls(suite=data["suite"], tasks=tuple(data["tasks"]), seed=int(data["seed"]),
                       n_examples=data["n_examples"], prefix_space=bool(data["prefix_space"]), dtype=data["dtype"],
                       task_sha256=data["task_sha256"], prompt_digests=data["prompt_digests"],
                       models=data.get("models", {}), task_dir=data.get("task_dir", ""),
                       flasheval_version=data.get("flasheval_version", ""),
                       scoring_version=str(data.get("scoring_version", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed build settings ({type(exc).__name__}: {exc})", path=where,
                             field="build") from None


def check_task_files(settings: BuildSettings, tasks: Sequence[LiveTask], *, where: str) -> None:
    """Refuse task files whose SHA-256 differs from the reference's (all differing tasks listed)."""
    changed = [t.name for t in tasks if settings.task_sha256.get(t.name) != t.sha256]
    if changed:
        raise InputError(f"task files differ from those reference {where!r} was built with: {', '.join(changed)} "
                         "(use the same task directory, or rebuild the reference)", field="--task-dir")


def check_prompts(settings: BuildSettings, tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *,
                  where: str) -> None:
    """Refuse when the prompts rebuilt here for the reference's examples differ from the reference's.

    Same task files but different prompts means the prompt code changed (another flasheval
    version): the comparison would no longer be paired.
    """
    names = [t.name for t in tasks]
    if sorted(names) != sorted(settings.tasks):
        raise InputError(f"reference {where!r} covers tasks {sorted(settings.tasks)}, not {sorted(names)}",
                         field="--reference")
    digests = prompt_digests(tasks, example_ids, seed=settings.seed, prefix_space=settings.prefix_space)
    changed = [n for n in names if digests[n] != settings.prompt_digests.get(n)]
    if changed:
        raise InputError(f"prompts rebuilt for {', '.join(changed)} differ from those reference {where!r} was built "
                         f"with (built by flasheval {settings.flasheval_version or '?'}, this is {__version__}); "
                         "rebuild the reference", field="--reference")


def check_live_settings(settings: BuildSettings, *, seed: int | None, dtype: str | None, where: str) -> tuple[int, str]:
    """The seed and dtype to use: the reference's; an explicit different value is refused."""
    if seed is not None and seed != settings.seed:
        raise InputError(f"reference {where!r} was built with seed {settings.seed}; placing with seed {seed} would "
                         "change the few-shot sets and the example order (omit --seed)", field="--seed")
    if dtype is not None and dtype != settings.dtype:
        raise InputError(f"reference {where!r} was built in {settings.dtype}; placing in {dtype} would not be "
                         "comparable (omit --dtype)", field="--dtype")
    return settings.seed, settings.dtype


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSetup:
    """What scoring live models against a built reference needs, checked against the reference."""

    reference: ReferenceLeaderboard
    settings: BuildSettings
    """The reference's build settings."""
    seed: int
    """The reference's seed (few-shot sets and example order)."""
    dtype: str
    """The reference's dtype."""
    task_dir: str
    tasks: tuple[LiveTask, ...]
    """The reference's tasks, loaded from ``task_dir`` (files and prompts checked)."""


def prepare_live(reference: ReferenceLeaderboard, *, seed: int | None, dtype: str | None,
                 task_dir: str | None) -> LiveSetup:
    """Check that live models can be scored against ``reference`` as it was built; refuse in one line.

    The reference must come from ``flasheval reference build``; ``seed``/``dtype`` (``None``: the
    reference's) must equal its own; the task files in ``task_dir`` (``None``: the folder it was
    built from) must hash as they did and rebuild the same prompts.
    """
    settings = BuildSettings.from_json(reference.manifest.build, where=reference.name)
    seed, dtype = check_live_settings(settings, seed=seed, dtype=dtype, where=reference.name)
    task_dir = task_dir or settings.task_dir
    if not task_dir:
        raise InputError("the reference records no task directory; pass --task-dir", field="--task-dir")
    tasks = load_live_tasks(reference.dataset_names, task_dir)
    check_task_files(settings, tasks, where=reference.name)
    check_prompts(settings, tasks, dict(zip(reference.dataset_names, reference.example_ids)), where=reference.name)
    return LiveSetup(reference=reference, settings=settings, seed=seed, dtype=dtype, task_dir=str(task_dir),
                     tasks=tuple(tasks))
