"""Layers point one way: the import graph of trm/ and tools/, read with `ast` (nothing is imported).

Every `import` counts, at module level and inside functions (a function-level import is a dependency
that is only deferred); imports under `if TYPE_CHECKING:` do not (they never run). Nodes are modules;
a subpackage is `trm.<name>` or `tools.<name>` with everything below it, and a top-level module
(`trm.errors`, `tools.cli`, …) is a node of its own. Inside `trm.launch` and `trm.training` the same
holds one level down: each component (`trm.launch.plan`, `trm.training.checkpointing`) and each module
directly in the package (`trm.training.loop`) is a unit, and no two units import each other either.
tools/ (repository tooling, not in the wheel) may import trm/; trm/ never imports tools/.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trm", "tools")


def module_files() -> dict[str, Path]:
    """`trm.launch.plan.plan` -> its file, for every module of trm/ and tools/."""
    modules = {}
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
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
    """The trm/tools module `name` refers to (an attribute of a module resolves to that module)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES and name not in PACKAGES else None


def imports_of(module: str) -> set[str]:
    """The trm/tools modules that `module` imports."""
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


def package(module: str) -> str:
    """`trm.launch.plan.plan` -> `trm.launch`; `trm.errors` -> `trm.errors`; `tools.jobs.k8s` -> `tools.jobs`."""
    return ".".join(module.split(".")[:2])


# Packages whose components are units of their own (trm.launch's import only lower ones: LAUNCH_LAYERS).
SPLIT_PACKAGES = ("trm.launch", "trm.training")


def unit(module: str) -> str:
    """`package(module)`, one level further down inside SPLIT_PACKAGES: `trm.launch.plan.plan` ->
    `trm.launch.plan`; `trm.training.checkpointing.state` -> `trm.training.checkpointing`;
    `trm.training.loop` -> itself; `trm.errors` -> `trm.errors`; `tools.jobs.k8s` -> `tools.jobs`."""
    return ".".join(module.split(".")[: 3 if package(module) in SPLIT_PACKAGES else 2])


def is_command_line(module: str) -> bool:
    """`python -m trm` (trm.commands, trm.__main__) and each repository task's `python -m tools.<task>`."""
    parts = module.split(".")
    return (
        module == "trm.__main__"
        or package(module) == "trm.commands"
        or (parts[0] == "tools" and parts[-1] in ("cli", "__main__"))
    )


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


def _edges_between(component: list[str], group: Callable[[str], str]) -> list[str]:
    """The module imports behind a cycle among the groups (`group`: module -> its node) in `component`."""
    members = set(component)
    return sorted(
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if group(a) in members and group(b) in members and group(a) != group(b)
    )


def test_the_graph_sees_module_and_function_level_imports():
    assert "trm.launch.config.settings" in GRAPH["trm.launch.plan.plan"]  # module level
    assert "trm.evaluation.arc" in GRAPH["trm.training.builder"]  # inside a function
    assert "trm.launch.launcher.runner" in GRAPH["trm.commands.launch"]  # inside a function of a command
    assert "tools.images.imagelock" in GRAPH["tools.jobs.k8s"]  # tools/ is read too
    assert "trm.errors" in GRAPH["tools.jobs.k8s"]


def test_no_library_module_imports_the_command_line():
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if not is_command_line(module)
        for target in targets
        if package(target) == "trm.commands"
    )
    assert offenders == [], (
        "trm.commands is argv -> library calls; only a command line may import it:\n" + "\n".join(offenders)
    )


def grouped(group: Callable[[str], str]) -> dict[str, set[str]]:
    """The import graph between the groups `group` puts the modules in."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        graph[group(module)].update(group(t) for t in targets if group(t) != group(module))
    return graph


@pytest.mark.parametrize("group", [package, unit], ids=["subpackages", "units"])
def test_no_cycle_among_subpackages(group):
    found = cycles(grouped(group))
    details = "\n\n".join(" <-> ".join(c) + ":\n  " + "\n  ".join(_edges_between(c, group)) for c in found)
    assert found == [], f"import cycles between {group.__name__}s:\n{details}"


def test_the_launch_and_training_components_are_units():
    assert (
        unit("trm.launch.plan.plan") == "trm.launch.plan" and package("trm.launch.plan.plan") == "trm.launch"
    )
    assert unit("trm.training.checkpointing.state") == "trm.training.checkpointing"
    assert unit("trm.training.loop") == "trm.training.loop" and unit("tools.jobs.k8s") == "tools.jobs"


def test_no_cycle_among_modules():
    found = cycles(GRAPH)
    details = "\n\n".join("\n  ".join(_edges_between(c, lambda m: m)) for c in found)
    assert found == [], f"import cycles between modules:\n  {details}"


# trm.launch by component, lowest first: a component imports only components of lower layers.
LAUNCH_LAYERS = {
    "host": 0,  # what the machine has and whether it can train: nvidia-smi, the hardware table, preflight
    "provider": 0,  # releasing the rented machine (ON_END / ON_BUDGET)
    "storage": 0,  # copying the run to SYNC_TO
    "config": 1,  # the launch variables and settings (they name the release and the sync)
    "cost": 2,  # dataset sizes, the time and cost estimate, the MAX_HOURS budget
    "plan": 3,  # the steps and commands of a launch
    "supervision": 4,  # torchrun under supervision: ledger, smoke gate, probe, step-downs, worker
    "handoff": 5,  # the bundle after the run, TensorBoard
    "launcher": 6,  # the launch: the plan's steps in order
}


def _launch_layer(module: str) -> int | None:
    parts = module.split(".")
    return LAUNCH_LAYERS[parts[2]] if package(module) == "trm.launch" and len(parts) > 2 else None


def test_the_launch_package_is_layered():
    components = {m.split(".")[2] for m in GRAPH if m.startswith("trm.launch.")}
    assert components == set(LAUNCH_LAYERS), "give each component of trm/launch/ a layer in LAUNCH_LAYERS"
    offenders = sorted(
        f"{a} imports {b}"
        for a, targets in GRAPH.items()
        if (upper := _launch_layer(a)) is not None
        for b in targets
        if (lower := _launch_layer(b)) is not None and unit(a) != unit(b) and lower >= upper
    )
    assert offenders == [], (
        "a component of trm/launch/ imports only components of lower layers (LAUNCH_LAYERS):\n"
        + "\n".join(offenders)
    )


# trm.training.checkpointing by layer: a module imports only modules of lower layers of the package.
CHECKPOINT_LAYERS = {
    "layout": 0,  # the on-disk format: step_N/ folders, manifest, discovery, pruning
    "async_writer": 0,
    "rolling": 0,
    "state": 1,  # what the files hold, written in the layout
    "best": 1,
    "initial_weights": 1,  # the weights a run starts from: our step_N/ or a reference file
    "resume": 2,
    "checkpointer": 3,
    "": 4,  # the package's face (__init__)
}


def test_the_checkpoint_package_is_layered():
    package = "trm.training.checkpointing"
    layer = {f"{package}.{name}" if name else package: n for name, n in CHECKPOINT_LAYERS.items()}
    members = {m for m in GRAPH if m == package or m.startswith(package + ".")}
    assert members == set(layer), (
        "give each module of trm/training/checkpointing/ a layer in CHECKPOINT_LAYERS"
    )
    offenders = sorted(
        f"{a} imports {b}" for a in members for b in GRAPH[a] if b in members and layer[b] >= layer[a]
    )
    offenders += sorted(f"{a} imports {b}" for a in members for b in GRAPH[a] if b == "trm.training.loop")
    assert offenders == [], "the checkpoint package imports downwards only, never the loop:\n" + "\n".join(
        offenders
    )


def test_trm_never_imports_tools():
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.startswith("trm.")
        for target in targets
        if target.startswith("tools.") or target == "tools"
    )
    assert offenders == [], (
        "trm/ is what the wheel ships and the image runs; repository tooling (tools/) may import trm, "
        "never the other way (move the shared part into trm/):\n" + "\n".join(offenders)
    )


def test_the_wheel_ships_trm_only():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "packages"
    ]["find"]
    assert find["include"] == ["trm", "trm.*"] and "exclude" not in find


def docker_build_scripts() -> dict[str, Path]:
    """The Python files a `docker build` stage runs before trm is installed: those the Dockerfile COPYs as
    single files (e.g. trm/images/venvtools.py, shared with the host bootstrap), and any .py under docker/."""
    dockerfile = (ROOT / "docker/Dockerfile").read_text(encoding="utf-8")
    copied = re.findall(r"^COPY\s+(?!--from)(\S+\.py)\s", dockerfile, flags=re.MULTILINE)
    paths = [ROOT / p for p in copied] + sorted((ROOT / "docker").rglob("*.py"))
    return {p.stem: p for p in paths}


def _module_level_imports(tree: ast.Module) -> Iterator[tuple[str, bool]]:
    """(top-level name, has an `except ImportError` fallback) for each import run when the file loads."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Try):
            guarded = any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in stmt.handlers
            )
            for inner in stmt.body:
                for name, _ in _module_level_imports(ast.Module(body=[inner], type_ignores=[])):
                    yield name, guarded
            for handler in stmt.handlers:
                yield from _module_level_imports(ast.Module(body=handler.body, type_ignores=[]))
        elif isinstance(stmt, ast.Import):
            yield from ((alias.name.split(".")[0], False) for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module != "__future__":
            yield stmt.module.split(".")[0], False


def test_docker_build_scripts_load_with_the_standard_library_only():
    scripts = docker_build_scripts()
    assert {"venvtools", "buildtools"} <= set(scripts)  # the Dockerfile is read
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in scripts.values()
        for name, guarded in _module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
        if not (name in sys.stdlib_module_names or name in scripts or guarded)
    )
    assert offenders == [], (
        "a script a `docker build` stage runs loads before trm or any dependency is installed: standard "
        "library and its sibling scripts only at module level (defer the rest into the function that needs "
        "it, or give it an `except ImportError` fallback):\n" + "\n".join(offenders)
    )
