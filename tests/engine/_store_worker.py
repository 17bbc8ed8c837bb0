"""One writer of ``test_store_shards.py``'s concurrency test, run as its own process.

``python -m tests.engine._store_worker FOLDER MODEL TAG GO_FILE STOP_FILE REPORT``: announce
readiness (``REPORT.ready``), wait for ``GO_FILE``, open the store for ``MODEL`` (then touch
``REPORT.opened``, refused or not) and append batches of results keyed ``TAG-<n>`` until
``STOP_FILE`` appears; then write ``REPORT`` (JSON): the keys written, or the one-line refusal, and
what this process logged (whether it migrated the old single file).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from flasheval.engine.store.results import ResultStore
from flasheval.errors import BackendError
from flasheval.types import LoglikelihoodResult

BATCH = 10


def _result(tag: str, i: int) -> LoglikelihoodResult:
    return LoglikelihoodResult(task_name=tag, example_id=str(i), choice_index=0, logprob_sum=-float(i), n_tokens=1 + i % 7,
                               is_greedy=i % 2 == 0)


def main(argv: list[str]) -> int:
    folder, model, tag, go_file, stop_file, report = argv
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("flasheval").addHandler(handler)
    logging.getLogger("flasheval").setLevel(logging.INFO)
    Path(report + ".ready").write_text("")
    while not Path(go_file).exists():
        time.sleep(0.005)
    written: list[str] = []
    refused = None
    try:
        store = ResultStore(folder, fingerprint=model)
    except BackendError as exc:
        refused = str(exc)
        Path(report + ".opened").write_text("")
    else:
        Path(report + ".opened").write_text("")
        with store:
            while not Path(stop_file).exists():
                batch = [(f"{tag}-{len(written) + j}", _result(tag, len(written) + j)) for j in range(BATCH)]
                store.put_many(batch)
                written.extend(key for key, _ in batch)
    Path(report).write_text(json.dumps({"written": written, "refused": refused,
                                        "migrated": [m for m in messages if "migrated" in m], "messages": messages}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
