"""Every subpackage exports its public names (lazily), and each name in `__all__` resolves."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "dspy_hero",
    "dspy_hero.execution",
    "dspy_hero.metrics",
    "dspy_hero.optimizer",
    "dspy_hero.refine",
    "dspy_hero.tasks",
    "dspy_hero.lm",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_to_the_object_itself(package):
    module = importlib.import_module(package)
    assert module.__all__, f"{package} exports nothing"
    assert module.__all__ == sorted(set(module.__all__))
    for name in module.__all__:
        value = getattr(module, name)
        # A name shadowed by a same-named submodule would resolve to the module, not the function.
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018


def test_the_names_a_user_types_import():
    from dspy_hero.execution import FalkorDBExecutor, Neo4jExecutor, PythonSandbox, SQLiteExecutor
    from dspy_hero.lm import ProgramAdapter, local_lm, scripted_lm
    from dspy_hero.metrics import cypher_execution_metric, infer_metric, r_ves, sql_execution_metric
    from dspy_hero.optimizer import HeroOptimizer, HeroResult
    from dspy_hero.refine import DemoBank, HeroRefine
    from dspy_hero.tasks import GenerateProgram, load_task

    assert SQLiteExecutor.__name__ == "SQLiteExecutor" and callable(local_lm)
    assert HeroOptimizer.__module__ == "dspy_hero.optimizer.hero"
    assert sql_execution_metric.__module__ == "dspy_hero.metrics.sql"
    for obj in (FalkorDBExecutor, Neo4jExecutor, PythonSandbox, ProgramAdapter, scripted_lm,
                cypher_execution_metric, infer_metric, r_ves, HeroResult, DemoBank, HeroRefine,
                GenerateProgram, load_task):
        assert callable(obj)


def test_top_level_names_are_the_subpackages_objects():
    import dspy_hero

    for name in dspy_hero.__all__:
        value = getattr(dspy_hero, name)
        owner = importlib.import_module(value.__module__.rsplit(".", 1)[0])
        if name in getattr(owner, "__all__", ()):
            assert getattr(owner, name) is value, name


def test_subpackage_imports_stay_lazy():
    """Importing a subpackage loads neither DSPy nor its engines until a name is used."""
    code = (
        "import sys\n"
        "import dspy_hero.metrics, dspy_hero.execution, dspy_hero.optimizer, dspy_hero.lm\n"
        "assert 'dspy' not in sys.modules, 'dspy imported eagerly'\n"
        "assert 'dspy_hero.execution.cypher' not in sys.modules\n"
        "from dspy_hero.execution import SQLiteExecutor\n"
        "assert 'dspy_hero.execution.cypher' not in sys.modules\n"
        "from dspy_hero.metrics import sql_execution_metric\n"
        "assert 'dspy' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
