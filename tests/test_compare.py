"""The comparison harness in --simulate mode over a tiny Spider-layout fixture (real SQLite), its
resume behaviour, its statistics, and the ReAct baseline."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import dspy
import pytest

from dspy_hero.bench.accounting import CountingMetric
from dspy_hero.bench.methods import DEFAULT_METHODS, mipro_plan
from dspy_hero.bench.stats import bootstrap_mean, fixes_and_breaks, paired_bootstrap
from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.lm.usage import track_usage, usage_of

ROOT = Path(__file__).resolve().parents[1]
NO_OPTUNA = "dspy.MIPROv2 needs optuna, from the 'mipro' extra: python -m pip install -e '.[mipro]'"
spec = importlib.util.spec_from_file_location("hero_benchmarks_compare", ROOT / "benchmarks" / "compare.py")
compare = importlib.util.module_from_spec(spec)
sys.modules["hero_benchmarks_compare"] = compare  # dataclasses need the module registered
spec.loader.exec_module(compare)

QUESTIONS = [
    ("How many items does store {db} stock?", "SELECT count(*) FROM items"),
    ("List the item names of store {db} from cheapest to dearest.", "SELECT name FROM items ORDER BY price"),
    ("For store {db}, count the items in each category id.", "SELECT cat_id, count(*) FROM items GROUP BY cat_id"),
    ("Show every item of store {db} with its category label.",
     "SELECT items.name, cats.label FROM items JOIN cats ON items.cat_id = cats.id"),
    ("Which different prices occur in store {db}?", "SELECT DISTINCT price FROM items"),
    ("Name the items of store {db} priced above its average.",
     "SELECT name FROM items WHERE price > (SELECT avg(price) FROM items)"),
    ("Give all item names sold by store {db}.", "SELECT name FROM items"),
    ("What is the single most expensive item in store {db}?", "SELECT name FROM items ORDER BY price DESC LIMIT 1"),
]


@pytest.fixture(scope="module")
def spider_fixture(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spider")
    rows = []
    for k, db in enumerate(["alpha", "bravo", "charlie", "delta"]):
        path = root / "database" / db / f"{db}.sqlite"
        path.parent.mkdir(parents=True)
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE cats (id INTEGER PRIMARY KEY, label TEXT)")
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, cat_id INTEGER)")
        conn.executemany("INSERT INTO cats VALUES (?, ?)", [(1, "tools"), (2, "food"), (3, "toys")])
        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                         [(i, f"{db}-item{i}", 1.5 * i + k, 1 + i % 3) for i in range(1, 8)])
        conn.commit()
        conn.close()
        rows += [{"db_id": db, "question": q.format(db=db), "query": sql} for q, sql in QUESTIONS]
    (root / "dev.json").write_text(json.dumps(rows))
    return root


def config(out: Path, data: Path, **kw) -> compare.CompareConfig:
    base = {"task": "spider", "data": str(data), "train_size": 16, "test_size": 16, "max_metric_calls": 60, "auto": None,
                "threads": 2, "seed": 0, "out": str(out), "simulate": True, "ves_repetitions": 1}
    base.update(kw)
    return compare.CompareConfig(**base)


@pytest.fixture(scope="module")
def sim_run(spider_fixture, tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    data = compare.run_comparison(config(out, spider_fixture))
    return out, data


def test_simulate_writes_json_markdown_and_plots_for_every_method(sim_run):
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    out, data = sim_run
    assert list(data["methods"]) == list(DEFAULT_METHODS)  # hero_o_t_paper runs when asked for by name
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["methods"]) == set(DEFAULT_METHODS)
    md = (out / "results.md").read_text()
    for label in ("Seed prompt", "HERO-O", "HERO-O + HERO-T", "GEPA", "MIPROv2", "ReAct"):
        assert label in md
    for png in ("accuracy.png", "fix_break.png"):
        assert (out / png).stat().st_size > 1000
    meta = saved["meta"]
    assert meta["budget"] == 60 and meta["split_note"].startswith("Spider dev.json")
    assert not set(meta["train_ids"]) & set(meta["test_ids"]) and not set(meta["val_ids"]) & set(meta["test_ids"])
    for name, res in saved["methods"].items():
        if res["status"] != "done":
            # an optional piece (another helper's module) may be missing; it must be recorded, not lost
            assert res["error"], name
            continue
        assert [o["example_id"] for o in res["outcomes"]] == meta["test_ids"]
        assert 0.0 <= res["pass_at_1"] <= 1.0 and res["ci"]["low"] <= res["pass_at_1"] <= res["ci"]["high"]
        assert res["ves"] is not None
    done = {m for m, r in saved["methods"].items() if r["status"] == "done"}
    assert {"seed", "gepa", "mipro", "react"} <= done
    assert saved["methods"]["mipro"]["rollouts_optimization"] > 0
    # the harness hands ReAct the environment references: every query executes, none fails to build one
    react = saved["methods"]["react"]
    assert react["extras"]["interactions_per_query"] >= 1.0
    assert not [o for o in react["outcomes"] if o.get("error")], react["outcomes"][0]
    assert saved["methods"]["gepa"]["lm_optimization"]["reflection"]["calls"] > 0
    if "hero_o" in done:
        hero = saved["methods"]["hero_o"]
        assert 0 < hero["extras"]["total_metric_calls"] <= 60  # HERO-O never exceeds its budget
        # the counted calls may add HERO-O's one preflight metric check (an empty prediction, no rollout)
        assert hero["rollouts_optimization"] <= 61
        assert hero["fix_break"] and all("fixes" in r for r in hero["fix_break"])
        detailed = json.loads((out / "logs" / "hero_o" / "detailed_results.json").read_text())
        assert len(detailed["rounds"]) == len(hero["extras"]["rounds_adopted"]) and detailed["budget"] == 60
        assert "vs_seed" in saved["summary"] and "hero_o" in saved["summary"]["vs_gepa"]
    if "hero_o_t" in done:  # every refined outcome says what HERO-T did and why it stopped
        assert all(o["refinement"]["stop_reason"] for o in saved["methods"]["hero_o_t"]["outcomes"])
        assert not any("refinement" in o for o in saved["methods"]["seed"]["outcomes"])


def test_simulated_world_rewards_rules():
    from dspy_hero.bench.simulate import SKILLS, SimulatedWorld

    world = SimulatedWorld({"q count": "SELECT count(*) FROM t", "q plain": "SELECT a FROM t"}, hard_fraction=0.0)
    assert world.answer("q plain", "") == "SELECT a FROM t"
    assert world.answer("q count", "") != "SELECT count(*) FROM t"
    assert world.answer("q count", SKILLS["count"][1]) == "SELECT count(*) FROM t"
    assert world.answer("q plain", "Always end every query with LIMIT 1 to keep the answer short.").endswith("LIMIT 1")


def test_resume_skips_completed_methods(sim_run, spider_fixture):
    out, _ = sim_run
    seed_path = out / "methods" / "seed.json"
    seed = json.loads(seed_path.read_text())
    seed["extras"]["marker"] = "kept"
    seed_path.write_text(json.dumps(seed))
    (out / "methods" / "react.json").unlink()
    data = compare.run_comparison(config(out, spider_fixture, methods=["seed", "react"]))
    assert data["methods"]["seed"]["extras"]["marker"] == "kept"  # reused, not re-run
    assert (out / "methods" / "react.json").exists() and data["methods"]["react"]["status"] == "done"
    assert "gepa" in data["methods"]  # finished earlier, still reported


def test_a_hero_t_row_with_another_refine_setting_is_rerun_not_refused(spider_fixture, tmp_path):
    """--refine-only-failing is read by HERO-T alone: a run resumes with either value, reuses seed and
    HERO-O, and re-runs a saved HERO-T row only when it ran with the other value."""
    out = tmp_path / "run"
    first = compare.run_comparison(config(out, spider_fixture, methods=["seed", "hero_o", "hero_o_t"]))
    assert first["methods"]["hero_o_t"]["extras"]["only_failing"] is False
    for name in ("seed", "hero_o", "hero_o_t"):
        path = out / "methods" / f"{name}.json"
        saved = json.loads(path.read_text())
        saved["extras"]["marker"] = name
        path.write_text(json.dumps(saved))
    again = compare.run_comparison(config(out, spider_fixture, methods=["seed", "hero_o", "hero_o_t"],
                                          refine_only_failing=True))
    assert again["methods"]["seed"]["extras"]["marker"] == "seed"  # reused
    assert again["methods"]["hero_o"]["extras"]["marker"] == "hero_o"  # reused
    assert "marker" not in again["methods"]["hero_o_t"]["extras"]  # re-run with the asked value
    assert again["methods"]["hero_o_t"]["extras"]["only_failing"] is True
    path = out / "methods" / "hero_o_t.json"
    saved = json.loads(path.read_text())
    saved["extras"]["marker"] = "second"
    path.write_text(json.dumps(saved))
    same = compare.run_comparison(config(out, spider_fixture, methods=["hero_o_t"], refine_only_failing=True))
    assert same["methods"]["hero_o_t"]["extras"]["marker"] == "second"  # the same value: reused
    assert same["methods"]["hero_o_t"]["extras"]["repairs"] is True
    # --no-repairs is a HERO-T setting too: the row is re-run without repairs, and says so
    off = compare.run_comparison(config(out, spider_fixture, methods=["hero_o_t"], refine_only_failing=True,
                                        refine_repairs=False))
    ref = off["methods"]["hero_o_t"]["extras"]
    assert "marker" not in ref and ref["repairs"] is False and ref["refinement"]["repairs"] == 0


def test_each_row_records_the_code_that_ran_it_and_a_resume_keeps_it(spider_fixture, tmp_path, monkeypatch):
    """A results file may hold rows from several invocations; each row names the code it ran with, and
    the meta names the latest invocation's (the run's fingerprint ignores it, so a run resumes)."""
    out = tmp_path / "run"
    here = compare.code_version()
    assert here and ("dspy-hero" in here or len(here.split("+")[0]) >= 7)
    first = compare.run_comparison(config(out, spider_fixture, methods=["seed"]))
    assert first["meta"]["code"] == here and first["methods"]["seed"]["extras"]["code"] == here
    monkeypatch.setattr(compare, "code_version", lambda: "later")
    again = compare.run_comparison(config(out, spider_fixture, methods=["seed", "hero_o"]))
    assert again["meta"]["code"] == "later"
    assert again["methods"]["seed"]["extras"]["code"] == here  # reused: still the code that ran it
    assert again["methods"]["hero_o"]["extras"]["code"] == "later"


def test_the_code_version_counts_changed_code_not_new_result_files(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed: code_version reports the package version instead")

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "dspy_hero").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "dspy_hero" / "x.py").write_text("A = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = compare.code_version(tmp_path)
    assert "+" not in head and len(head) >= 7
    (tmp_path / "benchmarks" / "results" / "run.json").write_text("{}")  # a new result, not code
    assert compare.code_version(tmp_path) == head
    (tmp_path / "dspy_hero" / "x.py").write_text("A = 2\n")
    assert compare.code_version(tmp_path) == head + "+changes"
    assert "not a git checkout" in compare.code_version(tmp_path / "dspy_hero" / "missing")


def test_every_row_keeps_its_phases_engine_time(spider_fixture, tmp_path, monkeypatch):
    """Where a local engine's time went is recorded for each phase a row ran: the optimizers' rows too,
    whose runners add their own extras afterwards (they once replaced the dict and lost it). The
    simulated LMs have no engine, so the meter's reading is stood in for."""
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    from dspy_hero.bench import accounting

    monkeypatch.setattr(accounting.PhaseUsage, "engine_time", lambda self: {"task": {"requests": 7}})
    data = compare.run_comparison(config(tmp_path / "run", spider_fixture, methods=["seed", "gepa", "mipro"],
                                         max_metric_calls=30, ves_repetitions=0))
    rows = data["methods"]
    assert all(rows[m]["status"] == "done" for m in ("seed", "gepa", "mipro")), {m: rows[m]["error"] for m in rows}
    for m in ("seed", "gepa", "mipro"):  # an evaluation reused from another row ran nothing of its own
        reused = "evaluation_of" in rows[m]["extras"]
        assert rows[m]["extras"].get("engine_evaluation") == (None if reused else {"task": {"requests": 7}}), m
    assert {"engine_optimization", "total_metric_calls"} <= set(rows["gepa"]["extras"])  # the runner's own too
    assert {"engine_optimization", "plan"} <= set(rows["mipro"]["extras"])
    assert rows["gepa"]["extras"]["engine_optimization"] == {"task": {"requests": 7}}


def test_resume_refuses_different_settings(sim_run, spider_fixture):
    out, _ = sim_run
    with pytest.raises(ValueError, match="different settings"):
        compare.run_comparison(config(out, spider_fixture, seed=1, methods=["seed"]))


def test_cli_parses_options(tmp_path):
    cfg, verbose = compare.parse_args(["--task", "bigcodebench", "--stdlib-only", "--max-metric-calls", "90",
                                       "--methods", "seed,gepa", "--out", str(tmp_path), "--lm", "openai/x"])
    assert cfg.max_metric_calls == 90 and cfg.auto is None and cfg.methods == ["seed", "gepa"]
    assert cfg.stdlib_only and cfg.lm == "openai/x" and not verbose and "--stdlib-only" in cfg.command
    assert not cfg.refine_only_failing
    assert compare.parse_args(["--refine-only-failing"])[0].refine_only_failing
    assert cfg.refine_repairs and not compare.parse_args(["--no-repairs"])[0].refine_repairs
    assert compare.ordered_methods(["hero_o_t"]) == ["hero_o", "hero_o_t"]
    ex = dspy.Example(question="q", db_schema="s", db_path="/x.sqlite", gold_sql="SELECT 1").with_inputs("question", "db_schema")
    (marked,) = compare.with_env_refs([ex])
    assert set(marked.inputs().keys()) == {"question", "db_schema", "db_path"} and "gold_sql" in marked.labels()
    with pytest.raises(ValueError):
        compare.ordered_methods(["nope"])


def test_paired_bootstrap_and_fix_break():
    iv = paired_bootstrap([1, 1, 1, 0], [0, 1, 1, 0], seed=0)
    assert iv.estimate == pytest.approx(0.25) and iv.low >= 0.0 and iv.high <= 0.75
    same = paired_bootstrap([1, 0, 1], [1, 0, 1])
    assert same.low == same.high == 0.0
    assert bootstrap_mean([1, 1, 0, 0]).estimate == 0.5
    assert fixes_and_breaks([0, 1, 1, 0], [1, 0, 1, 0]) == (1, 1)
    with pytest.raises(ValueError):
        paired_bootstrap([1], [1, 0])


@pytest.mark.parametrize("budget,val", [(10, 5), (60, 8), (476, 24), (3000, 100), (200, 35)])
def test_mipro_plan_stays_within_budget(budget, val):
    plan = mipro_plan(budget, val)
    assert plan["num_trials"] >= 1 and plan["minibatch_size"] <= val
    assert plan["expected_rollouts"] <= max(budget, val * 2)


def test_counting_metric_and_usage_history():
    seen = []
    metric = CountingMetric(lambda g, p, t=None, n=None, pt=None: seen.append(1) or 1.0)
    metric(None, None)
    metric(None, None, None, "x", None)
    assert metric.calls == 2 and len(seen) == 2
    lm = track_usage(scripted_lm(lambda r: {"answer": "ok"}))
    with dspy.context(lm=lm, max_history_size=1):
        for _ in range(3):
            dspy.Predict("question -> answer")(question="q")
    assert usage_of(lm).calls == 3 and len(lm.history) == 1 and usage_of(lm).input_tokens > 0


def test_react_baseline_revises_from_execution_and_stops(spider_fixture):
    from dspy_hero.execution.sqlite_environment import SQLiteEnvironment
    from dspy_hero.tasks.react_baseline import ReActRefine
    from dspy_hero.tasks.spider import load_spider

    task = load_spider(data_dir=spider_fixture)
    ex = task.test[0]

    def script(req):
        if "observation" in req.inputs:
            assert "previous_program" in req.inputs and "db_path" not in req.inputs
            return {"sql": ex.gold_sql if "Error" in req.inputs["observation"] else "SELECT 1"}
        return {"sql": "SELEC broken"}

    lm = scripted_lm(script)
    module = ReActRefine(task.make_program(), lambda e: SQLiteEnvironment(e.db_path), "sql", max_interactions=3)
    with dspy.context(lm=lm):
        pred = module(**ex.inputs())
    assert pred.sql == ex.gold_sql and len(pred.react_steps) == 2 and module.interactions == 2
    assert task.metric(ex, pred).score == 1.0
    assert engine_of(lm).call_count == 2

    stubborn = scripted_lm(lambda req: {"sql": "SELEC still broken"})
    with dspy.context(lm=stubborn):
        pred = module(**ex.inputs())
    assert len(pred.react_steps) == 3 and pred.sql == "SELEC still broken"  # no gate: last revision submitted


def test_a_failing_method_is_recorded_not_raised(spider_fixture, tmp_path):
    from dspy_hero.bench.methods import RunContext, run_method
    from dspy_hero.tasks.spider import load_spider

    task = load_spider(data_dir=spider_fixture, limit=4)

    def broken_environment(example):
        raise RuntimeError("engine down")

    task.environment_for = broken_environment
    lm = scripted_lm(lambda req: {"sql": "SELECT 1"})
    ctx = RunContext(task=task, train=task.train, val=task.train, test=task.test, task_lm=lm, reflection_lm=lm,
                     budget=4, threads=1, out_dir=tmp_path, ves_repetitions=0)
    seed = run_method(ctx, "seed")
    assert seed.status == "done" and len(seed.outcomes) == len(task.test)
    react = run_method(ctx, "react")  # every example's environment fails: scored 0, recorded per example
    assert react.status == "done" and all(o["error"] and "engine down" in o["error"] for o in react.outcomes)
    missing = run_method(ctx, "hero_o_react")  # needs HERO-O's prompt, which never ran here
    if "hero_o" not in ctx.programs:
        assert missing.status == "failed" and "HERO-O has not run" in missing.error


def test_aggregate_over_seeds(spider_fixture, tmp_path):
    dirs = [tmp_path / f"seed{k}" for k in (0, 1)]
    for k, d in enumerate(dirs):
        compare.run_comparison(config(d, spider_fixture, seed=k, methods=["seed", "gepa", "react"], max_metric_calls=30))
    agg = compare.aggregate_runs([str(d) for d in dirs], str(tmp_path / "agg"))
    metas = [json.loads((d / "meta.json").read_text()) for d in dirs]
    assert metas[0]["test_ids"] == metas[1]["test_ids"] and metas[0]["train_ids"] == metas[1]["train_ids"]
    assert agg["runs"] == 2 and agg["methods"]["seed"]["runs"] == 2 and agg["methods"]["gepa"]["runs"] == 2
    assert "react" in agg["vs_seed"] and (tmp_path / "agg" / "aggregate.md").read_text().count("|") > 10
    with pytest.raises(FileNotFoundError):
        compare.aggregate_runs([str(tmp_path / "nothing")], str(tmp_path / "agg2"))


def test_python_task_through_the_harness(tmp_path):
    """Seed and ReAct on a tiny BigCodeBench-layout task: real sandbox, real unittest metric."""
    import gzip

    pytest.importorskip("dspy_hero.metrics.python")
    from dspy_hero.bench.methods import RunContext, run_method
    from dspy_hero.tasks.bigcodebench import load_bigcodebench

    rows = []
    for i in range(6):
        rows.append({"task_id": f"BigCodeBench/{i}", "complete_prompt": "", "instruct_prompt": f"Return the number {i}.",
                     "canonical_solution": f"    return {i}\n", "code_prompt": "def task_func():\n",
                     "test": f"import unittest\nclass TestCases(unittest.TestCase):\n    def test_value(self):\n"
                             f"        self.assertEqual(task_func(), {i})\n",
                     "entry_point": "task_func", "libs": "[]"})
    with gzip.open(tmp_path / "bcb.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows))
    task = load_bigcodebench(data_dir=tmp_path)

    def script(req):
        n = req.user.split("Return the number ")[1][0]
        if "observation" in req.inputs:  # ReAct revision after seeing the failure
            return {"code": f"def task_func():\n    return {n}\n"}
        return {"code": f"def task_func():\n    return {n}\n" if int(n) % 2 else "def task_func(:\n    pass\n"}

    lm = scripted_lm(script)
    ctx = RunContext(task=task, train=task.train, val=task.train, test=task.test, task_lm=lm, reflection_lm=lm,
                     budget=4, threads=2, out_dir=tmp_path, ves_repetitions=0)
    try:
        seed = run_method(ctx, "seed")
        react = run_method(ctx, "react")
    finally:
        task.close()
    assert seed.status == "done" and react.status == "done", (seed.error, react.error)
    odd = [o["score"] for o in seed.outcomes if int(o["example_id"].split("/")[1]) % 2]
    even = [o["score"] for o in seed.outcomes if not int(o["example_id"].split("/")[1]) % 2]
    assert all(s == 1.0 for s in odd) and all(s == 0.0 for s in even)
    assert react.pass_at_1 == 1.0 and seed.ves is None  # syntax errors are revised from the observation


@pytest.mark.parametrize("budget", [60, 80])
def test_mipro_plan_matches_miprov2_own_eval_count(budget):
    """The plan's expected rollouts are MIPROv2's own count of evaluations (default program, minibatch
    trials and every full evaluation, including the one after a last partial block of trials)."""
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    from dspy_hero.tasks.programs import GenerateProgram

    def task(req):
        return {"sql": "SELECT 1"}

    def proposer(req):
        return {name: "Write one SQLite query." for name in req.output_fields}

    def metric(gold, pred, trace=None):
        return float(pred.sql == "SELECT 1")

    examples = [dspy.Example(question=f"q{i}", gold_sql="SELECT 1").with_inputs("question") for i in range(12)]
    plan = mipro_plan(budget, len(examples), minibatch_size=5)
    assert plan["minibatch"] and plan["num_trials"] == {60: 5, 80: 8}[budget]  # 8: a trailing partial block
    tl, pl = scripted_lm(task), scripted_lm(proposer)
    with dspy.context(lm=tl):
        opt = dspy.MIPROv2(metric=metric, prompt_model=pl, task_model=tl, auto=None,
                           num_candidates=plan["num_candidates"], num_threads=1, seed=0,
                           max_bootstrapped_demos=0, max_labeled_demos=0, verbose=False)
        best = opt.compile(GenerateProgram("sql", ["question"]), trainset=examples, valset=examples,
                           num_trials=plan["num_trials"], minibatch=True, minibatch_size=plan["minibatch_size"])
    own = max(log.get("total_eval_calls_so_far", 0) for log in best.trial_logs.values())
    assert own == plan["expected_rollouts"] <= budget


def test_react_baseline_treats_an_environment_failure_as_an_observation(spider_fixture):
    """As HERO-T does: an execution that raises is evidence for the next revision, not a crashed example."""
    from dspy_hero.execution.sqlite_environment import SQLiteEnvironment
    from dspy_hero.tasks.react_baseline import ReActRefine
    from dspy_hero.tasks.spider import load_spider

    task = load_spider(data_dir=spider_fixture)
    ex = task.test[0]

    class Flaky(SQLiteEnvironment):
        calls = 0

        def execute(self, program):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise ConnectionError("engine restarting")
            return super().execute(program)

    lm = scripted_lm(lambda req: {"sql": ex.gold_sql})
    module = ReActRefine(task.make_program(), lambda e: Flaky(e.db_path), "sql", max_interactions=3)
    with dspy.context(lm=lm):
        pred = module(**ex.inputs())
    assert "engine restarting" in pred.react_steps[0]["observation"]
    assert pred.react_steps[-1]["ok"] and task.metric(ex, pred).score == 1.0


def optimizer_args_seen(monkeypatch) -> list[tuple[str, dict]]:
    """(method, HeroOptimizer settings it ran with) for every method the comparison runs from now on."""
    seen = []
    real = compare.run_method

    def spy(ctx, method):
        seen.append((method, dict(ctx.optimizer_args)))
        return real(ctx, method)

    monkeypatch.setattr(compare, "run_method", spy)
    return seen


def test_training_references_reach_hero_o_and_the_meta(tmp_path, spider_fixture, monkeypatch):
    """--training-references is recorded in meta.json (a run without it cannot resume into it) and is
    the setting HERO-O runs with; without it HERO-O's evidence stays label-free."""
    cfg, _ = compare.parse_args(["--task", "spider", "--training-references", "--out", str(tmp_path / "x")])
    assert cfg.training_references
    seen = optimizer_args_seen(monkeypatch)
    out = tmp_path / "refs"
    compare.run_comparison(config(out, spider_fixture, methods=["hero_o"], training_references=True))
    assert seen == [("hero_o", {"training_references": True})]
    assert json.loads((out / "meta.json").read_text())["training_references"] is True
    with pytest.raises(ValueError, match="different settings"):
        compare.run_comparison(config(out, spider_fixture, methods=["hero_o"]))


def test_rounds_and_candidates_reach_hero_o_and_the_meta(tmp_path, spider_fixture, monkeypatch):
    """--rounds/--candidates set HERO-O's T and K (so its level alpha/(T*K)) and are recorded in meta.json:
    a run with another plan cannot resume into this one's HERO-O result."""
    cfg, _ = compare.parse_args(["--task", "spider", "--rounds", "1", "--candidates", "2", "--out", str(tmp_path / "x")])
    assert (cfg.rounds, cfg.candidates) == (1, 2)
    seen = optimizer_args_seen(monkeypatch)
    out = tmp_path / "plan"
    compare.run_comparison(config(out, spider_fixture, methods=["hero_o"], rounds=1, candidates=2))
    assert seen == [("hero_o", {"num_rounds": 1, "num_candidates": 2})]
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["hero_rounds"], meta["hero_candidates"]) == (1, 2)
    with pytest.raises(ValueError, match="different settings"):
        compare.run_comparison(config(out, spider_fixture, methods=["hero_o"], rounds=2, candidates=2))


@pytest.mark.local_model
def test_a_small_task_model_can_be_taught_by_a_larger_local_reflector():
    """`--lm local:0.5b --reflection-lm local:1.5b`: two embedded models, each deterministic; the same spec
    twice shares one model (a copy, counted apart)."""
    pytest.importorskip("xllamacpp")
    from dspy_hero.lm import model_pack as mp
    from dspy_hero.lm.local import close_local_servers, engine_of

    if not all(mp.pack_installed(mp.get_pack(size)) for size in ("0.5b", "1.5b")):
        pytest.skip("needs both model packs: python -m dspy_hero.lm.model_pack install 0.5b (and 1.5b)")
    assert compare.is_local("local") and compare.is_local("local:0.5b") and not compare.is_local("openai/gpt-4o")
    try:
        task_lm, refl_lm, task_name, refl_name = compare.make_lms(
            compare.CompareConfig(lm="local:0.5b", reflection_lm="local:1.5b", threads=1), [])
        assert "0.5b" in task_name and "1.5b" in refl_name
        assert engine_of(task_lm).server is not engine_of(refl_lm).server
        same_task, same_refl, _, _ = compare.make_lms(compare.CompareConfig(lm="local:0.5b", threads=1), [])
        assert same_refl is not same_task and engine_of(same_refl) is engine_of(same_task)
    finally:
        close_local_servers()
