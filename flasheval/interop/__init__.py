"""The field's shared result formats, out of flasheval: Every Eval Ever records of placements, evaluations, runs'
checkpoints and lm-eval output folders (:mod:`~flasheval.interop.every_eval_ever` writes them,
:mod:`~flasheval.interop.sources` reads what is exported). Records come in through the one import path,
:mod:`flasheval.reference.importing` (its reader, :mod:`flasheval.reference.every_eval_ever`, sits with the
other readers below this layer). ``docs/interop.md``."""
