"""The rounds a compare.py HERO-O run has completed, rebuilt from its journal without calling any model.

Why: HERO-O writes its round records (every candidate, its focus, its acceptance decision) only when
the run finishes, but every rollout and reflection output it paid for is in
``<out>/logs/hero_o/journal.jsonl`` as soon as it is made. The loop is deterministic given those
records, so replaying it over a copy of the journal rebuilds exactly the rounds the live run made;
the replay stops at the first rollout or LM call that the journal does not hold (the point where a
live run would have to pay), so a run killed at a deadline, or one still running, can be reported.
Nothing in `<out>` is changed; no model is started.

    python benchmarks/hero_o_replay.py --replay-out rounds.json <the compare.py arguments of the run>

``--proposal-style STYLE`` replays the run as if it had used another `ProposalStyle`: the journal's
whole-proposal records (the run's own style's proposals) are not read, each reflection-LM call is
answered from the record of the same request (under whichever proposal it was recorded: the run's
server is deterministic), and the run's fingerprint is checked with its recorded style, so every
other setting must match. A replay that completes asked nothing the run did not ask, and its rounds
are exactly what a live run in that style would have done; one that stops names the first call it
would have paid for.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import logging
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.bench.accounting import CountingMetric, track_usage
from dspy_hero.bench.methods import RunContext, hero_o_optimizer
from dspy_hero.files import write_json_atomic
from dspy_hero.optimizer import hero as hero_module
from dspy_hero.optimizer import run as run_module
from dspy_hero.optimizer.checkpoint import Journal
from dspy_hero.optimizer.settings import ProposalStyle

_spec = importlib.util.spec_from_file_location("hero_benchmarks_compare", Path(__file__).with_name("compare.py"))
compare = sys.modules.get("hero_benchmarks_compare") or importlib.util.module_from_spec(_spec)
if "hero_benchmarks_compare" not in sys.modules:
    sys.modules["hero_benchmarks_compare"] = compare  # its dataclasses need the module registered
    _spec.loader.exec_module(compare)

logger = logging.getLogger("hero.replay")


class JournalEnd(BaseException):
    """The replay reached a call the journal does not hold. A BaseException, so that the loop's
    per-proposal and per-rollout error handling (``except Exception``) cannot swallow it."""


def is_lm_call(key: str) -> bool:
    """A reflection record's key: "r<round>:<predictor>:<proposal hash>" is a whole proposal (run._reflect),
    that key plus ":<request hash>" one LM call inside it (checkpoint.journaled_lm)."""
    return key.count(":") >= 3


def request_hash(key: str) -> str:
    """The hash of an LM call's whole request (messages and call arguments): the last part of its key."""
    return key.rsplit(":", 1)[1]


class ReplayOnlyJournal(Journal):
    """A journal that answers only from its records: a miss ends the replay instead of paying."""

    def replay_rollout(self, key: str, example_id: str) -> dict[str, Any] | None:
        rec = super().replay_rollout(key, example_id)
        if rec is None:
            raise JournalEnd(f"rollout {key} on {example_id}")
        return rec

    def replay_reflection(self, key: str) -> dict[str, Any] | None:
        rec = super().replay_reflection(key)
        # A whole proposal (key "r<round>:<predictor>:<hash>") missing is normal: its LM calls
        # ("...:<hash>:<call hash>") are looked up next, and one of those missing is the end.
        if rec is None and is_lm_call(key):
            raise JournalEnd(f"reflection LM call {key}")
        return rec

    def record_rollout(self, key: str, example_id: str, result: dict[str, Any]) -> None:
        raise JournalEnd(f"rollout {key} on {example_id} would be paid")

    def record_reflection(self, key: str, output: dict[str, Any]) -> None:
        raise JournalEnd(f"reflection {key} would be paid")


class AmbiguousRecord(LookupError):
    """The same request was recorded with different outputs: no answer can be taken from the records."""


def index_by_request(reflections: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A journal's LM-call records by the hash of their whole request."""
    by_request: dict[str, list[dict[str, Any]]] = {}
    for key, output in reflections.items():
        if is_lm_call(key):
            by_request.setdefault(request_hash(key), []).append(output)
    return by_request


def same_request(by_request: dict[str, list[dict[str, Any]]], key: str) -> dict[str, Any] | None:
    """The record of the LM call `key` made under another proposal (None: never made). A proposal's key
    hashes its context, which in another style can hold other rejected candidates; the call's own hash
    covers its whole request, so the same request is this call (the run's server is deterministic).
    Outputs that differ would make the answer a guess: AmbiguousRecord."""
    same = by_request.get(request_hash(key), [])
    if any(o["outputs"] != same[0]["outputs"] for o in same):
        raise AmbiguousRecord(f"reflection LM call {key}: recorded with different outputs")
    return same[0] if same else None


class AnsweredByRequest:
    """Mixin for a journal whose LM calls may have been recorded under another proposal's key: a call
    is answered by its own record, else by the record of the same request (`same_request`)."""

    reflections: dict[str, dict[str, Any]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.by_request = index_by_request(self.reflections)
        self.answered_from_other_proposal = 0

    def recorded_call(self, key: str) -> dict[str, Any] | None:
        """The record answering LM call `key` (None: never made); AmbiguousRecord as `same_request`."""
        rec = self.reflections.get(key)
        if rec is None:
            rec = same_request(self.by_request, key)
            self.answered_from_other_proposal += rec is not None
        return rec


class RestyledJournal(AnsweredByRequest, ReplayOnlyJournal):
    """`ReplayOnlyJournal` for a replay in another proposal style: whole-proposal records hold the
    recorded style's proposals, so they are neither read nor written; the LM calls inside a proposal
    are answered from their records, and one missing ends the replay."""

    def replay_reflection(self, key: str) -> dict[str, Any] | None:
        if not is_lm_call(key):  # a whole proposal: the recorded style's
            return None
        try:
            rec = self.recorded_call(key)
        except AmbiguousRecord as exc:
            raise JournalEnd(str(exc)) from exc
        if rec is None:
            raise JournalEnd(f"reflection LM call {key}")
        return rec

    def record_reflection(self, key: str, output: dict[str, Any]) -> None:
        if not is_lm_call(key):  # this style's proposal, built from recorded calls: nothing is paid
            return
        super().record_reflection(key, output)


class ContinuedJournal(AnsweredByRequest, Journal):
    """The journal of a live run that continues a recorded one under today's settings (``--continue-live``):
    rollouts and LM calls the recorded run made are answered from its records (an LM call by its request,
    under whichever proposal it was recorded), everything else is paid and journaled as usual, so the
    continuation is resumable. Whole-proposal records are never read: they may hold another style's
    proposals, and each proposal is rebuilt from its journaled calls at no cost."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.paid_after_ambiguous = 0

    def replay_reflection(self, key: str) -> dict[str, Any] | None:
        if not is_lm_call(key):
            return None
        try:
            return self.recorded_call(key)
        except AmbiguousRecord as exc:
            logger.warning("%s; asking the model again", exc)
            self.paid_after_ambiguous += 1
            return None

    def record_reflection(self, key: str, output: dict[str, Any]) -> None:
        if self.reflections.get(key) == output:  # a proposal rebuilt on resume: already journaled
            return
        super().record_reflection(key, output)
        if is_lm_call(key):
            self.by_request.setdefault(request_hash(key), []).append(output)


def capturing(cls: type, instances: list[Any]) -> type:
    """A subclass of `cls` whose instances are appended to `instances`: to read the state of objects
    that a run (HERO-O's loop, compare.py) constructs itself."""

    class Captured(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            instances.append(self)

    Captured.__name__ = Captured.__qualname__ = f"Captured{cls.__name__}"
    return Captured


@contextlib.contextmanager
def replay_only(runs: list[Any], recorded_style: ProposalStyle | None = None) -> Iterator[None]:
    """Within: HERO-O runs use ReplayOnlyJournal and are appended to `runs` (to read their state).
    With `recorded_style`, a run may use another proposal style than the one it was recorded with:
    its fingerprint is computed with `recorded_style` and it reads the journal as `RestyledJournal`."""

    class CapturedRun(capturing(hero_module.HeroRun, runs)):
        def _fingerprint(self) -> str:
            if recorded_style is None:
                return super()._fingerprint()
            used, self.s = self.s, replace(self.s, proposal_style=recorded_style)
            try:
                return super()._fingerprint()
            finally:
                self.s = used

    saved = run_module.Journal, hero_module.HeroRun
    run_module.Journal = ReplayOnlyJournal if recorded_style is None else RestyledJournal
    hero_module.HeroRun = CapturedRun
    try:
        yield
    finally:
        run_module.Journal, hero_module.HeroRun = saved


def offline_lms(config: Any, meta: dict[str, Any], examples: Sequence[dspy.Example]) -> tuple[Any, Any]:
    """LMs with the names (and, for the embedded model, the context window and max_tokens) of the run's
    LMs, so the run's fingerprint and evidence sizing match; they are never called."""
    if config.simulate:
        task_lm, refl_lm, _, _ = compare.make_lms(config, examples)  # scripted: no model either
        return task_lm, refl_lm
    if config.lm:
        task_lm = dspy.LM(config.lm, cache=False)
    else:
        from dspy_hero.lm.local import local_lm

        defaults = {k: p.default for k, p in inspect.signature(local_lm).parameters.items()}
        task_lm = dspy.LM(meta["task_lm"], temperature=defaults["temperature"], max_tokens=defaults["max_tokens"],
                          cache=False, context_window=defaults["n_ctx"])
    refl_lm = dspy.LM(config.reflection_lm, cache=False) if config.reflection_lm else task_lm.copy()
    return track_usage(task_lm), track_usage(refl_lm)


def replay(config: Any, proposal_style: str | None = None) -> dict[str, Any]:
    """The completed rounds of the HERO-O run in `config.out`, in its own proposal style or in
    `proposal_style` (see the module docstring)."""
    out = Path(config.out)
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    source = out / "logs" / "hero_o"
    if not (source / "journal.jsonl").is_file():
        raise FileNotFoundError(f"{source / 'journal.jsonl'} not found: no HERO-O run in {out}")
    task = compare.load_task(config)
    runs: list[Any] = []
    stopped = None
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp) / "hero_o"
        shutil.copytree(source, log_dir)
        for name in ("result.json", "detailed_results.json"):
            (log_dir / name).unlink(missing_ok=True)
        try:
            train, val, _ = compare.optimization_pools(task, config.train_size, config.val_fraction, config.split_seed)
            train, val = compare.with_env_refs(train), compare.with_env_refs(val)
            if [e.example_id for e in train] != meta["train_ids"] or [e.example_id for e in val] != meta["val_ids"]:
                raise ValueError(f"these arguments give other pools than the run in {out}; pass its compare.py arguments")
            task_lm, refl_lm = offline_lms(config, meta, [*train, *val])
            args = compare.hero_o_args(config)
            recorded = None
            if proposal_style is not None:
                recorded = ProposalStyle(args.get("proposal_style", ProposalStyle.AUTO))
                args = {**args, "proposal_style": ProposalStyle(proposal_style).value}
            ctx = RunContext(task=task, train=train, val=val, test=[], task_lm=task_lm, reflection_lm=refl_lm,
                             budget=int(meta["budget"]), threads=config.threads, seed=config.seed, out_dir=out,
                             optimizer_args=args)
            with replay_only(runs, recorded), dspy.context(lm=task_lm):
                optimizer = hero_o_optimizer(ctx, CountingMetric(task.metric), log_dir)
                optimizer.display_progress = False  # volatile: not part of the run's fingerprint
                try:
                    optimizer.compile(task.make_program(), trainset=train, valset=val)
                except JournalEnd as end:
                    stopped = str(end)
        finally:
            task.close()
    if not runs:
        raise RuntimeError("the HERO-O run was not constructed")
    run = runs[0]
    result = run.result
    return {
        "run_dir": str(out), "complete": stopped is None, "stopped_at": stopped,
        "metric_calls_replayed": run.budget.spent if hasattr(run, "budget") else None,
        "budget": result.budget, "pools": result.pools, "warnings": result.warnings,
        "proposal_style": proposal_style or "as recorded",
        "reflection_usage": asdict(run.reflection_usage.total) if hasattr(run, "reflection_usage") else None,
        "lm_calls_answered_from_another_proposal": getattr(getattr(run, "journal", None), "answered_from_other_proposal", None),
        "adopted_fixes": result.adopted_fixes, "adopted_breaks": result.adopted_breaks,
        "rounds": [asdict(r) for r in result.rounds],
        "archive": [asdict(a) for a in run.archive],
        "final": asdict(result) if stopped is None else None,
    }


# Methods whose saved results do not depend on HERO-O's: a continuation keeps them for its report.
INDEPENDENT_METHODS = tuple(m for m in compare.METHODS if m != "hero_o" and m not in compare.NEEDS)


def continue_live(config: Any, into: str | Path) -> dict[str, Any]:
    """Continue the HERO-O run in `config.out` live, under today's code and settings, in `into`: its
    journal is copied there (once: a second call resumes the continuation), the recorded run's
    rollouts and LM calls are answered from it (`ContinuedJournal`) and the rest is paid; then the
    returned program is evaluated on the run's test set as compare.py does. `config.out` is not
    changed. The run's fingerprint must match today's settings, or the journal refuses to resume.
    `into/continuation.json` says what was paid: the two journals' record counts and this call's
    counters of requests answered under another proposal or asked again."""
    source, into = Path(config.out), Path(into)
    src_log, log_dir = source / "logs" / "hero_o", into / "logs" / "hero_o"
    if not (log_dir / "journal.jsonl").is_file():
        if not (src_log / "journal.jsonl").is_file():
            raise FileNotFoundError(f"{src_log / 'journal.jsonl'} not found: no HERO-O run in {source}")
        log_dir.mkdir(parents=True)
        (into / "methods").mkdir(exist_ok=True)
        shutil.copy2(source / "meta.json", into / "meta.json")
        for method in INDEPENDENT_METHODS:  # e.g. the seed's evaluation, reused when HERO-O returns the seed
            if (source / "methods" / f"{method}.json").is_file():
                shutil.copy2(source / "methods" / f"{method}.json", into / "methods" / f"{method}.json")
        state = json.loads((src_log / "state.json").read_text(encoding="utf-8"))
        write_json_atomic(log_dir / "state.json", {**state, "status": "running", "continued_from": str(source)})
        shutil.copy2(src_log / "journal.jsonl", log_dir / "journal.jsonl")
    journals: list[ContinuedJournal] = []
    saved = run_module.Journal
    run_module.Journal = capturing(ContinuedJournal, journals)
    try:
        results = compare.run_comparison(replace(config, out=str(into), methods=["hero_o"]))
    finally:
        run_module.Journal = saved
    write_json_atomic(into / "continuation.json", {
        "continued_from": str(source),
        "source_journal": journal_counts(src_log / "journal.jsonl"),
        "journal": journal_counts(log_dir / "journal.jsonl"),
        "this_call": {
            "lm_calls_answered_from_another_proposal": sum(j.answered_from_other_proposal for j in journals),
            "lm_calls_paid_after_an_ambiguous_record": sum(j.paid_after_ambiguous for j in journals),
        },
    })
    return results


def journal_counts(path: Path) -> dict[str, int]:
    """Rollout and reflection records in a journal: what the continuation paid is the difference
    between its journal's counts and its source's."""
    kinds = Counter(json.loads(line).get("kind") for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip())
    return {"rollouts": kinds["rollout"], "reflections": kinds["reflection"]}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replay-out", help="JSON file for the rebuilt rounds")
    p.add_argument("--continue-live", metavar="DIR", help="instead of replaying: continue the run live under "
                   "today's settings in DIR (a new directory, or one to resume), then evaluate it on the test set")
    p.add_argument("--proposal-style", choices=[s.value for s in ProposalStyle],
                   help="replay as if the run had used this proposal style (default: as recorded)")
    own, rest = p.parse_known_args(argv)
    config, _ = compare.parse_args(rest)
    if own.continue_live:
        if own.proposal_style or own.replay_out:
            p.error("--continue-live runs under today's settings; --proposal-style and --replay-out are for replays")
        command = "python benchmarks/hero_o_replay.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
        results = continue_live(replace(config, command=command), own.continue_live)
        sys.stdout.write(f"continued {config.out} live into {own.continue_live}: "
                         f"HERO-O pass@1 {results['methods']['hero_o']['pass_at_1']:.3f}\n")
        return 0
    if not own.replay_out:
        p.error("--replay-out is required for a replay")
    data = replay(config, own.proposal_style)
    write_json_atomic(own.replay_out, data)
    sys.stdout.write(f"{len(data['rounds'])} completed rounds rebuilt from {config.out}; "
                     f"{'run complete' if data['complete'] else 'stopped at ' + str(data['stopped_at'])}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
