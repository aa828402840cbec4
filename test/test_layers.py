"""The floors of the house: an import never points up.

dialects -> passes -> frontends -> lowering -> runtime -> tuning, synthesis -> frameworks -> tools
(bottom to top).
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
    "frameworks": 6,
    "tools": 7,
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
