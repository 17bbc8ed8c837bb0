"""Placement from inside training frameworks: each integration is a thin shell over
:func:`flasheval.place_checkpoint`, the generic hook a hand-written training loop calls itself.

* :mod:`~flasheval.integrations.transformers` — :func:`attach` adds a :class:`PlacementCallback` (a
  ``transformers.TrainerCallback``) made for its Trainer.
* :mod:`~flasheval.integrations.lightning` — :class:`PlacementCallback` (a ``lightning.pytorch.Callback``) for
  ``lightning.Trainer``, told which attribute of the ``LightningModule`` holds the Hugging Face model.
* :mod:`~flasheval.integrations.placing` — what both share: the options checked when a callback is made, the one
  placement call, the numbers a placement logs (the same names in every tracker).

Importing this package imports no training framework: each integration imports its framework when
its callback is first made.
"""
