"""The scaling figure is drawn from a record payload alone: points, curves, bands, predicted runs."""

from __future__ import annotations

import numpy as np
import pytest

from flasheval.errors import InputError
from flasheval.report.scaling_figure import save_scaling_figure, scaling_figure
from flasheval.scaling.fit import PredictTarget, ScalingFitOptions, scaling_fit_payload
from flasheval.scaling.runs import RunsTable
from flasheval.stats.scaling import error_law, loss_law


def _payload(with_error: bool) -> dict:
    n = np.array([1e7, 8e7, 1.5e8, 4e8, 1e7, 1.4e9, 6.9e9])
    m = np.array([20.0, 20, 20, 20, 320, 20, 20])
    loss = loss_law(6 * n * n * m, m, E=1.8, a=200.0, b=350.0, eta=0.13) * (1 + 0.002 * np.sin(np.arange(7)))
    err = error_law(loss, epsilon=0.85, k=2.1, gamma=0.75) + 0.002 * np.cos(np.arange(7))
    table = RunsTable(model_ids=tuple(f"r{i}" for i in range(7)), params=n, tokens=n * m, datasets=(None,) * 7,
                      values={"loss": loss, "err": err}, flags={}, sources=(("t", None),) * 7)
    options = ScalingFitOptions(loss_column="loss", error_columns=("err",) if with_error else (),
                                fit_max_compute=2.1e19, error_fit_max_compute=3e20, n_resamples=20)
    return scaling_fit_payload(table, [PredictTarget(model_id="r6")], options)


def test_figure_has_loss_and_error_panels(tmp_path):
    payload = _payload(with_error=True)
    fig = scaling_figure(payload)
    loss_ax, err_ax = fig.axes
    assert loss_ax.get_xscale() == "log"
    # one curve per multiplier (20, 320), one fill band each; the fitted points; the predicted star
    assert len(payload["fits"][0]["loss_curves"]) == 2 and len(loss_ax.collections) >= 2
    labels = [t.get_text() for t in loss_ax.texts]
    assert labels == ["r6"] and [t.get_text() for t in err_ax.texts] == ["r6"]
    fitted = [line for line in loss_ax.lines if line.get_label() == "fitted runs"][0]
    assert len(fitted.get_xdata()) == 5
    path = save_scaling_figure(payload, tmp_path / "f.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_loss_only_payload_has_one_panel_and_empty_payload_is_refused():
    assert len(scaling_figure(_payload(with_error=False)).axes) == 1
    with pytest.raises(InputError, match="no fits"):
        scaling_figure({"fits": []})
