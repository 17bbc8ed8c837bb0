"""The sweep's results store: durable appends, torn last line, corrupt lines refused; under a
2-process launch only the main process reads and writes the run folder."""

import json
from pathlib import Path

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.placement.scorers import ScoredExamples
from flasheval.placement.sweep_run import STORE_FILE, STORE_FORMAT, check_config
from flasheval.placement.sweep_store import ResultsStore, StoredScorer


class _Counting:
    n_parameters = None

    def __init__(self):
        self.asked = []

    def score(self, task_name, example_ids):
        self.asked.extend((task_name, e) for e in example_ids)
        return ScoredExamples(scores=np.array([len(e) % 2 for e in example_ids], dtype=float),
                              n_tokens=np.array([10 + len(e) for e in example_ids]))


def test_appended_scores_survive_a_reload(tmp_path):
    store = ResultsStore(tmp_path / "s.jsonl")
    store.append("m", "t", ["a", "bb"], ScoredExamples(scores=np.array([1.0, 0.5]), n_tokens=None))
    again = ResultsStore(tmp_path / "s.jsonl")
    assert len(again) == 2 and again.get("m", "t", "bb") == (0.5, None) and again.get("m", "t", "c") is None


def test_a_torn_last_line_is_cut_and_the_rest_kept(tmp_path, caplog):
    path = tmp_path / "s.jsonl"
    ResultsStore(path).append("m", "t", ["a", "b"], ScoredExamples(scores=np.array([1.0, 0.0])))
    with open(path, "a") as fh:
        fh.write('{"model_id":"m","task_name":"t","exam')  # the process died mid-write
    store = ResultsStore(path)
    assert len(store) == 2 and "torn last line" in caplog.text
    assert path.read_text().endswith("\n")
    store.append("m", "t", ["c"], ScoredExamples(scores=np.array([1.0])))
    assert len(ResultsStore(path)) == 3


def test_a_corrupt_line_in_the_middle_is_refused_with_its_line_number(tmp_path):
    path = tmp_path / "s.jsonl"
    ResultsStore(path).append("m", "t", ["a"], ScoredExamples(scores=np.array([1.0])))
    with open(path, "a") as fh:
        fh.write("garbage\n")
    with pytest.raises(InputError, match=r"s\.jsonl:2: corrupt results-store line"):
        ResultsStore(path)


def test_stored_scorer_asks_the_model_only_for_missing_examples(tmp_path):
    store = ResultsStore(tmp_path / "s.jsonl")
    inner = _Counting()
    first = StoredScorer(inner, store, "m").score("t", ["a", "bb"])
    resumed = StoredScorer(inner, ResultsStore(tmp_path / "s.jsonl"), "m")
    second = resumed.score("t", ["a", "bb", "ccc"])
    assert inner.asked == [("t", "a"), ("t", "bb"), ("t", "ccc")] and resumed.n_computed == 1
    np.testing.assert_array_equal(second.scores[:2], first.scores)
    assert second.n_tokens.tolist() == [11, 12, 13]


def _run_folder_on_two_processes(tmp_path, config: dict) -> list[dict]:
    from tests.engine.test_distributed import launch

    launch(Path(__file__).with_name("_run_folder_worker.py"), str(tmp_path), json.dumps(config), timeout=240,
           check=False)
    return [json.loads((tmp_path / f"seen{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.slow
def test_a_run_folder_is_read_and_written_by_the_main_process_only(tmp_path):
    pytest.importorskip("accelerate")
    config = {"store_format": STORE_FORMAT, "models": ["m"]}
    main_folder = tmp_path / "rank0"
    check_config(main_folder, config)
    ResultsStore(main_folder / STORE_FILE).append("m", "t", ["x1", "x2"], ScoredExamples(
        scores=np.array([1.0, 0.0]), n_tokens=np.array([3, 4])))
    seen = _run_folder_on_two_processes(tmp_path, config)
    expected = [["m", "t", "x1", 1.0, 3], ["m", "t", "x2", 0.0, 4], ["m", "t", "x9", 1.0, 7]]
    assert seen[0] == seen[1] == {"rows": expected}  # the other process starts from the main's scores
    assert not (tmp_path / "rank1").exists()  # and never writes its own folder
    assert len((main_folder / STORE_FILE).read_text().splitlines()) == 3  # the main appended the new batch once
    # other settings in the main's folder: every process is refused with the main's one line
    for name in ("seen0.json", "seen1.json"):
        (tmp_path / name).unlink()
    seen = _run_folder_on_two_processes(tmp_path, {**config, "models": ["n"]})
    assert seen[0] == seen[1] and "holds a sweep with other settings" in seen[0]["error"]
    assert not (tmp_path / "rank1").exists()


def test_a_copy_starts_from_given_rows_and_never_touches_its_file(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text('{"model_id": "m", "task_name": "t", "example_id": "on-disk", "score": 1.0, "n_tokens": 1}\n')
    before = path.read_bytes()
    copy = ResultsStore(path, writer=False, rows={("m", "t", "given"): (0.0, 2)})
    assert copy.get("m", "t", "on-disk") is None and copy.get("m", "t", "given") == (0.0, 2)
    copy.append("m", "t", ["new"], ScoredExamples(scores=np.array([1.0]), n_tokens=np.array([5])))
    assert copy.get("m", "t", "new") == (1.0, 5) and path.read_bytes() == before
    with pytest.raises(ValueError, match="rows are for copies"):
        ResultsStore(path, rows={})
