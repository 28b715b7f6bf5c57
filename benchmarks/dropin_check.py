"""Issue 13, items 2-4: run each call that failed for a new DSPy user and print OK/FAIL per bullet.

No real LLM: scripted LMs (tests/dropin_world.py) over real SQLite databases in a temporary folder.
Every check here is also a test (tests/test_dropin_programs.py, tests/test_dropin_conventions.py).

    python benchmarks/dropin_check.py [--out benchmarks/results/dropin_check.json]

Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import dspy  # noqa: E402
from dropin_world import RULE, Raises, RenamedQuery, examples, reflection_lm, task_lm  # noqa: E402

from dspy_hero.metrics.sql import sql_execution_metric  # noqa: E402
from dspy_hero.optimizer.hero import HeroOptimizer  # noqa: E402
from dspy_hero.optimizer.result import json_default  # noqa: E402
from dspy_hero.optimizer.rollout import RolloutAbort  # noqa: E402


class Records(logging.Handler):
    """Collects log messages (to count DSPy's per-call warnings)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))


class Counting:
    def __init__(self, metric):
        self.metric, self.calls, self.lock = metric, 0, threading.Lock()
        self.prediction_field = getattr(metric, "prediction_field", None)

    def __call__(self, gold, pred, trace=None):
        with self.lock:
            self.calls += 1
        return self.metric(gold, pred, trace)


def hero(metric=None, **kw):
    kw.setdefault("num_rounds", 2)
    kw.setdefault("max_metric_calls", 200)
    return HeroOptimizer(metric, reflection_lm=reflection_lm(), display_progress=False, **kw)


def checks(tmp: Path, log: Records) -> list[tuple[str, Callable[[], str]]]:
    data = examples(tmp)
    # the README's old advice: environment references marked as inputs (still allowed, never passed on)
    marked = [ex.with_inputs("question", "db_schema", "db_path", "db_id") for ex in data]

    def predict_no_env_inputs(data=data):
        log.messages.clear()
        with dspy.context(lm=task_lm()):
            out = hero().compile(dspy.Predict("question, db_schema -> sql"), data)
        res = out.detailed_results
        warned = sum("not in signature" in m for _, m in log.messages)
        assert warned == 0 and res.rollout_errors == {} and RULE in out.signature.instructions, (warned, res.rollout_errors)
        return f"{res.total_metric_calls} metric calls, 0 'not in signature' warnings, rule adopted"

    def chain_of_thought():
        with dspy.context(lm=task_lm()):
            out = hero().compile(dspy.ChainOfThought("question, db_schema -> sql"), data)
        assert out.detailed_results.rollout_errors == {}
        return f"rollout errors {out.detailed_results.rollout_errors or 'none'}"

    def custom_forward():
        with dspy.context(lm=task_lm()):
            out = hero(sql_execution_metric(prediction_field="query")).compile(RenamedQuery(), marked)
        res = out.detailed_results
        assert res.rollout_errors == {} and RULE in out.gen.signature.instructions, res.rollout_errors
        return "forward(self, question, db_schema) with output 'query': no TypeError, rule adopted"

    def missing_field_preflight():
        try:
            with dspy.context(lm=task_lm()):
                hero(sql_execution_metric()).compile(dspy.Predict("question, db_schema -> query"), data)
        except ValueError as exc:
            assert "prediction_field='query'" in str(exc)
            return f"refused before any metric call: {str(exc)[:90]}..."
        raise AssertionError("not refused")

    def label_as_input():
        bad = [ex.with_inputs("question", "db_schema", "gold_sql") for ex in data]
        try:
            with dspy.context(lm=task_lm()):
                hero().compile(dspy.Predict("question, db_schema -> sql"), bad)
        except ValueError as exc:
            assert "gold_sql" in str(exc)
            return "refused: " + str(exc)[:80] + "..."
        raise AssertionError("not refused")

    def fail_fast(student=None, data_=None, metric=None, expect=""):
        counted = Counting(metric or sql_execution_metric())
        try:
            with dspy.context(lm=task_lm()):
                hero(counted).compile(student or dspy.Predict("question, db_schema -> sql"), data_ or data)
        except RolloutAbort as exc:
            assert expect in str(exc), str(exc)
            return f"aborted after {counted.calls} metric calls (budget 200): {str(exc)[:70]}..."
        raise AssertionError("the run was not stopped")

    def raising_metric(gold, pred, trace=None):
        if pred.sql:
            raise KeyError("missing field")
        return sql_execution_metric()(gold, pred)

    (tmp / "broken").mkdir()
    broken = examples(tmp / "broken", gold_sql=lambda kind, age: "SELECT x FROM nope")

    def num_threads():
        with dspy.context(lm=task_lm(), num_threads=4, max_errors=7):
            res = hero(num_rounds=1, max_metric_calls=60).compile(dspy.Predict("question, db_schema -> sql"), data).detailed_results
        assert res.settings["num_threads"] == 4 and res.settings["max_errors"] == 7, res.settings
        return "dspy.context(num_threads=4, max_errors=7) -> num_threads=4, max_errors=7"

    def metric_calls():
        counted = Counting(sql_execution_metric())
        with dspy.context(lm=task_lm()):
            res = hero(counted).compile(dspy.Predict("question, db_schema -> sql"), data).detailed_results
        assert counted.calls == res.total_metric_calls, (counted.calls, res.total_metric_calls)
        return f"metric saw {counted.calls}, total_metric_calls={res.total_metric_calls} (pre-flight {res.preflight_metric_calls})"

    def json_and_gepa_fields():
        with dspy.context(lm=task_lm()):
            res = hero(max_metric_calls=300, log_dir=str(tmp / "log")).compile(
                dspy.Predict("question, db_schema -> sql"), data).detailed_results
        text = json.dumps(res.to_dict())
        json.dumps(res, default=json_default)
        d = json.loads(text)
        for k in ("best_candidate", "best_idx", "val_aggregate_scores", "candidates", "log_dir", "parents",
                  "val_subscores", "per_val_instance_best_candidates", "discovery_eval_counts", "total_metric_calls"):
            assert k in d, k
        assert d["best_candidate"] == res.final_instructions and d["log_dir"] == str(tmp / "log")
        return f"json.dumps ok ({len(text)} chars); best_idx={d['best_idx']} of {len(d['candidates'])} candidates"

    def summary():
        with dspy.context(lm=task_lm()):
            res = hero(max_metric_calls=300).compile(dspy.Predict("question, db_schema -> sql"), data).detailed_results
        s = res.summary()
        assert "rounds" in s and "tested" in s and "fixes/breaks" in s and "tokens: task LM" in s, s
        return s.splitlines()[2].strip()

    def mipro_args():
        tl, rl = task_lm(), reflection_lm()
        opt = HeroOptimizer(metric=sql_execution_metric(), prompt_model=rl, task_model=tl, teacher_settings={"lm": tl},
                            max_bootstrapped_demos=4, max_labeled_demos=4, auto=None, max_metric_calls=300, max_errors=10,
                            init_temperature=1.0, verbose=False, metric_threshold=0.5, seed=9, display_progress=False)
        out = opt.compile(dspy.Predict("question, db_schema -> sql"), trainset=data, num_trials=2, minibatch_size=35,
                          requires_permission_to_run=False, max_bootstrapped_demos=2, max_labeled_demos=2)
        res = out.detailed_results
        assert res.settings["num_rounds"] == 2 and res.seed == 9 and RULE in out.signature.instructions
        return "MIPROv2 constructor + compile(num_trials=2, minibatch_size=..., requires_permission_to_run=...) ran"

    return [
        ("2 Predict('question, db_schema -> sql') without environment inputs", predict_no_env_inputs),
        ("2 Predict with db_path, db_id marked as inputs", lambda: predict_no_env_inputs(marked)),
        ("2 ChainOfThought", chain_of_thought),
        ("2 custom forward(self, question, db_schema), db_path marked, prediction_field='query'", custom_forward),
        ("2 pre-flight: outputs lack the metric's field", missing_field_preflight),
        ("2 pre-flight: gold_sql marked as an input", label_as_input),
        ("3 fail fast: program raises on every call", lambda: fail_fast(Raises(), expect="RuntimeError")),
        ("3 fail fast: metric raises on every real prediction", lambda: fail_fast(metric=raising_metric, expect="metric raised KeyError")),
        ("3 fail fast: all-broken gold", lambda: fail_fast(data_=broken, expect="gold query failed")),
        ("4 num_threads / max_errors from dspy.settings", num_threads),
        ("4 total_metric_calls == what the metric saw", metric_calls),
        ("4 detailed_results: GEPA fields, JSON", json_and_gepa_fields),
        ("4 summary() shows rounds, decisions, fixes/breaks, tokens", summary),
        ("4 MIPROv2 constructor and compile arguments", mipro_args),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dropin_check.json"))
    args = parser.parse_args()
    log = Records()
    logging.getLogger().addHandler(log)
    logging.getLogger().setLevel(logging.WARNING)
    for noisy in ("dspy_hero", "dspy"):
        logging.getLogger(noisy).propagate = True
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, check in checks(Path(tmp), log):
            try:
                detail, ok = check(), True
            except Exception as exc:  # a failing check is reported, not raised
                detail, ok = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", False
            rows.append({"check": name, "ok": ok, "detail": detail})
            print(f"{'OK  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"checks": rows, "ok": all(r["ok"] for r in rows)}, indent=2) + "\n")
    print(f"{sum(r['ok'] for r in rows)}/{len(rows)} OK; wrote {args.out}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
