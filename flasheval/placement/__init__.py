"""Placement: where a new checkpoint stands on a reference, from escalating nested subsamples.

One step of the method per module:

* :mod:`~flasheval.placement.scorers`    — what the controller asks: per-example scores (protocol; live scorer);
* :mod:`~flasheval.placement.replay`     — the replay scorer (a reference model's recorded scores);
* :mod:`~flasheval.placement.tiers`      — tier plans (resolution per rank range, stages, stop rule);
* :mod:`~flasheval.placement.controller` — bootstrap rank at each stage, pure ``decide``, the ``place`` loop;
* :mod:`~flasheval.placement.sweep`      — many checkpoints under one budget (racing);
* :mod:`~flasheval.placement.sweep_store`, :mod:`~flasheval.placement.sweep_run` — a sweep's results store and run folder;
* :mod:`~flasheval.placement.sweep_models` — a live sweep's checkpoints, loaded on demand, at most N in memory;
* :mod:`~flasheval.placement.backtest`, :mod:`~flasheval.placement.simulation` — leave-one-out backtests, synthetic pools;
* :mod:`~flasheval.placement.dior`       — DIoR: how reducing a benchmark changes its decisions.

The statistics themselves (bootstrap, ranks, example orders) are in :mod:`flasheval.stats`.
"""
