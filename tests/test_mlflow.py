"""HERO-O's MLflow logging for real, on a local file store in tmp_path: settings, per-round figures, the
final selection score, the final instructions and the HeroResult artifact, from a scripted compile."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dspy
import pytest
from optimizer_toy import (
    COUNT_RULE,
    SUM_RULE,
    feedback_metric,
    make_examples,
    program,
    reflection_lm,
    task_lm,
)

from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.mlflow_log import log_compile

mlflow = pytest.importorskip(
    "mlflow", reason="the MLflow tests need mlflow-skinny, from the 'dev' extra: python -m pip install -e '.[dev]'"
)

ROOT = Path(__file__).resolve().parents[1]


def compile_toy(**kw):
    """A two-round scripted compile with a valset, so one rule is adopted and a final selection runs
    (one reflection call a round: the scripted reflector hands out one answer per call)."""
    opt = HeroOptimizer(feedback_metric, reflection_lm=reflection_lm([[COUNT_RULE], [SUM_RULE]]), num_rounds=2,
                        max_metric_calls=400, max_proposal_calls=1, display_progress=False, **kw)
    with dspy.context(lm=task_lm()):
        out = opt.compile(program(), make_examples(45), valset=make_examples(12, start=100))
    return opt, out


@pytest.fixture(scope="module")
def compiled():
    """Compiled while MLflow is not watching (no run, no autolog): the result is logged by each test."""
    assert mlflow.active_run() is None
    return compile_toy()


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 otherwise refuses file stores
    previous = mlflow.get_tracking_uri()
    uri = (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(uri)
    yield mlflow.MlflowClient(uri)
    mlflow.set_tracking_uri(previous)


def all_runs(client):
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def test_logs_into_the_active_run(compiled, store):
    opt, out = compiled
    res = out.detailed_results
    assert any(r.adopted_candidate_id for r in res.rounds), "the toy compile should adopt a rule"
    with mlflow.start_run() as run:
        log_compile(opt.get_params(), res)
    data = store.get_run(run.info.run_id).data
    # settings: numbers as they are, the reflection LM by model name, the metric by its qualified name
    assert data.params["hero.num_rounds"] == "2" and data.params["hero.max_metric_calls"] == "400"
    assert data.params["hero.reflection_lm"] == opt.reflection_lm.model == "scripted/toy-reflect"
    assert data.params["hero.metric"].endswith("feedback_metric")
    # per-round figures, one step per round
    calls = store.get_metric_history(run.info.run_id, "hero.metric_calls")
    assert [m.step for m in calls] == [r.round for r in res.rounds]
    assert [m.value for m in calls] == [c["metric_calls"] for c in res.cumulative_fix_break]
    adopted = store.get_metric_history(run.info.run_id, "hero.round_adopted")
    assert [m.value for m in adopted] == [float(r.adopted_candidate_id is not None) for r in res.rounds]
    fixes = store.get_metric_history(run.info.run_id, "hero.adopted_fixes")
    assert fixes[-1].value == res.adopted_fixes > 0
    # the final selection score is the selected archive entry's mean on the selection pool
    selected = next(e for e in res.archive if e.selected)
    assert selected.selection_mean is not None
    assert data.metrics["hero.selection_score"] == pytest.approx(selected.selection_mean)
    assert data.metrics["hero.total_metric_calls"] == res.total_metric_calls
    assert data.tags["hero.final_entry_id"] == res.final_entry_id
    # the final instructions and the HeroResult as artifacts
    folder = Path(store.download_artifacts(run.info.run_id, "hero"))
    final = json.loads((folder / "final_instructions.json").read_text())
    assert final == res.final_instructions == {"generate": out.generate.signature.instructions}
    assert (folder / "instructions" / "generate.txt").read_text() == final["generate"]
    saved = json.loads((folder / "hero_result.json").read_text())
    assert saved["final_entry_id"] == res.final_entry_id and len(saved["rounds"]) == len(res.rounds)
    assert saved["rounds"][0]["candidates"][0]["edit"] == res.rounds[0].candidates[0].edit


def test_no_run_and_no_autolog_logs_nothing(compiled, store):
    opt, out = compiled
    log_compile(opt.get_params(), out.detailed_results)
    assert all_runs(store) == []


def test_without_mlflow_imported_it_is_not_imported(compiled, monkeypatch):
    """Nothing can be active when mlflow was never imported: no import, no run, no error."""
    opt, out = compiled
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    log_compile(opt.get_params(), out.detailed_results)
    assert "mlflow" not in sys.modules


def test_a_store_that_cannot_be_written_is_a_warning(compiled, tmp_path, monkeypatch, caplog):
    opt, out = compiled
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    previous = mlflow.get_tracking_uri()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    mlflow.set_tracking_uri((tmp_path / "ok").as_uri())
    try:
        with mlflow.start_run():
            mlflow.set_tracking_uri((blocker / "mlruns").as_uri())
            with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer.mlflow_log"):
                log_compile(opt.get_params(), out.detailed_results)
            mlflow.set_tracking_uri((tmp_path / "ok").as_uri())
    finally:
        mlflow.set_tracking_uri(previous)
    assert "could not log the compile to MLflow" in caplog.text and "MLFLOW_TRACKING_URI" in caplog.text


AUTOLOG_SCRIPT = """
import inspect, json, os, sys
import mlflow
mlflow.set_tracking_uri(os.environ["STORE"])
if os.environ["ORDER"] == "autolog-first":
    mlflow.dspy.autolog()
from test_mlflow import compile_toy
if os.environ["ORDER"] == "import-first":
    mlflow.dspy.autolog(log_compiles=True)
opt, out = compile_toy()  # compile logs by itself
client = mlflow.MlflowClient()
runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
print(json.dumps([{"params": r.data.params, "metrics": r.data.metrics,
                   "artifacts": [a.path for a in client.list_artifacts(r.info.run_id)]
                                + [a.path for a in client.list_artifacts(r.info.run_id, "hero")]}
                  for r in runs]))
print(json.dumps(out.detailed_results.final_instructions))
"""


@pytest.mark.parametrize("order", ["autolog-first", "import-first"])
def test_autolog_in_either_import_order_gets_one_run_with_the_compile(order, tmp_path):
    """mlflow.dspy.autolog() before dspy_hero is imported (it cannot patch HeroOptimizer.compile), and
    after it with log_compiles=True (it patches compile and manages the run): one run holds it all."""
    env = {**os.environ, "STORE": (tmp_path / "mlruns").as_uri(), "ORDER": order, "MLFLOW_ALLOW_FILE_STORE": "true",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(AUTOLOG_SCRIPT)], check=False, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    runs, final = json.loads(lines[-2]), json.loads(lines[-1])
    hero_runs = [r for r in runs if "hero.num_rounds" in r["params"]]
    assert len(hero_runs) == 1, runs
    run = hero_runs[0]
    assert run["metrics"]["hero.selection_score"] >= 0 and run["metrics"]["hero.rounds"] == 2
    assert {"hero/final_instructions.json", "hero/hero_result.json"} <= set(run["artifacts"])
    assert COUNT_RULE in final["generate"]
    if order == "import-first":  # logged inside the run autolog manages around compile
        assert len(runs) == 1 and "best_model.json" in run["artifacts"]
