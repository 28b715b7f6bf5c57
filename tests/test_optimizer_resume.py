"""Checkpoint/resume of HeroOptimizer: interrupted runs resume to the same result without paying
twice for completed rollouts; damaged or foreign checkpoints give clear errors."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import pytest
from optimizer_toy import answer_for, feedback_metric, make_examples, program

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.optimizer.checkpoint import CheckpointError
from dspy_hero.optimizer.hero import HeroOptimizer

TESTS = Path(__file__).resolve().parent


class Interrupted(BaseException):
    """Stands in for a kill: not an Exception, so nothing in the loop may swallow it."""


def counting_lms(stop_task_after=None, stop_reflect_after=None):
    from optimizer_toy import kind_reflection_lm

    n = {"task": 0}

    def task(req):
        n["task"] += 1
        if stop_task_after is not None and n["task"] > stop_task_after:
            raise Interrupted()
        return {"sql": answer_for(req.inputs["question"], req.instructions)}

    rl = kind_reflection_lm()
    if stop_reflect_after is not None:
        inner = engine_of(rl).script
        r = {"n": 0}

        def reflect(req):
            r["n"] += 1
            if r["n"] > stop_reflect_after:
                raise Interrupted()
            return inner(req)

        engine_of(rl).script = reflect
    return scripted_lm(task), rl


def compile_once(log_dir, tl, rl, threads=1):
    with dspy.context(lm=tl):
        opt = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=400, num_rounds=3,
                            log_dir=str(log_dir) if log_dir else None, num_threads=threads, display_progress=False)
        return opt.compile(program(), make_examples(48))


def comparable(res):
    d = res.to_dict()
    d.pop("replayed_metric_calls")
    for where in ("settings", "log_dir"):  # where and how it ran (log_dir, threads), not what it decided
        d.pop(where)
    return d


@pytest.fixture(scope="module")
def reference():
    tl, rl = counting_lms()
    out = compile_once(None, tl, rl)
    return out, engine_of(tl).call_count, engine_of(rl).call_count


@pytest.mark.parametrize("stop_task,stop_reflect", [(3, None), (40, None), (95, None), (None, 1), (None, 3)])
def test_resume_after_interruption_gives_same_result_without_respending(tmp_path, reference, stop_task, stop_reflect):
    ref, ref_task_calls, ref_reflect_calls = reference
    tl, rl = counting_lms(stop_task, stop_reflect)
    with pytest.raises(Interrupted):
        compile_once(tmp_path, tl, rl)
    paid_first = engine_of(tl).call_count - (stop_task is not None)  # the interrupted call was not completed
    reflect_first = engine_of(rl).call_count - (stop_reflect is not None)
    tl2, rl2 = counting_lms()
    out = compile_once(tmp_path, tl2, rl2)
    assert out.generate.signature.instructions == ref.generate.signature.instructions
    assert comparable(out.detailed_results) == comparable(ref.detailed_results)
    assert paid_first + engine_of(tl2).call_count == ref_task_calls  # nothing paid twice
    assert reflect_first + engine_of(rl2).call_count == ref_reflect_calls
    assert out.detailed_results.replayed_metric_calls == paid_first
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["status"] == "completed" and (tmp_path / "result.json").exists()


def test_completed_run_replays_entirely_from_the_journal(tmp_path, reference, caplog):
    ref = reference[0]
    compile_once(tmp_path, *counting_lms())
    assert "resuming" not in caplog.text
    tl, rl = counting_lms()
    with caplog.at_level(logging.INFO, logger="dspy_hero.optimizer"):
        out = compile_once(tmp_path, tl, rl, threads=4)
    assert f"HERO-O: resuming from {tmp_path}" in caplog.text
    assert engine_of(tl).call_count == 0 and engine_of(rl).call_count == 0
    assert comparable(out.detailed_results) == comparable(ref.detailed_results)


def test_truncated_last_journal_line_is_ignored(tmp_path, reference):
    tl, rl = counting_lms(stop_task_after=30)
    with pytest.raises(Interrupted):
        compile_once(tmp_path, tl, rl)
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a write cut off by a kill
    tl2, rl2 = counting_lms()
    out = compile_once(tmp_path, tl2, rl2)
    assert comparable(out.detailed_results) == comparable(reference[0].detailed_results)
    assert engine_of(tl2).call_count == reference[1] - (30 - 1)  # only the cut-off rollout is re-bought
    for line in journal.read_text().splitlines():
        json.loads(line)  # the journal is clean again


def test_damaged_or_foreign_checkpoints_give_clear_errors(tmp_path):
    compile_once(tmp_path, *counting_lms())
    state = tmp_path / "state.json"
    good = state.read_text()
    state.write_text(good[:20])
    with pytest.raises(CheckpointError, match="corrupted checkpoint state"):
        compile_once(tmp_path, *counting_lms())
    data = json.loads(good)
    state.write_text(json.dumps({**data, "format_version": 999}))
    with pytest.raises(CheckpointError, match="format version 999"):
        compile_once(tmp_path, *counting_lms())
    state.write_text(good)
    tl, rl = counting_lms()
    with dspy.context(lm=tl):
        with pytest.raises(CheckpointError, match="different data, settings, models or metric"):
            HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=400, num_rounds=3, log_dir=str(tmp_path),
                          display_progress=False).compile(program(), make_examples(47))
    def other_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        return feedback_metric(gold, pred, trace, pred_name, pred_trace)

    with dspy.context(lm=tl):  # same data and settings, another metric: its journaled scores do not apply
        with pytest.raises(CheckpointError, match="models or metric"):
            HeroOptimizer(other_metric, reflection_lm=rl, max_metric_calls=400, num_rounds=3, log_dir=str(tmp_path),
                          display_progress=False).compile(program(), make_examples(48))
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[2] = "{not json"
    journal.write_text("\n".join(lines) + "\n")
    with pytest.raises(CheckpointError, match="corrupted journal"):
        compile_once(tmp_path, *counting_lms())
    for damaged in ('{"kind": "rollout", "key": "k"}', "[1, 2]", '{"kind": "other", "key": "k", "output": {}}'):
        lines[2] = damaged  # valid JSON, but not a record this journal wrote
        journal.write_text("\n".join(lines) + "\n")
        with pytest.raises(CheckpointError, match="line 3: not a rollout or reflection record"):
            compile_once(tmp_path, *counting_lms())
    assert engine_of(tl).call_count == 0


CHILD = r"""
import os, sys, time, hashlib
sys.path.insert(0, {tests!r})
import dspy
from dspy_hero.lm.scripted import scripted_lm
from dspy_hero.optimizer.hero import HeroOptimizer
from optimizer_toy import answer_for, feedback_metric, kind_reflection_lm, make_examples, program

paid = open(os.environ["PAID_LOG"], "a")

def task(req):
    time.sleep(0.004)
    key = hashlib.sha256(req.instructions.encode()).hexdigest()[:10] + "|" + req.inputs["question"]
    paid.write(key + "\n"); paid.flush(); os.fsync(paid.fileno())
    return {{"sql": answer_for(req.inputs["question"], req.instructions)}}

with dspy.context(lm=scripted_lm(task)):
    out = HeroOptimizer(feedback_metric, reflection_lm=kind_reflection_lm(), max_metric_calls=400, num_rounds=3,
                        log_dir=sys.argv[1], num_threads=1, display_progress=False).compile(program(), make_examples(48))
print("FINAL", repr(out.generate.signature.instructions))
"""


def test_sigkill_at_random_points_then_resume(tmp_path, reference):
    import random

    ref, ref_task_calls, _ = reference
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS)))
    paid = tmp_path / "paid.log"
    env = {**os.environ, "PAID_LOG": str(paid)}
    log_dir = tmp_path / "run"
    rng = random.Random(7)
    kills = 0

    def paid_count():
        return len(paid.read_text().splitlines()) if paid.exists() else 0

    for _ in range(4):
        target = paid_count() + rng.randint(5, 70)
        proc = subprocess.Popen([sys.executable, str(script), str(log_dir)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while paid_count() < target and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run([sys.executable, str(script), str(log_dir)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    final = done.stdout.split("FINAL ", 1)[1].strip()
    assert final == repr(ref.generate.signature.instructions)
    keys = paid.read_text().splitlines()
    duplicates = len(keys) - len(set(keys))
    assert kills >= 2
    assert duplicates <= kills  # at most the one in-flight rollout per kill is bought again
    assert len(set(keys)) == ref_task_calls
    result = json.loads((log_dir / "result.json").read_text())
    assert result["total_metric_calls"] == comparable(ref.detailed_results)["total_metric_calls"]
