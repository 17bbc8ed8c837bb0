"""Sweeps plan rounds (a pure step) and an executor serves them: one ``score_many`` call per checkpoint per look."""

from dataclasses import replace

import numpy as np
import pytest

import flasheval
from flasheval.api.sweep import spread_checkpoints
from flasheval.errors import InputError
from flasheval.placement.controller import Controller, by_dataset, course
from flasheval.placement.looks import for_budget, look_plan
from flasheval.placement.results import Budget
from flasheval.placement.tiers import load_tier_plan
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.sweeps.executor import Executor, InProcessExecutor
from flasheval.sweeps.folder import open_run_folder
from flasheval.sweeps.rounds import Round, RoundRequest, plan_round
from flasheval.sweeps.schedule import sweep
from tests.sweeps._run_folder_worker import SWEEP_CONFIG, sweep_world


@pytest.fixture(scope="module")
def world():
    return sweep_world()  # 8 checkpoints spread over the ranking of a synthetic reference, held out of its pool


class _Counting(ReplayScorer):
    """Replayed scores; counts ``score_many`` calls and the tasks of each."""

    def __init__(self, ref, model_id):
        super().__init__(ref, model_id)
        self.calls: list[tuple[str, ...]] = []

    def score_many(self, asks):
        self.calls.append(tuple(name for name, _ in asks))
        return super().score_many(asks)


class _Reversed:
    """An executor that serves a round's requests last first, and returns them in the round's order."""

    def __init__(self):
        self.rounds: list[Round] = []

    def serve(self, round_, scorers):
        self.rounds.append(round_)
        served = {r.model_id: scorers[r.model_id].score_many(r.asks) for r in reversed(round_.requests)}
        return [served[r.model_id] for r in round_.requests]


def _state(pool, held, plan, budget, seed=0):
    plan = plan.for_pool(pool.n_models + 1)
    looks = look_plan(pool, for_budget(plan, budget))
    shared = course(pool, plan, seed=seed, looks=looks, low_rank=plan.tiers[-1].first)
    return [Controller(shared, model_id=m) for m in held]


def _snapshot(state):
    return [(c.status, c.n_examples, list(c.n), len(c.records), None if c.dist is None else c.dist.interval)
            for c in state]


def test_the_planner_is_pure_same_states_same_round_nothing_scored(world):
    ref, pool, held = world
    plan, budget = load_tier_plan("default"), Budget(max_examples=4000)
    state = _state(pool, held, plan, budget)
    scorers = {m: _Counting(ref, m) for m in held}
    for number in (1, 2):  # the second round: after every checkpoint's first look
        before, calls = _snapshot(state), {m: len(s.calls) for m, s in scorers.items()}
        first, again = plan_round(state, budget, number=number), plan_round(state, budget, number=number)
        assert first == again and first.requests and first.number == number
        assert _snapshot(state) == before and {m: len(s.calls) for m, s in scorers.items()} == calls  # nothing scored
        for request, answer in zip(first.requests, InProcessExecutor().serve(first, scorers)):
            c = next(c for c in state if c.model_id == request.model_id)
            stage = c.next_stage()
            assert (stage.look, stage.stage) == (request.look, request.stage)
            c.take(stage, by_dataset(pool.dataset_names, stage, answer))
        assert {m: len(s.calls) - calls[m] for m, s in scorers.items()} == {
            m: int(any(r.model_id == m for r in first.requests)) for m in held}


def test_the_first_round_gives_every_checkpoint_its_first_look_as_far_as_the_budget_pays(world):
    ref, pool, held = world
    plan = load_tier_plan("default")
    state = _state(pool, held, plan, Budget(max_examples=10**6))
    first = [c.next_stage().n_new for c in state]
    assert len(set(first)) == 1
    # one look fewer than the checkpoints: the last by model id (ties of the no-look priority) is left out
    budget = Budget(max_examples=first[0] * (len(held) - 1))
    planned = plan_round(state, budget, number=1)
    assert [r.model_id for r in planned.requests] == sorted(held)[:-1]
    assert planned.n_new == first[0] * (len(held) - 1)
    assert all(r.asks == tuple((d, ids) for d, ids in zip(pool.dataset_names, c.next_stage().example_ids) if ids)
               for r in planned.requests for c in state if c.model_id == r.model_id)


def test_under_a_token_cap_the_first_round_is_planned_in_two_parts(world):
    # before anything is scored there is no token rate: the first request alone, then the rest at its rate
    ref, pool, held = world
    plan, budget = load_tier_plan("default"), Budget(max_tokens=10**9)
    state = _state(pool, held, plan, budget)
    first = plan_round(state, budget, number=1)
    assert not first.complete and [r.model_id for r in first.requests] == sorted(held)[:1]
    assert plan_round(state, Budget(max_examples=10**9), number=1).complete  # an examples cap is known exactly
    c = next(c for c in state if c.model_id == first.requests[0].model_id)
    stage = c.next_stage()
    c.take(stage, by_dataset(pool.dataset_names, stage, InProcessExecutor().serve(first, {c.model_id: ReplayScorer(
        ref, c.model_id)})[0]))
    rest = plan_round(state, budget, number=1, served=frozenset({c.model_id}))
    assert rest.complete and [r.model_id for r in rest.requests] == sorted(held)[1:]


def test_a_round_holds_one_request_per_checkpoint():
    request = RoundRequest(model_id="a", look=0, stage=0, asks=(("t", ("x",)),))
    with pytest.raises(InputError, match="one look per checkpoint"):
        Round(number=1, requests=(request, request))


def test_a_sweep_asks_each_checkpoint_once_per_look_behind_its_store(world, tmp_path):
    ref, pool, held = world
    plan = load_tier_plan("default")
    with open_run_folder(tmp_path, SWEEP_CONFIG, held) as run:
        inner = {m: _Counting(ref, m) for m in held}
        result = sweep(pool, {m: run.scorer(m, s) for m, s in inner.items()}, plan, budget=Budget(max_examples=4000),
                       seed=2)
    for c in result.checkpoints:
        assert len(inner[c.model_id].calls) == len(c.stages) > 0  # one call per look ...
        assert len(inner[c.model_id].calls[0]) == len(pool.dataset_names)  # ... with every task of the look
        assert len(inner[c.model_id].requests) == sum(map(len, inner[c.model_id].calls))  # (one entry per task)


def test_a_custom_executor_gives_the_in_process_result(world):
    ref, pool, held = world
    plan = replace(load_tier_plan("default"), n_resamples=500)
    budget = Budget(max_examples=5000)
    default = sweep(pool, {m: ReplayScorer(ref, m) for m in held}, plan, budget=budget, seed=1)
    executor = _Reversed()
    assert isinstance(executor, Executor)
    custom = sweep(pool, {m: ReplayScorer(ref, m) for m in held}, plan, budget=budget, seed=1, executor=executor)
    assert len(executor.rounds) == custom.n_rounds > 1 and any(len(r.requests) > 1 for r in executor.rounds)
    assert custom.to_json() == default.to_json()


def test_the_api_takes_an_executor_and_refuses_a_bad_one_before_writing(tmp_path):
    models = spread_checkpoints("helm_lite", 3)
    budget = flasheval.Budget(max_examples=3000)
    with pytest.raises(InputError, match="field 'executor': must have a serve"):
        flasheval.sweep(models, "helm_lite", budget=budget, output=tmp_path / "bad", executor=object())
    assert not (tmp_path / "bad").exists()
    executor = _Reversed()
    custom = flasheval.sweep(models, "helm_lite", budget=budget, output=tmp_path / "custom", executor=executor)
    default = flasheval.sweep(models, "helm_lite", budget=budget, output=tmp_path / "default")
    assert len(executor.rounds) == custom.result.n_rounds
    assert custom.result.to_json() == default.result.to_json()
    np.testing.assert_equal(custom.record["checkpoints"], default.record["checkpoints"])
