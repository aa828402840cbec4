"""The floors of the house: an import never points up.

dialects -> passes -> frontends -> lowering -> runtime -> tuning, synthesis -> planner -> frameworks
-> tools (bottom to top).
Every ``distir.X`` import in the package, lazy ones inside functions included, must name
a module on the importer's floor or below. The one allowed exception is xDSL's own
pattern: an op's canonicalization trait imports its patterns lazily from
``passes/canonicalize.py``.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {
    "dialects": 0,
    "passes": 1,
    "frontends": 2,
    "lowering": 3,
    "runtime": 4,
    "tuning": 5,
    "synthesis": 5,
    "planner": 6,
    "frameworks": 7,
    "tools": 8,
}
ALLOWED = {("dialects/dist.py", "distir.passes.canonicalize")}


def distir_imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("distir."):
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("distir.")]
    return out


def floor_of(module: str) -> int | None:
    return FLOORS.get(module.split(".")[1])


def test_no_import_points_up():
    upward = []
    for folder, level in FLOORS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for line, module in distir_imports(path):
                target = floor_of(module)
                if target is not None and target > level and (rel, module) not in ALLOWED:
                    upward.append(f"{rel}:{line} imports {module}")
    assert not upward, "imports pointing up a floor:\n" + "\n".join(upward)


def test_the_checker_sees_lazy_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from distir.tools.run import main\n    import distir.runtime.local\n")
    assert [m for _, m in distir_imports(probe)] == ["distir.tools.run", "distir.runtime.local"]
    assert floor_of("distir.tools.run") > floor_of("distir.dialects.dist")


# The cost model predicts from the IR alone: it and every module it uses (lazy imports
# included) import nothing from runtime/. The tuner's timing, checking and calibration
# modules run programs and may; the cost model does not import them.
PREDICTS = "distir.tuning.cost_model"


def module_path(module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for path in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if path.exists():
            return path
    return None


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``distir_imports`` plus the submodules named by ``from distir.pkg import mod``."""
    out = distir_imports(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("distir."):
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if module_path(f"{node.module}.{a.name}")]
    return out


def uses(root: str) -> dict[str, tuple[str, int]]:
    """Every distir module ``root`` uses, directly or through others: module -> (the
    module importing it first, line)."""
    seen: dict[str, tuple[str, int]] = {root: ("", 0)}
    work = [root]
    while work:
        module = work.pop()
        path = module_path(module)
        if path is None:
            continue
        for line, name in imported_modules(path):
            if name not in seen:
                seen[name] = (module, line)
                work.append(name)
    return seen


def test_the_cost_model_imports_nothing_from_the_runtime():
    reached = uses(PREDICTS)
    runtime = [f"{m} (imported by {by}:{line})" for m, (by, line) in sorted(reached.items()) if floor_of(m) == FLOORS["runtime"]]
    assert not runtime, "the cost model reaches runtime/:\n" + "\n".join(runtime)
    assert "distir.tuning.sizes" in reached and "distir.lowering.plan_execution" in reached  # the checker follows lazy imports


def test_the_runtime_has_no_planning_function():
    """The runtime executes what the program says: no ``plan_*`` choosing among
    strategies (``plan-execution`` decides, ``docs/planning.md``)."""
    found = []
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower().lstrip("_").startswith("plan"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not found, "planning in the runtime:\n" + "\n".join(found)


def test_the_runtime_imports_form_a_tree():
    """Inside runtime/ imports, lazy ones included, have no cycle: the shared pieces at
    the bottom (values, buffers, comm, streams, bulk, scattered, tiles), the devices and
    the executor above them, the backends above those, the registry (backend.py) on top."""
    runtime = ROOT / "runtime"
    edges: dict[str, set[str]] = {}
    for path in sorted(runtime.glob("*.py")):
        name = f"distir.runtime.{path.stem}"
        edges[name] = {m for _, m in imported_modules(path) if m.startswith("distir.runtime.") and m != name}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def cycle_from(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state:
                found = cycle_from(n)
                if found:
                    return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(edges):
        if m not in state:
            found = cycle_from(m)
            assert found is None, "an import cycle in runtime/: " + " -> ".join(found)
