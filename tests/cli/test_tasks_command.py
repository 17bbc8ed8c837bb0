"""``flasheval tasks list`` / ``tasks check``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from flasheval import cli


def _counts(output: str) -> dict[str, str]:
    rows = [line.split() for line in output.splitlines()[1:-1]]
    return {row[0]: row[1] for row in rows}


@pytest.mark.slow
def test_check_local_data_matches_tasks_csv(task_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tasks", "check", str(task_dir / "local_data")]) == 0
    out = capsys.readouterr().out
    counts = _counts(out)
    with (task_dir / "tasks.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(counts) == 53
    for row in rows:
        if row["file"].startswith("local_data/") and row["data_status"] == "original":
            assert counts[row["label"]] == row["n_in_file"], row["label"]
        else:  # reconstructed / GPQA live outside local_data; three files exist nowhere
            assert counts[row["label"]] == "missing", row["label"]
    assert out.splitlines()[-1].startswith("44 tasks valid, 9 missing (mmlu_zeroshot, hellaswag_zeroshot")


def test_check_reports_a_bad_file_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "commonsense_reasoning" / "copa.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"query": "q", "choices": ["a", "b"], "gold": 5}\n', encoding="utf-8")
    good = tmp_path / "commonsense_reasoning" / "piqa.jsonl"
    good.write_text('{"query": "q", "choices": ["a", "b"], "gold": 1}\n' * 3, encoding="utf-8")
    assert cli.main(["tasks", "check", str(tmp_path), "--suite", "dclm-core"]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:1: field 'gold': gold index 5 out of range (allowed: 0, 1)" in out
    assert _counts(out)["piqa"] == "3"
    assert out.splitlines()[-1] == (
        "1 tasks valid, 20 missing (hellaswag_zeroshot, jeopardy, bigbench_qa_wikidata, arc_easy, arc_challenge, "
        "commonsense_qa, openbook_qa, lambada_openai, hellaswag, winograd, winogrande, bigbench_dyck_languages, "
        "agi_eval_lsat_ar, bigbench_cs_algorithms, bigbench_operators, bigbench_repeat_copy_logic, squad, coqa, "
        "boolq, bigbench_language_identification), 1 with errors"
    )


@pytest.mark.parametrize(("argv", "message"), [
    (["tasks", "check", "/nonexistent/dir"], "flasheval: error: /nonexistent/dir: not a directory"),
    (["tasks", "list", "--suite", "core"], "flasheval: error: field '--suite': unknown suite 'core' (allowed: dclm-core, "),
])
def test_bad_arguments_give_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_list_shows_every_task_and_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tasks", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 53 + 5
    siqa = next(line for line in lines if line.startswith("siqa "))
    assert siqa.split()[1:5] == ["multiple_choice", "10", "33.3", "50"]
    assert lines[-3].startswith("suite dclm-mmlu: 1 tasks, accuracy")
