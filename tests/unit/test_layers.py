"""The package's shape, over its import graph: common/'s subpackages stand alone, placement is
reached through its facade only, the client library needs no command-line plumbing, and no
two modules of ours import each other, directly or around a circle (deferred imports inside
functions count: they hide a cycle, they do not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("common", "cli", "client", "supervisor", "worker", "sim", "dashboard")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "corral." + ".".join(parts)


MODULES = {_module(p): p for f in FOLDERS for p in (ROOT / f).rglob("*.py")}
PACKAGES = {m for m, p in MODULES.items() if p.name == "__init__.py"}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of ours an import statement loads (absolute names)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = module if module in PACKAGES else module.rsplit(".", 1)[0]
            up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
            base = ".".join(up + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                 for a in node.names]
    out = []
    for name in names:
        while name and name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES:
            out.append(name)
    return out


def _edges(include_type_checking: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        found: set[str] = set()

        def visit(node: ast.AST) -> None:
            if (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                    and not include_type_checking):
                for child in node.orelse:
                    visit(child)
                return
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(module, node))  # noqa: B023 (used at once)
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(ast.parse(path.read_text(), str(path)))
        # A package's own __init__ importing its modules is not a dependency of theirs.
        graph[module] = {t for t in found if t != module
                         and not (module in PACKAGES and t.startswith(module + "."))}
    return graph


def test_each_common_subpackage_imports_only_itself_and_errors() -> None:
    problems = []
    for module, targets in _edges(include_type_checking=True).items():
        if not module.startswith("corral.common."):
            continue
        own = ".".join(module.split(".")[:3])  # corral.common.<sub> (or a top-level module)
        for t in targets:
            if t == "corral.common.errors" or t == own or t.startswith(own + "."):
                continue
            problems.append(f"{module} imports {t}")
    assert problems == []


def test_placement_is_reached_through_its_facade_only() -> None:
    problems = [f"{m} imports {t}" for m, targets in _edges(True).items()
                if not m.startswith("corral.common.placement")
                for t in targets if t.startswith("corral.common.placement.")]
    assert problems == []


def test_the_client_library_needs_no_command_line_plumbing() -> None:
    problems = [f"{m} imports {t}" for m, targets in _edges(True).items()
                if m.startswith("corral.client") and m != "corral.client.ctl"
                for t in targets if t == "corral.cli" or t.startswith("corral.cli.")]
    assert problems == []


def test_no_import_cycles() -> None:
    graph = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan, iterative enough for our depth
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
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
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    assert cycles == []


# -- the supervisor's and the worker's state machines -----------------------------------------

STATE_MACHINES = [
    *(f"supervisor/{n}.py" for n in (
        "assigner", "changes", "core", "counters", "dispatch", "effects", "events", "failures",
        "feed", "handoffs", "hearing", "intake", "leadrule", "lifecycle", "queries",
        "rebalancing", "rebuild", "reconciler", "records", "registry", "role", "taskbook",
        "verbs", "views")),
    *(str(p.relative_to(ROOT)) for n in ("state", "events", "assembly", "sets")
      for p in [ROOT / "worker" / f"{n}.py"] if p.exists()),
]
NO_IO = {"threading", "socket", "zmq", "time", "asyncio", "subprocess", "selectors"}


def test_state_machine_modules_do_no_io_and_know_nothing_of_ha() -> None:
    """The daemons are thin loops around pure `handle(event, now) -> actions` machines: these
    modules import no threads, sockets or clocks, and nothing of the etcd election."""
    problems = []
    for rel in STATE_MACHINES:
        path = ROOT / rel
        module = _module(path)
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                names = []
            problems += [f"{rel}:{node.lineno} imports {n}" for n in names
                         if n.split(".")[0] in NO_IO]
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                problems += [f"{rel}:{node.lineno} imports {t}" for t in _targets(module, node)
                             if t == "corral.supervisor.ha"]
    assert problems == []


def _written(targets: list[ast.expr]) -> list[ast.Attribute]:
    """The attributes an assignment writes (``a.b = …``, ``a.b, c.d = …``), not those its
    subscripts or values only read."""
    out: list[ast.Attribute] = []
    for t in targets:
        if isinstance(t, ast.Attribute):
            out.append(t)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out += _written(list(t.elts))
        elif isinstance(t, ast.Starred):
            out += _written([t.value])
    return out


def test_each_worker_record_field_is_written_by_its_owner_only() -> None:
    from corral.supervisor.records import OWNERS

    owner_of = {f: part for part, fields in OWNERS.items() for f in fields}
    problems = []
    for path in sorted((ROOT / "supervisor").glob("*.py")):
        if path.name == "records.py":  # the first values
            continue
        part = path.stem
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for sub in _written(targets):
                if (sub.attr in owner_of and owner_of[sub.attr] != part
                        and not (isinstance(sub.value, ast.Name) and sub.value.id == "self")):
                    problems.append(f"supervisor/{path.name}:{sub.lineno} writes {sub.attr} "
                                    f"(owned by {owner_of[sub.attr]})")
    assert problems == []


def test_every_record_field_has_one_owner() -> None:
    from corral.supervisor.records import OWNERS, WorkerRecord

    fields = [f for fs in OWNERS.values() for f in fs]
    assert len(fields) == len(set(fields))
    assert set(fields) == set(WorkerRecord.__slots__)
    assert set(OWNERS) <= {p.stem for p in (ROOT / "supervisor").glob("*.py")}
