"""HeroRefine (HERO-T): refine the one program generated for this input from execution evidence.

The generator's instructions stay fixed (they are what HERO-O learned); what adapts is the single
program in hand. A refiner LM spends a small budget of actions gathering evidence (probing the
environment, retrieving verified examples, writing down a diagnosis) and asking for revisions; an
evidence gate lets a revision replace the current program only when it runs cleanly and the evidence
supports it. Without a supported revision the initial program is returned, so refinement can spend
calls but cannot trade a program for an unsupported guess.

Evidence. Every program that runs is *assessed* (`suspect.assess`): the environment's check plus the
programmatic diagnosis shared with HERO-O (`dspy_hero.diagnosis`: which table holds a missing column,
row and column counts, an empty result, NULL-only columns, a visible Python example that raises or
prints something other than the prompt shows). Its lines reach the refiner (in the initial
execution's evidence), the reviser (its own `diagnosis` field) and the judge. The reviser also sees
the at most `max_demos` chosen verified examples with their programs and every rejected revision
with the gate's reason; the judge sees the same examples, so a revision supported by a verified
pattern can be recognised as such.

Budget and stopping rule. Every refiner decision except ``stop`` uses one action of the budget B,
including malformed ones. An accepted revision becomes the current program and seeds the next step
(paper §4.2.2); the episode ends when (1) the refiner says ``stop``, (2) B actions are used, (3) the
reviser, asked twice, offers no revision (a proposal equal to the current program or to an already
rejected one is not a revision: it is re-asked once, within the same action; ``reask=False`` ends the
episode at the first such answer), or (4) an LM or
environment failure makes further steps pointless. ``stop_on_accept=True`` also ends it after an
accepted revision that is not suspect (the behaviour before accepted revisions seeded more steps).
Two rules keep a weak refiner from wasting the budget: a probe or diagnosis identical to an earlier
one is taken as the request to revise (its evidence is already on show; the 1.5B refiner otherwise
probed the same schema three times in a row); and when one action is left and the current program
still fails (`Assessment.failing`), that action is a revision (``revise_on_error``). A second
``retrieve`` costs an action but no LM call.

Repairs (`repairs.SqlRepairs`, ``repairer=``). A small reviser shown an error mostly repeats the
program (22 of 30 revisions of failing queries on the conventions task, session 23). So while the
current program fails, and the repairer knows an edit not yet tried (a date part SQLite lacks, a
column read through the wrong alias, ``IS NULL`` on a column the tables lack), that edit is the next
action: a revision proposed without an LM call, reviewed by the gate like any other, recorded with
``repaired=True``. A failing program has no result to lose, so a repair cannot break a right one.

The gate (`gate.EvidenceGate`). Programmatic checks first. By default (``judge_when_failing=False``)
the result shape then decides where it can: a revision that turns a *failing* program (an error, a
failed check, a visible example that raises, more columns than asked) into
one that passes every check and is not suspect is accepted by the checks; a revision that makes a
non-suspect program suspect is rejected by them; everything else, in particular any revision of a
program that already passes its checks (an empty result is suspect, yet sometimes right: 12 of the
449 shared Spider gold queries return no rows), needs the LLM judge. Measured with
Qwen2.5-Coder-1.5B on Spider, a judge asked about every revision rejected all 16 proposals that fixed
a failing query. ``judge_when_failing=True`` is the paper's exact gate: checks, then the judge, always.

Label-freedom. The module reads an instance field by field: the generator's signature inputs and the
environment fields of the field contract (db_path, graph, ..., see `dspy_hero.fields`). Label fields
are dropped if passed and refused if asked for (`dspy_hero.fields.read_unlabeled`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_hero.execution.base import ENVIRONMENT, Environment, Execution, failed
from dspy_hero.execution.environments import EnvironmentCache
from dspy_hero.fields import ENVIRONMENT_FIELDS, group_of
from dspy_hero.lm.adapter import program_adapter
from dspy_hero.metrics.base import extract_code, program_input_names
from dspy_hero.refine.actions import choose_demos, parse_action, render_actions
from dspy_hero.refine.demos import Demo, DemoBank, query_text
from dspy_hero.refine.fields import gather_inputs, generator_io, render_task
from dspy_hero.refine.gate import DEFAULT_CHECKS, EvidenceGate, GateCheck, same_program
from dspy_hero.refine.repairs import DEFAULT_REPAIRER, Repair, Repairer
from dspy_hero.refine.signatures import ChooseAction, JudgeRevision, ReviseProgram, SelectDemos
from dspy_hero.refine.suspect import Assessment, assess
from dspy_hero.refine.trace import (
    DIAGNOSE,
    ERROR,
    EXECUTE,
    INVALID,
    PROBE,
    RETRIEVE,
    REVISE,
    STOP,
    CallCounter,
    GateVerdict,
    RefinementTotals,
    RefinementTrace,
)

logger = logging.getLogger(__name__)

EnvironmentSpec = Environment | Callable[[dict[str, Any]], Environment] | None
# Attributes a copy shares with the original: live resources and read-only data.
_SHARED = ("environment", "demo_bank", "refiner_lm", "gate_checks", "repairer", "_environments")


class HeroRefine(dspy.Module):
    """Wraps a program-generation module and refines each program it generates at test time.

    Args:
        generator: the program-generation module (e.g. HeroOptimizer's result or `GenerateProgram`).
        environment: an `Environment`, a callable ``inputs -> Environment``, or None to build one from
            the call's inputs with `environment_for` (db_path -> SQLite, graph -> Cypher, prompt -> Python);
            those built for a database or graph are cached on the module and reused across calls.
        demos: a `DemoBank`, or training examples to build one from (`DemoBank.from_examples`; their gold
            programs are verified in the environments a callable `environment` builds), or None.
        budget: B, the most refiner actions per call (paper default 3).
        max_demos: the most retrieved examples that reach the refiner and reviser (paper: 3).
        retrieve_k: how many BM25 candidates the selector chooses from.
        judge: whether the LLM judge is part of the gate (False: programmatic checks only).
        judge_when_failing: ask the judge about every revision that passes the checks (the paper's exact
            gate); default False: the result-shape rules decide where they can (module docstring).
        gate_checks: the programmatic checks run on a proposal's execution, in order.
        refiner_lm: LM for the refiner, selector, reviser and judge (default: the configured LM).
        stop_on_accept: end the episode after an accepted revision that is not suspect (default False:
            an accepted revision seeds the next step, as in the paper).
        revise_on_error: when the current program fails (`suspect.Assessment.failing`: it does not
            run, fails its check, a visible example raises, ...) and one action is left, that action is a revision (without asking the refiner): a
            failure is the strongest evidence there is, and small refiners otherwise spend the whole
            budget looking instead of fixing.
        max_evidence_chars: cap on the rendered evidence shown to each LM call.
        only_failing: return an initial program that is not suspect (`suspect.assess`: it runs, passes
            its check, and no signal questions its result) without refining it. Off by default (the
            paper refines every instance); with small models it keeps HERO-T's cost on the programs
            execution shows are wrong.
        reask: when the reviser's answer is no revision (the current program again, or one already
            rejected), ask it once more with that said (default True). False ends the episode there:
            in a 1.5B demo run 7 of 8 re-asks repeated the program again and the eighth's accepted
            revision was still wrong, at ~10 s a call (`hero demo` turns it off: `cli.app.DEMO_REFINE_REASK`).
        repairer: proposes a programmatic repair of a program that fails (`repairs.SqlRepairs`: date
            parts SQLite lacks, a column read through the wrong alias, ``IS NULL`` on a column the
            tables lack). While the current program fails and the repairer has a repair not yet
            tried, the next action is that repair, without an LM call; the gate reviews it like any
            revision. `repairs.NoRepairs()` (or None) leaves every revision to the reviser, as in the paper.

    `named_predictors()` exposes ``refiner``, ``select_demos``, ``reviser``, ``judge`` and the generator's
    predictors, so the module can be saved, loaded and optimized like any DSPy program. `usage` holds
    thread-safe running totals (`usage.snapshot()` gives LM calls, actions, proposals and accepted
    revisions per query; `RefinementTotals.of(traces)` the same for traces gathered elsewhere).
    """

    def __init__(
        self,
        generator: dspy.Module,
        environment: EnvironmentSpec = None,
        demos: DemoBank | Sequence[Any] | None = None,
        budget: int = 3,
        max_demos: int = 3,
        retrieve_k: int = 8,
        judge: bool = True,
        gate_checks: Sequence[GateCheck] = DEFAULT_CHECKS,
        refiner_lm: dspy.LM | None = None,
        stop_on_accept: bool = False,
        revise_on_error: bool = True,
        max_evidence_chars: int = 8000,
        only_failing: bool = False,
        judge_when_failing: bool = False,
        reask: bool = True,
        repairer: Repairer | None = DEFAULT_REPAIRER,
    ):
        super().__init__()
        for name, value in (("budget", budget), ("max_demos", max_demos), ("retrieve_k", retrieve_k)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        generator_io(generator)  # fail now, with a clear message, on a generator without predictors
        self.generator = generator
        self.environment = environment
        # Demos given as examples are verified where the instances run (e.g. on the task's engine).
        self.demo_bank = _as_bank(demos, environment if callable(environment) and not _is_environment(environment)
                                  else None)
        self.budget = budget
        self.max_demos = max_demos
        self.retrieve_k = retrieve_k
        self.use_judge = bool(judge)
        self.gate_checks = tuple(gate_checks)
        self.refiner_lm = refiner_lm
        self.stop_on_accept = stop_on_accept
        self.revise_on_error = revise_on_error
        self.max_evidence_chars = max_evidence_chars
        self.only_failing = only_failing
        self.judge_when_failing = judge_when_failing
        self.reask = bool(reask)
        self.repairer = repairer
        self.refiner = dspy.Predict(ChooseAction)
        self.select_demos = dspy.Predict(SelectDemos)
        self.reviser = dspy.Predict(ReviseProgram)
        self.judge = dspy.Predict(JudgeRevision)
        self.usage = RefinementTotals()
        self._environments = EnvironmentCache()

    def accepted_inputs(self) -> tuple[str, ...]:
        """What a caller (HERO-O, `evaluate_program`) should pass: the generator's inputs plus the
        environment references, which reach the environment, never the generator's LM."""
        names = list(self._generator_inputs())
        return tuple(dict.fromkeys(names + list(ENVIRONMENT_FIELDS)))

    def _generator_inputs(self) -> tuple[str, ...]:
        """The inputs the generator accepts: its forward's parameters (a custom module), or its
        predictors' signature inputs (metrics.base.program_input_names)."""
        names = program_input_names(self.generator)
        return generator_io(self.generator).input_fields if names is None else names

    # -- the episode --------------------------------------------------------------------------------
    def forward(self, example: Any = None, **inputs: Any) -> dspy.Prediction:
        """Refine for one instance, given as keyword inputs and/or an example object (keywords win)."""
        counter = CallCounter()
        with dspy.context(callbacks=[*dspy.settings.get("callbacks", []), counter]):
            return self._episode(example, inputs, counter)

    def _episode(self, example: Any, inputs: dict[str, Any], counter: CallCounter) -> dspy.Prediction:
        io = generator_io(self.generator)
        # the generator gets exactly the inputs it accepts (a custom forward(question, db_schema) too)
        io = dataclasses.replace(io, input_fields=self._generator_inputs())
        gen_inputs, env_refs = gather_inputs(io, example, **inputs)
        environment = self._environment({**env_refs, **gen_inputs})
        language = io.language or getattr(environment, "language", None)

        counter.role = "generator"
        generated = self.generator(**gen_inputs)
        initial = clean_program(getattr(generated, io.output_field, "") or "", language)

        trace = RefinementTrace(language or "", self.budget, initial, final_program=initial)
        ep = _Episode(self, environment, language, trace, counter, gen_inputs, env_refs)
        ep.run()
        trace.final_program = ep.current
        trace.lm_calls = counter.total
        trace.lm_calls_by_role = dict(counter.by_role)
        self.usage.record(trace, counter.seconds_by_role)
        return dspy.Prediction(
            **{io.output_field: ep.current},
            refinement=trace,
            initial_program=initial,
            changed=trace.changed,
            lm_calls=trace.lm_calls,
            env_actions=trace.env_actions,
        )

    def _environment(self, refs: dict[str, Any]) -> Environment:
        spec = self.environment
        if _is_environment(spec):
            return spec
        if callable(spec):
            return spec(refs)
        if spec is not None:
            raise TypeError(f"environment must be an Environment, a callable or None, got {type(spec).__name__}")
        return self._environments(refs)

    def _lm_context(self):
        return dspy.context(lm=self.refiner_lm) if self.refiner_lm is not None else contextlib.nullcontext()

    # -- DSPy plumbing ------------------------------------------------------------------------------
    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        """Predictor states plus the demo bank, so `save()` keeps the verified examples too."""
        state = super().dump_state(json_mode=json_mode)
        state["hero_refine"] = {"demo_bank": self.demo_bank.to_dict() if self.demo_bank is not None else None}
        return state

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        extra = state.get("hero_refine") or {}
        super().load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)
        if extra.get("demo_bank") is not None:
            self.demo_bank = DemoBank.from_dict(extra["demo_bank"])

    def __deepcopy__(self, memo: dict) -> HeroRefine:
        """Copies predictors and the generator; shares the environment, demo bank and LM (live or
        read-only resources); starts fresh usage totals."""
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            if name in _SHARED:
                new.__dict__[name] = value
            elif name == "usage":
                new.__dict__[name] = RefinementTotals()
            elif isinstance(value, dspy.Module) and not isinstance(value, dspy.Predict):
                new.__dict__[name] = value.deepcopy()
            else:
                new.__dict__[name] = copy.deepcopy(value, memo)
        return new


class _Episode:
    """The mutable state of one refinement call (kept off the module, so calls can run in threads)."""

    def __init__(self, owner: HeroRefine, environment: Environment, language: str | None,
                 trace: RefinementTrace, counter: CallCounter, gen_inputs: dict[str, Any], env_refs: dict[str, Any]):
        self.m = owner
        self.env = environment
        self.language = language
        self.trace = trace
        self.counter = counter
        self.task = render_task(gen_inputs)
        self.task_query = query_text(gen_inputs)
        # what the assessment may read: the generator's inputs and the environment references (no labels)
        self.inputs = {**env_refs, **gen_inputs}
        self.current = trace.initial_program
        self.assessment: Assessment | None = None  # of the current program
        self.group = group_of(env_refs)
        self.demos: list[Demo] = []
        self.rejected: list[tuple[str, str]] = []  # (proposal, the gate's reason), oldest first
        self.gate = EvidenceGate(owner.gate_checks, self._judge if owner.use_judge else None,
                                 judge_when_failing=owner.judge_when_failing)
        try:
            self.probes = dict(environment.probes())
        except Exception:  # noqa: BLE001 - an environment without probes still refines
            self.probes = {}

    @property
    def current_ok(self) -> bool:
        """Does the current program run and pass the environment check? (A check that raised does not
        count against it: the program ran.)"""
        return self.assessment is not None and self.assessment.passes_checks

    # environment access, counted
    def execute(self, program: str) -> Execution:
        self.trace.env_actions += 1
        try:
            return self.env.execute(program)
        except Exception as exc:  # noqa: BLE001 - an environment failure is evidence, not a crash
            return failed(ENVIRONMENT, f"{type(exc).__name__}: {exc}")

    def assess(self, program: str, execution: Execution) -> Assessment:
        self.trace.diagnoses += 1
        return assess(self.language, program, execution, self.env, self.inputs)

    def run(self) -> None:
        m, trace = self.m, self.trace
        execution = self.execute(self.current)
        self.assessment = self.assess(self.current, execution)
        trace.initial_suspicions = [s.text for s in self.assessment.suspicions]
        note = "\n".join([execution.describe(max_rows=5, max_chars=800), self.assessment.check_note,
                          self.assessment.render()])
        trace.add(EXECUTE, argument="initial program", evidence=note, env_actions=1)
        if m.only_failing and not self.assessment.suspect:
            trace.stop_reason = "initial program is not suspect (only_failing)"
            return
        while trace.actions_used < m.budget:
            lm0, env0 = self.counter.total, trace.env_actions
            try:
                step_done = self._step(m.budget - trace.actions_used)
            except Exception as exc:  # noqa: BLE001 - LM or engine failure: record it, keep the current program
                logger.warning("HeroRefine step failed: %s: %s", type(exc).__name__, exc)
                trace.add(ERROR, evidence=f"{type(exc).__name__}: {str(exc)[:300]}")
                trace.stop_reason = f"error: {type(exc).__name__}"
                step_done = True
            last = trace.steps[-1]
            last.lm_calls, last.env_actions = self.counter.total - lm0, trace.env_actions - env0
            if step_done:
                break
        else:
            trace.stop_reason = trace.stop_reason or "budget exhausted"
        trace.demos_shown = [d.text for d in self.demos]

    def _step(self, left: int) -> bool:
        """One refiner decision and its action; True when the episode should end."""
        m, trace = self.m, self.trace
        # One retrieval per episode: its chosen examples stay on show, so a second one would only
        # spend budget (small models otherwise repeat it).
        can_retrieve = (m.demo_bank is not None and len(m.demo_bank) > 0 and m.max_demos > 0
                        and not any(s.action == RETRIEVE for s in trace.steps))
        repair = self._repair()
        if repair is not None:
            trace.actions_used += 1
            return self._revise("repair what the diagnosis shows, without an LM call", repair=repair)
        if m.revise_on_error and left == 1 and (self.assessment is None or self.assessment.failing):
            trace.actions_used += 1
            return self._revise("the current program fails: fix what the evidence shows is wrong")
        self.counter.role = "refiner"
        try:
            with m._lm_context():
                choice = m.refiner(
                    task=self.task, program=self.current or "(empty)", evidence=self._evidence(),
                    examples=self._examples(), actions=render_actions(self.probes, can_retrieve, left),
                )
        except AdapterParseError as exc:
            trace.actions_used += 1
            trace.add(INVALID, evidence=f"unparseable refiner output: {str(exc)[:200]}")
            return False
        action = parse_action(getattr(choice, "action", ""), getattr(choice, "argument", ""), list(self.probes))
        if action.kind == STOP:
            trace.add(STOP, argument=action.argument)
            trace.stop_reason = "refiner stopped"
            return True
        trace.actions_used += 1
        earlier = self._same_as_before(action)
        if action.kind == INVALID:
            trace.add(INVALID, argument=action.argument, evidence=action.problem)
        elif action.kind == DIAGNOSE and earlier is not None:
            # Nothing new to say: the useful next step is to act on the diagnosis.
            return self._revise(action.argument)
        elif action.kind == DIAGNOSE:
            trace.add(DIAGNOSE, argument=action.argument, evidence=f"diagnosis: {action.argument or '(empty)'}")
        elif action.kind == PROBE and earlier is not None:
            # Its result is already in the evidence: act on it.
            return self._revise(f"use what probe step [{earlier}] showed")
        elif action.kind == PROBE:
            label = f"{action.probe}: {action.probe_argument}".rstrip(": ")
            trace.add(PROBE, argument=label, evidence=self._probe(action.probe, action.probe_argument))
        elif action.kind == RETRIEVE:
            trace.add(RETRIEVE, argument=action.argument, evidence=self._retrieve(action.argument, can_retrieve))
        elif action.kind == REVISE:
            return self._revise(action.argument)
        return False

    def _same_as_before(self, action) -> int | None:
        """The index of an earlier step that took exactly this diagnose/probe action, if any."""
        if action.kind == DIAGNOSE:
            key = " ".join(action.argument.split()).lower()
            return next((s.index for s in self.trace.steps
                         if s.action == DIAGNOSE and " ".join(s.argument.split()).lower() == key), None)
        if action.kind == PROBE:
            label = f"{action.probe}: {action.probe_argument}".rstrip(": ")
            return next((s.index for s in self.trace.steps if s.action == PROBE and s.argument == label), None)
        return None

    def _probe(self, name: str, argument: str) -> str:
        self.trace.env_actions += 1
        try:
            result = self.env.probe(name, argument)
        except Exception as exc:  # noqa: BLE001 - a failing probe is evidence
            return f"probe failed: {type(exc).__name__}: {exc}"
        text = result.text if len(result.text) <= 3000 else result.text[:2985] + "\n... (cut)"
        return text if result.ok else f"probe error: {text}"

    def _retrieve(self, keywords: str, can_retrieve: bool) -> str:
        m = self.m
        if not can_retrieve:
            if any(s.action == RETRIEVE for s in self.trace.steps):
                return "already retrieved: the chosen examples are shown with the task"
            return "no verified examples are available"
        query = " ".join(x for x in (self.task_query, keywords) if x)

        def select(task: str, candidates: str) -> str:
            self.counter.role = "selector"
            with m._lm_context():
                return str(getattr(m.select_demos(task=task, candidates=candidates), "chosen", "") or "")

        try:
            demos, note = choose_demos(m.demo_bank, query, self.task_query, m.retrieve_k, m.max_demos, select,
                                       group=self.group)
        except AdapterParseError as exc:
            return f"selector output unparseable ({str(exc)[:120]}); no examples chosen"
        self.demos = demos[: m.max_demos]
        return note + (f"; {len(self.demos)} example(s) now shown" if self.demos else "")

    def _repair(self) -> Repair | None:
        """The repairer's proposal for the current program, when it fails and the proposal is new."""
        if self.m.repairer is None or self.assessment is None or not self.assessment.failing:
            return None
        try:
            repair = self.m.repairer.repair(self.current, self.env, self.language)
        except Exception as exc:  # noqa: BLE001 - a broken repairer leaves the revision to the reviser
            logger.warning("HeroRefine: the repairer raised (%s: %s); asking the reviser instead", type(exc).__name__, exc)
            return None
        if repair is None or same_program(repair.program, self.current):
            return None
        if any(same_program(repair.program, old) for old, _ in self.rejected):
            return None
        return repair

    def _revise(self, request: str, repair: Repair | None = None) -> bool:
        """One revise action: take the repairer's proposal, or ask the reviser (once more if its answer
        is no revision and `reask` is on); gate the proposal, and on acceptance let it seed the next
        step. True when the episode should end."""
        m, trace = self.m, self.trace
        before = self.current
        if repair is not None:
            proposal, reason, nothing_new = repair.program, repair.reason, None
        else:
            proposal, reason, nothing_new = self._ask_reviser(request)
        reasked = nothing_new is not None and m.reask
        if reasked:
            retry = (f"{request or '(none)'}\nYour previous answer was no revision: it {nothing_new}. Give a "
                     "different, complete program that acts on the evidence.")
            proposal, reason, nothing_new = self._ask_reviser(retry)
        if nothing_new is not None:  # (asked twice,) still nothing new: the reviser has no revision to offer
            asked = "asked twice" if reasked else "asked once"
            trace.add(REVISE, argument=request, proposal=proposal, claimed_reason=reason, program_before=before,
                      reasked=reasked, verdict=GateVerdict(False, "checks", f"not a revision: it {nothing_new} "
                                                                            f"({asked})"))
            trace.stop_reason = "the reviser proposed no new revision"
            return True
        evidence = self._evidence(with_diagnosis=True)
        verdict, execution, assessment = self.gate.review(
            self.current, proposal, reason, evidence, self.env, self.language, self.execute,
            current_passes=self.current_ok, current=self.assessment, assess=self.assess)
        ran = f"revision ran: {verdict.execution}" if verdict.execution else ""
        step = trace.add(REVISE, argument=request, proposal=proposal, claimed_reason=reason, verdict=verdict,
                         evidence=ran, program_before=before, reasked=reasked, repaired=repair is not None)
        if not verdict.accepted:
            if proposal.strip():
                self.rejected.append((proposal, f"{verdict.stage}: {verdict.reason}"))
            return False
        # the accepted revision is the current program from now on (paper §4.2.2: it seeds the next step)
        self.current = proposal
        self.assessment = assessment if assessment is not None else self.assess(proposal, execution)
        step.evidence += "\nit is now the current program; its diagnosis:\n" + self.assessment.render()
        if m.stop_on_accept and not self.assessment.suspect:
            trace.stop_reason = "accepted a revision that is not suspect (stop_on_accept)"
            return True
        return False

    def _ask_reviser(self, request: str) -> tuple[str, str, str | None]:
        """(proposal, reason, why it is no revision or None). An unparseable answer is an empty one."""
        m = self.m
        self.counter.role = "reviser"
        try:
            with m._lm_context(), program_adapter("revised_program"):
                out = m.reviser(task=self.task, program=self.current or "(empty)", diagnosis=self._diagnosis(),
                                evidence=self._evidence(), examples=self._examples(), rejected=self._rejected(),
                                request=request or "(none)")
        except AdapterParseError as exc:
            return "", f"unparseable reviser output: {str(exc)[:150]}", None
        proposal = clean_program(getattr(out, "revised_program", "") or "", self.language)
        reason = str(getattr(out, "reason", "") or "")
        if proposal.strip() and same_program(proposal, self.current):
            return proposal, reason, "repeats the current program"
        if any(same_program(proposal, old) for old, _ in self.rejected):
            return proposal, reason, "repeats a revision the gate already rejected"
        return proposal, reason, None

    def _judge(self, evidence: str, old: str, new: str, claimed: str, new_execution: str) -> tuple[bool, str]:
        m = self.m
        self.counter.role = "judge"
        try:
            with m._lm_context():
                out = m.judge(task=self.task, evidence=evidence, examples=self._examples(), old_program=old or "(empty)",
                              new_program=new, claimed_reason=claimed or "(none given)", new_execution=new_execution)
        except AdapterParseError as exc:
            return False, f"judge output unparseable: {str(exc)[:150]}"
        return _truthy(getattr(out, "supported", False)), str(getattr(out, "reason", "") or "")

    def _evidence(self, with_diagnosis: bool = False) -> str:
        text = self.trace.evidence_text(self.m.max_evidence_chars)
        if with_diagnosis:
            text += "\n\nDiagnosis of the current program:\n" + self._diagnosis()
        return text

    def _diagnosis(self) -> str:
        return self.assessment.render() if self.assessment is not None else "(not assessed)"

    def _rejected(self, max_chars: int = 3000) -> str:
        if not self.rejected:
            return "(none)"
        parts = [f"Rejected revision {i + 1} ({why}):\n{program}" for i, (program, why) in enumerate(self.rejected)]
        text = "\n\n".join(parts)
        return text if len(text) <= max_chars else "... (older ones cut)\n" + text[-max_chars:]

    def _examples(self) -> str:
        if not self.demos:
            return "(none)"
        return "\n\n".join(f"Example {i + 1}:\n{d.render()}" for i, d in enumerate(self.demos[: self.m.max_demos]))


def clean_program(text: str, language: str | None) -> str:
    """The program in an LM answer, without fences or DSPy field markers a small model left inline
    (``LIMIT 5;[[ ## completed ## ]]``), which would otherwise fail as a syntax error."""
    return extract_code(str(text), language).strip()


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "yes", "supported", "1"}


def _is_environment(spec: Any) -> bool:
    return spec is not None and hasattr(spec, "execute") and hasattr(spec, "probe")


def _as_bank(demos: DemoBank | Sequence[Any] | None,
             environment: Callable[[Any], Environment] | None = None) -> DemoBank | None:
    if demos is None or isinstance(demos, DemoBank):
        return demos
    if isinstance(demos, (str, bytes, dict)):
        raise TypeError("demos must be a DemoBank or a list of training examples")
    return DemoBank.from_examples(list(demos), environment=environment)
