"""Statistics core: numpy/scipy only (no pandas, no I/O).

- :mod:`flasheval.stats.ranking`: aggregates over datasets and ranks with ties.
- :mod:`flasheval.stats.bootstrap`: paired, dataset-stratified bootstrap of ranks, vectorized
  over replicates, with a finite-population correction.
- :mod:`flasheval.stats.scaling`: Gadre et al. (2024) scaling-law forms and fits.
- :mod:`flasheval.stats.scaling_bootstrap`: case-bootstrap refits of those laws and percentile
  intervals for their predictions.
"""
