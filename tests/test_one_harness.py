"""One harness: the `hero` CLI and `benchmarks/compare.py` run the same method runners and the same
report code (issue 15, item 1).

Two kinds of guard: (a) the same method through both doors, with the same scripted simulation LMs
(deterministic, over real SQLite execution), gives identical per-example outcomes, so the doors
cannot drift apart in how they evaluate, refine or optimize; (b) the CLI's modules, read with `ast`,
hold no evaluation, optimization, refinement, fix:break or plotting of their own: they may only
call the harness (`dspy_hero.bench`)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import dspy
import pytest
from typer.testing import CliRunner

from dspy_hero.bench.methods import (MethodResult, RunContext, evaluate, instructions_of, optimize_hero_o,
                                     run_method)
from dspy_hero.bench.simulate import simulated_lms
from dspy_hero.cli.app import app
from dspy_hero.optimizer.rollout import build_variant
from dspy_hero.tasks.registry import load_task

ROOT = Path(__file__).resolve().parents[1]
CLI_DIR = ROOT / "dspy_hero" / "cli"
runner = CliRunner()

# What each outcome records about one example; the comparison must see all of it identical.
OUTCOME_KEYS = ("example_id", "index", "score", "program", "error", "feedback", "refinement")


@pytest.fixture(scope="module")
def task():
    return load_task("builtin-sql")


def harness_context(task, out: Path, limit: int, **kw) -> RunContext:
    """The comparison's context for what the CLI runs: the task's optimization split as HERO-O's data
    (no separate valset), its first `limit` held-out examples, fresh simulation LMs like `--lm simulated`."""
    task_lm, reflection, _ = simulated_lms(task.train + task.test, language=task.language)
    return RunContext(task=task, train=list(task.train), val=[], test=list(task.test[:limit]), task_lm=task_lm,
                      reflection_lm=reflection, threads=1, seed=0, out_dir=out, ves_repetitions=0, **kw)


def outcomes(records) -> list[dict]:
    return [{k: o.get(k) for k in OUTCOME_KEYS} for o in records]


def cli(*args: str) -> None:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output


def ruled_program(task):
    """The seed program with every simulated SQL rule in its instructions: the simulation then solves
    some examples and not others (the hard ones), so identical rows mean something."""
    from dspy_hero.bench.simulate import SKILLS

    program = task.make_program()
    rules = " ".join(rule for _, rule, _ in SKILLS.values())
    program.generate.signature = program.generate.signature.with_instructions(
        program.generate.signature.instructions + " " + rules)
    return program


def test_cli_evaluate_and_the_harness_seed_method_give_identical_rows(task, tmp_path):
    cli("evaluate", "--task", task.name, "--lm", "simulated", "--limit", "6", "--out", str(tmp_path / "cli"))
    from_cli = json.loads((tmp_path / "cli" / "eval_seed.json").read_text())
    harness = run_method(harness_context(task, tmp_path / "harness", 6, budget=0), "seed")
    assert harness.status == "done", harness.error
    assert len(harness.outcomes) == 6 and outcomes(from_cli["outcomes"]) == outcomes(harness.outcomes)
    assert (from_cli["pass_at_1"], from_cli["ci"], from_cli["rollouts_evaluation"]) == \
        (harness.pass_at_1, harness.ci, harness.rollouts_evaluation)
    assert from_cli["lm_evaluation"]["task"]["calls"] == harness.lm_evaluation["task"]["calls"] == 6


def test_cli_evaluate_of_a_saved_program_and_the_harness_evaluation_give_identical_rows(task, tmp_path):
    saved = tmp_path / "program.json"
    ruled_program(task).save(str(saved))
    cli("evaluate", "--task", task.name, "--lm", "simulated", "--program", str(saved), "--limit", "8",
        "--out", str(tmp_path / "cli"))
    from_cli = json.loads((tmp_path / "cli" / "eval_program.json").read_text())
    ctx = harness_context(task, tmp_path / "harness", 8, budget=0)
    harness = evaluate(ctx, build_variant(task.make_program(), instructions_of(ruled_program(task))),
                       MethodResult("program", "program"))
    assert 0 < harness.pass_at_1 < 1, harness.pass_at_1  # some pass, some fail: the rows could differ
    assert outcomes(from_cli["outcomes"]) == outcomes(harness.outcomes)
    assert (from_cli["pass_at_1"], from_cli["ci"]) == (harness.pass_at_1, harness.ci)


@pytest.mark.parametrize("name, limit", [("builtin-sql", 4), ("builtin-python", 2)])
def test_cli_refine_and_the_harness_hero_t_method_give_identical_rows(name, limit, tmp_path):
    """HERO-T through both doors: the same demo bank (verified by the task metric: for Python, its
    hidden tests in the sandbox), environments, budget and refiner LM."""
    task = load_task(name)
    cli("refine", "--task", task.name, "--lm", "simulated", "--limit", str(limit), "--out", str(tmp_path / "cli"))
    from_cli = json.loads((tmp_path / "cli" / "eval_seed_refined.json").read_text())
    ctx = harness_context(task, tmp_path / "harness", limit, budget=0)
    ctx.instructions["hero_o"] = instructions_of(task.make_program())  # HERO-T around the seed prompt
    harness = run_method(ctx, "hero_o_t")
    assert harness.status == "done", harness.error
    assert all(o["refinement"] for o in harness.outcomes)  # HERO-T ran on every example
    assert outcomes(from_cli["outcomes"]) == outcomes(harness.outcomes)


def test_cli_optimize_and_the_harness_hero_o_runner_make_the_same_run(task, tmp_path):
    cli("optimize", "--task", task.name, "--lm", "simulated", "--max-metric-calls", "40", "--rounds", "1",
        "--candidates", "1", "--out", str(tmp_path / "cli"))
    from_cli = json.loads((tmp_path / "cli" / "hero_o_result.json").read_text())
    ctx = harness_context(task, tmp_path / "harness", 0, budget=40,
                          optimizer_args={"num_rounds": 1, "num_candidates": 1})
    _, harness = optimize_hero_o(ctx, MethodResult("hero_o", "HERO-O"))
    for key in ("final_instructions", "total_metric_calls", "lineage", "pools", "adopted_fixes", "adopted_breaks"):
        assert from_cli[key] == harness[key], key
    assert [len(r["candidates"]) for r in from_cli["rounds"]] == [len(r["candidates"]) for r in harness["rounds"]]


# -- the CLI holds no harness logic of its own ----------------------------------------------------

# Modules whose job is the harness's: the CLI reaches them only through dspy_hero.bench.
HARNESS_ONLY = ("matplotlib", "dspy_hero.optimizer", "dspy_hero.refine", "dspy_hero.tasks.evaluate",
                "dspy_hero.bench.stats", "dspy_hero.bench.accounting", "dspy_hero.bench.plots")
# Names that a definition in the CLI must not carry: fix:break readings, plots, report rows and tables.
HARNESS_WORDS = ("plot", "fix_break", "fixes", "breaks", "rows_of", "method_rows", "markdown", "table", "vs_seed")
# HeroResult fields only a fix:break reading needs.
HARNESS_FIELDS = ("cumulative_fix_break",)


def harness_logic_in(source: str, name: str) -> list[str]:
    """What in one module's source is harness work: imports of harness-only modules, definitions named
    for fix:break / plot / table jobs, reads of HeroResult's per-round fix:break."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            modules = []
        found += [f"{name}: imports {m}" for m in modules
                  if any(m == h or m.startswith(h + ".") for h in HARNESS_ONLY)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                any(w in node.name.lower() for w in HARNESS_WORDS) and node.name != "print_rows":
            found.append(f"{name}: defines {node.name}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in HARNESS_FIELDS:
            found.append(f"{name}: reads {node.value!r}")
    return found


def test_the_cli_holds_no_fix_break_plot_or_evaluation_logic_of_its_own():
    found = [hit for path in sorted(CLI_DIR.glob("*.py"))
             for hit in harness_logic_in(path.read_text(encoding="utf-8"), path.name)]
    assert not found, found
    assert not (CLI_DIR / "report.py").exists()  # the report is bench/run_report.py's


@pytest.mark.parametrize("source", [
    "import matplotlib.pyplot as plt\n",
    "def f():\n    from dspy_hero.optimizer.hero import HeroOptimizer\n",
    "from dspy_hero.tasks.evaluate import evaluate_program\n",
    "def per_round_fix_break(hero):\n    return hero\n",
    "def plot_accuracy(rows, path):\n    pass\n",
    "x = hero.get('cumulative_fix_break')\n",
])
def test_the_checker_finds_harness_logic_put_back_into_the_cli(source):
    assert harness_logic_in(source, "mutant.py")


def test_bench_never_imports_the_cli():
    bench = ROOT / "dspy_hero" / "bench"
    for path in sorted(bench.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n.startswith("dspy_hero.cli")], path.name


def test_counting_metric_keeps_the_wrapped_metrics_name_for_the_journal():
    """The journal fingerprint names the metric; through the harness's counting wrapper two different
    metrics must still get different names (else a log would resume for another metric)."""
    from dspy_hero.bench.accounting import CountingMetric
    from dspy_hero.optimizer.run import _callable_name

    def metric_a(gold, pred, trace=None):
        return 1.0

    def metric_b(gold, pred, trace=None):
        return 0.0

    assert _callable_name(CountingMetric(metric_a)) == _callable_name(metric_a)
    assert _callable_name(CountingMetric(metric_a)) != _callable_name(CountingMetric(metric_b))


def test_hero_t_starts_from_the_programs_of_the_hero_o_evaluation(task, tmp_path):
    """HERO-O + HERO-T refines exactly the programs HERO-O's evaluation produced: no second generation
    (the task LM is not asked for them again) and every refinement's initial program is HERO-O's."""
    ctx = harness_context(task, tmp_path, 6, budget=0, refine_only_failing=True)
    ctx.programs["hero_o"] = ruled_program(task)
    hero_o = evaluate(ctx, ctx.programs["hero_o"], MethodResult(method="hero_o", label="HERO-O"))
    # a different generation, were HERO-T to ask again: the simulated LM without the rules fails more
    ctx.programs["hero_o"].generate.signature = task.make_program().generate.signature
    refined = run_method(ctx, "hero_o_t")
    assert refined.status == "done", refined.error
    assert refined.extras["initial_programs_from_hero_o_evaluation"] == 6
    by_id = {o["example_id"]: o["program"] for o in hero_o.outcomes}
    for o in refined.outcomes:
        initial = o["refinement"]["initial_program"] if o.get("refinement") else o["program"]
        assert initial == by_id[o["example_id"]]
    roles = [(o.get("refinement") or {}).get("lm_calls_by_role", {}) for o in refined.outcomes]
    assert any(roles) and not any(r.get("generator") for r in roles), roles


def test_the_paper_gate_row_lets_only_the_judge_accept(task, tmp_path):
    """``hero_o_t_paper`` is HERO-T with the paper's exact gate: every accepted revision was accepted by
    the judge, whereas the default gate accepts a clean revision of a failing program by its checks.
    Both rows refine the same HERO-O programs, so only the gate differs."""
    limit = 8
    rows = {}
    for method in ("hero_o_t", "hero_o_t_paper"):
        ctx = harness_context(task, tmp_path / method, limit, budget=0)
        ctx.instructions["hero_o"] = instructions_of(task.make_program())
        rows[method] = run_method(ctx, method)
        assert rows[method].status == "done", rows[method].error
    stages = {m: [rev["stage"] for o in r.outcomes for rev in (o["refinement"] or {}).get("accepted_revisions", [])]
              for m, r in rows.items()}
    assert "checks" in stages["hero_o_t"], stages  # the default gate's own rule was exercised
    assert stages["hero_o_t_paper"] and set(stages["hero_o_t_paper"]) == {"judge"}, stages
    assert rows["hero_o_t_paper"].extras["judge_when_failing"] is True


def test_a_program_another_method_evaluated_is_not_run_again_but_other_demos_or_instructions_are(task, tmp_path):
    """HERO-O returning the seed costs no second evaluation; the reuse keys on every predictor's
    instructions *and* demos (MIPROv2 changes only demos), and never applies to wrapped programs."""
    ctx = harness_context(task, tmp_path, 4, budget=0)
    seed = run_method(ctx, "seed")
    calls = len(ctx.task_lm.history)
    same = evaluate(ctx, task.make_program(), MethodResult(method="hero_o", label="HERO-O"))
    assert len(ctx.task_lm.history) == calls  # the LM was not asked again
    assert same.extras["evaluation_of"] == "seed" and same.rollouts_evaluation == 0
    assert outcomes(same.outcomes) == outcomes(seed.outcomes) and (same.pass_at_1, same.ci) == (seed.pass_at_1, seed.ci)

    with_demo = task.make_program()
    with_demo.generate.demos = [dspy.Example(**task.train[0].inputs(), sql=task.train[0].gold_sql)]
    other = evaluate(ctx, with_demo, MethodResult(method="mipro", label="MIPROv2"))
    assert "evaluation_of" not in other.extras and other.rollouts_evaluation == 4
    ruled = ruled_program(task)
    assert "evaluation_of" not in evaluate(ctx, ruled, MethodResult(method="gepa", label="GEPA")).extras
    assert len(ctx.task_lm.history) == calls + 8
