"""Every API entry checks every argument before it reads, loads or writes anything (``tests/test_validation_first.py``
holds ``place``, ``place_checkpoint`` and ``watch`` to it; this file the other entries).

For each entry, a bad value of each kind it takes (seed, confidence level, resample count, budget, aggregate, a flag
that is not ``True``/``False``, a wrong type) is refused in one line naming its field, and the output folder holds
nothing afterwards. Several were wrong before: a sweep with ``aggregate="bogus"`` wrote its run folder's config,
lock and shards (and fixed the bad aggregate as the folder's setting); a backtest made its record's folder; an
evaluate of an unknown replayed task made its output folder; ``force="yes"`` or ``log_samples="yes"`` passed as a
truth value; ``fit_scaling`` and ``import_reference`` read their tables before checking the fit's or the manifest's
options. And a sharded model (FSDP2) with ``distributed="main"`` is refused by ``place`` and ``place_checkpoint``
with the Trainer callback's line, before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flasheval

A, B = "replay:meta/llama-3-70b", "replay:openai/gpt-4o-2024-05-13"
BUDGET = flasheval.Budget(max_examples=3000)
REPLAYED = "replay:helm_lite/meta/llama-3-70b"


def _files(folder: Path) -> dict[str, bytes] | None:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} \
        if folder.exists() else None


def _refused(call, field: str) -> str:
    with pytest.raises(flasheval.InputError) as caught:
        call()
    assert caught.value.field == field, str(caught.value)
    assert "\n" not in str(caught.value)
    return str(caught.value)


SWEEP_BAD = [
    ({"aggregate": "bogus"}, "--aggregate"),  # was refused only after the run folder's config, lock and shards
    ({"seed": -1}, "--seed"),
    ({"seed": 1.5}, "--seed"),
    ({"budget": 100}, "--budget-examples"),
    ({"budget": flasheval.Budget(max_examples=1)}, "--budget-examples"),  # below one stage per checkpoint
    ({"missing": "none"}, "--missing"),
    ({"force": 2}, "force"),  # was taken as a truth value
    ({"progress": 2}, "progress"),
    ({"plan": 3}, "--tiers"),
    ({"low_rank": 0}, "--low-rank"),
]


@pytest.mark.parametrize(("bad", "field"), SWEEP_BAD)
def test_a_refused_sweep_writes_nothing_and_a_correct_one_then_runs(tmp_path, bad, field):
    out = tmp_path / "sweep"
    _refused(lambda: flasheval.sweep([A, B], **{"budget": BUDGET, "output": out, **bad}), field)
    assert not out.exists()
    run = flasheval.sweep([A, B], budget=BUDGET, output=out)  # the folder is not bound to the refused call
    assert {c.model_id for c in run.result.checkpoints} == {"meta/llama-3-70b", "openai/gpt-4o-2024-05-13"}


def test_a_refused_sweep_leaves_a_run_folder_byte_for_byte(tmp_path):
    out = tmp_path / "sweep"
    flasheval.sweep([A, B], budget=BUDGET, output=out)
    before = _files(out)
    for bad, field in SWEEP_BAD:
        _refused(lambda: flasheval.sweep([A, B], **{"budget": BUDGET, "output": out, **bad}), field)
        assert _files(out) == before, bad


BACKTEST_BAD = [
    ({"aggregate": "bogus"}, "--aggregate"),  # was refused after the record's folder was made
    ({"seeds": (-1,)}, "--seed"),
    ({"seeds": 3}, "--seeds"),
    ({"missing": "none"}, "--missing"),
    ({"force": "yes"}, "force"),  # was taken as a truth value
    ({"progress": 1}, "progress"),
    ({"held_out": "3"}, "--held-out"),
    ({"held_out": 68}, "--held-out"),  # more than the pool can spare: checked on the reference, before the folder
    ({"plan": 3}, "--tiers"),
    ({"compare_plan": 3}, "--tiers"),
    ({"methods": ["bogus"]}, "--methods"),
]


@pytest.mark.parametrize(("bad", "field"), BACKTEST_BAD)
def test_a_refused_backtest_makes_no_folder(tmp_path, bad, field):
    out = tmp_path / "bt" / "backtest.json"
    _refused(lambda: flasheval.backtest(output=out, **bad), field)
    assert not out.parent.exists()


@pytest.mark.parametrize(("bad", "field"), [
    ({"seed": -1}, "--seed"),
    ({"n_examples": 0}, "--n-examples"),
    ({"force": 3}, "force"),
    ({"format": "csv"}, "--format"),
    ({"tasks": "helm_lite/no-such-task"}, "--tasks"),  # was refused after the output folder was made
    ({"heldout": 3}, "--heldout"),  # was iterated (a TypeError) after the tasks were read
    ({"heldout": ["val.jsonl", None]}, "--heldout"),
])
def test_a_refused_evaluate_makes_no_folder(tmp_path, bad, field):
    out = tmp_path / "eval"
    _refused(lambda: flasheval.evaluate(REPLAYED, **{"tasks": "helm_lite/gsm8k", "output": out, **bad}), field)
    assert not out.exists()


@pytest.mark.parametrize(("bad", "field"), [
    ({"n_resamples": 0}, "--n-resamples"),
    ({"confidence_level": 1.5}, "--confidence-level"),
    ({"confidence_level": 0.3}, "--confidence-level"),
    ({"seed": -1}, "--seed"),
    ({"method": "bogus"}, "--method"),
    ({"fit_max_compute": -1}, "--fit-max-compute"),
    ({"error": "no"}, "error"),
])
def test_fit_scaling_checks_the_fit_before_it_reads_a_table(tmp_path, bad, field):
    # the runs file does not exist: a check that came after reading it would name the file instead
    out = tmp_path / "fit" / "scaling.json"
    _refused(lambda: flasheval.fit_scaling(tmp_path / "no-such-runs.csv", predict="a", output=out, **bad), field)
    assert not out.parent.exists()


@pytest.mark.parametrize(("bad", "field"), [
    ({"aggregate": "bogus"}, "--aggregate"),  # was checked once the whole source was read
    ({"force": 2}, "--force"),
    ({"higher_is_better": "no"}, "--lower-is-better"),
    ({"random_baselines": 3}, "--random-baselines"),
    ({"format": "csv"}, "--format"),
    ({"suite": "core", "format": "lm-eval-samples"}, "--suite"),
    ({"name": "../x"}, "--name"),
])
def test_import_reference_checks_its_options_before_it_reads_anything(tmp_path, bad, field):
    baselines = tmp_path / "baselines.json"  # unreadable JSON: read before the checks, it would be named instead
    baselines.write_text("{")
    out = tmp_path / "refs"
    options = {"format": "long-parquet", "name": "r", "output": out, "random_baselines": baselines, **bad}
    _refused(lambda: flasheval.import_reference(tmp_path / "no-such.parquet", **options), field)
    assert not out.exists()


def test_build_lm_eval_and_aggregate_refuse_a_flag_that_is_not_true_or_false(tmp_path):
    out = tmp_path / "out"
    _refused(lambda: flasheval.build_reference(["hf:a", "hf:b"], name="r", suite="dclm-core", task_dir=tmp_path,
                                               output=out, force=2), "--force")
    _refused(lambda: flasheval.build_reference(["hf:a", "hf:b"], name="r", suite="dclm-core", task_dir=tmp_path,
                                               output=out, progress=2), "progress")
    _refused(lambda: flasheval.build_reference(["hf:a", "hf:b"], name="r", suite="dclm-core", task_dir=tmp_path,
                                               output=out, seed=-1), "--seed")
    _refused(lambda: flasheval.lm_eval("hf:a", tasks="x", output=out, log_samples="yes"), "--log-samples")
    _refused(lambda: flasheval.lm_eval("hf:a", tasks="x", output=out, fewshot_seed=-1), "--fewshot-seed")
    _refused(lambda: flasheval.aggregate(tmp_path / "x.csv", suites="dclm-core", partial="y", output=out / "a.csv"),
             "--partial")
    _refused(lambda: flasheval.render_report(3), "RUN_DIR")
    _refused(lambda: flasheval.check_tasks(3), "DIR")
    assert not out.exists()


def test_lm_eval_names_a_bad_argument_before_it_needs_lm_eval(tmp_path, monkeypatch):
    # lm-eval is imported once every argument is checked: without it, a bad model spec is still the line a user sees
    import flasheval.lmeval

    def absent() -> None:
        raise flasheval.InputError("lm-eval is not installed", field="--engine")

    monkeypatch.setattr(flasheval.lmeval, "require_lm_eval", absent)
    _refused(lambda: flasheval.lm_eval("hf:" + str(tmp_path / "no-such-model"), tasks="x"), "--model")
    _refused(lambda: flasheval.lm_eval(3, tasks="x"), "--model")
    _refused(lambda: flasheval.lm_eval("hf:" + str(tmp_path), tasks="x"), "--engine")  # a real folder: lm-eval next


def test_one_message_per_flag():
    from flasheval.checks import check_flag

    messages = {_refused(lambda: call("yes"), field).split(": ", 1)[1] for call, field in (
        (lambda v: flasheval.sweep([A, B], budget=BUDGET, force=v), "force"),
        (lambda v: flasheval.backtest(force=v), "force"),
        (lambda v: flasheval.dior("helm_lite", force=v), "force"),
        (lambda v: flasheval.rank_intervals("helm_lite", simultaneous=v), "simultaneous"),
        (lambda v: check_flag(v, field="x"), "x"),
    )}
    assert messages == {"must be True or False, got 'yes'"}
    assert check_flag(False, field="x") is False


def test_a_sharded_model_with_main_is_refused_by_place_before_anything_is_written(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from flasheval.engine.hf.in_memory import check_sharded_placement, is_sharded
    from tests.integrations.test_trainer_callback import LOOP, SHARDED

    model, tokenizer = LOOP.tiny_llama(0), LOOP.byte_tokenizer()
    check_sharded_placement(model, "main")  # whole: "main" is fine
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        fully_shard(model)  # FSDP2: every forward pass gathers the parameters from every process
        assert is_sharded(model)
        check_sharded_placement(model, "main")  # a group of one process: process zero is every process
        # the group as two processes report it (a real 2-process job: tests/integrations, _sharded_callback_worker)
        monkeypatch.setattr("flasheval.engine.hf.in_memory.caller_group", lambda: (2, None))
        out, run = tmp_path / "out", tmp_path / "run"
        assert _refused(lambda: flasheval.place(model, "tiny", tokenizer=tokenizer, output=out), "distributed") \
            == SHARDED
        assert _refused(lambda: flasheval.place_checkpoint(model, run=run, step=1, reference="tiny",
                                                           tokenizer=tokenizer), "distributed") == SHARDED
        assert not out.exists() and not run.exists()
        check_sharded_placement(model, "all")  # "all" places in lockstep (tests/integrations)
    finally:
        dist.destroy_process_group()
