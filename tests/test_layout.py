"""The package's architecture, checked: one folder per domain, imports flow one way, no cycles.

The import graph is read with the standard library's ``ast`` (nothing is imported), counting
every import of the package, at module level or inside a function: a lazy import is still a
dependency. Each module belongs to a domain (its first folder under ``flasheval/``; the loose
foundation modules form one domain) and a domain may import only itself and domains below it.
The checker is also run on small packages written here, so it is shown to fail when it should.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "flasheval"

# Lowest first. A module may import its own domain and the domains before it, never one after it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("foundation",),  # errors, types, hashing, version, data_paths, checks, atomic, records/ (records, schemas)
    ("stats",),       # numpy/scipy only
    ("tasks",),       # formats, prompts, suites, scoring of an example
    ("engine",),      # backends, store, journal, data parallelism
    ("cluster",),     # models held by Ray actors on many machines, requests served there (the Ray executor's parts)
    ("evaluation",),  # example selection, scoring through a backend, records, summaries, dtype comparison
    ("lmeval",),      # the lm-evaluation-harness bridge: lm-eval's conventions on the engine, lm-eval tasks
    ("reference",),   # the reference data model, import, live build
    ("placement",),   # the core: tiers, looks, stop rule, calibration, controller
    ("sweeps",),      # many checkpoints under one budget: rounds planned, served by an executor
    ("runs",),        # training runs: the run folder, the checkpoints a run saves, coverage over a run
    ("analysis",),    # backtests, simulations, interval coverage, DIoR, Fluid
    ("scaling",),     # scaling-law fits and their run tables
    ("report",),      # Markdown + HTML + figures from run records
    ("interop",),     # the field's shared formats in and out (Every Eval Ever)
    ("api",),         # the Python API: one function per job, the one path behind each command
    ("integrations",),  # training-framework callbacks (transformers' Trainer, Lightning), each a shell over the API
    ("cli",),         # one thin module per subcommand, a shell over the API
    ("__main__",),
    ("root",),        # the package itself: re-exports the API (lazily), imported by no module of it
)
FOUNDATION = ("errors", "types", "hashing", "records", "version", "data_paths", "checks", "atomic")
THIRD_PARTY_ALLOWED = {"stats": {"numpy", "scipy"}}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules(root: Path) -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(p, root): (p, ast.parse(p.read_text(encoding="utf-8"), filename=str(p)))
            for p in sorted(root.rglob("*.py"))}


def imports_of(name: str, path: Path, tree: ast.Module, known: set[str], package: str) -> tuple[set[str], set[str]]:
    """``(package modules imported, third-party top-level names imported)`` by one module."""
    own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside, outside = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [(target, tuple(alias.name for alias in node.names))]
        else:
            continue
        for target, names in targets:
            top = target.split(".")[0]
            if top != package:
                if top not in sys.stdlib_module_names and top != "__future__":
                    outside.add(top)
                continue
            # ``from pkg.sub import mod`` depends on the module ``pkg.sub.mod`` when it is one.
            submodules = {f"{target}.{n}" for n in names} & known
            inside |= submodules or {target}
    return inside, outside


def domain_of(name: str, package: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] in FOUNDATION:
        return "foundation"
    return parts[1]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def check_package(root: Path) -> list[str]:
    """Every violation in the package at ``root``: cycles, upward imports, forbidden third-party imports."""
    package = root.name
    modules = read_modules(root)
    known = set(modules)
    rank = {domain: i for i, layer in enumerate(LAYERS) for domain in layer}
    graph, problems = {}, []
    for name, (path, tree) in modules.items():
        inside, outside = imports_of(name, path, tree, known, package)
        graph[name] = {m for m in inside if m in known and m != name}
        domain = domain_of(name, package)
        if domain not in rank:
            problems.append(f"{name}: folder {domain!r} is not a known domain (add it to LAYERS)")
            continue
        for target in sorted(graph[name]):
            other = domain_of(target, package)
            if other != domain and rank.get(other, len(LAYERS)) >= rank[domain]:
                problems.append(f"{name} ({domain}) imports {target} ({other}), a layer at or above its own")
        allowed = THIRD_PARTY_ALLOWED.get(domain)
        if allowed is not None and outside - allowed:
            problems.append(f"{name} ({domain}) imports {sorted(outside - allowed)}; only {sorted(allowed)} allowed")
    problems += [f"import cycle: {' -> '.join(c)}" for c in find_cycles(graph)]
    return problems


def test_the_package_has_no_cycles_and_imports_only_downwards():
    assert check_package(PACKAGE_DIR) == []


def test_every_domain_folder_is_a_layer():
    folders = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    layered = {d for layer in LAYERS for d in layer} | {"records"}  # records/: the foundation's one package
    assert folders <= layered, folders - layered
    loose = {p.stem for p in PACKAGE_DIR.glob("*.py")} - {"__init__", "__main__"}
    assert loose <= set(FOUNDATION), loose - set(FOUNDATION)


MAX_MODULES = 20
"""No package holds more modules than this (its ``__init__`` counted): past it, a package has more than one concern."""


def test_no_package_holds_over_twenty_modules():
    sizes = {str(d.relative_to(PACKAGE_DIR.parent)): len(list(d.glob("*.py")))
             for d in [PACKAGE_DIR, *PACKAGE_DIR.rglob("*")] if (d / "__init__.py").exists()}
    assert {d: n for d, n in sizes.items() if n > MAX_MODULES} == {}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # a cycle through a lazy (function-level) import
        ({"__init__.py": "", "cli/__init__.py": "", "cli/a.py": "def f():\n    from pkg.cli import b\n",
          "cli/b.py": "from pkg.cli.a import f\n"}, "import cycle: pkg.cli.a -> pkg.cli.b"),
        # a lower layer importing a higher one, by a relative import
        ({"__init__.py": "", "stats/__init__.py": "", "placement/__init__.py": "", "placement/c.py": "",
          "stats/s.py": "from ..placement import c\n"}, "pkg.stats.s (stats) imports pkg.placement.c (placement)"),
        # the CLI imported by a domain
        ({"__init__.py": "", "cli/__init__.py": "", "engine/__init__.py": "", "engine/e.py": "import pkg.cli\n"},
         "pkg.engine.e (engine) imports pkg.cli (cli)"),
        # statistics that import pandas
        ({"__init__.py": "", "stats/__init__.py": "import pandas\n"}, "only ['numpy', 'scipy'] allowed"),
    ],
)
def test_the_checker_finds_what_it_must(tmp_path, files, expected):
    problems = check_package(_write(tmp_path, files))
    assert any(expected in p for p in problems), problems


def test_the_checker_accepts_a_clean_package(tmp_path):
    root = _write(tmp_path, {"__init__.py": "from pkg.errors import E\n", "errors.py": "class E(Exception): ...\n",
                             "stats/__init__.py": "import numpy\nfrom pkg.errors import E\n",
                             "cli/__init__.py": "from pkg.stats import numpy\nfrom . import run\n", "cli/run.py": ""})
    assert check_package(root) == []


def test_importing_the_package_loads_no_model_framework():
    # Every module, the Hugging Face backend's included, in a fresh interpreter: torch, transformers and
    # accelerate load only when a model is opened, so the CLI, placement and reports start fast.
    import subprocess

    code = (
        "import importlib, pkgutil, sys, flasheval\n"
        "names = [m.name for m in pkgutil.walk_packages(flasheval.__path__, prefix='flasheval.')\n"
        "         if m.name != 'flasheval.__main__']\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE_DIR.parent, check=True)
    n_modules, loaded = done.stdout.split(" ", 1)
    assert int(n_modules) > 50
    assert loaded.strip() == "[]"


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
"""A function's length counts its signature and body, not its docstring (STYLE.md: functions under ~60 lines,
modules under ~400; 80 is the hard limit for a function)."""

LONG_FUNCTIONS: dict[str, str] = {}
"""Functions allowed over :data:`MAX_FUNCTION_LINES`, each with the reason it stays whole."""


def size_problems(root: Path) -> list[str]:
    """Modules over :data:`MAX_MODULE_LINES` lines and functions over :data:`MAX_FUNCTION_LINES` (docstring left
    out) under ``root``, except the functions :data:`LONG_FUNCTIONS` names."""
    problems = []
    for name, (path, tree) in read_modules(root).items():
        n_lines = len(path.read_text(encoding="utf-8").splitlines())
        if n_lines > MAX_MODULE_LINES:
            problems.append(f"{name}: {n_lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                length -= first.end_lineno - first.lineno + 1
            if length > MAX_FUNCTION_LINES and f"{name}.{node.name}" not in LONG_FUNCTIONS:
                problems.append(f"{name}.{node.name}: {length} lines without its docstring (at most {MAX_FUNCTION_LINES})")
    return problems


def test_modules_and_functions_stay_small():
    assert size_problems(PACKAGE_DIR) == []


def test_the_size_check_finds_a_long_module_and_a_long_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    root = _write(tmp_path, {"__init__.py": "", "big.py": "\n" * (MAX_MODULE_LINES + 1),
                             "long.py": 'def f():\n    """doc\n    string"""\n' + body,
                             "short.py": 'def g():\n    """a docstring of many lines\n' + "\n" * 100 + '    """\n' + "    y = 0\n" * 70})
    problems = size_problems(root)
    assert any(p.startswith("pkg.big: ") for p in problems), problems
    assert any(p.startswith("pkg.long.f: 81 lines") for p in problems), problems
    assert not any("pkg.short" in p for p in problems), problems
