"""Layers point one way: the import graph of trm/, read with `ast` (nothing is imported).

Every `import` counts, at module level and inside functions (a function-level import is a dependency
that is only deferred); imports under `if TYPE_CHECKING:` do not (they never run). Nodes are modules;
a subpackage is `trm.<name>` with everything below it, and a top-level module (`trm.errors`,
`trm.distributed`, …) is a node of its own.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

from trm.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trm"


def module_files() -> dict[str, Path]:
    """`trm.launch.planning.plan` -> its file, for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement below `node`, skipping the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _import_nodes(ast.Module(body=[stmt], type_ignores=[]))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _import_nodes(child)


def _known(name: str) -> str | None:
    """The trm module `name` refers to (an attribute of a module resolves to that module)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES and name != "trm" else None


def imports_of(module: str) -> set[str]:
    """The trm modules that `module` imports."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        found.update(target for name in names if (target := _known(name)) and target != module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def unit(module: str) -> str:
    """`trm.launch.planning.plan` -> `trm.launch`; `trm.errors` -> `trm.errors`."""
    return ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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


def _edges_between(component: list[str], graph: dict[str, set[str]], by_unit: bool) -> list[str]:
    members = set(component)
    return sorted(
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if (unit(a) if by_unit else a) in members
        and (unit(b) if by_unit else b) in members
        and (unit(a) != unit(b) if by_unit else True)
    )


def test_the_graph_sees_module_and_function_level_imports():
    assert "trm.launch.planning.settings" in GRAPH["trm.launch.planning.plan"]  # module level
    assert "trm.evaluation.arc" in GRAPH["trm.training.builder"]  # inside a function
    assert "trm.launch.running.runner" in GRAPH["trm.commands.launch"]  # inside a function of a command


def test_no_library_module_imports_the_command_line():
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if not (module == "trm.__main__" or unit(module) == "trm.commands")
        for target in targets
        if unit(target) == "trm.commands"
    )
    assert offenders == [], "trm.commands is argv -> library calls; nothing may import it:\n" + "\n".join(
        offenders
    )


def test_no_cycle_among_subpackages():
    units: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        units[unit(module)].update(unit(t) for t in targets if unit(t) != unit(module))
    found = cycles(units)
    details = "\n\n".join(
        " <-> ".join(c) + ":\n  " + "\n  ".join(_edges_between(c, units, True)) for c in found
    )
    assert found == [], f"import cycles between subpackages:\n{details}"


def test_no_cycle_among_modules():
    found = cycles(GRAPH)
    details = "\n\n".join("\n  ".join(_edges_between(c, GRAPH, False)) for c in found)
    assert found == [], f"import cycles between modules:\n  {details}"


def wheel_exclusions() -> list[str]:
    """The package patterns pyproject.toml keeps out of the wheel (repository tooling)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["setuptools"]["packages"]["find"]["exclude"]


def test_the_wheel_imports_nothing_it_leaves_out():
    excluded = wheel_exclusions()
    assert "trm.ops" in excluded and "trm.bench" in excluded

    def left_out(module: str) -> str | None:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        return next((p for p in excluded if fnmatch(package, p)), None)

    needs = {c.module: c.needs for c in COMMANDS}
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if left_out(module) is None
        for target in targets
        if left_out(target) is not None and needs.get(module) != unit(target)
    )
    assert offenders == [], (
        "modules in the wheel import repository tooling that pyproject.toml leaves out (a command may, "
        "when its `needs=` in trm.commands.COMMANDS names the package):\n" + "\n".join(offenders)
    )
