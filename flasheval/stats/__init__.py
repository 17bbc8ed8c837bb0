"""Statistics: pure numpy/scipy functions (bootstrap, ranking, scaling-law fits)."""
