"""Fixtures for the lm-eval bridge: synthetic local tasks, lm-eval's own HF backend and the bridge
on the real SmolLM2-135M (the GGUF's weights as a Hugging Face folder: ``tests/conftest.py``), and one
``simple_evaluate`` run of each on the same tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lmeval._tasks import write_tasks

ALL_TASKS = ("synth_arith", "synth_story", "synth_text", "synth_gen")


@pytest.fixture(scope="session")
def lm_eval():
    return pytest.importorskip("lm_eval", reason='lm-eval not installed: pip install -e ".[lm-eval]"')


@pytest.fixture(scope="session")
def lmeval_tasks(tmp_path_factory, lm_eval) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lmeval_tasks"))


@pytest.fixture(scope="session")
def bridge(smollm_hf, tmp_path_factory, lm_eval):
    from flasheval.engine.specs import parse_named_models
    from flasheval.lmeval.loading import open_lmeval_model

    opened = open_lmeval_model(parse_named_models([f"smollm2=hf:{smollm_hf}"])[0], tmp_path_factory.mktemp("store"),
                               dtype="float32", device="cpu", batch_size=16)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def runs(smollm_hf, lmeval_tasks, bridge, lm_eval):
    """``{"hf": results, "flasheval": results}``: the same tasks through lm-eval's HF backend and the bridge."""
    from lm_eval.models.huggingface import HFLM

    from flasheval.lmeval.tasks import make_task_manager, run_tasks

    manager = make_task_manager(str(lmeval_tasks), ALL_TASKS)
    hf = HFLM(pretrained=str(smollm_hf), dtype="float32", device="cpu", batch_size=16)
    out = {"hf": run_tasks(hf, ALL_TASKS, task_manager=manager), "hf_lm": hf}
    out["flasheval"] = run_tasks(bridge.lm, ALL_TASKS, task_manager=manager)
    return out
