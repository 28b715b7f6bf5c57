"""The `hero demo` end to end on the conventions task with its scripted simulation (real SQLite, real
HERO-O / HERO-T loops, scripted LMs) at the demo's own default budget, the other commands on the
built-in SQL task, plus the clear one-line errors a user can cause."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dspy_hero.cli.app import DEMO_MAX_METRIC_CALLS, DEMO_TEST_LIMIT, app

runner = CliRunner()


def said(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """`hero demo --lm simulated` with every other option at its default (the budget the real demo uses)."""
    out = tmp_path_factory.mktemp("demo")
    result = runner.invoke(app, ["demo", "--lm", "simulated", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_demo_runs_on_the_conventions_task_and_prints_each_adopted_rule_with_its_held_out_counts(demo_dir):
    from dspy_hero.bench.conventions_world import CONVENTION_SKILLS

    out, output = demo_dir
    for name in ("results.json", "report.md", "accuracy.png", "fix_to_break.png", "hero_o_program.json",
                 "hero_o_result.json", "eval_seed.json", "eval_hero_o.json", "eval_hero_o_hero_t.json"):
        assert (out / name).exists(), name
    data = json.loads((out / "results.json").read_text())
    assert data["notes"][0].startswith("task: builtin-conventions-demo;")
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {"seed prompt", "HERO-O", "HERO-O + HERO-T"}
    assert DEMO_TEST_LIMIT >= 20 and all(r["n"] == DEMO_TEST_LIMIT for r in rows.values())
    # HERO-T refines with the demo's budget, starting from the HERO-O evaluation's programs
    from dspy_hero.cli.app import DEMO_REFINE_BUDGET

    hero_t = json.loads((out / "eval_hero_o_hero_t.json").read_text())
    refined = [o["refinement"] for o in hero_t["outcomes"] if o.get("refinement")]
    assert refined and all(r["budget"] == DEMO_REFINE_BUDGET for r in refined)
    from dspy_hero.cli.app import DEMO_REFINE_REASK

    assert DEMO_REFINE_REASK is False and hero_t["extras"]["hero_t"] == {
        "budget": DEMO_REFINE_BUDGET, "only_failing": True, "max_demos": 3, "reask": DEMO_REFINE_REASK}
    hero_o_programs = {o["example_id"]: o["program"] for o in json.loads((out / "eval_hero_o.json").read_text())["outcomes"]}
    assert all(o["refinement"]["initial_program"] == hero_o_programs[o["example_id"]]
               for o in hero_t["outcomes"] if o.get("refinement"))
    hero = data["hero_o"]
    assert hero["budget"] == DEMO_MAX_METRIC_CALLS
    assert hero["total_metric_calls"] <= DEMO_MAX_METRIC_CALLS  # pre-flight calls included
    # the simulated seed prompt has no convention rule; at the default budget one rule passes the sound test
    assert hero["lineage"], "the simulated demo adopted nothing at its default budget"
    adopted = [c for r in hero["rounds"] for c in r["candidates"] if c["status"] == "adopted"]
    rules = {s.rule for s in CONVENTION_SKILLS}
    assert adopted and all(c["edit"][len("ADD: "):] in rules for c in adopted)
    assert rows["HERO-O"]["pass_at_1"] > rows["seed prompt"]["pass_at_1"]
    # the table's fixes:breaks vs seed are the paired counts of the evaluation files
    seed, tuned = (json.loads((out / f"eval_{n}.json").read_text())["outcomes"] for n in ("seed", "hero_o"))
    fixes = sum(t["score"] > s["score"] for s, t in zip(seed, tuned))
    breaks = sum(t["score"] < s["score"] for s, t in zip(seed, tuned))
    assert rows["HERO-O"]["vs_seed"] == f"{fixes}:{breaks}" and fixes > breaks and rows["seed prompt"]["vs_seed"] is None
    # the table's in-sample fix:break is the last point of the fix:break curve both harness doors plot
    from dspy_hero.bench.methods import hero_fix_break

    last = hero_fix_break(hero)[-1]
    assert rows["HERO-O"]["fix_break"] == f"{last['fixes']}:{last['breaks']}" == \
        f"{hero['adopted_fixes']}:{hero['adopted_breaks']}"
    # every adopted rule is printed with its in-sample and held-out counts, in the terminal and in report.md
    text, md = said(type("R", (), {"output": output})), (out / "report.md").read_text()
    assert "HERO-O's adopted rules" in text and "## HERO-O's adopted rules" in md
    for row, cand in zip(hero["lineage"], adopted):
        held, ins = row["held_out"], row["in_sample"]
        cells = f"{ins['fixes']}:{ins['breaks']} of {ins['n']} | {held['fixes']}:{held['breaks']} of {held['n']}"
        assert f"| {row['round']} | {cand['edit']} | {cells} |" in md
        assert f"{held['fixes']}:{held['breaks']} of {held['n']}" in text and cand["edit"][:20] in text
    for stage in ("stage 1/4 seed prompt", "stage 2/4 HERO-O: optimizing", "stage 3/4 HERO-O", "stage 4/4 HERO-O + HERO-T"):
        assert stage in text, stage
    assert not [n for n in data["notes"] if "raised" in n], data["notes"]  # HERO-T reached its environments


def test_demo_can_run_another_task(tmp_path):
    out = tmp_path / "sql"
    result = runner.invoke(app, ["demo", "--task", "builtin-sql", "--lm", "simulated", "--out", str(out),
                                 "--max-metric-calls", "40", "--test-limit", "4"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert data["notes"][0].startswith("task: builtin-sql;") and all(r["n"] == 4 for r in data["rows"])


def test_demo_resumes_without_redoing_finished_stages(demo_dir):
    out, _ = demo_dir
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("eval_*.json")}
    result = runner.invoke(app, ["demo", "--lm", "simulated", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("eval_*.json")} == before
    assert "already evaluated" in said(result) and "already optimized" in said(result)


def test_report_rerenders(demo_dir):
    out, _ = demo_dir
    (out / "report.md").unlink()
    result = runner.invoke(app, ["report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "HERO-O" in (out / "report.md").read_text()


def test_unknown_task_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["optimize", "--task", "no-such-task", "--lm", "simulated", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown task 'no-such-task'" in said(result) and "builtin-sql" in said(result)


def test_missing_data_path_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["evaluate", "--task", "spider", "--data", str(tmp_path / "absent"), "--lm", "simulated"])
    assert result.exit_code == 2
    assert "does not exist" in said(result)


def test_unreachable_lm_is_a_clear_error_before_any_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    result = runner.invoke(app, ["optimize", "--task", "builtin-sql", "--lm", "openai/no-such-model",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "cannot be reached" in said(result)
    assert not (tmp_path / "run" / "hero_o_log").exists()


def test_report_without_a_run_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no evaluations (eval_*.json), HERO-O result" in said(result)


def test_tasks_lists_the_registry():
    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0
    for name in ("builtin-sql", "builtin-cypher", "builtin-python", "bird", "spider", "cypherbench",
                 "bigcodebench", "dscodebench"):
        assert name in result.output


@pytest.mark.parametrize("spec, message", [
    ("local:/nonexistent/model.gguf", "is not a file"),
    ("local:7b", "unknown model size '7b'"),
])
def test_unusable_local_model_is_a_clear_error(tmp_path, spec, message):
    result = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", spec, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "error:" in said(result) and message in said(result)


def test_missing_local_model_names_every_way_to_provide_one(tmp_path, monkeypatch):
    from dspy_hero.lm import model_pack as mp

    monkeypatch.delenv(mp.ENV_MODEL, raising=False)
    monkeypatch.setenv(mp.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(mp, "pack_installed", lambda pack: False)
    result = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "local:0.5b", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "no local model" in said(result) and "model_pack install 0.5b" in said(result)


def test_a_cached_evaluation_is_reused_only_for_the_same_task_split_and_program(tmp_path):
    from dspy_hero.cli.pipeline import RunConfig, StagedRun
    from dspy_hero.lm.scripted import engine_of, scripted_lm
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-sql")
    lm = scripted_lm(lambda req: {"sql": "SELECT 1"})
    first = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2)).evaluate("seed", task.make_program())
    assert len(first.outcomes) == 2
    calls = engine_of(lm).call_count
    again = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2)).evaluate("seed", task.make_program())
    assert engine_of(lm).call_count == calls and again.outcomes == first.outcomes  # resumed, nothing re-run
    wider = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=3)).evaluate("seed", task.make_program())
    assert len(wider.outcomes) == 3  # another split: evaluated again, not the stale 2-example result
    other = task.make_program()
    other.generate.signature = other.generate.signature.with_instructions("Write SQL.")
    run = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=3))
    calls = engine_of(lm).call_count
    run.evaluate("seed", other)
    assert engine_of(lm).call_count == calls + 3  # another program: evaluated again


def test_a_stage_whose_program_another_stage_evaluated_reuses_that_evaluation(tmp_path):
    """HERO-O that returned the seed program is not run on the held-out questions a second time; a
    program with other instructions is."""
    from dspy_hero.cli.pipeline import RunConfig, StagedRun
    from dspy_hero.lm.scripted import engine_of, scripted_lm
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-sql")
    lm = scripted_lm(lambda req: {"sql": "SELECT 1"})
    run = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2))
    seed = run.evaluate("seed", task.make_program())
    calls = engine_of(lm).call_count
    same = run.evaluate("hero_o", task.make_program())
    assert engine_of(lm).call_count == calls
    assert same.outcomes == seed.outcomes and same.extras["evaluation_of"] == "seed" and same.method == "hero_o"
    assert json.loads((tmp_path / "eval_hero_o.json").read_text())["extras"]["evaluation_of"] == "seed"
    assert run.ctx.outcomes["hero_o"] == seed.outcomes  # what HERO-T then starts from
    other = task.make_program()
    other.generate.signature = other.generate.signature.with_instructions("Write SQL.")
    run.evaluate("tuned", other)
    assert engine_of(lm).call_count == calls + 2
    # resumed in a new invocation: the seed stage comes from its file, and still counts for reuse
    again = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2))
    again.evaluate("seed", task.make_program())
    assert again.evaluate("hero_o_again", task.make_program()).extras["evaluation_of"] == "seed"
    assert engine_of(lm).call_count == calls + 2


def test_a_run_directory_belongs_to_one_task(tmp_path):
    out = tmp_path / "run"
    first = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "simulated", "--limit", "1", "--out", str(out)])
    assert first.exit_code == 0, first.output
    other = runner.invoke(app, ["evaluate", "--task", "builtin-python", "--lm", "simulated", "--limit", "1", "--out", str(out)])
    assert other.exit_code == 2, other.output
    assert "holds a run of task 'builtin-sql'" in said(other)
    again = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "simulated", "--limit", "1", "--out", str(out)])
    assert again.exit_code == 0, again.output


def test_data_path_for_a_builtin_task_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--data", str(tmp_path), "--lm", "simulated",
                                 "--limit", "1", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "generates its own data" in said(result)


def test_hero_t_uses_the_tasks_environments(tmp_path):
    from dspy_hero.cli.pipeline import RunConfig, StagedRun
    from dspy_hero.execution.environments import environment_for
    from dspy_hero.lm.scripted import scripted_lm
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-sql")
    asked = []

    def recording(refs):
        asked.append(refs.get("db_id"))
        return environment_for(refs)

    task.environment_for = recording
    lm = scripted_lm(lambda req: {"sql": "SELECT 1", "action": "stop", "argument": ""})
    run = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2))
    refiner = run.refiner(task.make_program())
    # the demos are verified by the task metric (on its own engine), not by bare execution here
    assert asked == [] and refiner.demo_bank.stats == {"considered": len(task.train), "kept": len(task.train)}
    report = run.evaluate("seed_refined", refiner)
    assert not [o["error"] for o in report.outcomes if o["error"]]
    assert asked == [ex.db_id for ex in run.test]


def test_unloadable_program_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "program.json"
    bad.write_text("not a saved program")
    result = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--program", str(bad), "--lm", "simulated",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "cannot load program" in said(result)


def test_data_path_without_the_benchmark_layout_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["evaluate", "--task", "bird", "--data", str(tmp_path), "--lm", "simulated",
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "no usable dev questions" in said(result)


def test_a_cached_hero_t_evaluation_is_not_reused_under_other_refinement_settings(tmp_path):
    from dspy_hero.cli.pipeline import RunConfig, StagedRun
    from dspy_hero.lm.scripted import engine_of, scripted_lm
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-sql")
    lm = scripted_lm(lambda req: {"sql": "SELECT 1", "action": "stop", "argument": ""})
    only_failing = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2, refine_only_failing=True))
    only_failing.evaluate("hero_t", only_failing.refiner(task.make_program()))
    calls = engine_of(lm).call_count
    every = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=2, refine_only_failing=False))
    every.evaluate("hero_t", every.refiner(task.make_program()))
    assert engine_of(lm).call_count > calls  # --refine-all after a default run: evaluated again


def test_default_run_directories_are_per_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for task in ("builtin-sql", "builtin-python"):
        result = runner.invoke(app, ["evaluate", "--task", task, "--lm", "simulated", "--limit", "1"])
        assert result.exit_code == 0, result.output
        assert (tmp_path / "hero_runs" / task / "evaluate" / "eval_seed.json").exists()


def optimize_args(out, *extra):
    return ["optimize", "--task", "builtin-sql", "--lm", "simulated", "--rounds", "2", "--candidates", "2",
            "--out", str(out), *extra]


@pytest.fixture(scope="module")
def optimize_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimize")
    result = runner.invoke(app, optimize_args(out, "--max-metric-calls", "60"))
    assert result.exit_code == 0, result.output
    return out


def test_a_changed_configuration_on_an_existing_out_is_refused(optimize_dir, tmp_path):
    program = (optimize_dir / "hero_o_program.json").read_text()
    bigger = runner.invoke(app, optimize_args(optimize_dir, "--max-metric-calls", "90"))
    assert bigger.exit_code == 2, bigger.output
    assert "--max-metric-calls 60 -> 90" in said(bigger) and "another --out" in said(bigger)
    for changed, shown in ((["--max-metric-calls", "60", "--seed", "1"], "--seed 0 -> 1"),
                           (["--auto", "light"], "--auto None -> 'light'")):
        result = runner.invoke(app, optimize_args(optimize_dir, *changed))
        assert result.exit_code == 2 and shown in said(result), result.output
    assert (optimize_dir / "hero_o_program.json").read_text() == program  # the old run is untouched
    same = runner.invoke(app, optimize_args(optimize_dir, "--max-metric-calls", "60", "--threads", "2"))
    assert same.exit_code == 0, same.output  # the recorded settings (threads change no result) resume
    fresh = runner.invoke(app, optimize_args(tmp_path / "new", "--max-metric-calls", "90"))
    assert fresh.exit_code == 0, fresh.output
    assert json.loads((tmp_path / "new" / "hero_o_result.json").read_text())["budget"] == 90


def test_auto_with_max_metric_calls_is_an_error_before_anything_runs(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, optimize_args(out, "--auto", "light", "--max-metric-calls", "40"))
    assert result.exit_code == 2, result.output
    assert "--auto light and --max-metric-calls 40 both set the budget" in said(result)
    assert not out.exists()


def test_settings_of_a_stage_that_never_ran_do_not_block_a_corrected_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    out = tmp_path / "run"
    failed = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "openai/no-such-model", "--limit", "1",
                                 "--out", str(out)])
    assert failed.exit_code == 2 and "cannot be reached" in said(failed)
    fixed = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "simulated", "--limit", "1", "--out", str(out)])
    assert fixed.exit_code == 0, fixed.output
    other_lm = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "openai/no-such-model", "--limit", "1",
                                   "--out", str(out)])
    assert other_lm.exit_code == 2 and "--lm 'simulated' -> 'openai/no-such-model'" in said(other_lm)
    wider = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "simulated", "--limit", "2", "--out", str(out)])
    assert wider.exit_code == 0, wider.output  # --limit is checked by the evaluation cache: re-evaluated
    assert len(json.loads((out / "eval_seed.json").read_text())["outcomes"]) == 2


def test_report_renders_an_optimize_directory(optimize_dir):
    result = runner.invoke(app, ["report", "--out", str(optimize_dir)])
    assert result.exit_code == 0, result.output
    hero = json.loads((optimize_dir / "hero_o_result.json").read_text())
    md = (optimize_dir / "report.md").read_text()
    assert "## HERO-O rounds" in md and md.count("\n| 1 | generate |") == 1
    assert f"{hero['total_metric_calls']}/{hero['budget']} metric calls" in md
    assert hero["final_instructions"]["generate"] in md
    assert (optimize_dir / "fix_to_break.png").stat().st_size > 1000
    assert not (optimize_dir / "accuracy.png").exists()  # nothing was evaluated there
    assert f"{len(hero['rounds'])} rounds" in said(result)


@pytest.mark.parametrize("command, name", [("evaluate", "seed"), ("refine", "seed_refined")])
def test_report_renders_evaluate_and_refine_directories(tmp_path, command, name):
    out = tmp_path / command
    ran = runner.invoke(app, [command, "--task", "builtin-sql", "--lm", "simulated", "--limit", "2", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    result = runner.invoke(app, ["report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / f"eval_{name}.json").read_text())
    data = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in data["rows"]] == [{"seed": "seed prompt"}.get(name, name)]
    assert data["rows"][0]["pass_at_1"] == saved["pass_at_1"] and data["rows"][0]["n"] == 2
    assert data["notes"][0] == "task: builtin-sql"
    assert (out / "accuracy.png").stat().st_size > 1000 and "pass@1" in (out / "report.md").read_text()
    assert not (out / "fix_to_break.png").exists()


def test_report_of_a_demo_directory_rebuilds_from_its_stage_files(demo_dir):
    out, _ = demo_dir
    before = json.loads((out / "results.json").read_text())
    (out / "results.json").unlink()
    result = runner.invoke(app, ["report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    after = json.loads((out / "results.json").read_text())
    assert after["rows"] == before["rows"] and "## HERO-O rounds" in (out / "report.md").read_text()


def test_a_stage_file_of_the_older_format_is_reported_and_then_evaluated_again(tmp_path):
    """Run directories written before the CLI ran through the harness hold bare EvalReports (outcomes by
    index, one LM's usage): `hero report` still renders them, and a re-run evaluates them afresh (they
    carry no fingerprint of the harness's format) instead of reusing them."""
    out = tmp_path / "run"
    out.mkdir()
    old = {"name": "seed", "wall_s": 1.5, "lm_calls": 2, "input_tokens": 30, "output_tokens": 4, "pass_at_1": 0.5,
           "extras": {"fingerprint": "0123456789abcdef"},
           "outcomes": [{"index": 0, "score": 1.0, "feedback": "", "program": "SELECT 1", "error": None,
                         "refinement": None},
                        {"index": 1, "score": 0.0, "feedback": "wrong", "program": "SELECT 2", "error": None,
                         "refinement": None}]}
    (out / "eval_seed.json").write_text(json.dumps(old))
    (out / "task.json").write_text(json.dumps({"task": "builtin-sql", "stages": {}}))
    shown = runner.invoke(app, ["report", "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    row = json.loads((out / "results.json").read_text())["rows"][0]
    assert (row["method"], row["pass_at_1"], row["n"], row["lm_calls"], row["tokens"]) == ("seed prompt", 0.5, 2, 2, 34)
    again = runner.invoke(app, ["evaluate", "--task", "builtin-sql", "--lm", "simulated", "--limit", "2", "--out", str(out)])
    assert again.exit_code == 0, again.output
    from dspy_hero.tasks.registry import load_task

    fresh = json.loads((out / "eval_seed.json").read_text())
    assert fresh["method"] == "seed" and [o["example_id"] for o in fresh["outcomes"]] == \
        [ex.example_id for ex in load_task("builtin-sql").test[:2]]
