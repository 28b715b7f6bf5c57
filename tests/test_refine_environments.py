"""environment_for dispatches on environment references only, and EnvironmentCache reuses by key."""

from __future__ import annotations

import sqlite3

import dspy
import pytest

from dspy_hero.execution.base import Environment
from dspy_hero.execution.environments import (
    EnvironmentCache,
    environment_for,
    environment_key,
    environment_kind,
)


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()
    return str(path)


def test_sql_dispatch_from_dict_example_and_object(db):
    class Obj:
        db_path = db

    for source in ({"db_path": db, "question": "q"}, dspy.Example(db_path=db, gold_sql="x"), Obj()):
        env = environment_for(source)
        assert isinstance(env, Environment) and env.language == "sql"
        assert env.execute("SELECT a FROM t").rows == ((1,),)
    assert environment_key({"db_path": db}) == ("sql", db)


def test_python_dispatch_and_no_sharing():
    pytest.importorskip("dspy_hero.execution.python_environment", reason="dspy_hero.execution.python_environment missing")
    refs = {"prompt": "def f(x):\n    '''\n    >>> f(1)\n    2\n    '''\n", "entry_point": "f"}
    env = environment_for(refs)
    assert env.language == "python" and env.entry_point == "f"
    assert environment_kind(refs) == "python" and environment_key(refs) is None


def test_missing_references_fail_clearly_and_options_reach_the_constructor(db):
    with pytest.raises(ValueError, match="db_path"):
        environment_for({"question": "q"})
    with pytest.raises(TypeError):
        environment_for({"db_path": db}, no_such_option=1)


def test_cache_reuses_by_database(db, tmp_path):
    other = tmp_path / "u.sqlite"
    sqlite3.connect(other).close()
    cache = EnvironmentCache(maxsize=1, timeout_s=5.0)
    first = cache({"db_path": db})
    assert cache({"db_path": db, "question": "another"}) is first and len(cache) == 1
    assert cache({"db_path": str(other)}) is not first and len(cache) == 1  # LRU bound
    import copy

    assert copy.deepcopy(cache) is cache


def test_cache_shares_one_sandbox_between_python_instances():
    pytest.importorskip("dspy_hero.execution.python_environment", reason="dspy_hero.execution.python_environment missing")
    cache = EnvironmentCache()
    a = cache({"prompt": "def f(x):\n    pass\n", "entry_point": "f"})
    b = cache({"prompt": "def g(x):\n    pass\n", "entry_point": "g"})
    assert a is not b and a.sandbox is b.sandbox and len(cache) == 0
