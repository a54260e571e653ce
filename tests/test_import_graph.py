"""No import cycles in ``src/gpufleet``: the module graph, read from the source, is acyclic.

Every import counts, including those deferred into functions (a deferred import hides a cycle
from Python, not from the design), except under ``if TYPE_CHECKING:``. Package ``__init__``
modules are nodes too: ``from gpufleet.placement import get_policy`` depends on
``gpufleet/placement/__init__.py``, and ``from gpufleet.market.deadline import mdp`` on the
``mdp`` module. Importing a submodule runs its parents' ``__init__`` first, which Python orders
by itself; that implicit step is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpufleet

SRC = Path(gpufleet.__file__).resolve().parent.parent


def _modules(pkg: str = "gpufleet") -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / pkg).rglob("*.py")):
        parts = p.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip |= {id(x) for x in ast.walk(n)}
    return skip


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module → modules of the package it imports."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        is_pkg = path.name == "__init__.py"
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            targets: list[str] = []
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                if n.level:
                    base_parts = mod.split(".")
                    drop = n.level - 1 if is_pkg else n.level
                    base_parts = base_parts[: len(base_parts) - drop]
                    base = ".".join(base_parts + ([n.module] if n.module else []))
                else:
                    base = n.module or ""
                for a in n.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else base)
            for t in targets:
                if t in mods and t != mod:
                    edges[mod].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle_in_gpufleet() -> None:
    mods = _modules()
    edges = import_graph(mods)
    assert sum(map(len, edges.values())) > len(mods)  # the graph was read, not empty
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_feature_clis_do_not_import_the_entry_point() -> None:
    edges = import_graph(_modules())
    back = sorted(m for m, deps in edges.items() if "gpufleet.cli" in deps and m.endswith(".cli"))
    assert "gpufleet.sim.cli" in edges and edges["gpufleet.cli"] >= {"gpufleet.sim.cli"}
    assert back == [], back


# Layer rules (../shared/DESIGN.md): the policy core reads no driver, and the live side (the
# Kubernetes driver and the cloud providers) never reaches into the simulator. Every rule that both
# drivers apply lives below them, so a driver importing the other driver means a rule was copied.
POLICY_CORE = ("control", "placement", "queueing", "provisioning", "market", "recovery")
DRIVERS = ("sim", "k8s", "cloud")
FORBIDDEN = [(core, driver) for core in POLICY_CORE for driver in DRIVERS] + [
    ("k8s", "sim"),
    ("cloud", "sim"),
]


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """``importer → imported`` for every edge that crosses a forbidden layer boundary."""
    bad = set(FORBIDDEN)
    return sorted(
        f"{m} → {t}"
        for m, deps in edges.items()
        for t in deps
        if (_package(m), _package(t)) in bad
    )


def test_layers_policy_core_imports_no_driver_and_live_side_no_simulator() -> None:
    found = layer_violations(import_graph(_modules()))
    assert not found, "layer violations:\n" + "\n".join(found)


def test_the_layer_check_finds_a_violation() -> None:
    edges = {
        "gpufleet.control.cycle": {"gpufleet.sim.jobs", "gpufleet.state"},
        "gpufleet.k8s.schedule.cycle": {"gpufleet.control.cycle", "gpufleet.config"},
        "gpufleet.cloud.kwok": {"gpufleet.sim.spot"},
        "gpufleet.sim.jobs": {"gpufleet.k8s.names"},  # the simulator may not, but no rule here
    }
    assert layer_violations(edges) == [
        "gpufleet.cloud.kwok → gpufleet.sim.spot",
        "gpufleet.control.cycle → gpufleet.sim.jobs",
    ]
