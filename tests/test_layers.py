"""The layers of hub_export point one way: no import circle between its modules (imports inside functions count),
and the rules of CONTRIBUTING.md ("Layers") hold. The import graph is read with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hub_export"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The hub_export modules ``name`` imports anywhere in its body (``if TYPE_CHECKING:`` blocks excepted)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for child in node.body for inner in ast.walk(child)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        found |= {t for t in targets if t in modules and t != name and t != "hub_export"}
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items() if name != "hub_export"}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert _circles(graph) == []


def test_the_hub_client_never_imports_the_model(graph: dict[str, set[str]]) -> None:
    offenders = {m: sorted(i) for m, i in graph.items() if m.startswith("hub_export.hub.") and "hub_export.model" in i}
    assert offenders == {}


def test_in_memory_objects_do_not_import_loaders(graph: dict[str, set[str]]) -> None:
    assert "hub_export.loading" not in graph["hub_export.component"]
    assert not any(m.startswith("hub_export.hub") for m in graph["hub_export.component"])


def test_the_embedded_hub_imports_nothing_of_hub_export_but_the_errors(graph: dict[str, set[str]]) -> None:
    server = {m: i for m, i in graph.items() if m.startswith("hub_export.embedded_hub")}
    outside = {m: sorted(i - set(server) - {"hub_export.errors"}) for m, i in server.items()}
    assert {m: i for m, i in outside.items() if i} == {}


def test_only_the_facade_and_a_backend_itself_import_a_backend(graph: dict[str, set[str]]) -> None:
    """Nothing outside ``hub_export/backends/<format>/`` names a format: the registry finds the backends."""
    offenders = {}
    for module, imported in graph.items():
        own = module.split(".")[2] if module.startswith("hub_export.backends.") else None
        foreign = sorted(m for m in imported if m.startswith("hub_export.backends.") and m.split(".")[2] != own)
        if foreign:
            offenders[module] = foreign
    assert offenders == {}


def test_lower_layers_do_not_import_higher_ones(graph: dict[str, set[str]]) -> None:
    """The core (errors, formats, dims, structure, signature, manifest, configs) imports no pipeline, runtime or Hub
    module."""
    core = {
        "hub_export.errors",
        "hub_export.formats",
        "hub_export.dims",
        "hub_export.structure",
        "hub_export.signature",
        "hub_export.manifest",
        "hub_export.configs",
        "hub_export.preprocessing",
        "hub_export._allowlist",
        "hub_export._bounded",
        "hub_export._cache",
        "hub_export._files",
        "hub_export._pickle",
        "hub_export._versions",
        "hub_export._progress",
        "hub_export._quiet",
    }
    offenders = {m: sorted(graph[m] - core) for m in core if graph[m] - core}
    assert offenders == {}
