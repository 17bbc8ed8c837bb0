"""Scaling laws (Gadre et al. 2024): run tables in, fitted laws and predictions out.

* :mod:`~flasheval.scaling.runs` — read run tables (CSV, JSON lines, run records) into a validated :class:`~flasheval.scaling.runs.RunsTable`;
* :mod:`~flasheval.scaling.fit`  — fit sets, the loss and error laws with bootstrap intervals, predictions, the record payload.

The numerics (law forms, the 128-start fits, bootstrap) are pure and live in :mod:`flasheval.stats.scaling`
and :mod:`flasheval.stats.scaling_bootstrap`.
"""
