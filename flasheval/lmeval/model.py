"""flasheval as an lm-evaluation-harness model: :class:`FlashevalLM`.

lm-eval hands a model lists of ``Instance`` requests; :class:`FlashevalLM` turns them into
flasheval requests, answers them batch-first through any flasheval backend that follows lm-eval's
conventions (normally ``CachedBackend(DistributedBackend(LmEvalConventionBackend(...)))``: the
results store makes every run resumable, accelerate splits the work) and hands the answers back
in lm-eval's shapes. lm-eval sees one process (``rank`` 0, ``world_size`` 1) on every process of
an accelerate launch: every process builds all requests, the flasheval runner splits and gathers
them, so lm-eval's own sharding stays off and the results are those of one process.

This module never imports lm-eval at import time; the class registers itself as a virtual
subclass of ``lm_eval.api.model.LM`` when the first instance is made.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from flasheval.engine.base import Backend
from flasheval.evaluation.evaluate import example_tokens
from flasheval.engine.progress_bar import progress_bar
from flasheval.errors import InputError
from flasheval.lmeval._install import require_lm_eval
from flasheval.types import GenerationRequest, LoglikelihoodRequest, RollingLoglikelihoodRequest

__all__ = ["FlashevalLM", "OnlyDocsLM"]

logger = logging.getLogger(__name__)


def _register_class(cls: type) -> None:
    """Make ``cls`` a virtual subclass of lm-eval's ``LM`` (``simple_evaluate`` checks ``isinstance``)."""
    require_lm_eval()
    from lm_eval.api.model import LM

    if not issubclass(cls, LM):
        LM.register(cls)


class FlashevalLM:
    """lm-eval's ``LM`` interface (``loglikelihood``, ``loglikelihood_rolling``, ``generate_until``).

    Parameters
    ----------
    backend
        A flasheval backend that tokenizes by lm-eval's rules (see :mod:`flasheval.lmeval.conventions`),
        usually wrapped in the results store and the data-parallel runner.
    tokenizer
        The model's tokenizer (lm-eval logs its special tokens).
    max_length
        lm-eval's maximum input length (logged by lm-eval).
    model_id
        Name of the model, for lm-eval's logs.
    progress_bar
        A bar per lm-eval call (``loglikelihood``, ...) that advances as each batch finishes (stored answers at
        once): ``None`` (default) shows it when stderr is a terminal or in a notebook, ``True`` always,
        ``False`` never; lm-eval's ``disable_tqdm=True`` turns it off for that call.
    processes
        The :class:`~flasheval.engine.coordination.distributed.Processes` the backend's runner splits work over (``None``: this
        process alone): :func:`~flasheval.lmeval.tasks.run_tasks` broadcasts the main process's results over them.

    Examples
    --------
    ``lm_eval.simple_evaluate(model=FlashevalLM(...), tasks=["arc_easy"])``; see ``docs/lm-eval.md``.
    """

    def __init__(self, backend: Backend, *, tokenizer: Any = None, max_length: int | None = None,
                 model_id: str = "flasheval", progress_bar: bool | None = None, processes: Any = None) -> None:
        _register_class(FlashevalLM)
        from lm_eval.api.model import CacheHook

        self._backend = backend
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.model_id = model_id
        self.progress_bar = progress_bar
        self.processes = processes
        """The :class:`~flasheval.engine.coordination.distributed.Processes` that score together (``None``: this one alone)."""
        self.cache_hook = CacheHook(None)
        self.n_requests = 0
        self.doc_tokens: dict[tuple[str, str], int] = {}
        """Tokens the model ran per ``(task_name, doc_id)`` (:func:`~flasheval.evaluation.evaluate.example_tokens`)."""

    # lm-eval reads these; every process of a launch looks like the only one to lm-eval.
    rank = 0
    world_size = 1

    @property
    def eot_token_id(self) -> int | None:
        return None if self.tokenizer is None else self.tokenizer.eos_token_id

    @property
    def tokenizer_name(self) -> str:
        return "" if self.tokenizer is None else str(getattr(self.tokenizer, "name_or_path", "")).replace("/", "__")

    def get_model_info(self) -> dict[str, Any]:
        """What lm-eval records about the model in its results file."""
        return {"model_name": self.model_id, "model_fingerprint": self._backend.fingerprint}

    def _task(self, instance: Any) -> str:
        return str(getattr(instance, "task_name", None) or "lm-eval")

    def _count(self, instances: Sequence[Any], requests: Sequence[Any], results: Sequence[Any]) -> None:
        """Add each doc's tokens (distinct contexts once, every continuation) to :attr:`doc_tokens`."""
        by_doc: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
        for instance, request, result in zip(instances, requests, results, strict=True):
            pair = by_doc.setdefault((self._task(instance), str(getattr(instance, "doc_id", ""))), ([], []))
            pair[0].append(request)
            pair[1].append(result)
        for key, (reqs, ress) in by_doc.items():
            self.doc_tokens[key] = self.doc_tokens.get(key, 0) + example_tokens(reqs, ress)

    def _answer(self, method: Any, flat: Sequence[Any], what: str, disable_tqdm: bool) -> list[Any]:
        """``method(flat)`` with the per-batch bar (see ``progress_bar``)."""
        bar = progress_bar(len(flat), desc=what, enabled=False if disable_tqdm else self.progress_bar)
        if bar is None:
            return method(flat)
        try:
            return method(flat, on_results=lambda pairs: bar.update(len(pairs)))
        finally:
            bar.close()

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(log-likelihood, is_greedy)`` of each ``(context, continuation)``."""
        flat = [LoglikelihoodRequest(task_name=self._task(r), example_id=str(i), choice_index=0, context=r.args[0],
                                     continuation=r.args[1]) for i, r in enumerate(requests)]
        self.n_requests += len(flat)
        results = self._answer(self._backend.loglikelihood, flat, "loglikelihood", disable_tqdm)
        self._count(requests, flat, results)
        return [(float(x.logprob_sum), bool(x.is_greedy)) for x in results]

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text (lm-eval's rolling windows)."""
        flat = [RollingLoglikelihoodRequest(task_name=self._task(r), example_id=str(i), text=r.args[0])
                for i, r in enumerate(requests)]
        self.n_requests += len(flat)
        results = self._answer(self._backend.loglikelihood_rolling, flat, "loglikelihood_rolling", disable_tqdm)
        self._count(requests, flat, results)
        return [float(x.logprob_sum) for x in results]

    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the task's stop sequences and the EOS text (as ``HFLM``)."""
        from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

        eos = None if self.tokenizer is None else self.tokenizer.decode(self.eot_token_id, skip_special_tokens=False)
        flat = []
        for i, r in enumerate(requests):
            context, gen_kwargs = r.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), 256)
            if kwargs.get("do_sample") or kwargs.get("temperature", 0.0) not in (0, 0.0, None):
                raise InputError(f"sampled generation is not supported (task {self._task(r)} asks {gen_kwargs}); "
                                 "flasheval generates greedily", field="generation_kwargs")
            until = [s for s in handle_stop_sequences(kwargs.pop("until", None), eos=eos) if s]
            flat.append(GenerationRequest(task_name=self._task(r), example_id=str(i), context=context,
                                          stop_sequences=tuple(until), max_new_tokens=int(kwargs["max_gen_toks"])))
        self.n_requests += len(flat)
        results = self._answer(self._backend.generate, flat, "generate_until", disable_tqdm)
        self._count(requests, flat, results)
        return [x.text for x in results]

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        raise InputError("chat templates are not supported by the flasheval bridge", field="--apply_chat_template")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return None


class OnlyDocsLM:
    """An lm-eval model that answers only the requests of chosen docs and a placeholder for the rest.

    lm-eval draws each doc's few-shot examples from one random stream per task, in doc order, so
    a doc's prompt depends on the docs before it. Running the whole task through this wrapper
    builds every prompt exactly as a full run does, while the model scores only ``docs``; the
    other docs' metrics are meaningless and must be ignored.

    Parameters
    ----------
    lm
        The model that answers the chosen docs' requests.
    docs
        ``{task_name: doc ids}`` to answer.
    """

    def __init__(self, lm: Any, docs: dict[str, set[int]]) -> None:
        _register_class(OnlyDocsLM)
        self._lm = lm
        self._docs = docs
        self.tokenizer = getattr(lm, "tokenizer", None)
        self.max_length = getattr(lm, "max_length", None)
        self.cache_hook = getattr(lm, "cache_hook", None)
        self.processes = getattr(lm, "processes", None)

    rank = 0
    world_size = 1

    def _wanted(self, instance: Any) -> bool:
        return int(instance.doc_id) in self._docs.get(str(instance.task_name), ())

    def _answer(self, method: str, requests: Sequence[Any], placeholder: Any) -> list[Any]:
        wanted = [r for r in requests if self._wanted(r)]
        answers = iter(getattr(self._lm, method)(wanted) if wanted else [])
        return [next(answers) if self._wanted(r) else placeholder for r in requests]

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self._answer("loglikelihood", requests, (0.0, False))

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[float]:
        return self._answer("loglikelihood_rolling", requests, 0.0)

    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        return self._answer("generate_until", requests, "")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self._lm.apply_chat_template(chat_history, add_generation_prompt)

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return None
