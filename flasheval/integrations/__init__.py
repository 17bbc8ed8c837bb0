"""Placement from inside training frameworks: each integration is a thin shell over
:func:`flasheval.place_checkpoint`, the generic hook a hand-written training loop calls itself.

* :mod:`~flasheval.integrations.transformers` — :func:`attach` adds a :class:`PlacementCallback` (a
  ``transformers.TrainerCallback``) made for its Trainer.

Importing this package imports no training framework: each integration imports its framework when
its callback is first made.
"""
