"""Failing LMs during HERO-O (issue 7): rate limits are retried with backoff by DSPy's LM layer; what
still fails counts as a failed rollout against the budget and is recorded; an LM that fails on every
request stops the run early with a clear message (max_errors, issue 13), unless max_errors is raised,
when the run ends with the seed program and a clear warning."""

from __future__ import annotations

import threading

import dspy
import pytest
from dspy.lm15 import RateLimitError
from optimizer_toy import COUNT_RULE, feedback_metric, make_examples, program, reflection_lm

from dspy_hero.lm.scripted import ScriptedEngine
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.rollout import RolloutAbort


def rate_limited_task_lm(every: int, retries: int) -> tuple[dspy.LM, dict[str, int]]:
    """A task LM whose provider answers 429 to every `every`-th request (retry_after 10 ms)."""
    seen = {"requests": 0, "429": 0}
    lock = threading.Lock()

    def script(req):
        with lock:
            seen["requests"] += 1
            refuse = seen["requests"] % every == 0
            if refuse:
                seen["429"] += 1
        if refuse:
            raise RateLimitError("429 Too Many Requests", retry_after=0.01)
        low = req.instructions.lower()
        question = req.inputs.get("question", "")
        table = question.rstrip("?.").split()[-1]
        if question.startswith("How many") and "count" in low:
            return {"sql": f"SELECT COUNT(*) FROM {table}"}
        return {"sql": f"SELECT * FROM {table}"}

    return dspy.LM("scripted/rate-limited", engine=ScriptedEngine(script), cache=False, num_retries=retries), seen


def compile_with(task_lm: dspy.LM, **kw):
    kw.setdefault("max_metric_calls", 200)
    with dspy.context(lm=task_lm):
        return HeroOptimizer(feedback_metric, reflection_lm=reflection_lm([[COUNT_RULE]] * 3), num_rounds=2,
                             display_progress=False, **kw).compile(program(), make_examples(36))


def test_rate_limits_are_retried_and_cost_no_rollout():
    lm, seen = rate_limited_task_lm(every=3, retries=3)
    out = compile_with(lm)
    res = out.detailed_results
    assert seen["429"] > 0
    # Each refused request was retried: the LM saw more requests than there were rollouts, none failed.
    assert seen["requests"] == res.total_metric_calls - res.preflight_metric_calls + seen["429"]
    assert COUNT_RULE in out.generate.signature.instructions


def test_persistent_rate_limits_stop_the_run_early():
    lm, seen = rate_limited_task_lm(every=1, retries=1)  # every request refused, one retry each
    with pytest.raises(RolloutAbort, match=r"first 1\d rollouts( to finish)? all failed for the same reason: LMRateLimitError"):
        compile_with(lm, max_metric_calls=60)
    assert seen["requests"] <= 2 * 12  # ~10 rollouts, not the budget's 59


def test_persistent_rate_limits_fail_rollouts_but_not_the_run_with_a_high_max_errors(caplog):
    lm, seen = rate_limited_task_lm(every=1, retries=1)  # every request refused, one retry each
    out = compile_with(lm, max_metric_calls=60, max_errors=1000)
    res = out.detailed_results
    assert res.total_metric_calls <= 60
    # one try + one retry per rollout, all refused
    assert seen["requests"] == 2 * (res.total_metric_calls - res.preflight_metric_calls)
    cases = [c for r in res.rounds for c in r.diagnosis_cases]
    assert cases and all("429" in (c.get("error") or "") for c in cases)  # the error is in the results
    assert out.generate.signature.instructions == program().generate.signature.instructions
    assert any("adopted no candidate" in w for w in res.warnings)


def test_unreachable_task_lm_stops_the_run_with_the_reason():
    lm = dspy.LM("openai/nothing-here", api_base="http://127.0.0.1:9/v1", api_key="x", cache=False, num_retries=0)
    with pytest.raises(RolloutAbort, match=r"same reason: LMTransportError.*Connection refused"):
        compile_with(lm, max_metric_calls=24)


def test_unreachable_task_lm_ends_with_the_seed_and_a_warning_with_a_high_max_errors():
    # A real OpenAI-compatible client pointed at a closed loopback port: connection refused.
    lm = dspy.LM("openai/nothing-here", api_base="http://127.0.0.1:9/v1", api_key="x", cache=False, num_retries=0)
    out = compile_with(lm, max_metric_calls=24, max_errors=1000)
    res = out.detailed_results
    assert 0 < res.total_metric_calls <= 24
    assert out.generate.signature.instructions == program().generate.signature.instructions
    assert res.warnings
    cases = [c for r in res.rounds for c in r.diagnosis_cases]
    assert cases and all(c.get("error") for c in cases)
