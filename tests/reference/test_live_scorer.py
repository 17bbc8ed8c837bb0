"""The live scorer asked for a stage's examples of several tasks at once: one backend call, the same scores."""

from __future__ import annotations

import numpy as np
import pytest

from flasheval.evaluation.evaluate import score_examples
from flasheval.placement.controller import StageRequest, score_request
from flasheval.reference.scoring.scorers import LiveScorer
from flasheval.stats.sampling import example_order
from flasheval.tasks import load_live_tasks

TASKS = ("copa", "winograd")


class CountingBackend:
    """An HF backend (real, tiny) that counts its loglikelihood calls: a wrapper, not a stand-in."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def loglikelihood(self, requests, **kwargs):
        self.calls.append(len(requests))
        return self.inner.loglikelihood(requests, **kwargs)


def test_a_stage_of_two_tasks_is_one_backend_call_with_the_scores_of_one_call_per_task(task_dir):
    pytest.importorskip("torch")
    from flasheval.engine.hf.backend import HFBackend
    from tests.engine.conftest import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(3, max_positions=512)
    backend = CountingBackend(HFBackend(model, tokenizer, fingerprint="tiny-3", batch_size=4))
    tasks = load_live_tasks(TASKS, task_dir)
    ids = tuple(tuple(example_order(t.example_ids, seed=7, task_name=t.name)[:5]) for t in tasks)
    scorer = LiveScorer(backend, tasks, seed=7, prefix_space=True)
    request = StageRequest(look=0, stage=0, stage_size=5, targets=(5, 5), example_ids=ids)
    got = score_request(scorer, TASKS, request)
    assert len(backend.calls) == 1  # both tasks' requests in one call
    assert [a for a, _ in scorer.requests] == list(TASKS) and len(scorer.outcomes) == 10
    for task, task_ids, scored in zip(tasks, ids, got):  # the same as scoring each task alone
        alone = score_examples(backend, task, task_ids, seed=7, prefix_space=True)
        assert np.array_equal(scored.scores, [o.score for o in alone])
        assert np.array_equal(scored.n_tokens, [o.n_tokens for o in alone])
    empty = StageRequest(look=1, stage=1, stage_size=5, targets=(5, 5), example_ids=((), ids[1]))
    calls = len(backend.calls)
    first, second = score_request(scorer, TASKS, empty)
    assert first is None and second is not None and len(backend.calls) == calls + 1
