"""Field-by-field schemas of the run records flasheval writes and reads back: one per record ``kind``.

A schema maps a dotted field path to a type name. ``a.b``: key ``b`` of object ``a``; ``a[].b``: key ``b``
of every element of list ``a``; ``a{}.b``: key ``b`` of every value of object ``a``. A path ending in ``?``
may be absent; a type ending in ``|null`` may be ``null``; a field under an absent or ``null`` parent is not
looked for. Type names: ``str``, ``int``, ``number`` (int or float, finite), ``bool``, ``object``, ``list``,
``items`` (a non-empty list),
``strs`` / ``ints`` / ``numbers`` (lists of them), ``pair`` (``[low, high]`` ranks, ``1 <= low <= high``), ``entry``
(a leaderboard row: ``[model_id, value]`` or ``{"model_id", "value"}``), and ranges: ``count`` (an integer >= 0),
``size`` (an integer >= 1), ``level`` (a confidence level, a number in [0.5, 1)). What relates two fields (a rank
within its interval, an interval within ``1 .. n_models + 1``, examples scored at most those there are, a tier's
last rank at or after its first) is checked per kind by :func:`check_payload`.

:func:`flasheval.records.run_record.read_record` checks every record of a kind named here against its schema, so
every reader (``flasheval report``, ``read_run``, a watcher, a resumed placement, a score table read from
an ``evaluate`` record) sees the fields it reads with the types it expects, or one line naming the file,
the field (``payload.stages[2].interval``), the value and what is allowed. Fields a schema does not name
are kept as they are (later releases may add fields). Foundation level: no domain imports.

>>> check_fields({"rank": 3, "interval": [2, 4]}, {"rank": "int|null", "interval": "pair"}, path="p.json")
>>> check_fields({"rank": "3"}, {"rank": "int|null"}, path="p.json")
Traceback (most recent call last):
...
flasheval.errors.InputError: p.json: field 'payload.rank': '3' is not an integer (or null)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from flasheval.checks import MAX_CHECKPOINTS
from flasheval.errors import InputError

__all__ = ["PAYLOAD_SCHEMAS", "check_fields", "check_payload"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_TYPES: Mapping[str, tuple[Callable[[Any], bool], str]] = MappingProxyType({
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (_int, "an integer"),
    "number": (_number, "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "items": (lambda v: isinstance(v, list) and len(v) > 0, "a non-empty list"),
    "count": (lambda v: _int(v) and v >= 0, "an integer >= 0"),
    "size": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
    "level": (lambda v: _number(v) and 0.5 <= v < 1, "a finite number in [0.5, 1) (a confidence level)"),
    "strs": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "ints": (lambda v: isinstance(v, list) and all(_int(x) for x in v), "a list of integers"),
    "numbers": (lambda v: isinstance(v, list) and all(_number(x) for x in v), "a list of numbers"),
    "pair": (lambda v: isinstance(v, list) and len(v) == 2 and all(_int(x) for x in v) and 1 <= v[0] <= v[1],
             "[low, high] ranks (integers, 1 <= low <= high)"),
    "entry": (lambda v: (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and _number(v[1]))
              or (isinstance(v, dict) and isinstance(v.get("model_id"), str) and _number(v.get("value"))),
              "[model_id, value] or {model_id, value}"),
})


def _walk(value: Any, steps: list[str], where: str, out: list[tuple[str, Any, bool]]) -> None:
    """Collect ``(field, value, present)`` for every place ``steps`` leads to from ``value``."""
    if not steps:
        return
    step, rest = steps[0], steps[1:]
    key = step.rstrip("[]{}")
    marks = [step[i:i + 2] for i in range(len(key), len(step), 2)]  # "rows{}[]" -> ["{}", "[]"]
    optional = key.endswith("?")
    key = key.rstrip("?")
    if not isinstance(value, dict):
        return  # the parent's own check names it
    here = f"{where}.{key}" if where else key
    if key not in value:
        if not optional and not marks and not rest:  # a missing parent is named by its own entry
            out.append((here, None, False))
        return
    items = [(here, value[key])]
    for mark in marks:  # every element of every container on the way
        inner = []
        for name, child in items:
            if mark == "[]" and isinstance(child, list):
                inner += [(f"{name}[{i}]", v) for i, v in enumerate(child)]
            elif mark == "{}" and isinstance(child, dict):
                inner += [(f"{name}[{k}]", v) for k, v in child.items()]
            # else: the container's own entry checks its type
        items = inner
    for name, item in items:
        if rest:
            _walk(item, rest, name, out)
        else:
            out.append((name, item, True))


def check_fields(data: Any, schema: Mapping[str, str], *, path: str | os.PathLike[str] | None,
                 prefix: str = "payload") -> None:
    """Check ``data`` against ``schema`` (see the module's notes); one line naming file, field, value and type.

    Raises
    ------
    InputError
        A field is missing, or holds a value not of its type.
    """
    if not isinstance(data, dict):
        raise InputError(f"{str(repr(data))[:60]} is not an object", path=path, field=prefix)
    for dotted, type_name in schema.items():
        nullable = type_name.endswith("|null")
        check, allowed = _TYPES[type_name.removesuffix("|null")]
        found: list[tuple[str, Any, bool]] = []
        _walk(data, dotted.split("."), "", found)
        for field, value, present in found:
            name = f"{prefix}.{field}" if prefix else field
            if not present:
                raise InputError("missing field", path=path, field=name)
            if not (check(value) or (nullable and value is None)):
                raise InputError(f"{str(repr(value))[:60]} is not {allowed}{' (or null)' if nullable else ''}",
                                 path=path, field=name)


_COMPUTE = {"compute": "object", "compute.n_examples": "count", "compute.full_examples": "size",
            "compute.n_tokens?": "int|null", "compute.full_tokens?": "number|null", "compute.flops?": "number|null",
            "compute.saving?": "number|null", "compute.example_saving?": "number|null",
            "compute.token_saving?": "number|null"}

_PLACE = {
    "model_id": "str", "reference": "str", "plan": "str", "seed": "int", "status": "str", "reason": "str",
    "rank": "int|null", "interval": "pair", "confidence_level": "level", "tier": "str|null",
    "resolution": "int|null", "n_models": "size", "aggregate?": "str|null", "full_data_rank?": "int|null",
    "stages": "list", "stages[]": "object", "stages[].stage": "int", "stages[].stage_size": "int|null",
    "stages[].n_examples": "ints", "stages[].rank": "int", "stages[].mid_rank": "number", "stages[].interval": "pair",
    "stages[].confidence_level": "level", "stages[].tier": "str", "stages[].resolution": "int",
    "stages[].decision": "str", "stages[].reason": "str", "compute.full_flops?": "number|null",
    **_COMPUTE, "neighbours?": "strs|null", "leaderboard?": "list|null", "leaderboard[]": "entry",
    "timing?": "object|null", **{f"timing.{k}": "number" for k in (
        "wall_seconds", "load_seconds", "scoring_seconds", "outside_model_seconds", "looks_seconds")},
    "timing.import_seconds?": "number",
    **{f"timing.{k}?": "number|null" for k in ("full_wall_seconds", "full_tokens", "tokens_per_second",
                                                "time_saving", "shared_tokens", "full_run_tokens")},
    "live?": "object|null", "live.fingerprint?": "str|null", "live.seconds?": "number|null",
}

_SWEEP = {
    "reference": "str", "plan": "str", "seed": "int", "aggregate?": "str|null", "n_models": "int",
    "budget": "object", **{f"budget.{k}?": "number|null" for k in ("examples", "tokens", "flops")},
    "truth?": "object", "truth{}": "int|null", "tier_boundaries?": "ints",
    "checkpoints": "list", "checkpoints[]": "object", "checkpoints[].model_id": "str", "checkpoints[].status": "str",
    "checkpoints[].rank": "int|null", "checkpoints[].interval": "pair", "checkpoints[].tier": "str|null",
    "checkpoints[].n_examples": "int", "checkpoints[].rounds": "int", "checkpoints[].saving?": "number|null",
    "order?": "list|null", "order[]": "object", "order[].model_id": "str", "order[].rank": "int",
    "order[].interval": "pair",
    "compute": "object", "compute.n_examples": "int", "compute.full_examples": "int",
    "compute.saving": "number|null", "compute.median_saving?": "number|null",
    "leaderboard?": "list|null", "leaderboard[]": "entry",
    "backtest?": "object|null", "backtest.covered": "number", "backtest.resolved_within_resolution?": "number|null",
    "backtest.n_resolved": "int", "backtest.separate_placements_examples?": "int|null",
    "backtest.order_kendall_tau?": "number|null",
}

_BACKTEST_ONE = {
    "reference": "str", "plan": "str", "seed": "int", "confidence_level": "number",
    "summaries": "list", "summaries[]": "object", "summaries[].method": "str", "summaries[].n_models": "int",
    **{f"summaries[].{k}": "number" for k in ("share_within", "coverage", "mean_examples")},
    **{f"summaries[].{k}": "number|null" for k in ("median_saving", "total_saving")},
    "rows": "object", "rows{}": "items", "rows{}[]": "object", "rows{}[].model_id": "str",
    "rows{}[].full_rank": "int", "rows{}[].placed_rank": "int|null", "rows{}[].interval": "pair",
    "rows{}[].resolution": "int|null", "rows{}[].within": "bool", "rows{}[].covered": "bool",
}

_DIOR_SIZES = {f"{part}[].{k}": t for part in ("examples?", "datasets?", "pool?") for k, t in (
    ("decision", "str"), ("size", "int"), ("aggregate", "str"), ("tau_lower", "number"), ("tau_median", "number"),
    ("top_two_swap_rate", "number"))}

_DIOR = {
    "reference": "str", "aggregate": "str", "n_instantiations": "int", "confidence_level": "number",
    "model_ids": "strs", "dataset_names": "strs", **{f"{part}": "list" for part in ("examples?", "datasets?", "pool?")},
    **{f"{part}[]": "object" for part in ("examples?", "datasets?", "pool?")}, **_DIOR_SIZES,
    "findings?": "object", "findings.flattening_size?": "int|null", "findings.flat_gain_per_100?": "number|null",
    "findings.datasets_tau_lower?": "number", "findings.examples_equivalent_of_datasets?": "int|null",
    "leader_changes?": "list", "leader_changes[]": "object", "leader_changes[].pool_size": "int",
    **{f"leader_changes[].{k}": "str" for k in ("added", "leader_before", "leader_after")},
    "n_leader_changes?": "int", "n_pools_tried?": "int",
}

_EVALUATE = {
    "model_id": "str", "tasks?": "object|null", "tasks{}": "object", "tasks{}.n_examples": "int",
    "tasks{}.accuracy": "number", "tasks{}.standard_error?": "number|null",
    "suites?": "object|null", "suites{}": "object", "suites{}.partial": "bool", "suites{}.aggregate": "str",
    "suites{}.value": "number", "suites{}.standard_error?": "number|null", "suites{}.n_tasks": "int",
    "suites{}.n_suite_tasks": "int", "suites{}.missing": "strs", "suites{}.without_data?": "strs|null",
    "validation?": "object|null", "validation{}": "object",
    **{f"validation{{}}.{k}": "int" for k in ("n_documents", "n_tokens", "n_bytes")},
    **{f"validation{{}}.{k}": "number" for k in ("mean_nll", "bits_per_byte")},
    "dtype_comparison?": "object|null", "dtype_comparison.dtype": "str", "dtype_comparison.compare_dtype": "str",
    "dtype_comparison.tasks": "object", "dtype_comparison.n_requests_computed": "int",
    "dtype_comparison.n_requests_from_store": "int", "dtype_comparison.scoring_seconds": "number",
    "compute?": "object|null", "compute.n_examples": "int", "compute.n_tokens": "int|null",
    "compute.flops?": "number|null", "compute.n_parameters?": "number|null", "compute.heldout_n_tokens?": "int|null",
    **{f"compute.{k}?": "number|null" for k in ("wall_seconds", "load_seconds", "scoring_seconds")},
    "model_loaded?": "bool", "metrics?": "object|null",
}

_SCALING = {
    "loss_column": "str", "fits": "list", "fits[]": "object", "fits[].dataset": "str|null",
    "predictions": "list", "predictions[]": "object", "predictions[].dataset": "str|null",
    "predictions[].quantity": "str", "predictions[].model_id": "str",
    **{f"predictions[].{k}": "number" for k in ("predicted", "low", "high")}, "predictions[].actual": "number|null",
}

_RUN = {
    "name": "str", "reference_source": "str", "reference_digest?": "str", "settings": "object", "settings.reference": "str",
    "settings.plan": "str", "settings.confidence_level": "level", "settings.simultaneous?": "size|null",
    "tiers": "items", "tiers[]": "object", "tiers[].first": "size", "tiers[].last?": "size|null",
    "tiers[].resolution": "count", "plan_spec?": "object",
}

_REFERENCE_BUILD = {
    "reference": "str", "settings": "object", "seconds": "object", "seconds{}": "number",
    "computed_requests": "object", "computed_requests{}": "int", "examples": "object", "examples{}": "list",
    "examples{}[]": "object",
}

_TOGETHER: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType({"dior": (
    ("findings.examples_equivalent_of_datasets", "findings.datasets_tau_lower"),
    ("findings.win_rate_leader_change_found", "n_leader_changes"),
    ("findings.win_rate_leader_change_found", "n_pools_tried"))})
"""Per kind, ``(field, needed)``: where ``field`` is present, ``needed`` must be too (the report reads both)."""

PAYLOAD_SCHEMAS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "place": MappingProxyType(_PLACE), "sweep": MappingProxyType(_SWEEP), "dior": MappingProxyType(_DIOR),
    "backtest": MappingProxyType(_BACKTEST_ONE), "evaluate": MappingProxyType(_EVALUATE),
    "scaling": MappingProxyType(_SCALING), "run": MappingProxyType(_RUN),
    "reference-build": MappingProxyType(_REFERENCE_BUILD),
})
"""The payload schema of each record kind flasheval writes (a ``backtest`` record over several seeds holds
``{"seeds": [...]}``, each element of the one-seed schema)."""


def _within(items: list[tuple[str, dict]], key: str, path: str | os.PathLike[str] | None) -> None:
    """Refuse an item whose ``key`` (a rank; ``null`` passes) lies outside its ``interval``."""
    for where, item in items:
        rank, (low, high) = item[key], item["interval"]
        if rank is not None and not low <= rank <= high:
            raise InputError(f"rank {rank} is outside interval [{low}, {high}]", path=path, field=f"{where}.{key}")


def _place_relations(payload: dict, path: str | os.PathLike[str] | None) -> None:
    """A place record's ranks within its intervals, its intervals within ``1 .. n_models + 1`` (the pool and the
    model placed) and its examples scored at most those there are."""
    places = payload["n_models"] + 1
    items = [("payload", payload), *((f"payload.stages[{i}]", st) for i, st in enumerate(payload["stages"]))]
    for where, item in items:
        if item["interval"][1] > places:
            raise InputError(f"interval {item['interval']} reaches past rank {places} (n_models {payload['n_models']} "
                             "and the model placed)", path=path, field=f"{where}.interval")
    _within(items, "rank", path)
    compute = payload["compute"]
    if compute["n_examples"] > compute["full_examples"]:
        raise InputError(f"{compute['n_examples']} examples scored of {compute['full_examples']} there are",
                         path=path, field="payload.compute.n_examples")


def _run_relations(payload: dict, path: str | os.PathLike[str] | None) -> None:
    """A run record's tiers (each one's last rank at or after its first) and its planned checkpoints (at most
    :data:`~flasheval.checks.MAX_CHECKPOINTS`)."""
    planned = payload["settings"].get("simultaneous")
    if planned is not None and planned > MAX_CHECKPOINTS:
        raise InputError(f"{planned} planned checkpoints; at most {MAX_CHECKPOINTS:,}", path=path,
                         field="payload.settings.simultaneous")
    for i, tier in enumerate(payload["tiers"]):
        if tier.get("last") is not None and tier["last"] < tier["first"]:
            raise InputError(f"last {tier['last']} is before first {tier['first']}", path=path,
                             field=f"payload.tiers[{i}].last")


def _backtest_rows(one: dict, path: str | os.PathLike[str] | None, where: str) -> None:
    _within([(f"{where}.rows[{m}][{i}]", r) for m, rows in one["rows"].items() for i, r in enumerate(rows)],
            "placed_rank", path)


def check_payload(kind: str, payload: Any, *, path: str | os.PathLike[str] | None) -> None:
    """Check a ``kind`` record's payload against :data:`PAYLOAD_SCHEMAS` (a kind not named there: only that it
    is an object); one line naming the file and field otherwise.

    Raises
    ------
    InputError
        A payload field is missing or of the wrong type.
    """
    if kind == "backtest" and isinstance(payload, dict) and "seeds" in payload:
        check_fields(payload, {"seeds": "list", "seeds[]": "object"}, path=path)
        for i, one in enumerate(payload["seeds"]):
            check_fields(one, PAYLOAD_SCHEMAS["backtest"], path=path, prefix=f"payload.seeds[{i}]")
            _backtest_rows(one, path, f"payload.seeds[{i}]")
            methods = [s["method"] for s in one["summaries"]]
            if i and methods != [s["method"] for s in payload["seeds"][0]["summaries"]]:
                raise InputError(f"methods {methods} differ from seed 0's", path=path,
                                 field=f"payload.seeds[{i}].summaries")
        return
    check_fields(payload, PAYLOAD_SCHEMAS.get(kind, {}), path=path)
    if kind == "place":  # a rank lies in its interval (the report draws rank - low and high - rank)
        _place_relations(payload, path)
    if kind == "run":
        _run_relations(payload, path)
    if kind == "backtest":
        _backtest_rows(payload, path, "payload")
    for given, needed in _TOGETHER.get(kind, ()):  # a field that comes with another
        parent, _, key = given.rpartition(".")
        holder = payload.get(parent) if parent else payload
        if isinstance(holder, dict) and key in holder:
            check_fields(payload, {needed: "int" if needed.startswith("n_") else "number"}, path=path)
