"""The backend contract: the methods plus one BackendInfo, stated by every backend and read without defaults."""

from __future__ import annotations

import ast
import re
from contextlib import nullcontext
from pathlib import Path

import pytest

from flasheval.engine.base import Backend, BackendInfo, TokenBackend
from flasheval.engine.coordination.distributed import DistributedBackend
from flasheval.engine.loading import behind_store, n_parameters, open_backend, open_model
from flasheval.engine.specs import parse_model_spec, parse_named_models
from flasheval.types import LoglikelihoodRequest

PACKAGE = Path(__file__).resolve().parents[2] / "flasheval"
REQUESTS = [LoglikelihoodRequest(task_name="t", example_id="0", choice_index=c, context="question:",
                                 continuation=f" answer {c}") for c in range(2)]


def test_a_deferred_backend_reports_before_and_after_its_weights_load(tiny_folder, tmp_path):
    (model,) = parse_named_models([f"m=hf:{tiny_folder}"])
    backend = open_model(model, dtype="float32", device="cpu", batch_size=4)
    before = backend.info
    assert (before.is_loaded, before.load_seconds, before.forward_tokens) == (False, 0.0, 0)
    assert (before.dtype, before.device, before.batch_size, before.prefix_space) == ("float32", "cpu", 4, False)
    cached, store = behind_store(backend, tmp_path)
    try:
        cached.loglikelihood(REQUESTS)
    finally:
        store.close()
    after = backend.info
    assert after.is_loaded and after.load_seconds > 0 and after.forward_tokens > 0 and after.forward_seconds > 0
    # counted on an empty copy before the load, on the loaded model after: the same number, tied weights once
    assert after.n_parameters == before.n_parameters == sum(p.numel() for p in backend.backend.model.parameters())
    assert cached.info == after == DistributedBackend(backend).info  # wrappers report the wrapped backend's
    assert n_parameters(cached) == after.n_parameters
    assert backend.backend.info.previous_fingerprint == after.previous_fingerprint != backend.fingerprint
    cached.release()  # through the wrapper: the weights go, the report says so
    assert not backend.info.is_loaded


def test_what_callers_need_is_in_the_contract(tiny_folder, tmp_path):
    """The load callback, the maximum length, the tokenizer, the spec and the lockstep: asked of the contract
    through any wrapper, the same from a deferred backend as from the loaded one."""
    spec = parse_model_spec(f"hf:{tiny_folder}")
    deferred = open_backend(spec, deferred=True, dtype="float32", device="cpu", max_length=64)
    loaded = open_backend(spec, dtype="float32", device="cpu", max_length=64)
    cached, store = behind_store(deferred, tmp_path)
    assert isinstance(cached, Backend) and isinstance(deferred, TokenBackend) and isinstance(loaded, TokenBackend)
    loads: list[tuple[str, float]] = []
    cached.notify_load(lambda seconds: loads.append(("first", seconds)))  # through the store's wrapper
    deferred.notify_load(lambda seconds: loads.append(("second", seconds)))
    try:
        cached.loglikelihood(REQUESTS)
    finally:
        store.close()
    assert [name for name, _ in loads] == ["first", "second"] and loads[0][1] == deferred.info.load_seconds > 0
    loaded.notify_load(loads.append)  # loaded when opened: nothing loads later
    for info in (deferred.info, loaded.info, cached.info):
        assert (info.max_length, info.source) == (64, f"hf:{tiny_folder}")
    assert deferred.tokenizer is not None and loaded.tokenizer is not None and len(loads) == 2
    for backend in (deferred, loaded, cached):
        with backend.lockstep(lambda what: nullcontext()):  # not sharded: a null context, no collective
            pass


def test_one_is_sharded_for_scoring_mode_and_lockstep():
    torch = pytest.importorskip("torch")
    from flasheval.engine.hf.in_memory import is_sharded

    class FSDPModule(torch.nn.Module):  # how FSDP2 marks a module it shards (a class of that name in its MRO)
        pass

    outer = torch.nn.Sequential(torch.nn.Linear(2, 2), FSDPModule())
    zero3 = torch.nn.Linear(2, 2)
    zero3.weight.ds_id = 0  # DeepSpeed ZeRO-3's mark on a partitioned parameter
    assert is_sharded(outer) and is_sharded(zero3) and not is_sharded(torch.nn.Linear(2, 2))


def test_backend_info_refuses_impossible_values():
    with pytest.raises(ValueError, match="batch_size"):
        BackendInfo(prefix_space=True, batch_size=0, is_loaded=True, load_seconds=0.0, n_parameters=1, dtype=None,
                    device=None)
    with pytest.raises(ValueError, match="seconds"):
        BackendInfo(prefix_space=True, batch_size=1, is_loaded=True, load_seconds=-1.0, n_parameters=1, dtype=None,
                    device=None)


def test_no_backend_attribute_is_guessed_or_forwarded_in_the_package():
    """``getattr`` / ``hasattr`` on a backend (a default standing in for what it does not say), or ``__getattr__``
    forwarding in the engine: the contract is BackendInfo and the protocol's methods."""
    probe = re.compile(r"(getattr|hasattr)\((self\.)?_?(backend|cached|engine|opened|hf)\b")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if probe.search(line) or "def __getattr__" in line and "engine" in path.relative_to(PACKAGE).parts:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert found == []


WRAPPER_ATTRIBUTES = frozenset({"_backend", "_inner", "_wrapped", "_model", "_runner"})
"""Where wrappers keep what they wrap: read from outside, a walk through the wrappers."""
BACKEND_WORDS = ("backend", "inner", "wrapped", "runner", "cached")
OPENERS = frozenset({"open_model", "open_backend", "open_cached_backend", "behind_store", "load_hf_backend",
                     "load_planned", "cached_runner"})
"""Functions that return backends: a name bound from one of their calls holds a backend, whatever it is called."""


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return _name(node.func) if isinstance(node, ast.Call) else None


def _backend_names(tree: ast.AST) -> set[str]:
    """Names bound to a backend: parameters and variables annotated ``...Backend``, and names bound from an opener."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            names |= {a.arg for a in arguments if a.annotation is not None and "Backend" in ast.unparse(a.annotation)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "Backend" in ast.unparse(node.annotation):
                names.add(node.target.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _name(node.value) in OPENERS:
            for target in node.targets:
                names |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def private_backend_reads(source: str, filename: str = "<source>") -> list[str]:
    """Every read of a private attribute (``x._name``, not ``self._name``) on what holds a backend: a value whose
    name says backend / inner / wrapped / runner / cached, a name bound to a backend (:func:`_backend_names`), or a
    wrapper's attribute (:data:`WRAPPER_ATTRIBUTES`) on anything."""
    tree = ast.parse(source, filename=filename)
    typed = _backend_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue  # a class's own parts
        owner = _name(node.value) or ""
        if node.attr in WRAPPER_ATTRIBUTES or owner in typed or any(w in owner.lower() for w in BACKEND_WORDS):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_private_read_check_fails_on_a_wrapper_walk_whatever_the_names():
    walk = """
def sharded(self):
    inner = self._backend
    while hasattr(inner, "_backend"):
        inner = inner._backend
    return inner
"""
    assert [f.split(": ")[1] for f in private_backend_reads(walk)] == ["inner._backend"]
    assert private_backend_reads("def f(self):\n    return self._backend._model") != []  # the wrapped one's parts
    assert private_backend_reads("def f(x: Backend):\n    return x._plan") != []  # annotated, any name
    assert private_backend_reads("def f():\n    m = open_model(s)\n    return m._tokenizer") != []  # opened
    assert private_backend_reads("def f(o):\n    return o.backend._plan") != []  # reached through an attribute
    assert private_backend_reads("def f(self, lm):\n    return self._limits.max_rows, lm.tokenizer") == []


def test_no_module_reads_a_backends_private_parts():
    """What a caller needs of a backend is in the protocol or BackendInfo: never found by walking wrappers."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += private_backend_reads(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == []


def test_a_deferred_backend_told_to_stay_unloaded_serves_the_store_and_refuses_the_rest(tiny_folder, tmp_path):
    """How a Ray build's driver learns, without loading, whether its store answers a model entirely."""
    from flasheval.engine.hf.deferred import NotStored

    (model,) = parse_named_models([f"m=hf:{tiny_folder}"])
    first = open_model(model, dtype="float32", device="cpu")
    cached, store = behind_store(first, tmp_path)
    try:
        computed = cached.loglikelihood(REQUESTS[:1])
    finally:
        store.close()
    again = open_model(model, dtype="float32", device="cpu")
    again.stay_unloaded()
    cached, store = behind_store(again, tmp_path)
    try:
        assert cached.loglikelihood(REQUESTS[:1]) == computed  # what the store holds is served
        with pytest.raises(NotStored, match="a request is not in the results store"):
            cached.loglikelihood(REQUESTS)
    finally:
        store.close()
    assert not again.info.is_loaded and len(store) == 1


def test_forward_tokens_count_a_context_two_examples_share_once(tiny_folder):
    """Twin examples (Winograd's and Winogrande's sentence pairs) share a context: the passes run it once, so
    ``forward_tokens`` is the per-example count (``example_tokens``: each example's context once) less the shared
    context, counted here with the tokenizer alone."""
    from flasheval.evaluation.evaluate import example_tokens

    spec = parse_model_spec(f"hf:{tiny_folder}")
    backend = open_backend(spec, dtype="float32", device="cpu")
    twins = [LoglikelihoodRequest(task_name="t", example_id=e, choice_index=0, context="The trophy",
                                  continuation=f" is too {word}.") for e, word in (("0", "big"), ("1", "small"))]
    other = LoglikelihoodRequest(task_name="t", example_id="2", choice_index=0, context="A suitcase",
                                 continuation=" is small.")
    requests = [*twins, other]
    results = backend.loglikelihood(requests)
    tokenizer = backend.tokenizer
    context = {text: len(tokenizer(text).input_ids) for text in ("The trophy", "A suitcase")}
    continuations = sum(len(tokenizer(r.continuation, add_special_tokens=False).input_ids) for r in requests)
    per_example = sum(example_tokens([r], [x]) for r, x in zip(requests, results))
    assert per_example == 2 * context["The trophy"] + context["A suitcase"] + continuations
    assert backend.info.forward_tokens == per_example - context["The trophy"]
