"""The sweep's results store: durable appends, torn last line, corrupt lines refused."""

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.placement.scorers import ScoredExamples
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
