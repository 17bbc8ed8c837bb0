"""The lm-evaluation-harness bridge: flasheval's engine as an lm-eval model, and lm-eval tasks
for placement.

* :mod:`~flasheval.lmeval._install`    — the one import of ``lm_eval`` and the install hint;
* :mod:`~flasheval.lmeval.conventions` — lm-eval's request conventions (split, BOS, truncation,
  rolling windows) on flasheval's HF backend, as a flasheval backend (store and data parallelism apply);
* :mod:`~flasheval.lmeval.model`       — :class:`FlashevalLM`, lm-eval's ``LM`` interface on that backend;
* :mod:`~flasheval.lmeval.loading`     — open a model spec as a ``FlashevalLM`` behind the results store;
* :mod:`~flasheval.lmeval.tasks`       — run lm-eval tasks (``simple_evaluate``, chosen doc ids), per-example
  scores, and the task settings a reference pins (config digest, few-shot, lm-eval version).

Importing this package imports neither lm-eval nor torch; lm-eval is an optional extra
(``pip install -e ".[lm-eval]"``).
"""

from flasheval.lmeval._install import INSTALL_HINT, LM_EVAL_VERSION, require_lm_eval

__all__ = ["INSTALL_HINT", "LM_EVAL_VERSION", "require_lm_eval"]
