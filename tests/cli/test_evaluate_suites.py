"""``flasheval evaluate --suite/--heldout`` on the real SmolLM2 GGUF and the real task files:

* the suite aggregates in the record equal those ``flasheval aggregate`` computes from the same
  per-task accuracies, and those computed here from DCLM's own baseline file (independent path);
* suites lacking a task without data (coqa) are labelled partial in the table, the record, the
  aggregate CSV, the runs table for ``scaling fit`` and the report; never under the full name;
* bits per byte of real text (SQuAD's Wikipedia paragraphs, read from the shared task file at test
  time) is far below that of a randomly initialised twin (same architecture, 2 of its layers, same tokenizer);
* compute is recorded in placement's units.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from flasheval import cli
from flasheval.records.run_record import read_record
from flasheval.scaling.runs import read_runs_files
from tests.cli import test_evaluate
from tests.cli.test_evaluate import _cli
from tests.engine.test_distributed import one_thread

gguf_model = test_evaluate.gguf_model  # the SmolLM2 GGUF fixture (skips, saying how to install it, when absent)


@pytest.fixture(scope="module")
def real_text(task_dir: Path, tmp_path_factory) -> Path:
    """Held-out text: the first 4 distinct SQuAD paragraphs (Wikipedia), as JSON lines with ``text``."""
    paragraphs: list[str] = []
    with (task_dir / "local_data" / "reading_comprehension" / "squad.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            text = json.loads(line)["context"].removeprefix("Context: ").split("\nQuestion:")[0]
            if text not in paragraphs:
                paragraphs.append(text)
            if len(paragraphs) == 4:
                break
    path = tmp_path_factory.mktemp("heldout") / "squad_paragraphs.jsonl"
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs), encoding="utf-8")
    return path


# The suites' tasks with short prompts (every suite task would take minutes on shared CPUs), and coqa,
# which has no file: both suites are partial, for a task without data and for tasks not selected.
TASKS = ("copa", "winograd", "winogrande", "openbook_qa", "lambada_openai", "hellaswag_zeroshot",
         "bigbench_qa_wikidata", "coqa")
SCORED = tuple(t for t in TASKS if t != "coqa")


@pytest.fixture(scope="module")
def suite_run(gguf_model: str, task_dir: Path, real_text: Path, tmp_path_factory) -> tuple[Path, str]:
    """CORE and Gadre-17 narrowed to :data:`TASKS`, two examples per task, plus the held-out text."""
    output = tmp_path_factory.mktemp("suites")
    done = _cli(["evaluate", "--model", gguf_model, "--model-id", "smol", "--task-dir", str(task_dir),
                 "--suite", "dclm-core", "--suite", "gadre-17", "--tasks", ",".join(TASKS), "--n-examples", "2",
                 "--heldout", str(real_text), "--format", "jsonl", "--output", str(output)], timeout=900)
    return output, done.stdout + done.stderr


def _dclm_baselines(task_dir: Path) -> dict[str, float]:
    with (task_dir / "configs" / "dclm" / "eval_meta_data.csv").open(encoding="utf-8") as fh:
        return {row["Eval Task"]: float(row["Random baseline"]) / 100 for row in csv.DictReader(fh)}


@pytest.mark.slow
def test_suite_aggregates_equal_aggregate_command_and_dclm_formula(suite_run, task_dir: Path, capsys) -> None:
    output, _ = suite_run
    payload = read_record(output / "summary.json").payload
    accuracy = {t: r["accuracy"] for t, r in payload["tasks"].items()}
    assert set(accuracy) == set(SCORED)
    assert all(r["n_examples"] == 2 and r["standard_error"] is not None for r in payload["tasks"].values())
    # independent: DCLM's centering with the baselines of DCLM's own csv; Gadre's mean top-1 error
    lists = json.loads((task_dir / "task_lists.json").read_text(encoding="utf-8"))
    baselines = _dclm_baselines(task_dir)
    core = [(accuracy[t] - baselines[t]) / (1 - baselines[t]) for t in lists["dclm_core_22"] if t in accuracy]
    gadre = [1 - accuracy[t] for t in lists["gadre_17_subset"] if t in accuracy]
    assert len(core) == 7 and len(gadre) == 5
    assert payload["suites"]["dclm-core"]["value"] == pytest.approx(sum(core) / len(core), abs=1e-12)
    assert payload["suites"]["gadre-17"]["value"] == pytest.approx(sum(gadre) / len(gadre), abs=1e-12)
    # the aggregate command on the record: same values, and the partial label
    assert cli.main(["aggregate", "--suite", "dclm-core", "--suite", "gadre-17", "--partial",
                     "--scores", str(output / "summary.json")]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    for suite in ("dclm-core", "gadre-17"):
        assert float(row[suite]) == payload["suites"][suite]["value"]
        assert row[f"{suite}_partial"] == "True" and row[f"{suite}_missing"].split(";") == payload["suites"][suite]["missing"]
    assert cli.main(["aggregate", "--suite", "dclm-core", "--scores", str(output / "summary.json")]) == 1
    assert "incomplete" in capsys.readouterr().err


@pytest.mark.slow
def test_partial_suites_are_labelled_everywhere(suite_run, tmp_path: Path) -> None:
    output, printed = suite_run
    payload = read_record(output / "summary.json").payload
    for suite, n, used in (("dclm-core", 22, 7), ("gadre-17", 17, 5)):
        s = payload["suites"][suite]
        assert (s["partial"], s["without_data"], s["n_tasks"], s["n_suite_tasks"]) == (True, ["coqa"], used, n)
        assert "coqa" in s["missing"] and len(s["missing"]) == n - used
        assert f"PARTIAL {suite}" in printed
        assert f"PARTIAL: {used} of {n} tasks; no data: coqa; not selected: {n - used - 1}" in printed
        assert f"{suite}_partial" in payload["metrics"] and suite not in payload["metrics"]
    assert "coqa: no file in" in printed
    # scaling fit's runs table: merged by model id with a table of N and D; the partial error is no default column
    scale = tmp_path / "scale.csv"
    scale.write_text("model_id,params,tokens\nsmol,134515008,2e12\n", encoding="utf-8")
    table = read_runs_files([scale, output / "summary.json"])
    assert table.values["loss"][0] == payload["validation"]["squad_paragraphs"]["mean_nll"]
    assert table.values["gadre-17_partial"][0] == payload["suites"]["gadre-17"]["value"]
    assert "gadre-17" not in table.values
    # the report renders the per-task table, the labelled aggregates and the loss
    assert cli.main(["report", str(output / "summary.json")]) == 0
    report = (output / "report.md").read_text(encoding="utf-8")
    assert "| PARTIAL dclm-core | centered_mean |" in report and "no data: coqa" in report
    assert "| squad_paragraphs | 4 |" in report and "| copa | 2 |" in report
    assert "Compute: 14 examples, " in report and "Compute: 14 examples, " in printed


@pytest.mark.slow
def test_compute_is_recorded_in_placement_units(suite_run) -> None:
    output, _ = suite_run
    payload = read_record(output / "summary.json").payload
    compute, examples = payload["compute"], [json.loads(x) for x in (output / "examples.jsonl").read_text().splitlines()]
    assert compute["n_examples"] == len(examples) == 2 * len(SCORED)
    assert compute["n_tokens"] == sum(t["n_tokens"] for t in payload["tasks"].values())
    # a token count is every continuation token scored plus the contexts (at least a few tokens each)
    assert compute["n_tokens"] > sum(sum(e["choice_n_tokens"]) for e in examples) + len(examples) * 5
    assert compute["n_parameters"] == 134_515_008  # SmolLM2-135M
    assert compute["flops"] == 2.0 * compute["n_parameters"] * compute["n_tokens"]
    assert compute["wall_seconds"] >= compute["load_seconds"] + compute["scoring_seconds"] - 1e-6


@pytest.mark.slow
def test_bits_per_byte_of_real_text_far_below_a_random_twin(suite_run, smollm_hf: Path, real_text: Path,
                                                            tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(smollm_hf)  # the GGUF's own config and tokenizer, converted once
    config.num_hidden_layers = 2  # a random model is near uniform at any depth; 2 of 30 layers load in a second
    tokenizer = AutoTokenizer.from_pretrained(smollm_hf)
    torch.manual_seed(0)  # test only: the twin's random initialisation
    twin = AutoModelForCausalLM.from_config(config)
    twin.save_pretrained(tmp_path / "twin")
    tokenizer.save_pretrained(tmp_path / "twin")
    assert one_thread(lambda: cli.main(["evaluate", "--model", f"hf:{tmp_path / 'twin'}", "--heldout", str(real_text),
                                        "--dtype", "float32", "--output", str(tmp_path / "out")])) == 0
    real = read_record(suite_run[0] / "summary.json").payload["validation"]["squad_paragraphs"]
    random = read_record(tmp_path / "out" / "summary.json").payload["validation"]["squad_paragraphs"]
    assert real["n_tokens"] == random["n_tokens"] > 300 and real["n_bytes"] == random["n_bytes"]
    assert real["bits_per_byte"] < 1.2  # measured: 0.969 (the 2-layer twin: 3.704)
    assert random["bits_per_byte"] > 3 * real["bits_per_byte"]
    assert random["mean_nll"] > 0.9 * math.log(config.vocab_size)  # near uniform over the vocabulary


def _error_line(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_suite_or_heldout_input_is_one_line_before_any_model_loads(capsys, task_dir: Path, tmp_path: Path) -> None:
    base = ["evaluate", "--model", "hf:/nowhere", "--output", str(tmp_path / "out")]
    assert "unknown suite 'core'" in _error_line(capsys, [*base, "--task-dir", str(task_dir), "--suite", "core"])
    assert "field '--tasks': gsm8k_cot not in suite(s) dclm-core" in _error_line(
        capsys, [*base, "--task-dir", str(task_dir), "--suite", "dclm-core", "--tasks", "gsm8k_cot"])
    assert "cannot read" in _error_line(capsys, [*base, "--heldout", str(tmp_path / "missing.jsonl")])
    assert "nothing to evaluate" in _error_line(capsys, [*base, "--task-dir", str(task_dir)])
    replay = ["evaluate", "--model", "replay:helm_lite/meta/llama-3-70b", "--output", str(tmp_path / "r")]
    assert "--suite and --heldout need a model" in _error_line(capsys, [*replay, "--suite", "dclm-core"])


def test_suite_and_heldout_run_on_a_tiny_model(task_dir: Path, real_text: Path, tmp_path: Path, capsys) -> None:
    """The whole path on a 2-layer random Llama (seconds): gadre-17 over copa + winograd + coqa (no data)."""
    pytest.importorskip("torch")
    from tests._tiny_models import save_tiny_models

    folder = save_tiny_models(tmp_path / "models", seeds=(0,))["m0"]
    output = tmp_path / "out"
    assert cli.main(["evaluate", "--model", f"hf:{folder}", "--task-dir", str(task_dir), "--suite", "gadre-17",
                     "--tasks", "copa,winograd,coqa", "--n-examples", "3", "--heldout", str(real_text),
                     "--dtype", "float32", "--device", "cpu", "--format", "jsonl", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    payload = read_record(output / "summary.json").payload
    accuracy = [payload["tasks"][t]["accuracy"] for t in ("copa", "winograd")]
    suite = payload["suites"]["gadre-17"]
    assert suite["value"] == pytest.approx(1 - sum(accuracy) / 2, abs=1e-15) and suite["without_data"] == ["coqa"]
    assert "PARTIAL gadre-17" in printed and "PARTIAL: 2 of 17 tasks; no data: coqa; not selected: 14" in printed
    assert payload["metrics"]["gadre-17_partial"] == suite["value"] and payload["model_id"] == "m0"
    loss = payload["validation"]["squad_paragraphs"]
    assert loss["n_bytes"] == len("".join(json.loads(x)["text"] for x in real_text.read_text().splitlines()).encode())
    assert loss["bits_per_byte"] == pytest.approx(loss["mean_nll"] * loss["n_tokens"] / math.log(2) / loss["n_bytes"])
    assert loss["n_tokens"] == loss["n_bytes"]  # a byte-level tokenizer: one token per byte
    from transformers import AutoModelForCausalLM

    n_parameters = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(folder).parameters())
    compute = payload["compute"]
    assert compute["n_parameters"] == n_parameters and compute["n_examples"] == 6
    assert compute["flops"] == 2.0 * n_parameters * compute["n_tokens"]
    assert compute["heldout_n_tokens"] == loss["n_tokens"]
