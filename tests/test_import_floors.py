"""The house's floors, read from the code: every import of every module under dspy_hero/ (parsed with
`ast`, nothing imported) must point down.

- execution/ imports only execution/ and the floor-0 utilities;
- lm/ imports neither tasks/ nor metrics/;
- the floor-0 utilities import only each other;
- production code never imports the scripted test LMs (dspy_hero.lm.scripted), except the listed
  simulation modules whose job is to script an LM;
- no import cycle among dspy_hero modules (function-level imports count: a cycle hidden in a
  function is still a cycle; the lazy-export maps of __init__ files are strings, not imports);
- no module writes os.environ when it is imported, except the listed documented places;
- no module keeps mutable state at module level (a container it mutates, a lock, a `global`), except
  the listed ones, each with its reason.

Each rule is checked on the real tree and, so the checker itself can fail, on a small synthetic tree
that breaks it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "dspy_hero"

# Floor 0: small utilities every floor may import (DESIGN.md, "Floors"). fields.py holds the
# example-field contract (issue 15 item 3) and belongs here when it exists.
BOTTOM = frozenset({"dspy_hero.text", "dspy_hero.files", "dspy_hero.lazy", "dspy_hero.net", "dspy_hero.fields"})

# Modules that may import dspy_hero.lm.scripted, each with its reason. Any other importer fails.
SCRIPTED = "dspy_hero.lm.scripted"
SCRIPTED_IMPORTERS = {
    "dspy_hero.bench.simulate": "the simulated SQL/Cypher/Python worlds of `--lm simulated`: scripting the LM is its job",
    "dspy_hero.bench.conventions_world": "the simulated conventions world of `--lm simulated`: scripting the LM is its job",
}

# Modules that write os.environ at import, each with its reason. Any other one fails.
IMPORT_TIME_ENV_WRITERS = {
    "dspy_hero": "LITELLM_LOCAL_MODEL_COST_MAP must be set before litellm is first imported (through dspy), "
    "or litellm fetches its cost map from the network; the package's __init__ runs before any of its modules",
}


# Module-level mutable state, each with its reason. Any other one fails.
MODULE_STATE = {
    ("dspy_hero.tasks.registry", "_LOADERS"): "the task registry: register_task adds a user's loader process-wide by design",
    ("dspy_hero.tasks.builtin.cypher_data", "_LOCK"): "serializes building the built-in graph files, one set per process "
    "and cache directory",
    ("dspy_hero.tasks.builtin.sql_data", "_BUILD_LOCK"): "serializes building the built-in databases, one file per process "
    "and cache directory",
}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def read_modules(root: Path, package: str = PACKAGE) -> dict[str, Module]:
    """Every module of `package` under `root`, by dotted name, parsed but not imported."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return modules


def imports_of(module: Module, known: set[str] | dict, package: str = PACKAGE) -> set[str]:
    """The package modules `module` imports anywhere in its code. ``from a.b import c`` names the
    module a.b.c when that is a module, else a.b."""
    found: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name == package or name.startswith(package + ".")}


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    return {name: imports_of(module, modules) - {name} for name, module in modules.items()}


def under(name: str, folder: str) -> bool:
    return name == folder or name.startswith(folder + ".")


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that run up a floor, as 'importer -> imported: rule'."""
    bad = []
    for importer, imported in sorted(graph.items()):
        for target in sorted(imported):
            if under(importer, "dspy_hero.execution") and not (under(target, "dspy_hero.execution") or target in BOTTOM):
                bad.append(f"{importer} -> {target}: execution/ imports only execution/ and floor 0")
            if under(importer, "dspy_hero.lm") and (under(target, "dspy_hero.tasks") or under(target, "dspy_hero.metrics")):
                bad.append(f"{importer} -> {target}: lm/ imports neither tasks/ nor metrics/")
            if importer in BOTTOM and target not in BOTTOM:
                bad.append(f"{importer} -> {target}: floor 0 imports only floor 0")
    return bad


def scripted_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{importer} imports {SCRIPTED}: production code never imports the scripted test LMs"
        for importer, imported in graph.items()
        if SCRIPTED in imported and importer != SCRIPTED and importer not in SCRIPTED_IMPORTERS
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"


def writes_environ_at_import(module: Module) -> bool:
    """Whether a statement that runs at import (outside every def and class) writes os.environ."""

    def walk(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            yield node
            yield from walk(ast.iter_child_nodes(node))

    for node in walk(module.tree.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if _is_environ(func.value) and func.attr in {"setdefault", "update", "pop", "clear"}:
                return True
            if isinstance(func.value, ast.Name) and func.value.id == "os" and func.attr in {"putenv", "unsetenv"}:
                return True
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets):
                return True
    return False


_MUTATORS = frozenset({"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert",
                       "remove", "discard", "move_to_end", "appendleft"})
_CONTAINERS = frozenset({"dict", "list", "set", "OrderedDict", "defaultdict", "Counter", "deque",
                         "WeakValueDictionary", "WeakKeyDictionary", "WeakSet"})
_SYNC = frozenset({"Lock", "RLock", "Event", "Condition", "Semaphore", "local"})


def module_state(module: Module) -> list[str]:
    """Names bound at module level to mutable state: a container the module mutates (a method such as
    .append, or item assignment), a lock or thread-local, or any name rebound through `global`."""
    bound: dict[str, str] = {}
    for node in module.tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        value, kind = node.value, None
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
            kind = "container"
        elif isinstance(value, ast.Call):
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            kind = "container" if name in _CONTAINERS else "sync" if name in _SYNC else None
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if kind and isinstance(target, ast.Name):
                bound[target.id] = kind
    found = {name for name, kind in bound.items() if kind == "sync"}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Global):
            found.update(node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
              and isinstance(node.func.value, ast.Name) and bound.get(node.func.value.id) == "container"):
            found.add(node.func.value.id)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            found.update(t.value.id for t in targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                         and bound.get(t.value.id) == "container")
    return sorted(found)


# --- the real tree ---------------------------------------------------------------------------------

MODULES = read_modules(ROOT)
GRAPH = import_graph(MODULES)


def test_the_tree_is_read():
    assert "dspy_hero.execution.sqlite" in GRAPH and "dspy_hero.metrics.base" in GRAPH
    assert "dspy_hero.execution.base" in GRAPH["dspy_hero.execution.sqlite"]
    assert "dspy_hero.text" in GRAPH["dspy_hero.execution.sqlite_environment"]
    # the field contract is floor 0: environments dispatch on it, metrics and HERO-T read through it
    assert GRAPH["dspy_hero.fields"] == set()
    for user in ("dspy_hero.execution.environments", "dspy_hero.metrics.base", "dspy_hero.refine.fields",
                 "dspy_hero.optimizer.evidence", "dspy_hero.diagnosis"):
        assert "dspy_hero.fields" in GRAPH[user], user
    # the sandbox's parts import down to its executor's floor, never up to the executor
    for part in ("sandbox_layers", "sandbox_command", "sandbox_process"):
        assert "dspy_hero.execution.python" not in GRAPH[f"dspy_hero.execution.{part}"]
        assert f"dspy_hero.execution.{part}" in GRAPH["dspy_hero.execution.python"]


def test_imports_point_down():
    assert floor_violations(GRAPH) == []


def test_production_code_never_imports_the_scripted_lms():
    assert scripted_violations(GRAPH) == []


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_no_environment_writes_at_import_beyond_the_documented_ones():
    writers = sorted(name for name, module in MODULES.items() if writes_environ_at_import(module))
    assert [w for w in writers if w not in IMPORT_TIME_ENV_WRITERS] == []


def test_no_module_level_mutable_state_beyond_the_listed_ones():
    state = {(name, var) for name, module in MODULES.items() for var in module_state(module)}
    assert sorted(state - set(MODULE_STATE)) == []


# --- the checker can fail ----------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        path = tmp_path / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {p.parent for p in (tmp_path / PACKAGE).rglob("*.py")} | {tmp_path / PACKAGE}:
        (folder / "__init__.py").touch()
    return read_modules(tmp_path)


def test_checker_sees_an_upward_import_even_inside_a_function(tmp_path):
    modules = _tree(tmp_path, {
        "execution/probe.py": "def f():\n    from dspy_hero.metrics.base import extract_code\n",
        "metrics/base.py": "",
        "lm/adapter.py": "from dspy_hero.tasks import hub\n",
        "tasks/hub.py": "",
        "text.py": "import dspy_hero.metrics.base\n",
        "execution/ok.py": "from dspy_hero.text import extract_code\nfrom . import probe\n",
    })
    bad = floor_violations(import_graph(modules))
    assert bad == [
        "dspy_hero.execution.probe -> dspy_hero.metrics.base: execution/ imports only execution/ and floor 0",
        "dspy_hero.lm.adapter -> dspy_hero.tasks.hub: lm/ imports neither tasks/ nor metrics/",
        "dspy_hero.text -> dspy_hero.metrics.base: floor 0 imports only floor 0",
    ]


def test_checker_sees_a_new_scripted_importer(tmp_path):
    modules = _tree(tmp_path, {
        "lm/scripted.py": "",
        "optimizer/run.py": "from dspy_hero.lm.scripted import approx_tokens\n",
        "bench/simulate.py": "from dspy_hero.lm import scripted\n",
    })
    assert scripted_violations(import_graph(modules)) == [
        "dspy_hero.optimizer.run imports dspy_hero.lm.scripted: production code never imports the scripted test LMs"
    ]


def test_checker_sees_a_cycle_through_a_lazy_function_import(tmp_path):
    modules = _tree(tmp_path, {
        "execution/cypher.py": "def __getattr__(name):\n    from dspy_hero.execution import cypher_probes\n",
        "execution/cypher_probes.py": "from dspy_hero.execution.cypher import FalkorDBExecutor\n",
        "execution/environments.py": "from dspy_hero.execution.cypher import CypherEnvironment\n",
    })
    assert cycles(import_graph(modules)) == [["dspy_hero.execution.cypher", "dspy_hero.execution.cypher_probes"]]


def test_checker_sees_an_environment_write_at_import_only(tmp_path):
    modules = _tree(tmp_path, {
        "a.py": "import os\nos.environ.setdefault('X', '1')\n",
        "b.py": "import os\nif True:\n    os.environ['X'] = '1'\n",
        "c.py": "import os\ndef f():\n    os.environ['X'] = '1'\nY = os.environ.get('X')\n",
    })
    assert sorted(n for n, m in modules.items() if writes_environ_at_import(m)) == ["dspy_hero.a", "dspy_hero.b"]


def test_checker_sees_module_level_state(tmp_path):
    modules = _tree(tmp_path, {
        "a.py": "import threading\n_WATCHDOG = threading.Lock()\n",
        "b.py": "_CACHE = {}\ndef f(k):\n    _CACHE[k] = 1\n",
        "c.py": "SEEN = []\ndef f(x):\n    SEEN.append(x)\n",
        "d.py": "N = 0\ndef f():\n    global N\n    N += 1\n",
        "e.py": "TABLE = {'a': 1}\nNAMES = ('x',)\ndef f():\n    return dict(TABLE)\n",
    })
    assert {n: module_state(m) for n, m in modules.items() if module_state(m)} == {
        "dspy_hero.a": ["_WATCHDOG"], "dspy_hero.b": ["_CACHE"], "dspy_hero.c": ["SEEN"], "dspy_hero.d": ["N"]}
