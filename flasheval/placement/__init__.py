"""Placement: where a new checkpoint stands on a reference, from escalating nested subsamples.

One step of the method per module:

* :mod:`~flasheval.placement.scorers`    — what the controller asks: per-example scores (protocol; live scorer);
* :mod:`~flasheval.placement.replay`     — the replay scorer (a reference model's recorded scores);
* :mod:`~flasheval.placement.lmeval_scorer` — the scorer for lm-eval references (lm-eval's own task code);
* :mod:`~flasheval.placement.live_scoring` — what a reference's models were scored with, one protocol for both
  engines (DCLM-format task files, lm-eval tasks): checked options, a live model opened as a scorer;
* :mod:`~flasheval.placement.building`, :mod:`~flasheval.placement.build_setups` — the one reference-build loop and
  its two engines (open, score, close, fingerprint and free every model; the same files and fields from either);
* :mod:`~flasheval.placement.tiers`      — tier plans (resolution per rank range, stages, stop rule);
* :mod:`~flasheval.placement.results`    — what a placement records and returns (budget, decision, stage, compute, result);
* :mod:`~flasheval.placement.stop_rule`  — the pure stop rule: ``decide``, the ``window`` rule's rank and its table;
* :mod:`~flasheval.placement.allocation` — how a look's examples are split across datasets (uniform, Neyman with costs);
* :mod:`~flasheval.placement.calibration` — the looks' constant calibrated to the window rule;
* :mod:`~flasheval.placement.looks`      — the looks fixed before the new model is scored: targets, variances, levels;
* :mod:`~flasheval.placement.controller` — the one stage loop: a per-model controller (next look, take scores,
  stop?), bootstrap rank at each look, ``place`` driving one controller;
* :mod:`~flasheval.placement.sweep`      — many checkpoints under one budget (racing): a scheduler of controllers;
* :mod:`~flasheval.placement.sweep_store`, :mod:`~flasheval.placement.sweep_folder` — a checkpoint's scores in the
  results store; a sweep's run folder (settings, lock, a shard per checkpoint, the old layout migrated);
* :mod:`~flasheval.placement.sweep_pool`, :mod:`~flasheval.placement.sweep_record` — the pool a sweep ranks against;
  a replay sweep's truth and the record's payload;
* :mod:`~flasheval.placement.sweep_models` — a live sweep's checkpoints, loaded on demand, at most N in memory;
* :mod:`~flasheval.placement.backtest`, :mod:`~flasheval.placement.simulation` — leave-one-out backtests, synthetic pools;
* :mod:`~flasheval.placement.fluid`      — Fluid Benchmarking (IRT, adaptive item selection) as a baseline;
* :mod:`~flasheval.placement.dior`       — DIoR: how reducing a benchmark changes its decisions.

The statistics themselves (bootstrap, ranks, example orders) are in :mod:`flasheval.stats`.
"""
