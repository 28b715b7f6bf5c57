"""Build the HERO-T environment an instance needs, from its environment references alone.

Dispatch is on the environment fields of the field contract (`dspy_hero.fields.environment_kind`),
never on labels: ``db_path`` -> SQLite, ``graph`` -> Cypher, ``prompt`` / ``code_prompt`` /
``entry_point`` -> the Python sandbox. Engine modules are imported only when an
instance needs them, so SQL users never load the graph or sandbox stacks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from dspy_hero.execution.base import Environment
from dspy_hero.fields import PYTHON_TASK_FIELDS, environment_kind, get_field


def environment_key(example_or_inputs: Any) -> tuple | None:
    """A hashable key under which one environment can serve many instances (None: per instance).

    SQL and Cypher environments depend only on the database or graph; a Python environment holds the
    instance's own visible examples, so it is never shared.
    """
    kind = environment_kind(example_or_inputs)
    if kind == "sql":
        return ("sql", str(get_field(example_or_inputs, "db_path")))
    if kind == "cypher":
        return ("cypher", str(get_field(example_or_inputs, "graph")), str(get_field(example_or_inputs, "graph_source") or ""))
    return None


def environment_for(example_or_inputs: Any, **options: Any) -> Environment:
    """The environment for one instance (an example, a dict of inputs, or any object with fields).

    `options` go to the environment's constructor (e.g. ``timeout_s``; for Cypher ``engine``, an
    executor to share between instances). Raises ValueError naming the fields it looked for when the
    instance has none of them.
    """
    kind = environment_kind(example_or_inputs)
    if kind == "sql":
        from dspy_hero.execution.sqlite_environment import SQLiteEnvironment

        return SQLiteEnvironment(str(get_field(example_or_inputs, "db_path")), **options)
    if kind == "cypher":
        from dspy_hero.execution.cypher_environment import CypherEnvironment

        source = get_field(example_or_inputs, "graph_source") or None
        engine = options.pop("engine", None) or get_field(example_or_inputs, "engine")
        if engine is not None:
            options["engine"] = engine
        return CypherEnvironment(graph=str(get_field(example_or_inputs, "graph")), graph_source=source, **options)
    if kind == "python":
        from dspy_hero.execution.python_environment import PythonEnvironment

        refs = {f: get_field(example_or_inputs, f) for f in PYTHON_TASK_FIELDS}
        return PythonEnvironment(**{k: v for k, v in refs.items() if v is not None}, **options)
    raise ValueError(
        "cannot build a HERO-T environment: the instance has none of db_path (SQLite), graph (Cypher) or "
        "prompt/code_prompt/entry_point (Python). Pass them as inputs, or pass environment=... to HeroRefine."
    )


class EnvironmentCache:
    """Environments keyed by database or graph, built once and reused across instances and threads.

    Why: a Cypher environment may start an embedded engine and load a graph, which costs far more
    than refining one query; SQL environments are cheap but cache their schema text. Python
    environments belong to one instance and are built per call, but share one sandbox (its isolation
    layer is probed once; it is thread-safe). The least recently used entry is dropped beyond
    `maxsize` (an environment that owns an engine stops it when collected). `options` go to every
    environment this cache builds.
    """

    def __init__(self, maxsize: int = 64, **options: Any):
        self.maxsize = maxsize
        self.options = options
        self._lock = threading.Lock()
        self._envs: OrderedDict[tuple, Environment] = OrderedDict()
        self._sandbox: Any = None

    def __call__(self, example_or_inputs: Any) -> Environment:
        key = environment_key(example_or_inputs)
        if key is None:
            options = self.options
            if environment_kind(example_or_inputs) == "python" and "sandbox" not in options:
                options = {**options, "sandbox": self._shared_sandbox()}
            return environment_for(example_or_inputs, **options)
        with self._lock:
            env = self._envs.get(key)
            if env is None:
                env = environment_for(example_or_inputs, **self.options)
                self._envs[key] = env
                while len(self._envs) > self.maxsize:
                    self._envs.popitem(last=False)
            else:
                self._envs.move_to_end(key)
            return env

    def _shared_sandbox(self) -> Any:
        with self._lock:
            if self._sandbox is None:
                from dspy_hero.execution.python import PythonSandbox

                timeout = self.options.get("timeout_s")
                self._sandbox = PythonSandbox(timeout_s=timeout) if timeout else PythonSandbox()
            return self._sandbox

    def __len__(self) -> int:
        return len(self._envs)

    def clear(self) -> None:
        with self._lock:
            self._envs.clear()

    def __deepcopy__(self, memo: dict) -> EnvironmentCache:
        return self  # live resources are shared, never copied

    def __getstate__(self) -> dict:
        return {"maxsize": self.maxsize, "options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["maxsize"], **state["options"])
