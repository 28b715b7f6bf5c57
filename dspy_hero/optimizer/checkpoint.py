"""Checkpoint and resume: an append-only journal of everything that spent budget, plus a state file.

Every completed rollout and every reflection output is appended to ``journal.jsonl`` (one JSON
object per line, flushed and fsynced before the run moves on). Resuming re-runs the same
deterministic loop but reads those records instead of calling the LM or the metric, so the resumed
run takes the same decisions, ends with the same result, and never pays twice for a completed
rollout. Why a journal rather than a snapshot of the loop's variables: the loop state is derived
data; keeping only the paid-for facts makes resume exact at any kill point, including mid-round.

``state.json`` (written atomically: temp file + ``os.replace``) holds the format version and a
fingerprint of the data and settings, so a log_dir is never silently reused for a different run.
A truncated last journal line (a kill mid-write) is dropped; any other damage is a clear error.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from dspy_hero.files import write_json_atomic

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """The log_dir cannot be resumed: corrupted, from another version, or from a different run."""


def fingerprint(payload: Any) -> str:
    blob = json.dumps(payload, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Journal:
    """The journal and state of one run in `log_dir` (see module docstring)."""

    def __init__(self, log_dir: str | os.PathLike, run_fingerprint: str):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / "state.json"
        self.journal_path = self.dir / "journal.jsonl"
        self.fingerprint = run_fingerprint
        self._lock = threading.Lock()
        self.rollouts: dict[tuple[str, str], dict[str, Any]] = {}
        self.reflections: dict[str, dict[str, Any]] = {}
        self.state: dict[str, Any] = {}
        if self.state_path.exists():
            self.state = self._read_state()
            self._load_journal()
        elif self.journal_path.exists() and self.journal_path.stat().st_size > 0:
            raise CheckpointError(f"{self.journal_path} exists without {self.state_path.name}; use a fresh log_dir")
        else:
            self.state = {"format_version": FORMAT_VERSION, "fingerprint": run_fingerprint, "status": "running"}
            write_json_atomic(self.state_path, self.state)
        self.resumed = bool(self.rollouts or self.reflections)
        self._file = open(self.journal_path, "a", encoding="utf-8")

    def _read_state(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"corrupted checkpoint state {self.state_path}: {exc}") from exc
        if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
            version = state.get("format_version") if isinstance(state, dict) else None
            raise CheckpointError(
                f"checkpoint {self.state_path} has format version {version!r}; this dspy-hero writes "
                f"version {FORMAT_VERSION}. Use a fresh log_dir."
            )
        if state.get("fingerprint") != self.fingerprint:
            raise CheckpointError(
                f"log_dir {self.dir} holds a run with different data, settings, models or metric; use a fresh log_dir "
                "to start a new run (resume needs the same student, trainset, valset and settings)"
            )
        return state

    def _load_journal(self) -> None:
        if not self.journal_path.exists():
            return
        raw = self.journal_path.read_bytes()
        good_end = 0
        lines = raw.split(b"\n")
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if not line.strip():
                good_end += len(line) + (0 if last else 1)
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
                if last:  # no newline after it: the write was cut off
                    raise ValueError("unterminated line")
            except (ValueError, UnicodeDecodeError) as exc:
                if last:
                    break
                raise CheckpointError(f"corrupted journal {self.journal_path} at line {i + 1}: {exc}") from exc
            if not self._apply(rec):
                raise CheckpointError(f"corrupted journal {self.journal_path} at line {i + 1}: not a rollout or "
                                      f"reflection record: {line[:120]!r}")
            good_end += len(line) + 1
        if good_end < len(raw):  # drop the cut-off tail so new records start on a fresh line
            with open(self.journal_path, "r+b") as f:
                f.truncate(good_end)

    def _apply(self, rec: Any) -> bool:
        """Index one journal record; False when it is not a well-formed record of a known kind."""
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
            return False
        if rec.get("kind") == "rollout" and isinstance(rec.get("example_id"), str) and isinstance(rec.get("result"), dict):
            self.rollouts[(rec["key"], rec["example_id"])] = rec["result"]
            return True
        if rec.get("kind") == "reflection" and isinstance(rec.get("output"), dict):
            self.reflections[rec["key"]] = rec["output"]
            return True
        return False

    def _append(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, ensure_ascii=False, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def replay_rollout(self, key: str, example_id: str) -> dict[str, Any] | None:
        return self.rollouts.get((key, example_id))

    def record_rollout(self, key: str, example_id: str, result: dict[str, Any]) -> None:
        self.rollouts[(key, example_id)] = result
        self._append({"kind": "rollout", "key": key, "example_id": example_id, "result": result})

    def replay_reflection(self, key: str) -> dict[str, Any] | None:
        return self.reflections.get(key)

    def record_reflection(self, key: str, output: dict[str, Any]) -> None:
        self.reflections[key] = output
        self._append({"kind": "reflection", "key": key, "output": output})

    def update_state(self, **fields: Any) -> None:
        self.state.update(fields)
        write_json_atomic(self.state_path, self.state)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def journaled_lm(inner: Any, journal: Journal, prefix: str) -> Any:
    """`inner` (the reflection LM) with each call's outputs journaled under keys starting with `prefix`.

    Keyed by a hash of the request (messages + call kwargs), so a resumed run re-reads a completed
    reflection call even when the run was killed between the two calls of one proposal. It is a
    `dspy.BaseLM` (DSPy's predictors require one) that delegates everything else to `inner`.
    """
    import dspy
    from dspy.clients.base_lm import BaseLM

    from dspy_hero.lm.usage import Usage, UsageMeter

    class _Journaled(BaseLM):
        def __init__(self) -> None:  # no BaseLM.__init__: every other attribute comes from `inner`
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.__dict__["_inner"], name)

        supported_params = property(lambda self: self._inner.supported_params)
        supports_decision_requests = property(lambda self: getattr(self._inner, "supports_decision_requests", False))
        supports_function_calling = property(lambda self: self._inner.supports_function_calling)
        supports_reasoning = property(lambda self: self._inner.supports_reasoning)
        supports_response_schema = property(lambda self: self._inner.supports_response_schema)

        def __call__(self, prompt=None, messages=None, **kwargs):
            key = prefix + fingerprint({"prompt": prompt, "messages": messages, "kwargs": kwargs})[:24]
            outer = dspy.settings.usage_tracker
            rec = journal.replay_reflection(key)
            if rec is None:
                meter = UsageMeter()
                with dspy.context(usage_tracker=meter):
                    outputs = self._inner(prompt, messages=messages, **kwargs)
                rec = {"outputs": json.loads(json.dumps(outputs, default=str)),
                       "usage": [meter.total.calls, meter.total.input_tokens, meter.total.output_tokens]}
                journal.record_reflection(key, rec)
            if isinstance(outer, UsageMeter):
                outer.add(Usage(*rec["usage"]))
            return rec["outputs"]

    return _Journaled()
