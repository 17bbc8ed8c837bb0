"""One fresh process of ``test_gguf_cache_api.py``: ``flasheval.evaluate`` of a ``gguf:`` file, as a user runs it.

``python -m tests.engine._gguf_worker GGUF WARMUP_FOLDER TEXT STORE``: first evaluates the Hugging Face folder
``WARMUP_FOLDER`` (so the libraries every load imports are imported before anything is timed), then times
``flasheval.evaluate("gguf:GGUF", heldout=[TEXT], store=STORE)`` and prints one JSON line: its seconds, the
model fingerprint and the held-out loss it computed.
"""

from __future__ import annotations

import json
import sys
import time

import flasheval


def main(argv: list[str]) -> int:
    gguf, warmup, text, store = argv
    engine = flasheval.EngineOptions(device="cpu", dtype="float32", max_length=32)
    flasheval.evaluate(f"hf:{warmup}", heldout=[text], store=store + "-warmup", engine=engine)
    start = time.perf_counter()
    run = flasheval.evaluate(f"gguf:{gguf}", heldout=[text], store=store, engine=engine)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "fingerprint": run.summary.record["fingerprint"],
                      "validation": run.summary.record["validation"]}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
