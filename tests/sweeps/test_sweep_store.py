"""A sweep's scores in the engine's results store: a checkpoint's shard survives a reload, a torn last line is
cut, a corrupt line is skipped (the store's one policy) and recomputed; the run folder's lock refuses a second
sweep in one line; a run folder of the old layout (one scores.jsonl) is migrated once, nothing recomputed;
under a 2-process launch only the main process reads and writes the run folder."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from flasheval import cli
from flasheval.engine.store.results import ResultStore
from flasheval.engine.store.shards import lock_folder, shard_path
from flasheval.engine.store.stored_score import StoredScore, score_key
from flasheval.errors import InputError
from flasheval.reference.scoring.scorers import ScoredExamples
from flasheval.sweeps.folder import STORE_FORMAT, check_config, open_run_folder
from flasheval.sweeps.store import StoredScorer, score_fingerprint
from flasheval.records.run_record import read_record

OLD_FOLDER = Path(__file__).with_name("data") / "run_folder_v1"
"""A run folder written by the sweep before store format 2 (store format 1): `flasheval sweep --models
replay:meta/llama-3-70b replay:allenai/olmo-7b --datasets helm_lite/math helm_lite/openbookqa --budget-examples 200`."""


class _Counting:
    n_parameters = None

    def __init__(self):
        self.asked = []

    def score_many(self, asks):
        self.calls = getattr(self, "calls", 0) + 1
        self.asked.extend((task_name, e) for task_name, example_ids in asks for e in example_ids)
        return [ScoredExamples(scores=np.array([len(e) % 2 for e in example_ids], dtype=float),
                               n_tokens=np.array([10 + len(e) for e in example_ids])) for _, example_ids in asks]


def _store(folder):
    return ResultStore(folder, fingerprint=score_fingerprint("m"), folder_locked=True)


def test_stored_scorer_asks_the_model_only_for_missing_examples_across_a_reload(tmp_path):
    inner = _Counting()
    first = StoredScorer(inner, _store(tmp_path)).score("t", ["a", "bb"])
    resumed = StoredScorer(inner, _store(tmp_path))
    second = resumed.score("t", ["a", "bb", "ccc"])
    assert inner.asked == [("t", "a"), ("t", "bb"), ("t", "ccc")] and resumed.n_computed == 1
    np.testing.assert_array_equal(second.scores[:2], first.scores)
    assert second.n_tokens.tolist() == [11, 12, 13]


def test_stored_scorer_asks_the_model_once_for_the_missing_examples_of_every_task(tmp_path):
    inner = _Counting()
    scorer = StoredScorer(inner, _store(tmp_path))
    scorer.score("t", ["a"])
    got = scorer.score_many([("t", ["a", "bb"]), ("u", ["a"]), ("t2", [])])
    assert inner.calls == 2 and inner.asked == [("t", "a"), ("t", "bb"), ("u", "a")]  # one call for both tasks
    assert [g.scores.tolist() for g in got] == [[1.0, 0.0], [1.0], []] and scorer.n_computed == 3
    scorer.score_many([("t", ["bb"]), ("u", ["a"])])
    assert inner.calls == 2  # all stored: the model is not asked


def test_a_torn_last_line_is_cut_and_a_corrupt_line_skipped_then_recomputed(tmp_path, caplog):
    StoredScorer(_Counting(), _store(tmp_path)).score("t", ["a", "bb", "ccc"])
    path = shard_path(tmp_path, score_fingerprint("m"))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"garbage": 1}\n' + lines[2] + b'{"fp": "sweep-sc')  # damage, then a killed write
    store = _store(tmp_path)
    assert len(store) == 2 and "torn last record" in caplog.text and ":2: corrupt record skipped" in caplog.text
    assert path.read_bytes().endswith(b"\n")  # the torn tail was cut off; the corrupt line stays, skipped
    inner = _Counting()
    StoredScorer(inner, store).score("t", ["a", "bb", "ccc"])
    assert inner.asked == [("t", "bb")]  # only the corrupt line's example is recomputed


def test_a_copy_starts_from_given_scores_and_never_touches_a_file(tmp_path):
    given = {score_key("t", "given"): StoredScore(task_name="t", example_id="given", score=0.0, n_tokens=2)}
    copy = ResultStore(tmp_path / "run", fingerprint=score_fingerprint("m"), writer=False, contents=given)
    scorer = StoredScorer(_Counting(), copy)
    assert scorer.score("t", ["given", "new"]).n_tokens.tolist() == [2, 13] and scorer.n_computed == 1
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="contents are for readers"):
        ResultStore(tmp_path, fingerprint="m", contents={})


def test_a_second_sweep_on_a_run_folder_in_use_is_refused_in_one_line(tmp_path):
    fd = lock_folder(tmp_path)  # a sweep running in the folder
    try:
        with pytest.raises(InputError, match="another sweep is running in this run folder") as exc:
            open_run_folder(tmp_path, {"store_format": STORE_FORMAT}, ["m"])
        assert str(tmp_path) in str(exc.value) and "\n" not in str(exc.value)
        assert not (tmp_path / "sweep-config.json").exists()  # refused before reading or writing anything
    finally:
        import os

        os.close(fd)
    with open_run_folder(tmp_path, {"store_format": STORE_FORMAT}, ["m"]) as run:  # free again
        assert run.n_stored == 0


def test_a_run_folder_of_the_old_layout_is_migrated_once_and_nothing_recomputed(tmp_path, capsys, caplog):
    out = tmp_path / "run"
    shutil.copytree(OLD_FOLDER, out)
    old_scores = (out / "scores.jsonl").read_bytes()
    argv = ["sweep", "--models", "replay:meta/llama-3-70b", "replay:allenai/olmo-7b", "--datasets", "helm_lite/math",
            "helm_lite/openbookqa", "--budget-examples", "200", "--output", str(out)]
    assert cli.main(argv) == 0
    assert "0 computed now" in capsys.readouterr().out and "migrated 200 scores of 2 checkpoints" in caplog.text
    expected = read_record(OLD_FOLDER / "sweep.json").payload
    got = read_record(out / "sweep.json").payload
    assert {k: v for k, v in got.items() if k != "n_computed"} == {k: v for k, v in expected.items() if k != "n_computed"}
    assert (out / "scores.jsonl.migrated").read_bytes() == old_scores and not (out / "scores.jsonl").exists()
    assert json.loads((out / "sweep-config.json").read_text())["store_format"] == STORE_FORMAT
    rows = [json.loads(line) for line in old_scores.splitlines()]
    caplog.clear()
    config, models = json.loads((out / "sweep-config.json").read_text()), ["meta/llama-3-70b", "allenai/olmo-7b"]
    with open_run_folder(out, config, models) as run:
        assert run.n_stored == len(rows) == 200 and "migrated" not in caplog.text  # once
        for row in rows:  # every score as it was
            got = run.stores[row["model_id"]].get(score_key(row["task_name"], row["example_id"]))
            assert (got.score, got.n_tokens) == (row["score"], row["n_tokens"])


@pytest.mark.slow
def test_a_run_folder_is_read_and_written_by_the_main_process_only(tmp_path):
    pytest.importorskip("accelerate")
    from tests.engine.test_distributed import launch

    config = {"store_format": STORE_FORMAT, "models": ["m"]}
    main_folder = tmp_path / "rank0"
    check_config(main_folder, config)
    StoredScorer(_Counting(), _store(main_folder)).score("t", ["x1", "x22"])
    launch(Path(__file__).with_name("_run_folder_worker.py"), "launch", str(tmp_path), json.dumps(config),
           json.dumps({**config, "models": ["n"]}), timeout=240, check=False)
    seen = [json.loads((tmp_path / f"seen{rank}.json").read_text()) for rank in (0, 1)]
    expected = [["t", "x1", 0.0, 12], ["t", "x22", 1.0, 13], ["t", "x9", 1.0, 7]]
    assert seen[0]["rows"] == seen[1]["rows"] == expected  # the other process starts from the main's scores
    assert len(shard_path(main_folder, score_fingerprint("m")).read_text().splitlines()) == 3  # appended once
    # other settings in the main's folder: every process is refused with the main's one line
    assert seen[0]["other"] == seen[1]["other"] and "holds a sweep with other settings" in seen[0]["other"]
    assert not (tmp_path / "rank1").exists()  # the other process never writes its own folder
