"""What an lm-eval reference pins per task, so a new model can be scored the same way.

A reference imported from lm-eval's ``--log_samples`` output (or built with ``reference build
--engine lm-eval``) records in its manifest's ``build`` dict (:class:`LmEvalSettings`, kind
``lm-eval``), per task (:class:`TaskSettings`): the task config exactly as lm-eval logged it and
its digest (:func:`config_digest`), the task version, ``num_fewshot``, the few-shot seed and the
per-example metric; and once, the lm-eval version. Pure data: reading and writing these needs no
lm-eval; comparing them with the installed tasks does (:mod:`flasheval.lmeval.tasks`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flasheval.errors import InputError
from flasheval.hashing import stable_hash
from flasheval.records.schemas import check_fields

__all__ = ["LMEVAL_KIND", "DEFAULT_METRICS", "TaskSettings", "LmEvalSettings", "config_digest", "settings_from_results",
           "RESULTS_SCHEMA", "check_results",
           "pick_metric", "prompt_hashes", "differing_keys"]

LMEVAL_KIND = "lm-eval"
"""``build["kind"]`` of a reference whose tasks are lm-eval tasks."""

DEFAULT_METRICS: tuple[str, ...] = ("acc", "exact_match", "acc_norm")
"""Per-example metric used when none is named: the first of these a sample has."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# lm-eval copies the model arguments of its command line into every task's ``metadata``; they
# say nothing about the task, so the digest leaves ``metadata`` out (the task version is pinned apart).
_NOT_TASK = ("metadata",)


def _canonical_config(config: Mapping[str, Any]) -> Any:
    text = json.dumps({k: v for k, v in config.items() if k not in _NOT_TASK}, sort_keys=True, default=str)
    return json.loads(_ADDRESS.sub("", text))


def config_digest(config: Mapping[str, Any]) -> str:
    """Digest of a task config as lm-eval logs it (``metadata`` and object addresses left out).

    Examples
    --------
    >>> a = {"task": "t", "doc_to_text": "<function f at 0x7f00>", "metadata": {"pretrained": "m1"}}
    >>> b = {"task": "t", "doc_to_text": "<function f at 0x7fff>", "metadata": {"pretrained": "m2"}}
    >>> config_digest(a) == config_digest(b)
    True
    """
    return stable_hash(_canonical_config(config), n_chars=16)


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Top-level config keys whose values differ (for the refusal message)."""
    ca, cb = _canonical_config(a), _canonical_config(b)
    return sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSettings:
    """One lm-eval task as the reference scored it."""

    task_name: str
    config: Mapping[str, Any]
    """The task config exactly as lm-eval logged it (``results_*.json`` ``configs``)."""
    config_digest: str
    """:func:`config_digest` of ``config``."""
    task_version: str
    """lm-eval's ``versions`` entry of the task."""
    num_fewshot: int
    fewshot_seed: int | None
    """lm-eval's few-shot sampler seed (``--seed``'s fourth value; 1234 by default)."""
    metric: str
    """The per-example metric taken as the score."""
    prompt_hashes: Mapping[str, str] = field(default_factory=dict)
    """Per doc id, the first 12 hex digits of lm-eval's ``prompt_hash`` (the full first prompt, few-shot
    examples included): a live run must rebuild exactly these prompts."""

    def to_json(self) -> dict[str, Any]:
        return {"config": dict(self.config), "config_digest": self.config_digest, "task_version": self.task_version,
                "num_fewshot": self.num_fewshot, "fewshot_seed": self.fewshot_seed, "metric": self.metric,
                "prompt_hashes": dict(self.prompt_hashes)}


@dataclass(frozen=True, slots=True, kw_only=True)
class LmEvalSettings:
    """The manifest's ``build`` dict of an lm-eval reference."""

    tasks: Mapping[str, TaskSettings]
    lm_eval_version: str
    include_path: str = ""
    """Where custom task YAMLs were found (a default for placements; the config digests decide)."""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per model, what is known of it (spec, fingerprint) when the reference was built by flasheval."""
    dtype: str | None = None
    """The dtype every model was scored in (built by flasheval: pinned, a placement must use it);
    ``None`` for imported lm-eval logs, which do not say."""

    def to_json(self) -> dict[str, Any]:
        out = {"kind": LMEVAL_KIND, "lm_eval_version": self.lm_eval_version, "include_path": self.include_path,
               "tasks": {name: t.to_json() for name, t in sorted(self.tasks.items())},
               "models": {k: dict(v) for k, v in self.models.items()}}
        if self.dtype is not None:
            out["dtype"] = self.dtype
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, *, where: str) -> LmEvalSettings:
        """Settings from a manifest's ``build`` dict; refuses a reference that has none."""
        if not data or data.get("kind") != LMEVAL_KIND:
            raise InputError(f"reference {where!r} records no lm-eval task settings (import lm-eval output that has "
                             "its results_*.json, or build it with 'reference build --engine lm-eval')",
                             field="--reference")
        try:
            tasks = {name: TaskSettings(task_name=name, config=t["config"], config_digest=t["config_digest"],
                                        task_version=str(t["task_version"]), num_fewshot=int(t["num_fewshot"]),
                                        fewshot_seed=t["fewshot_seed"], metric=t["metric"],
                                        prompt_hashes=t.get("prompt_hashes", {}))
                     for name, t in data["tasks"].items()}
            dtype = data.get("dtype")
            if dtype is not None and not isinstance(dtype, str):
                raise TypeError(f"dtype must be a string, got {dtype!r}")
            return cls(tasks=tasks, lm_eval_version=str(data["lm_eval_version"]),
                       include_path=data.get("include_path", ""), models=data.get("models", {}), dtype=dtype)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hand-edited manifest's build
            raise InputError(f"malformed lm-eval settings ({type(exc).__name__}: {exc})", path=where,
                             field="build") from None


def pick_metric(sample: Mapping[str, Any], metric: str | None) -> str | None:
    """The metric a sample is scored by: ``metric``, else the first of :data:`DEFAULT_METRICS` present."""
    for name in (metric,) if metric else DEFAULT_METRICS:
        if name in sample:
            return name
    return None


PROMPT_HASH_CHARS = 12


def prompt_hashes(samples: Any) -> dict[str, str]:
    """``{doc id: prompt hash prefix}`` of one task's logged samples (first row of each doc)."""
    out: dict[str, str] = {}
    for row in samples:
        if "prompt_hash" in row:
            out.setdefault(str(row["doc_id"]), str(row["prompt_hash"])[:PROMPT_HASH_CHARS])
    return out


RESULTS_SCHEMA: Mapping[str, str] = MappingProxyType({
    "model_name?": "str|null", "config?": "object|null", "config.fewshot_seed?": "int|null",
    "n-samples?": "object|null", "n-samples{}": "object", "n-samples{}.effective?": "int",
    "configs?": "object|null", "configs{}": "object", "configs{}.num_fewshot?": "int|null",
    "versions?": "object|null", "n-shot?": "object|null", "n-shot{}": "int", "lm_eval_version?": "str|null",
    "samples?": "object|null", "samples{}": "list",
})
"""The fields of an lm-eval ``results_*.json`` that flasheval reads (:mod:`flasheval.records.schemas` notation); others are
not looked at. Checked by :func:`settings_from_results` and by the reader of lm-eval output folders."""


def check_results(results: Any, *, where: str | None) -> None:
    """Refuse, in one line naming the file and field, an lm-eval results dict that :data:`RESULTS_SCHEMA` refuses."""
    check_fields(results, RESULTS_SCHEMA, path=where, prefix="")


def settings_from_results(results: Mapping[str, Any], tasks: Mapping[str, str], *, where: str,
                          include_path: str = "",
                          hashes: Mapping[str, Mapping[str, str]] | None = None) -> LmEvalSettings:
    """Settings of ``tasks`` (``{task: metric}``) from an lm-eval results dict (``results_*.json``).

    The few-shot seed is the run's ``config.fewshot_seed``; the version, ``lm_eval_version``; the
    prompt hashes, ``hashes`` or else the results' own ``samples``.
    """
    check_results(results, where=where)
    try:
        configs, versions, shots = results["configs"] or {}, results.get("versions") or {}, results.get("n-shot") or {}
        version = results.get("lm_eval_version") or ""
        seed = (results.get("config") or {}).get("fewshot_seed")
        out = {}
        for name, metric in tasks.items():
            config = configs[name]
            out[name] = TaskSettings(task_name=name, config=config, config_digest=config_digest(config),
                                     task_version=str(versions.get(name, "")),
                                     num_fewshot=int(shots.get(name, config.get("num_fewshot") or 0)),
                                     fewshot_seed=seed, metric=metric,
                                     prompt_hashes=(hashes or {}).get(name)
                                     or prompt_hashes((results.get("samples") or {}).get(name, ())))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"cannot read the task settings ({type(exc).__name__}: {exc})", path=where,
                         field="configs") from None
    if not version:
        raise InputError("no lm_eval_version recorded", path=where, field="lm_eval_version")
    return LmEvalSettings(tasks=out, lm_eval_version=version, include_path=include_path)
