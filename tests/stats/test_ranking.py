import numpy as np
import pytest

from flasheval.errors import InputError, UnknownNameError
from flasheval.stats.ranking import aggregate, competition_ranks, rank_among


def test_mean_of_dataset_means_weighs_datasets_equally():
    means = np.array([[1.0, 0.0], [0.4, 0.4]])
    assert aggregate(means).tolist() == [0.5, 0.4]


def test_centered_maps_chance_to_zero_and_perfect_to_one():
    means = np.array([[0.25, 1.0], [1.0, 0.5]])
    got = aggregate(means, kind="centered", dataset_names=["mc", "yn"], random_baselines={"mc": 0.25, "yn": 0.5})
    np.testing.assert_allclose(got, [0.5, 0.5])


def test_centered_needs_a_baseline_per_dataset():
    with pytest.raises(InputError, match="no random baseline"):
        aggregate(np.ones((2, 2)), kind="centered", dataset_names=["a", "b"], random_baselines={"a": 0.1})


def test_win_rate_counts_ties_half_and_depends_on_the_pool():
    means = np.array([[0.9, 0.1], [0.5, 0.5], [0.1, 0.9]])
    np.testing.assert_allclose(aggregate(means, kind="win_rate"), [0.5, 0.5, 0.5])
    # adding one weak model (last on dataset 0, middling on 1) crowns model 2; its mirror crowns model 0
    wr = aggregate(np.vstack([means, [[0.0, 0.7]]]), kind="win_rate")
    assert wr[2] > max(wr[0], wr[1])
    wr = aggregate(np.vstack([means, [[0.7, 0.0]]]), kind="win_rate")
    assert wr[0] > max(wr[1], wr[2])
    np.testing.assert_allclose(aggregate(np.array([[0.5], [0.5]]), kind="win_rate"), [0.5, 0.5])


def test_win_rate_respects_direction():
    means = np.array([[1.0], [2.0], [3.0]])
    np.testing.assert_allclose(aggregate(means, kind="win_rate", higher_is_better=False), [1.0, 0.5, 0.0])


def test_aggregate_is_batched_over_leading_axes():
    rng = np.random.default_rng(0)
    batch = rng.random((5, 4, 3))
    for kind in ("mean", "win_rate"):
        whole = aggregate(batch, kind=kind)
        assert whole.shape == (5, 4)
        for b in range(5):
            np.testing.assert_allclose(whole[b], aggregate(batch[b], kind=kind))


def test_unknown_aggregate_lists_the_allowed():
    with pytest.raises(UnknownNameError, match="allowed: centered, mean, win_rate"):
        aggregate(np.ones((2, 2)), kind="median")


def test_competition_ranks_and_mid_rank_of_a_new_model():
    assert competition_ranks(np.array([0.2, 0.8, 0.8, 0.5])).tolist() == [4, 1, 1, 3]
    pool = np.array([0.8, 0.8, 0.5])
    assert rank_among(0.9, pool).item() == 1.0
    assert rank_among(0.8, pool).item() == 2.0  # tied with two: 1 + 0 + 2/2
    assert rank_among(0.1, pool).item() == 4.0
    assert rank_among(0.6, -pool, higher_is_better=False).item() == 4.0
