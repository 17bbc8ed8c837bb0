"""Training runs: a run's folder (one record per run, a place record per checkpoint), the checkpoints it saves, coverage over a run."""
