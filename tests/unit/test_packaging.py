"""Packaging and layering, read from the source: every subpackage listed in pyproject.toml, the
pure core's rules, doctests run. (The installed package, run as processes — pip, the console
scripts — is tested in tests/component/test_packaging.py.)"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"common": "corral.common", "cli": "corral.cli", "client": "corral.client",
           "supervisor": "corral.supervisor", "worker": "corral.worker", "sim": "corral.sim",
           "dashboard": "corral.dashboard"}


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed_in_pyproject() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    data_only = {"corral.dashboard.static"}  # files, no code: listed so setuptools ships it
    assert found | data_only == listed


# -- layering --------------------------------------------------------------------------------

IMPURE_MODULES = {"zmq", "socket", "threading", "asyncio", "subprocess", "multiprocessing",
                  "selectors", "signal", "os", "pathlib", "shutil", "tempfile", "io"}
CLOCK_CALLS = {"time", "monotonic", "sleep", "perf_counter", "time_ns", "monotonic_ns"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((node.lineno, base))
    return found


def _py_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_common_is_pure() -> None:
    problems = []
    for path in _py_files("common"):
        for line, name in _imports(path):
            top = name.lstrip(".").split(".")[0]
            if top in IMPURE_MODULES or name.startswith(("corral.supervisor", "corral.worker")):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
            if name.lstrip(".").startswith(("supervisor", "worker")) and name.startswith(".."):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in CLOCK_CALLS
                    and isinstance(node.value, ast.Name) and node.value.id == "time"):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} reads the clock")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "random" and node.attr != "Random"):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} uses global random")
    assert problems == []


@pytest.mark.parametrize(("a", "b"), [
    ("supervisor", "worker"), ("worker", "supervisor"),
    ("client", "supervisor"), ("client", "worker"),
    ("cli", "supervisor"), ("cli", "worker"), ("cli", "client"),
    # sim/ (click, files, exits) sits outside the pure core: corral.common, and corral.cli's
    # plumbing for its command line, only.
    ("sim", "supervisor"), ("sim", "worker"), ("sim", "client"),
    # the dashboard may import corral.common, corral.client and corral.cli's plumbing only
    ("dashboard", "supervisor"), ("dashboard", "worker"),
])
def test_layers_import_only_what_they_may(a: str, b: str) -> None:
    problems = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in _py_files(a)
        for line, name in _imports(p)
        if name.split(".")[:2] == ["corral", b] or name == b
        or (name.startswith("..") and name.lstrip(".").split(".")[0] == b)
    ]
    assert problems == []


# What the pure core may not do, by name: files, exits, processes, signals, clocks, sockets,
# threads. (Imports of such modules are checked above; these are the calls.)
FORBIDDEN_CALLS = {"open", "print", "input", "exit", "quit", "breakpoint"}
FORBIDDEN_ATTRS = {("sys", "exit"), ("os", "system"), ("os", "kill"), ("os", "fork"),
                   ("os", "_exit"), ("os", "popen"), ("os", "getenv"), ("os", "environ"),
                   ("datetime", "now"), ("datetime", "utcnow"), ("date", "today"),
                   ("Path", "read_text"), ("Path", "write_text")}
IMPURE_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes"}


def test_common_does_no_io_by_ast() -> None:
    problems = []
    for path in _py_files("common"):
        tree = ast.parse(path.read_text())
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in FORBIDDEN_CALLS:
                problems.append(f"{where}:{node.lineno} calls {node.func.id}()")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and (node.value.id, node.attr) in FORBIDDEN_ATTRS:
                problems.append(f"{where}:{node.lineno} uses {node.value.id}.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr in IMPURE_METHODS:
                problems.append(f"{where}:{node.lineno} calls .{node.attr}()")
    assert problems == []


def test_every_module_with_doctests_runs_them() -> None:
    """A docstring example that no test runs rots: every module of ours whose docstrings hold
    one must be collected by the doctest runner below."""
    import doctest
    import importlib
    import warnings

    finder = doctest.DocTestFinder()
    failures = []
    for folder, package in FOLDERS.items():
        for path in _py_files(folder):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join([package, *[p for p in rel.parts if p != "__init__"]])
            with warnings.catch_warnings():  # a deprecated alias warns when imported
                warnings.simplefilter("ignore", DeprecationWarning)
                module = importlib.import_module(name)
            for test in finder.find(module):
                if test.examples:
                    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(
                        test, out=lambda s: None)
                    if result.failed:
                        failures.append(f"{test.name}: {result.failed} failed")
    assert failures == []


# Where a module's top-level import name and its distribution's name differ.
DISTRIBUTIONS = {"zmq": "pyzmq"}


def _module_level_imports(path: Path) -> set[str]:
    """The top-level names a module imports when it is loaded (not inside functions: those
    are the optional extras' lazy imports, e.g. etcd3gw for --ha, matplotlib for --plot)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_a_plain_install_has_every_module_level_import() -> None:
    """`pip install corral` then any command works: every third-party module a corral module
    imports on load is a dependency, not an extra (corral-dashboard needed aiohttp, an extra,
    and ended in ModuleNotFoundError — issue 32)."""
    deps = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower().replace("_", "-")
            for d in _pyproject()["project"]["dependencies"]}
    stdlib = set(sys.stdlib_module_names)
    missing = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for name in _module_level_imports(path) - stdlib - {"corral", "__future__"}:
                dist = DISTRIBUTIONS.get(name, name).lower().replace("_", "-")
                if dist not in deps:
                    missing[name] = str(path.relative_to(ROOT))
    assert missing == {}, f"imported on load, but not a dependency: {missing}"

