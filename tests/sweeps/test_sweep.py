"""Sweeps: budget, racing priorities, shared examples, resume after a crash, bad input."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flasheval import cli
from flasheval.errors import InputError
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.placement.results import Budget
from flasheval.sweeps.schedule import sweep
from flasheval.sweeps.folder import open_run_folder
from flasheval.placement.tiers import load_tier_plan
from flasheval.records.run_record import read_record
from tests.sweeps._run_folder_worker import SWEEP_CONFIG, sweep_world


@pytest.fixture(scope="module")
def world():
    return sweep_world()  # 8 checkpoints spread over the ranking of a synthetic reference, held out of its pool


class _Recording(ReplayScorer):
    """A replay scorer that can crash after a number of calls (a killed process)."""

    calls = 0
    crash_after: int | None = None

    def score_many(self, asks):
        type(self).calls += 1
        if self.crash_after is not None and type(self).calls > self.crash_after:
            raise KeyboardInterrupt
        return super().score_many(asks)


def _scorers(ref, held, run=None):
    scorers = {m: _Recording(ref, m) for m in held}
    return scorers if run is None else {m: run.scorer(m, s) for m, s in scorers.items()}


def test_sweep_stays_within_budget_and_spends_it_on_the_top(world):
    ref, pool, held = world
    # the centred rule without a correction resolves the bottom slowly, so the racing rule has work to do
    plan = replace(load_tier_plan("default"), stop_rule="interval", correction="none",
                   stages=(20, 50, 100, 150, 200, 500, 1000, None), n_resamples=1000)
    result = sweep(pool, _scorers(ref, held), plan, budget=Budget(max_examples=3000), seed=0)
    assert result.n_examples <= 3000
    by_rank = sorted((c for c in result.checkpoints), key=lambda c: c.rank)
    assert all(c.n_examples >= 60 for c in by_rank)  # everyone got the first stage
    # the bottom tier stops early; the top checkpoints get the most examples
    assert by_rank[0].n_examples > by_rank[-1].n_examples == 60
    assert any(c.status == "clearly low" for c in result.checkpoints)
    assert {c.status for c in result.checkpoints} <= {"resolved", "clearly low", "unresolved at budget"}
    savings = [c.saving for c in result.checkpoints]
    # total = ratio of sums <= mean of ratios (AM-HM); the median lies among the checkpoints' savings
    assert result.saving <= sum(savings) / len(savings) + 1e-9 and min(savings) <= result.median_saving <= max(savings)
    assert result.to_json()["compute"]["median_saving"] == result.median_saving


def test_checkpoints_share_the_same_nested_examples(world):
    ref, pool, held = world
    scorers = _scorers(ref, held[:3])
    sweep(pool, scorers, load_tier_plan("default"), budget=Budget(max_examples=20000), seed=3)
    for d in pool.dataset_names:
        seqs = [[e for t, ids in s.requests if t == d for e in ids] for s in scorers.values()]
        shortest = min(len(s) for s in seqs)
        assert all(s[:shortest] == seqs[0][:shortest] for s in seqs)
        assert all(len(set(s)) == len(s) for s in seqs)  # never asked twice


def test_full_budget_order_among_checkpoints_is_the_true_order(world):
    ref, pool, held = world
    plan = load_tier_plan("default")
    result = sweep(pool, _scorers(ref, held), plan, budget=Budget(max_examples=10**6), seed=0, low_rank=10**6)
    truth = [r.model_id for r in ref.ranking() if r.model_id in held]
    assert [o.model_id for o in result.order] == truth
    assert result.order[0].interval[0] == 1


def test_a_sweep_killed_mid_round_resumes_and_loses_nothing(world, tmp_path):
    ref, pool, held = world
    plan = load_tier_plan("default")
    budget = Budget(max_examples=4000)
    clean = sweep(pool, _scorers(ref, held), plan, budget=budget, seed=2)
    _Recording.calls, _Recording.crash_after = 0, 17  # dies in the middle of a round
    with open_run_folder(tmp_path, SWEEP_CONFIG, held) as run:
        crashing = _scorers(ref, held, run)
        with pytest.raises(KeyboardInterrupt):
            sweep(pool, crashing, plan, budget=budget, seed=2)
    with open_run_folder(tmp_path, SWEEP_CONFIG, held) as run:
        kept = run.n_stored
        assert kept > 0
        _Recording.crash_after = None
        resumed_scorers = _scorers(ref, held, run)
        resumed = sweep(pool, resumed_scorers, plan, budget=budget, seed=2)
    assert resumed.n_computed == clean.n_examples - kept
    as_json = lambda r: {k: v for k, v in r.to_json().items() if k != "n_computed"}  # noqa: E731
    assert as_json(resumed) == as_json(clean)
    asked = [(m, t, e) for m, s in {**crashing, **resumed_scorers}.items() for t, ids in s.inner.requests for e in ids]
    first_run = [(m, t, e) for m, s in crashing.items() for t, ids in s.inner.requests for e in ids]
    second_run = [(m, t, e) for m, s in resumed_scorers.items() for t, ids in s.inner.requests for e in ids]
    assert not set(first_run) & set(second_run) and len(asked) >= len(second_run)


def test_a_neyman_cost_plan_places_a_model_as_place_does(world):
    # one core: a one-checkpoint sweep (no racing) takes the looks `place` takes, the plan's allocation included
    from flasheval.placement.controller import place

    ref, pool, held = world
    plan = replace(load_tier_plan("default"), allocation="neyman-cost", n_resamples=500)
    model, budget = held[2], Budget(max_examples=900)
    placed = place(pool, ReplayScorer(ref, model), plan, model_id=model, seed=1, budget=budget)
    swept = sweep(pool, {model: ReplayScorer(ref, model)}, plan, budget=budget, seed=1, low_rank=10**6).checkpoints[0]
    assert len(placed.stages) > 1 and len(set(placed.stages[-1].n_examples)) > 1  # several looks, not uniform
    assert (swept.rank, swept.interval, swept.tier, swept.status) == (placed.rank, placed.interval, placed.tier,
                                                                      placed.status)
    assert swept.per_dataset == placed.stages[-1].n_examples and swept.n_examples == placed.compute.n_examples
    assert [(s.n_examples, s.rank, s.interval, s.confidence_level) for s in swept.stages] == [
        (sum(s.n_examples), s.rank, s.interval, s.confidence_level) for s in placed.stages]
    assert swept.placement == placed  # one result: the sweep's checkpoint holds the controller's, as place returns it


def test_a_checkpoints_looks_report_its_placement_and_its_record_is_built_from_it(world):
    # the stopping look reports the rank the checkpoint is placed at (under the window rule, the rank whose window
    # holds the interval; the sweep reported the point rank there), as a place record's stages do
    ref, pool, held = world
    plan = replace(load_tier_plan("default"), n_resamples=500)
    result = sweep(pool, _scorers(ref, held), plan, budget=Budget(max_examples=6000), seed=0)
    resolved = [c for c in result.checkpoints if c.status == "resolved"]
    assert resolved and all(c.stages[-1].rank == c.rank == c.placement.stages[-1].rank for c in resolved)
    for c, saved in zip(result.checkpoints, result.to_json()["checkpoints"]):
        assert saved["rank"] == c.placement.rank and saved["interval"] == list(c.placement.interval)
        assert saved["saving"] == c.placement.compute.example_saving and saved["rounds"] == len(c.placement.stages)
        assert [s["round"] for s in saved["stages"]] == list(c.look_rounds) and c.look_rounds == tuple(
            sorted(set(c.look_rounds)))  # one look per round, rounds increasing


def test_a_budget_smaller_than_one_stage_is_refused(world):
    ref, pool, held = world
    with pytest.raises(InputError, match="smaller than one stage for every checkpoint"):
        sweep(pool, _scorers(ref, held), load_tier_plan("default"), budget=Budget(max_examples=100))


@pytest.mark.slow
def test_sweep_command_backtests_ten_held_out_models_on_helm_lite(tmp_path, capsys):
    argv = ["sweep", "--backtest", "10", "--budget-examples", "15000", "--output", str(tmp_path)]
    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    payload = read_record(tmp_path / "sweep.json").payload
    assert len(payload["checkpoints"]) == 10 and payload["compute"]["n_examples"] <= 15000
    assert payload["compute"]["saving"] > 3 and payload["backtest"]["covered"] >= 0.8
    assert len(payload["order"]) == 10 and "full-data" in first
    assert cli.main(argv) == 0  # the rerun is served from the store
    assert "0 computed now" in capsys.readouterr().out
    assert read_record(tmp_path / "sweep.json").payload["checkpoints"] == payload["checkpoints"]


@pytest.mark.parametrize("argv, message", [
    (["--models", "replay:no/such-model"], "unknown model in reference 'helm_lite' 'no/such-model'"),
    (["--models", "hf:gpt2"], "was not built by 'flasheval reference build'"),  # live spec, replay reference
    (["--models", "replay:meta/llama-65b", "--datasets", "helm_lite/boolq"], "unknown dataset in reference"),
    (["--models", "replay:meta/llama-65b", "--budget-examples", "50"], "smaller than one stage"),
    (["--models", "replay:meta/llama-65b", "--budget-tokens", "50"], "records no token counts"),
])
def test_bad_sweep_input_is_one_line(argv, message, tmp_path, capsys):
    base = ["sweep", "--output", str(tmp_path)]
    budget = [] if "--budget-examples" in argv else ["--budget-examples", "5000"]  # an option is given once
    assert cli.main(base + budget + argv) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("saved, message", [
    ({"store_format": 1, "reference": "helm_lite", "seed": 99}, "holds a sweep with other settings"),
    ({"store_format": 0, "reference": "helm_lite"}, "run folder from an incompatible flasheval (sweep store format 0"),
])
def test_a_run_folder_of_another_sweep_or_version_is_refused(saved, message, tmp_path, capsys):
    (tmp_path / "sweep-config.json").write_text(json.dumps(saved))
    argv = ["sweep", "--models", "replay:meta/llama-65b", "--budget-examples", "5000", "--output", str(tmp_path)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_resumes_and_loses_nothing(world, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from flasheval.errors import InputError

    ref, pool, held = world
    plan, budget = load_tier_plan("default"), Budget(max_examples=4000)
    clean = sweep(pool, _scorers(ref, held), plan, budget=budget, seed=2)
    repo_root = Path(__file__).resolve().parents[2]
    worker = Path(__file__).with_name("_run_folder_worker.py")
    proc = subprocess.Popen([sys.executable, str(worker), "sweep", str(tmp_path)], cwd=repo_root,
                            env={**__import__("os").environ, "PYTHONPATH": str(repo_root)})

    def stored_lines() -> int:
        return sum(p.read_bytes().count(b"\n") for p in (tmp_path / "shards").glob("*.jsonl"))

    deadline = time.monotonic() + 30
    while stored_lines() < 500 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(InputError, match="another sweep is running in this run folder"):  # two sweeps, one folder
        open_run_folder(tmp_path, SWEEP_CONFIG, held)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open_run_folder(tmp_path, SWEEP_CONFIG, held) as run:  # the killed process's lock went with it
        kept = run.n_stored
        assert 0 < kept < clean.n_examples  # killed mid-sweep, after some batches
        _Recording.crash_after = None
        resumed = sweep(pool, _scorers(ref, held, run), plan, budget=budget, seed=2)
    assert resumed.n_computed == clean.n_examples - kept
    assert resumed.to_json()["checkpoints"] == clean.to_json()["checkpoints"]


class _Tokens(ReplayScorer):
    """Replayed scores with random token counts, sometimes none (a scorer that does not report them)."""

    def __init__(self, ref, model_id, gen):
        super().__init__(ref, model_id)
        self.gen = gen

    def score_many(self, asks):
        out = []
        for got in super().score_many(asks):
            tokens = None if self.gen.random() < 0.03 else self.gen.integers(1, 50, size=len(got.scores))
            out.append(replace(got, n_tokens=tokens))
        return out


def test_the_sweeps_totals_equal_a_recount_of_what_the_scorers_returned_after_every_stage(world):
    # the round planner's budget check starts from the totals spent so far: recount them from the scorers' answers
    from flasheval.placement.controller import Controller, course, score_request
    from flasheval.placement.looks import look_plan
    from flasheval.sweeps.rounds import spent

    ref, pool, held = world
    plan = replace(load_tier_plan("default"), correction="pocock").for_pool(pool.n_models + 1)
    shared = course(pool, plan, seed=0, looks=look_plan(pool, plan))
    gen = np.random.default_rng(4)
    state = [Controller(shared, model_id=m) for m in held[:6]]
    scorers = {m: _Tokens(ref, m, gen) for m in held[:6]}
    answers: dict[str, list] = {m: [] for m in held[:6]}
    assert spent(state) == (0, None)
    for _ in range(40):
        c = state[int(gen.integers(len(state)))]
        request = c.next_stage()
        if request is None:
            continue
        got = score_request(scorers[c.model_id], pool.dataset_names, request)
        answers[c.model_id] += [g for g in got if g is not None]
        c.take(request, got)
        scored = [a for a in answers.values() if a]
        tokens = None if not scored or any(g.n_tokens is None for a in scored for g in a) else float(
            sum(int(g.n_tokens.sum()) for a in scored for g in a))
        assert spent(state) == (sum(len(g.scores) for a in answers.values() for g in a), tokens)
        assert [len(s) for s in c.joined()] == c.n  # joined once, kept in one piece, extended by later stages
