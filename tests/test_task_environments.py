"""A task's HERO-T environments: one per database or graph, reused across instances, and on the same
engine the task's metric judges with (real SQLite and the real embedded FalkorDB engine)."""

from __future__ import annotations

import pytest

from dspy_hero.tasks.builtin.cypher_tasks import builtin_cypher_task
from dspy_hero.tasks.builtin.sql_tasks import builtin_sql_task


def test_sql_task_reuses_one_environment_per_database(tmp_path):
    task = builtin_sql_task(directory=tmp_path / "sql")
    try:
        first, *rest = [ex for ex in task.test if ex.db_id == task.test[0].db_id]
        other = next(ex for ex in task.test if ex.db_id != first.db_id)
        env = task.environment_for(first)
        assert all(task.environment_for(ex) is env for ex in rest)
        assert task.environment_for(other) is not env
        assert env.execute(first.gold_sql).ok
    finally:
        task.close()


def test_cypher_task_environment_runs_on_the_engine_given_to_the_task(tmp_path):
    cypher = pytest.importorskip("dspy_hero.execution.falkordb_executor")
    with cypher.FalkorDBExecutor(timeout_s=30) as engine:
        task = builtin_cypher_task(directory=tmp_path / "cypher", engine=engine)
        try:
            env = task.environment_for(task.test[0])
            # the metric's engine, not a second embedded server started per instance
            assert env.executor is engine
            assert task.environment_for(task.test[1]) is env
            assert env.execute(task.test[0].gold_cypher).ok
        finally:
            task.close()
        assert engine.alive()  # the caller's engine is the caller's to stop
