"""The one table of spec prefixes: the parser, the file checks and open_backend read it and nothing else."""

from __future__ import annotations

import ast
from pathlib import Path
from types import MappingProxyType

import pytest

from flasheval.engine import loading, specs
from flasheval.engine.loading import open_backend, open_model
from flasheval.engine.registry import BACKENDS, SpecKind
from flasheval.engine.specs import SPEC_PREFIXES, check_model_files, parse_model_spec, parse_named_models
from flasheval.errors import InputError

ENGINE = Path(__file__).resolve().parents[2] / "flasheval" / "engine"


def test_the_prefixes_are_the_tables_keys_and_the_table_is_immutable():
    assert SPEC_PREFIXES == tuple(BACKENDS) == ("hf", "gguf", "replay")
    with pytest.raises(TypeError):
        BACKENDS["new"] = SpecKind(open=None)  # type: ignore[index]


def test_a_new_prefix_is_one_registration(monkeypatch, tmp_path):
    """A prefix added to the table is parsed, checked, named and opened with no other change."""
    opened = []

    def open_toy(target, *, revision, deferred, **options):
        opened.append((target, revision, deferred, options))
        return "a toy backend"

    table = MappingProxyType({**BACKENDS, "toy": SpecKind(open=open_toy, revisions=True, local_file=True)})
    for module in (specs, loading):
        monkeypatch.setattr(module, "BACKENDS", table)
    monkeypatch.setattr(specs, "SPEC_PREFIXES", tuple(table))
    spec = parse_model_spec("toy:org/model@v2")
    assert (spec.kind, spec.target, spec.revision) == ("toy", "org/model", "v2")
    assert open_backend(spec, dtype="float32") == "a toy backend"
    (model,) = parse_named_models([f"toy:{tmp_path / 'weights.bin'}"])
    assert model.model_id == "weights"  # a local file's stem names it
    with pytest.raises(InputError, match="model files not found"):
        check_model_files([model])
    assert open_model(model, dtype="float32", device="cpu") == "a toy backend"
    assert opened[0] == ("org/model", "v2", False, {"dtype": "float32"})
    assert opened[1][2] is True  # a spec's model is opened deferred: weights on first use


def test_a_prefix_without_a_loader_is_refused_in_one_line():
    with pytest.raises(InputError, match="replay: models serve recorded scores"):
        open_backend(parse_model_spec("replay:ref/m"))
    with pytest.raises(InputError, match="replay models have no weights"):
        parse_named_models(["replay:ref/m"])


def test_no_module_of_the_engine_branches_on_a_spec_prefix():
    """``spec.kind == "gguf"`` and the like: the table says what a prefix does."""
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
                if any(isinstance(c, ast.Constant) and c.value in BACKENDS for c in node.comparators):
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []
