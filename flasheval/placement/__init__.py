"""Placement, the core: where a new checkpoint stands on a reference, from escalating nested subsamples.

One step of the method per module:

* :mod:`~flasheval.placement.tiers`      — tier plans (resolution per rank range, stages, stop rule);
* :mod:`~flasheval.placement.results`    — what a placement records and returns (budget, decision, stage, compute, result);
* :mod:`~flasheval.placement.stop_rule`  — the pure stop rule: ``decide``, the ``window`` rule's rank and its table;
* :mod:`~flasheval.placement.allocation` — how a look's examples are split across datasets (uniform, Neyman with costs);
* :mod:`~flasheval.placement.calibration`, :mod:`~flasheval.placement.calibration_cache`,
  :mod:`~flasheval.placement.miss_simulation` — the looks' constant calibrated to the window rule, its cache, and
  the simulation of the stops it is calibrated on;
* :mod:`~flasheval.placement.looks`      — the looks fixed before the new model is scored: targets, variances, levels;
* :mod:`~flasheval.placement.controller` — the one stage loop: a per-model controller (next look, take scores,
  stop?), bootstrap rank at each look, ``place`` driving one controller;
* :mod:`~flasheval.placement.import_clock` — the seconds a placement spends importing libraries.

Above it: the scorers it asks (:mod:`flasheval.reference.scoring`), sweeps of many checkpoints
(:mod:`flasheval.sweeps`), training runs (:mod:`flasheval.runs`) and the analyses of the method
(:mod:`flasheval.analysis`). The statistics themselves (bootstrap, ranks, example orders) are in :mod:`flasheval.stats`.
"""
