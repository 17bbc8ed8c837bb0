"""Golden outputs of every ``flasheval`` subcommand, for refactors that must not change behaviour.

``python scripts/golden_outputs.py capture OUTDIR [--repo PATH]`` runs each case of :mod:`golden_cases`
(every subcommand and its ``--help``, on replay references, the shared aggregate / task data, a generated long
table and tiny seeded Llamas made by the script) as ``python -m flasheval ...`` with ``PYTHONPATH=PATH``, in one
fresh working folder (:data:`TMP_NAME`), and writes ``OUTDIR/cases/<case>.json`` (command, exit code, stdout, stderr and a
digest of every file the case wrote) and ``OUTDIR/index.json`` (cases, runtimes, the tiny models' hashes).
``python scripts/golden_outputs.py compare BEFORE AFTER`` prints per case ``identical`` or ``differs`` with a
bounded unified diff, then a summary; it always exits 0 (it is a report).

The normaliser (:func:`normalise_text`, :func:`normalise_json`) masks what changes from run to run and nothing
else: the temporary folder, repository, shared-data and interpreter paths (``<TMP>``, ``<REPO>``, ``<SHARED>``,
``<PYTHON>``); durations and rates (``0.3 s`` -> ``<T> s``, ``12.5 examples/s`` -> ``<R> examples/s``, ``1.2x the
placement's time``); dates and times (``<DATE>``); hex runs in written files' names (``<HEX>``); and in JSON records the values of keys named in :data:`VOLATILE_KEYS` or ending in
:data:`VOLATILE_SUFFIXES` (timestamps, seconds, hosts, library versions, fingerprints), replaced by ``"<masked>"``
so that a key appearing or vanishing still shows. ``compare`` applies the masks again to both records, so a mask added
later needs no new capture (except inside hashed content). Standard library only: model weights and parquet inputs are made
by the project's interpreter in subprocesses.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
"""The script's own checkout: the lm-eval task fixtures are read from here, whatever ``--repo`` is."""
sys.path.insert(0, str(_ROOT / "scripts"))
from golden_cases import Case, cases, make_inputs  # noqa: E402  (the script's own folder, not a package)

VOLATILE_KEYS = frozenset({
    "created_utc", "timestamp", "date", "start_time", "end_time", "hostname", "host", "pid",
    "flasheval_version", "torch_version", "transformers_version", "lm_eval_version", "accelerate_version",
    "numpy_version", "python_version", "platform", "git_hash", "pretty_env_info",
    "fingerprint", "fp", "crc", "total_evaluation_time_seconds", "seconds", "time_saving", "fraction_of_peak",
})
"""JSON keys whose values are masked wherever they occur (``fp`` / ``crc``: a store line's model fingerprint and
the checksum over it)."""
VOLATILE_SUFFIXES = ("_seconds", "_per_second", "_utc", "_fingerprint")
"""A key ending in one of these is masked too (``load_seconds``, ``tokens_per_second``, ``model_fingerprint`` ...).
Format and schema versions (``schema_version``, ``scoring_version``) are compared, not masked."""
TMP_NAME = "flasheval-golden"
"""The working folder, under the system's temporary folder: the same path in every capture, so that a digest a
command takes over a path (lm-eval's task config digest) agrees between captures; one capture at a time."""
TEXT_LIMIT = 64_000
"""Text files up to this many characters are kept whole (normalised); longer ones as length + hash."""

_DURATION = re.compile(r"\b\d+(?:\.\d+)?(\s?)(ms|s|sec|min|h)\b")
_RATE = re.compile(r"\b\d+(?:\.\d+)?(\s?[A-Za-z]+/s)\b")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}[T _]\d{2}[:-]\d{2}(?:[:-]\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?(?: UTC)?")
_TIME_RATIO = re.compile(r"\b\d+(?:\.\d+)?x the placement")
_HEX = re.compile(r"\b[0-9a-f]{16,64}\b")


def _substitutions(tmp: Path, repo: Path, shared: Path) -> list[tuple[str, str]]:
    """Longest first, so that a path inside another is replaced by its own name."""
    pairs = {str(tmp): "<TMP>", str(repo): "<REPO>", str(shared): "<SHARED>", sys.prefix: "<PYTHON>",
             str(Path(sys.executable).parent): "<PYTHON>/bin"}
    for path, name in list(pairs.items()):
        pairs.setdefault(os.path.realpath(path), name)
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def normalise_text(text: str, subs: list[tuple[str, str]]) -> str:
    """Paths to placeholders, then dates, rates and durations masked."""
    for path, name in subs:
        text = text.replace(path, name)
    text = _DATE.sub("<DATE>", text)
    text = _RATE.sub(r"<R>\1", text)
    text = _TIME_RATIO.sub("<X>x the placement", text)
    return _DURATION.sub(r"<T>\1\2", text)


def _volatile(key: str) -> bool:
    return key in VOLATILE_KEYS or key.endswith(VOLATILE_SUFFIXES)


def normalise_json(value, subs: list[tuple[str, str]]):
    """``value`` with volatile keys masked and every string normalised (keys too: they can hold paths)."""
    if isinstance(value, dict):
        return {normalise_text(str(k), subs): "<masked>" if _volatile(str(k)) else normalise_json(v, subs)
                for k, v in value.items()}
    if isinstance(value, list):
        return [normalise_json(v, subs) for v in value]
    return normalise_text(value, subs) if isinstance(value, str) else value


def _digest(path: Path, subs: list[tuple[str, str]]):
    """What the comparison sees of one written file."""
    data = path.read_bytes()
    if path.suffix == ".json":
        try:
            return normalise_json(json.loads(data), subs)
        except ValueError:
            pass
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if path.suffix == ".jsonl":
        lines = []
        for line in text.splitlines():
            try:
                lines.append(json.dumps(normalise_json(json.loads(line), subs), sort_keys=True))
            except ValueError:
                lines.append(normalise_text(line, subs))
        joined = "\n".join(sorted(lines))
        return {"lines": len(lines), "sha256_sorted_lines": hashlib.sha256(joined.encode()).hexdigest(),
                "first_lines": lines[:3]}
    text = normalise_text(text, subs)
    if len(text) > TEXT_LIMIT:
        return {"chars": len(text), "sha256_normalised": hashlib.sha256(text.encode()).hexdigest()}
    return text


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file() and not {"__pycache__", ".git"} & set(p.parts)}


def _written(work: Path, before: dict, subs: list[tuple[str, str]]) -> dict:
    """Files created or changed under ``work`` since ``before`` (names normalised: hex runs -> <HEX>)."""
    after = _snapshot(work)
    files: dict[str, list] = {}
    for rel in sorted(after):
        if before.get(rel) != after[rel]:
            name = _HEX.sub("<HEX>", normalise_text(rel, subs))
            files.setdefault(name, []).append(_digest(work / rel, subs))
    for rel in sorted(set(before) - set(after)):
        files.setdefault(_HEX.sub("<HEX>", normalise_text(rel, subs)), []).append("<removed>")
    return {name: sorted(v, key=lambda d: json.dumps(d, sort_keys=True)) if len(v) > 1 else v[0]
            for name, v in files.items()}


def _environment(repo: Path, shared: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHEVAL_", "PYTHON", "HF_", "TQDM_"))}
    env.update(PYTHONPATH=str(repo), PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", FLASHEVAL_SHARED=str(shared),
               FLASHEVAL_CACHE=str(tmp / "cache"), FLASHEVAL_REFERENCES=str(tmp / "work" / "refs"),
               HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "home" / ".cache"), HF_HOME=str(tmp / "home" / "hf"),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", COLUMNS="100", LC_ALL="C.UTF-8", TZ="UTC",
               TQDM_DISABLE="1", PYTHONWARNINGS="ignore")
    return env


def _run_case(case: Case, paths: dict[str, Path], env: dict[str, str], subs: list) -> tuple[dict, float]:
    work = paths["work"]
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in case.argv]
    before = _snapshot(work)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "flasheval", *argv], cwd=work, env=env, capture_output=True,
                              text=True, timeout=case.timeout_s)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    seconds = time.perf_counter() - start
    record = {"case": case.name, "note": case.note, "argv": ["flasheval", *(normalise_text(a, subs) for a in argv)],
              "exit_code": code, "stdout": normalise_text(out, subs), "stderr": normalise_text(err, subs),
              "files": _written(work, before, subs)}
    return record, seconds


def _run_all(tmp: Path, outdir: Path, repo: Path, shared: Path, only: list[str] | None) -> dict:
    paths = {"tmp": tmp, "work": tmp / "work", "inputs": tmp / "inputs", "models": tmp / "models",
             "shared": shared, "repo": repo}
    for key in ("work", "inputs", "models"):
        paths[key].mkdir()
    (tmp / "home").mkdir()
    subs = _substitutions(tmp, repo, shared)
    env = _environment(repo, shared, tmp)
    index = {"repo": "<REPO>", "models_sha256": make_inputs(paths, env, _ROOT), "cases": []}
    selected = [c for c in cases() if not only or c.name in only]
    for n, case in enumerate(selected, 1):
        record, seconds = _run_case(case, paths, env, subs)
        (outdir / "cases" / f"{case.name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        index["cases"].append({"case": case.name, "seconds": round(seconds, 1), "exit_code": record["exit_code"]})
        print(f"[{n}/{len(selected)}] {case.name}: exit {record['exit_code']}, {seconds:.1f} s", flush=True)
    return index


def capture(outdir: Path, repo: Path, shared: Path, only: list[str] | None) -> int:
    repo, outdir = repo.resolve(), outdir.resolve()
    tmp = Path(tempfile.gettempdir()).resolve() / TMP_NAME
    try:
        tmp.mkdir()
    except FileExistsError:
        print(f"{tmp} exists: another capture is running, or one was killed (then remove it)", file=sys.stderr)
        return 1
    (outdir / "cases").mkdir(parents=True, exist_ok=True)
    repo_before = _snapshot(repo)
    try:
        index = _run_all(tmp, outdir, repo, shared, only)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    after = _snapshot(repo)
    changed = sorted(k for k in set(after) | set(repo_before) if repo_before.get(k) != after.get(k))
    index["repo_files_changed"] = changed  # must stay empty: the capture never writes into the checkout
    (outdir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    total = sum(c["seconds"] for c in index["cases"])
    print(f"{len(index['cases'])} cases in {total:.0f} s; written to {outdir}"
          + (f"; REPO CHANGED: {changed}" if changed else ""))
    return 0


def _lines(record: dict) -> list[str]:
    """One case as text lines: what the diff compares (runtimes are not part of it)."""
    lines = ["$ " + " ".join(record["argv"]), f"exit code: {record['exit_code']}", "--- stdout"]
    lines += record["stdout"].splitlines() + ["--- stderr"] + record["stderr"].splitlines() + ["--- files"]
    for name, digest in record["files"].items():
        lines.append(f"== {name}")
        lines += (digest if isinstance(digest, str) else json.dumps(digest, indent=1, sort_keys=True)).splitlines()
    return lines


def compare(before: Path, after: Path, max_lines: int) -> int:
    names = {p.stem for p in (before / "cases").glob("*.json")} | {p.stem for p in (after / "cases").glob("*.json")}
    order = [c["case"] for c in json.loads((before / "index.json").read_text())["cases"]]
    order += sorted(names - set(order))
    counts: dict[str, list[str]] = {}
    for name in order:
        files = [d / "cases" / f"{name}.json" for d in (before, after)]
        if not all(f.is_file() for f in files):
            status = "only in before" if files[0].is_file() else "only in after"
            counts.setdefault(status, []).append(name)
            print(f"{name}: {status}")
            continue
        a, b = (_lines(normalise_json(json.loads(f.read_text()), [])) for f in files)
        if a == b:
            counts.setdefault("identical", []).append(name)
            print(f"{name}: identical")
            continue
        counts.setdefault("differs", []).append(name)
        diff = list(difflib.unified_diff(a, b, "before", "after", lineterm="", n=2))
        print(f"{name}: differs")
        print("\n".join("    " + line for line in diff[:max_lines]))
        if len(diff) > max_lines:
            print(f"    ... ({len(diff) - max_lines} more diff lines; see {files[0]} and {files[1]})")
    models = [json.loads((d / "index.json").read_text()).get("models_sha256") for d in (before, after)]
    print("tiny models: " + ("identical" if models[0] == models[1] else "DIFFER (the comparison of live cases is void)"))
    print("summary: " + ", ".join(f"{len(v)} {k}" for k, v in counts.items())
          + ("" if "differs" not in counts else "; differs: " + ", ".join(counts["differs"])))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    cap = sub.add_parser("capture", help="run every case and record its outputs")
    cap.add_argument("outdir", type=Path)
    cap.add_argument("--repo", type=Path, default=_ROOT,
                     help="checkout whose flasheval runs (PYTHONPATH; default: this script's)")
    cap.add_argument("--shared", type=Path, default=Path(os.environ.get("FLASHEVAL_SHARED") or _ROOT.parent / "shared"),
                     help="shared data folder (default: $FLASHEVAL_SHARED, else ../shared beside the checkout)")
    cap.add_argument("--only", nargs="+", metavar="CASE", help="run only these cases (they may need earlier ones)")
    cmp_ = sub.add_parser("compare", help="compare two captures (always exits 0)")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    cmp_.add_argument("--max-lines", type=int, default=60, help="diff lines shown per case (default 60)")
    args = parser.parse_args(argv)
    if args.action == "capture":
        return capture(args.outdir, args.repo, args.shared.resolve(), args.only)
    return compare(args.before, args.after, args.max_lines)


if __name__ == "__main__":
    sys.exit(main())
