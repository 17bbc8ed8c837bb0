"""Evaluation: which examples a run scores, how they are scored through a backend, and what a run reports.

One job per module (above :mod:`flasheval.engine`, which answers requests; below the reference,
placement and API layers, which call it):

* :mod:`~flasheval.evaluation.selection`       — an ``evaluate`` run's task plan and each task's selected examples;
* :mod:`~flasheval.evaluation.heldout`         — held-out text files and their requests, for validation loss;
* :mod:`~flasheval.evaluation.evaluate`        — task examples -> requests -> backend -> per-example scores;
* :mod:`~flasheval.evaluation.example_records` — ``evaluate``'s per-example records and their file;
* :mod:`~flasheval.evaluation.summary`         — ``evaluate``'s per-task, suite, validation and compute summary;
* :mod:`~flasheval.evaluation.dtype_comparison` — the same examples scored again in another dtype;
* :mod:`~flasheval.evaluation.workflow`        — the ``evaluate`` workflow: store, scoring, records, summary.
"""
