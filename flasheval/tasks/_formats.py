"""llm-foundry ICL jsonl files → validated :class:`Example` values.

One job: read a task file (plain jsonl, or a member of GPQA's password zip), check every
line against its ``icl_type``'s schema, and return frozen examples. Validation errors name
the file, the 1-based line, the field and the allowed values. Top-level string fields are
stripped as llm-foundry's ``strip_dataset=True`` does (list items are left untouched, as
there), so examples hold exactly the strings the prompt builder uses.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.errors import InputError
from flasheval.hashing import file_sha256
from flasheval.tasks._suites import TaskSpec, task_spec

__all__ = ["Example", "load_examples", "load_task_file", "parse_examples", "resolve_task_file", "TaskFile", "LiveTask",
           "load_live_tasks"]

# GPQA asks that its questions not appear online as plain text, so DCLM ships them in a zip whose
# password is published in GPQA's own README and DCLM's eval script; we only read it.
GPQA_ZIP_PASSWORD = b"deserted-untie-orchid"

# Field name -> (JSON type check, type name) per icl_type; required fields first.
_SCHEMAS: dict[str, dict[str, str]] = {
    "multiple_choice": {"query": "str", "choices": "list[str]", "gold": "int"},
    "schema": {"context_options": "list[str]", "continuation": "str", "gold": "int"},
    "language_modeling": {"context": "str", "continuation": "str"},
    "generation_task_with_answers": {"context": "str", "answer": "str"},
}
_OPTIONAL: dict[str, str] = {"category": "str", "aliases": "list[str]", "chain_of_thought": "str"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    """One example of a task, as llm-foundry sees it after ``strip_dataset``.

    Only the fields of the task's ``icl_type`` are set; the others keep their empty defaults.
    """

    task_name: str
    """Task (DCLM label) the example belongs to."""
    example_id: str
    """Stable id: the 0-based record index in the file, zero-padded to 6 digits (``"000042"``)."""
    line: int
    """1-based line number in the file (for messages)."""
    category: str | None = None
    """``category`` field (subject for MMLU, round for jeopardy), if present."""
    query: str = ""
    """multiple_choice: the question."""
    choices: tuple[str, ...] = ()
    """multiple_choice: the answer options; schema: the ``context_options``."""
    gold: int | None = None
    """multiple_choice / schema: index of the correct choice."""
    context: str = ""
    """language_modeling / generation: the text before the answer."""
    continuation: str = ""
    """language_modeling: the gold continuation; schema: the fixed continuation."""
    answer: str = ""
    """generation: the gold answer."""
    aliases: tuple[str, ...] = ()
    """generation: other accepted answers."""
    chain_of_thought: str = ""
    """generation (CoT tasks): the worked solution shown in few-shot examples."""

    def __post_init__(self) -> None:
        if not self.task_name or not self.example_id:
            raise ValueError("task_name and example_id must be non-empty")
        if self.gold is not None and not 0 <= self.gold < len(self.choices):
            raise ValueError(f"gold {self.gold} out of range for {len(self.choices)} choices")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFile:
    """Where a task's data was found."""

    path: Path
    """The jsonl file, or the zip holding it."""
    member: str | None = None
    """Member name inside ``path`` when it is a zip."""

    def __str__(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}:{self.member}"


def resolve_task_file(spec: TaskSpec, task_dir: str | Path) -> TaskFile | None:
    """Find ``spec``'s data under ``task_dir``; ``None`` when it is not there.

    ``task_dir`` may be laid out like ``shared/data/tasks`` (``local_data/``, ``reconstructed/``,
    ``gpqa/``) or be an llm-foundry ``local_data`` folder itself. Reconstructed stand-ins are
    looked up in ``reconstructed/`` first, then ``local_data/``. GPQA is read from an extracted
    ``gpqa_data/`` folder or from ``gpqa/gpqa_data_dclm_format.zip``.
    """
    root = Path(task_dir)
    uri = spec.dataset_uri
    rel = uri[len("local_data/"):] if uri.startswith("local_data/") else uri
    candidates = []
    if spec.data_status == "reconstructed":
        candidates.append(root / "reconstructed" / rel)
    candidates += [root / "local_data" / rel, root / rel, root / "gpqa" / rel]
    for candidate in candidates:
        if candidate.is_file():
            return TaskFile(path=candidate)
    if spec.zip_file is not None:
        for zip_path in (root / spec.zip_file, root / Path(spec.zip_file).name):
            if zip_path.is_file():
                return TaskFile(path=zip_path, member=uri)
    return None


def _read_bytes(source: TaskFile) -> bytes:
    try:
        if source.member is None:
            return source.path.read_bytes()
        with zipfile.ZipFile(source.path) as archive:
            return archive.read(source.member, pwd=GPQA_ZIP_PASSWORD)
    except KeyError:
        raise InputError(f"zip has no member {source.member!r}", path=source.path) from None
    except (OSError, zipfile.BadZipFile, RuntimeError) as exc:
        raise InputError(f"cannot read: {exc}", path=source.path) from None


def _lines(data: bytes, where: str) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not valid UTF-8 (byte {exc.start + 1} of the line)", path=where, line=number) from None
        if text.strip():
            yield number, text


def _check_type(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _validate(record: Any, icl_type: str, where: str, line: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", path=where, line=line)
    schema = _SCHEMAS[icl_type]
    for field, kind in schema.items():
        if field not in record:
            raise InputError(f"missing (required for {icl_type})", path=where, line=line, field=field,
                             allowed=list(schema))
    for field, kind in {**schema, **_OPTIONAL}.items():
        if field in record and not _check_type(record[field], kind):
            raise InputError(f"expected {kind}, got {type(record[field]).__name__}: {record[field]!r:.60}",
                             path=where, line=line, field=field)
    if "gold" in schema:
        n_choices = len(record["choices" if icl_type == "multiple_choice" else "context_options"])
        if n_choices < 2:
            raise InputError(f"needs at least 2 options, got {n_choices}", path=where, line=line,
                             field="choices" if icl_type == "multiple_choice" else "context_options")
        if not 0 <= record["gold"] < n_choices:
            raise InputError(f"gold index {record['gold']} out of range", path=where, line=line, field="gold",
                             allowed=range(n_choices))
    return record


def _example(spec: TaskSpec, index: int, line: int, record: dict[str, Any]) -> Example:
    # llm-foundry's strip_dataset: strip top-level strings only; list items stay as they are.
    def text(field: str) -> str:
        return record.get(field, "").strip()

    return Example(
        task_name=spec.name,
        example_id=f"{index:06d}",
        line=line,
        category=record["category"].strip() if "category" in record else None,
        query=text("query"),
        choices=tuple(record.get("choices", record.get("context_options", ()))),
        gold=record.get("gold"),
        context=text("context"),
        continuation=text("continuation"),
        answer=text("answer"),
        aliases=tuple(record.get("aliases", ())),
        chain_of_thought=text("chain_of_thought"),
    )


def parse_examples(spec: TaskSpec, data: bytes, *, where: str) -> tuple[Example, ...]:
    """Parse and validate the bytes of a task file (``where`` names it in messages)."""
    examples = []
    for line, text in _lines(data, where):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"broken JSON: {exc.msg} (column {exc.colno})", path=where, line=line) from None
        record = _validate(record, spec.icl_type, where, line)
        if spec.has_categories and "category" not in record:
            raise InputError("missing (task has categories)", path=where, line=line, field="category")
        examples.append(_example(spec, len(examples), line, record))
    if not examples:
        raise InputError("file has no examples", path=where)
    return tuple(examples)


def load_examples(spec: TaskSpec, task_dir: str | Path) -> tuple[Example, ...]:
    """Read and validate every example of ``spec`` from ``task_dir``.

    Raises
    ------
    InputError
        The file is missing (the message says where it was looked for) or malformed
        (the message names file, line, field and the allowed values).
    """
    source = resolve_task_file(spec, task_dir)
    if source is None:
        status = " (no copy of this file is known to be available)" if spec.data_status == "missing" else ""
        raise InputError(f"task {spec.name!r}: data file {spec.dataset_uri!r} not found{status}", path=task_dir)
    return load_task_file(spec, source)


def load_task_file(spec: TaskSpec, source: TaskFile) -> tuple[Example, ...]:
    """Read and validate ``spec``'s examples from a file found by :func:`resolve_task_file`."""
    return parse_examples(spec, _read_bytes(source), where=str(source))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LiveTask:
    """One task's specification, every example of its file and the file's SHA-256."""

    spec: TaskSpec
    """The task."""
    examples: tuple[Example, ...]
    """Every example of the task file (the few-shot pool)."""
    sha256: str
    """SHA-256 of the task file's bytes (the zip member's container for GPQA)."""
    path: str
    """Where the file was found."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def example_ids(self) -> tuple[str, ...]:
        return tuple(e.example_id for e in self.examples)


def load_live_tasks(task_names: Sequence[str], task_dir: str | Path) -> tuple[LiveTask, ...]:
    """Load every named task from ``task_dir``; one error lists ALL tasks whose file is missing.

    Raises
    ------
    UnknownNameError
        A task name that is not defined.
    InputError
        ``task_dir`` does not exist, or lacks some of the tasks (all of them are listed).
    """
    root = Path(task_dir)
    if not root.is_dir():
        raise InputError("task directory does not exist", path=root, field="--task-dir")
    specs = [task_spec(name) for name in task_names]
    found = [(spec, resolve_task_file(spec, root)) for spec in specs]
    missing = [spec.name for spec, source in found if source is None]
    if missing:
        raise InputError(f"task directory lacks {len(missing)} of the {len(specs)} tasks: {', '.join(missing)}",
                         path=root, field="--task-dir")
    tasks = []
    for spec, source in found:
        tasks.append(LiveTask(spec=spec, examples=load_task_file(spec, source),  # type: ignore[arg-type]
                              sha256=file_sha256(source.path), path=str(source.path)))  # type: ignore[union-attr]
    return tuple(tasks)
