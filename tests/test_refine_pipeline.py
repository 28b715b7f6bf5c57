"""HeroRefine inside the evaluation path: built-in SQL task, a demo bank verified on its real databases,
threaded evaluation and the task's execution metric (scripted LMs)."""

from __future__ import annotations

import re

import pytest
from refine_scripts import RoleScript

from dspy_hero.refine.module import HeroRefine

pytest.importorskip("dspy_hero.tasks.builtin.sql_tasks", reason="builtin SQL task missing")

from dspy_hero.tasks.evaluate import evaluate_program
from dspy_hero.tasks.registry import load_task


def test_refined_program_is_scored_by_the_task_metric_in_threads():
    task = load_task("builtin-sql")
    # Environment references must reach HeroRefine as inputs (the metrics.base convention).
    test = [ex.with_inputs("question", "db_schema", "db_path") for ex in task.test[:6]]
    gold_by_question = {ex.question: ex.gold_sql for ex in task.test}  # the *script* plays a perfect reviser

    def revise(req):
        question = re.search(r"question: (.*)", req.inputs["task"]).group(1).strip()
        return {"reason": "[0] the table does not exist; [1] the schema lists the real tables",
                "revised_program": gold_by_question[question]}

    script = RoleScript(
        generator={"sql": "SELECT * FROM no_such_table"},
        refiner=[{"action": "probe", "argument": "schema"}, {"action": "revise", "argument": "use real tables"}],
        reviser=revise,
        judge={"reason": "the error and the schema support it", "supported": True},
    )
    refiner = HeroRefine(task.make_program(), demos=task.train, budget=3)
    assert len(refiner.demo_bank) == len(task.train)  # every builtin gold query executes
    lm = script.lm()
    seed = evaluate_program(task.make_program(), test, task.metric, lm=lm, num_threads=2)
    refined = evaluate_program(refiner, test, task.metric, lm=lm, num_threads=2)
    assert seed.pass_at_1 == 0.0
    assert [o.error for o in refined.outcomes] == [None] * len(test)
    # a revision is only accepted if it executes cleanly; the metric then agrees with the gold
    assert [o.score for o in refined.outcomes] == [1.0] * len(test)
    usage = refiner.usage.snapshot()
    assert usage["queries"] == len(test) and usage["env_actions_per_query"] <= 3.0
    assert usage["lm_calls"] == refined.lm_calls  # the module's own count matches the LM's history
    by_role = usage["lm_calls_by_role"]
    assert sum(by_role.values()) == usage["lm_calls"] and {"generator", "refiner", "reviser"} <= set(by_role)
    assert set(usage["lm_seconds_by_role"]) == set(by_role) and min(usage["lm_seconds_by_role"].values()) >= 0
    task.close()
