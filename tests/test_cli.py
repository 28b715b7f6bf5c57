"""The `hero` command, end to end on the built-in SQL task with the scripted simulation (real SQLite,
real HERO-O / HERO-T loops, scripted LMs), plus the clear one-line errors a user can cause."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dspy_hero.cli.app import app

runner = CliRunner()


def said(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    result = runner.invoke(app, ["demo", "--lm", "simulated", "--out", str(out), "--max-metric-calls", "300",
                                 "--rounds", "5", "--candidates", "4", "--test-limit", "20"])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_demo_writes_a_complete_report(demo_dir):
    out, output = demo_dir
    for name in ("results.json", "report.md", "accuracy.png", "fix_to_break.png", "hero_o_program.json",
                 "hero_o_result.json", "eval_seed.json", "eval_hero_o.json", "eval_hero_o_hero_t.json"):
        assert (out / name).exists(), name
    data = json.loads((out / "results.json").read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {"seed prompt", "HERO-O", "HERO-O + HERO-T"}
    assert all(r["n"] == 20 for r in rows.values())
    hero = data["hero_o"]
    assert hero["total_metric_calls"] <= 300
    # In the simulation the seed prompt lacks every rule, so HERO-O can only gain by adopting some.
    assert rows["HERO-O"]["pass_at_1"] >= rows["seed prompt"]["pass_at_1"]
    assert hero["adopted_fixes"] >= hero["adopted_breaks"]
    assert not [n for n in data["notes"] if "raised" in n], data["notes"]  # HERO-T reached its environments
    assert "HERO-O" in output and "pass@1" in output


def test_demo_resumes_without_redoing_finished_stages(demo_dir):
    out, _ = demo_dir
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("eval_*.json")}
    result = runner.invoke(app, ["demo", "--lm", "simulated", "--out", str(out), "--max-metric-calls", "300",
                                 "--rounds", "5", "--candidates", "4", "--test-limit", "20"])
    assert result.exit_code == 0, result.output
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("eval_*.json")} == before


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
    assert result.exit_code == 2 and "no results.json" in said(result)


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
    assert not [o.error for o in report.outcomes if o.error]
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
