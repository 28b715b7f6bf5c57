"""HeroOptimizer (HERO-O): learn a program's instructions from execution evidence.

The loop (paper §4.1, C.1): for T rounds (no early stopping), pick a predictor round-robin, run the
current program on a diagnosis batch, render passing and failing cases, ask the reflection LM for a
textual gradient and K rule edits, drop edits that memorize answers, test each surviving candidate
against the current program on paired update-pool examples, and adopt the best accepted one. The
final prompt is chosen among the seed and every adopted prompt on the selection pool. Every
decision is a small replaceable object (pools, evidence, proposer, guard, acceptance, selector).

Where the paper is silent, for small budgets and small reflection models (choices measured on the
local 1.5B model): rounds are funded well enough to decide (``min_calls_per_round``); successive
rounds diagnose the next part of the pool and show cases the reflector has not seen first; edits
already rejected against the current prompt are listed to the reflector and never re-tested.
"""

from __future__ import annotations

import hashlib
import logging
import random
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from dspy_hero.lm.scripted import approx_tokens
from dspy_hero.optimizer.acceptance import AdaptivePairedAcceptance
from dspy_hero.optimizer.archive import AdaptiveSelector, ArchiveEntry
from dspy_hero.optimizer.budget import Budget, plan_round, resolve_budget, rounds_for_budget
from dspy_hero.optimizer.checkpoint import Journal, fingerprint, journaled_lm
from dspy_hero.optimizer.evidence import DefaultEvidenceRenderer, build_cases
from dspy_hero.optimizer.guard import MemorizationGuard
from dspy_hero.optimizer.instructions import PromptState, apply_edit, instructions_key, parse_instructions
from dspy_hero.optimizer.reflection import GepaProposerAdapter, Proposal, ReflectionContext, RuleProposer
from dspy_hero.optimizer.reflection_cases import CaseRuleProposer, FallbackProposer
from dspy_hero.optimizer.result import CandidateRecord, HeroResult, LMUsage, RoundRecord
from dspy_hero.optimizer.rollout import MetricAdapter, MetricError, Rollouts, UsageMeter, build_variant

logger = logging.getLogger("dspy_hero.optimizer")

# dspy.GEPA arguments with no meaning in HERO-O: accepted for drop-in use, warned about once if set.
_NO_HERO_MEANING = (
    "reflection_minibatch_size", "candidate_selection_strategy", "skip_perfect_score", "code_proposer",
    "use_merge", "max_merge_invocations", "use_wandb", "wandb_api_key", "wandb_init_kwargs",
    "track_best_outputs", "warn_on_score_mismatch", "gepa_kwargs",
)


def _model_name(lm: Any) -> str:
    return str(getattr(lm, "model", None) or type(lm).__name__)


def _callable_name(fn: Any) -> str:
    target = getattr(fn, "func", fn)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{getattr(target, '__module__', '') or type(target).__module__}.{name}"


class HeroOptimizer(Teleprompter):
    """A drop-in sibling of `dspy.GEPA` that only adopts instruction changes that fix more than they break.

    ``HeroOptimizer().compile(program, trainset)`` works with no other argument: the metric is inferred
    from the examples' fields (`dspy_hero.metrics.infer`) and the budget defaults to ``auto="light"``.

    Mapping of `dspy.GEPA`'s arguments:
    - ``metric``: same calling conventions (2, 3 or 5 arguments; float, bool, dict or
      ``Prediction(score, feedback)``); scores must lie in [0, 1].
    - ``auto`` / ``max_full_evals`` / ``max_metric_calls``: the same budget GEPA computes (``auto`` calls
      ``dspy.GEPA.auto_budget`` itself); at most one may be set, none means ``auto="light"``. A metric
      call is one rollout + metric evaluation on one example; the budget is never exceeded.
    - ``reflection_lm``: the LM for reflection (default: the task LM), used through ``dspy.context``.
    - ``instruction_proposer``: a HERO proposer (an object with ``propose(ctx) -> Proposal``), or a GEPA
      ``ProposalFn``, whose full-text proposals are guarded and acceptance-tested like rule edits.
    - ``component_selector``: only ``"round_robin"`` (one predictor per round, in order).
    - ``add_format_failure_as_feedback``: always on in HERO-O (parse failures are failing cases).
    - ``num_threads``: parallel rollouts. ``failure_score``: the score of a failed rollout (LM error,
      unparseable output, program or metric exception). ``perfect_score``: a case with score >= it is
      *passing* in the evidence.
    - ``log_dir``: journal + state for crash-safe resume (see checkpoint.py).
    - ``track_stats``: accepted; ``.detailed_results`` (a HeroResult) is always attached.
    - ``use_mlflow``: per-round figures to MLflow when it is installed. ``seed``: all randomness.
    - No HERO meaning (accepted, warned once if set): reflection_minibatch_size (HERO reflects on up to
      ``num_failing_cases`` + ``num_passing_cases`` cases), candidate_selection_strategy, skip_perfect_score
      (passing cases are evidence here), code_proposer, use_merge, max_merge_invocations, use_wandb,
      wandb_api_key, wandb_init_kwargs, track_best_outputs, warn_on_score_mismatch, gepa_kwargs.

    HERO's own settings (paper defaults): ``num_rounds`` T=5 at most (``min_calls_per_round``, default
    24 = a diagnosis batch of 8 plus 8 paired acceptance examples, plans fewer rounds when the budget
    cannot fund T such rounds; calls a round leaves unused fund extra rounds up to T; 0 keeps a fixed T),
    ``num_candidates`` K=4, up to 32 failing and 32 passing cases (``failure_only`` is the ablation
    switch), ``evidence_token_budget`` (approximate tokens of rendered evidence, default 3000 for small
    local models), ``acceptance_margin``,
    ``acceptance_initial`` / ``acceptance_max`` / ``acceptance_alpha``, ``pool_fractions`` (diagnosis,
    update, selection), ``group_key`` (e.g. ``"db_id"``), ``selection_budget_fraction`` (budget kept for
    final selection), ``max_rules`` / ``max_rule_chars``. The decision objects ``pool_splitter``,
    ``evidence_renderer``, ``proposer``, ``guard``, ``acceptance`` and ``selector`` replace the defaults.
    """

    def __init__(
        self,
        metric: Any = None,
        *,
        auto: str | None = None,
        max_full_evals: int | None = None,
        max_metric_calls: int | None = None,
        reflection_minibatch_size: int | None = None,
        candidate_selection_strategy: str | None = None,
        reflection_lm: dspy.LM | None = None,
        skip_perfect_score: bool | None = None,
        add_format_failure_as_feedback: bool = True,
        instruction_proposer: Any = None,
        code_proposer: Any = None,
        component_selector: str = "round_robin",
        use_merge: bool | None = None,
        max_merge_invocations: int | None = None,
        num_threads: int | None = None,
        failure_score: float = 0.0,
        perfect_score: float = 1.0,
        log_dir: str | None = None,
        track_stats: bool = True,
        use_wandb: bool | None = None,
        wandb_api_key: str | None = None,
        wandb_init_kwargs: dict | None = None,
        track_best_outputs: bool | None = None,
        warn_on_score_mismatch: bool | None = None,
        use_mlflow: bool = False,
        seed: int | None = 0,
        gepa_kwargs: dict | None = None,
        # HERO-O's own settings
        num_rounds: int = 5,
        min_calls_per_round: int = 24,
        num_candidates: int = 4,
        num_failing_cases: int = 32,
        num_passing_cases: int = 32,
        failure_only: bool = False,
        evidence_token_budget: int = 3000,
        acceptance_margin: float = 0.0,
        acceptance_initial: int = 8,
        acceptance_max: int = 32,
        acceptance_alpha: float = 0.1,
        pool_fractions: tuple[float, float, float] = (0.4, 0.4, 0.2),
        group_key: str | None = None,
        selection_budget_fraction: float = 0.2,
        max_rules: int = 12,
        max_rule_chars: int = 300,
        display_progress: bool = True,
        pool_splitter: Any = None,
        evidence_renderer: Any = None,
        proposer: Any = None,
        guard: Any = None,
        acceptance: Any = None,
        selector: Any = None,
    ):
        super().__init__()
        if metric is not None:
            MetricAdapter(metric)  # fail now on an unusable signature
        if not 0.0 <= failure_score <= 1.0 or not 0.0 < perfect_score <= 1.0:
            raise ValueError("failure_score must be in [0, 1] and perfect_score in (0, 1]: scores are in [0, 1]")
        if component_selector != "round_robin":
            raise ValueError(f"component_selector={component_selector!r}: HERO-O supports 'round_robin' only")
        if num_rounds < 0 or num_candidates < 1 or min_calls_per_round < 0:
            raise ValueError("num_rounds and min_calls_per_round must be >= 0 and num_candidates >= 1")
        if not 0.0 <= selection_budget_fraction < 1.0:
            raise ValueError("selection_budget_fraction must be in [0, 1)")
        self.metric = metric
        self.auto, self.max_full_evals, self.max_metric_calls = auto, max_full_evals, max_metric_calls
        resolve_budget(auto=auto, max_full_evals=max_full_evals, max_metric_calls=max_metric_calls,
                       num_predictors=1, trainset_size=1, valset_size=None)  # validate the combination now
        self.reflection_lm = reflection_lm
        self.add_format_failure_as_feedback = add_format_failure_as_feedback
        self.instruction_proposer = instruction_proposer
        self.component_selector = component_selector
        self.num_threads = num_threads
        self.failure_score, self.perfect_score = failure_score, perfect_score
        self.log_dir, self.track_stats, self.use_mlflow, self.seed = log_dir, track_stats, use_mlflow, seed
        self.num_rounds, self.num_candidates = num_rounds, num_candidates
        self.min_calls_per_round = min_calls_per_round
        self.num_failing_cases, self.num_passing_cases, self.failure_only = num_failing_cases, num_passing_cases, failure_only
        self.evidence_token_budget = evidence_token_budget
        self.acceptance_margin, self.acceptance_initial = acceptance_margin, acceptance_initial
        self.acceptance_max, self.acceptance_alpha = acceptance_max, acceptance_alpha
        self.pool_fractions, self.group_key = tuple(pool_fractions), group_key
        self.selection_budget_fraction = selection_budget_fraction
        self.max_rules, self.max_rule_chars = max_rules, max_rule_chars
        self.display_progress = display_progress
        self.pool_splitter = pool_splitter
        self.evidence_renderer = evidence_renderer or DefaultEvidenceRenderer(evidence_token_budget)
        if proposer is None and instruction_proposer is not None:
            proposer = instruction_proposer if hasattr(instruction_proposer, "propose") else GepaProposerAdapter(instruction_proposer)
        self.proposer = proposer
        self.guard = guard or MemorizationGuard()
        self.acceptance = acceptance or AdaptivePairedAcceptance(
            margin=acceptance_margin, initial=acceptance_initial, max_size=acceptance_max, alpha=acceptance_alpha
        )
        self.selector = selector or AdaptiveSelector(alpha=acceptance_alpha)
        given = dict(
            reflection_minibatch_size=reflection_minibatch_size, candidate_selection_strategy=candidate_selection_strategy,
            skip_perfect_score=skip_perfect_score, code_proposer=code_proposer, use_merge=use_merge,
            max_merge_invocations=max_merge_invocations, use_wandb=use_wandb, wandb_api_key=wandb_api_key,
            wandb_init_kwargs=wandb_init_kwargs, track_best_outputs=track_best_outputs,
            warn_on_score_mismatch=warn_on_score_mismatch, gepa_kwargs=gepa_kwargs or None,
        )
        self.ignored_gepa_args = sorted(k for k, v in given.items() if v is not None)
        if self.ignored_gepa_args:
            logger.warning("HeroOptimizer ignores dspy.GEPA options with no HERO-O meaning: %s",
                           ", ".join(self.ignored_gepa_args))

    def compile(self, student: dspy.Module, trainset: list | None = None, *, teacher: Any = None,
                valset: list | None = None) -> dspy.Module:
        """Return a deep copy of `student` with optimized instructions and `.detailed_results`.

        The student is never mutated. `valset`, when given, is the selection pool (the user's
        held-out data picks the final prompt); the trainset is split into diagnosis and update pools.
        Bad input (empty trainset, examples without inputs, a metric that raises or returns a score
        outside [0, 1]) is reported before any budget is spent.
        """
        if teacher is not None:
            raise ValueError("HeroOptimizer does not use a teacher program")
        run = _Run(self, student, list(trainset or []), list(valset) if valset else None)
        return run.execute()


def diagnosis_limit(allowance: int, acceptance_initial: int) -> int:
    """Paid diagnosis rollouts in a round: half the round, but when the round is tight, no more than
    what leaves one acceptance test's initial sample (both prompts) -- though never under a third.
    A candidate decided on 6 ties teaches nothing; 7 diagnosis cases still show a few failures."""
    half, third = allowance // 2, allowance // 3
    return max(0, min(half, max(third, allowance - 2 * acceptance_initial)))


def min_round_calls(opt: HeroOptimizer) -> int:
    """The fewest calls worth an extra round beyond the planned ones: one acceptance test's initial
    sample of candidate rollouts (the current prompt's are usually cached by then)."""
    return max(1, opt.acceptance_initial)


def default_proposer(guard: Any = None) -> FallbackProposer:
    """Evidence-wide rule edits first; per-failing-case rules when none of those is usable or passes
    the guard (small reflection models), see reflection_cases.py."""
    return FallbackProposer(RuleProposer(), CaseRuleProposer(), guard=guard)


class _Run:
    """The state of one compile() call; the optimizer object itself stays stateless across calls."""

    def __init__(self, opt: HeroOptimizer, student: dspy.Module, trainset: list, valset: list | None):
        self.opt = opt
        self.student = student
        if not trainset:
            raise ValueError("trainset is empty: HERO-O needs training examples to diagnose and to test changes on")
        self.predictors = [name for name, _ in student.named_predictors()]
        if not self.predictors:
            raise ValueError("the student program has no predictors (dspy.Predict) whose instructions could be optimized")
        self.train = [(f"t{i}", ex) for i, ex in enumerate(trainset)]
        self.val = [(f"v{i}", ex) for i, ex in enumerate(valset)] if valset else None
        self.examples = dict(self.train + (self.val or []))
        for ex_id, ex in self.examples.items():
            try:
                ex.inputs()
            except Exception as exc:
                raise ValueError(
                    f"example {ex_id} has no input fields ({exc}); build examples with .with_inputs(...)"
                ) from exc
        metric = opt.metric
        if metric is None:
            from dspy_hero.metrics.infer import infer_metric

            metric = infer_metric(trainset)
        self.metric = MetricAdapter(metric)
        self.total = resolve_budget(auto=opt.auto, max_full_evals=opt.max_full_evals, max_metric_calls=opt.max_metric_calls,
                                    num_predictors=len(self.predictors), trainset_size=len(trainset),
                                    valset_size=len(valset) if valset else None)
        self._preflight_lms()
        self.preflight_calls = self._preflight_metric(limit=self.total)
        self.rng_seed = 0 if opt.seed is None else int(opt.seed)

    # ---- pre-flight: fail before spending anything -------------------------------------------
    def _preflight_lms(self) -> None:
        lms = [p.lm or dspy.settings.lm for _, p in self.student.named_predictors()]
        if any(lm is None for lm in lms):
            raise ValueError("no task LM: call dspy.configure(lm=...) or set predictor.lm before compile()")
        self.reflection_lm = self.opt.reflection_lm or dspy.settings.lm or lms[0]

    def _preflight_metric(self, limit: int) -> int:
        """Call the metric once per distinct example field set with an empty prediction: a metric
        that raises, needs fields some examples lack, or scores outside [0, 1] fails here.

        These calls run no program, but they are metric calls, so they are paid from the budget
        (at most `limit` of them): an outside counter of metric calls never sees more than the budget
        (except, as with dspy.GEPA, the extra per-predictor feedback calls a 5-argument metric gets
        on a multi-predictor program; they refine evidence and are not rollouts).
        Returns how many were made."""
        outputs = {f: "" for _, p in self.student.named_predictors() for f in p.signature.output_fields}
        seen: set[frozenset] = set()
        for ex_id, ex in self.examples.items():
            keys = frozenset(ex.keys())
            if keys in seen:
                continue
            if len(seen) >= limit:
                break
            seen.add(keys)
            try:
                self.metric(ex, dspy.Prediction(**outputs), None)
            except MetricError:
                raise
            except Exception as exc:
                raise ValueError(
                    f"the metric raised on example {ex_id} during the pre-flight check (called with an empty "
                    f"prediction before any budget is spent): {type(exc).__name__}: {exc}"
                ) from exc
        return len(seen)

    # ---- the loop ------------------------------------------------------------------------------
    def execute(self) -> dspy.Module:
        opt = self.opt
        from dspy_hero.optimizer.pools import DefaultPoolSplitter

        splitter = opt.pool_splitter or DefaultPoolSplitter(opt.pool_fractions, opt.group_key)
        self.pools = splitter.split(self.train, self.val, self.rng_seed)
        if not self.pools.diagnosis or not self.pools.update or not self.pools.selection:
            raise ValueError(f"the pool splitter left a pool empty: {self.pools}")
        if set(self.pools.diagnosis) & set(self.pools.update):
            raise ValueError("diagnosis and update pools overlap: an example would both inspire and judge a change")
        self.journal = Journal(opt.log_dir, self._fingerprint()) if opt.log_dir else None
        if self.journal and self.journal.resumed:
            logger.info("HERO-O: resuming from %s (%d rollouts and %d reflection records journaled; replayed, not re-bought)",
                        self.journal.dir, len(self.journal.rollouts), len(self.journal.reflections))
        self.budget = Budget(max(0, self.total - self.preflight_calls))  # rollouts; pre-flight calls already paid
        self.rollouts = Rollouts(self.student, self.metric, self.budget, num_threads=opt.num_threads or 1,
                                 failure_score=opt.failure_score, journal=self.journal,
                                 display_progress=opt.display_progress)
        self.proposer = opt.proposer or default_proposer(opt.guard)
        self.current = {n: parse_instructions(p.signature.instructions) for n, p in self.student.named_predictors()}
        seed_instr = self._render(self.current)
        self.result = HeroResult(budget=self.total, seed_instructions=seed_instr, pools=self.pools.to_dict(), seed=opt.seed)
        self.result.warnings += [f"pools: {n}" for n in self.pools.notes]
        self.archive = [ArchiveEntry("seed", 0, seed_instr, self._tokens(seed_instr))]
        self.reflection_usage = LMUsage()
        self.reserve = int(self.total * opt.selection_budget_fraction)
        diag = list(self.pools.diagnosis)
        random.Random(self.rng_seed).shuffle(diag)
        self.diag_order = diag
        self.diag_cursor = 0
        self.shown_examples: set[str] = set()
        # current prompt key -> {rejected candidate text: its edit, or None for a full-text proposal}
        self.rejected: dict[str, dict[str, str | None]] = {}
        logger.info("HERO-O: budget %d metric calls; pools diagnosis=%d update=%d selection=%d%s", self.total,
                    len(self.pools.diagnosis), len(self.pools.update), len(self.pools.selection),
                    " (reuses update)" if self.pools.selection_reuses_update else "")
        planned = rounds_for_budget(opt.num_rounds, self.budget.remaining, self.reserve, opt.min_calls_per_round)
        if planned < opt.num_rounds:
            self.result.warnings.append(
                f"budget of {self.total} metric calls funds {planned} of num_rounds={opt.num_rounds} rounds at "
                f"min_calls_per_round={opt.min_calls_per_round} (calls a round leaves unused fund later rounds; "
                f"set min_calls_per_round=0 to keep all)")
            logger.info("HERO-O: %s", self.result.warnings[-1])
        mlflow_run = _mlflow_start() if opt.use_mlflow else None
        try:
            for t in range(1, opt.num_rounds + 1):
                # Re-planned every round: small pools and cached rollouts often leave a round's calls
                # unused, and those fund further rounds instead of being returned unspent.
                rounds_left = rounds_for_budget(opt.num_rounds - t + 1, self.budget.remaining, self.reserve,
                                                opt.min_calls_per_round)
                if t > planned and (self.budget.remaining - self.reserve < min_round_calls(opt)
                                    or self.result.rounds[-1].metric_calls == 0):
                    break  # too little left for an acceptance test, or nothing changed since the last round
                predictor = self.predictors[(t - 1) % len(self.predictors)]
                allowance = plan_round(self.budget.remaining, rounds_left, self.reserve)
                rec = RoundRecord(t, predictor)
                spent0 = self.budget.spent
                self._round(rec, allowance)
                rec.metric_calls = self.budget.spent - spent0
                self.result.rounds.append(rec)
                self._log_round(rec)
                if self.journal:
                    self.journal.update_state(rounds_completed=t, metric_calls=self.budget.spent)
            program = self._finish()
        finally:
            self.rollouts.close()
            if mlflow_run is not None:
                mlflow_run()
            if self.journal:
                self.journal.close()
        return program

    def _round(self, rec: RoundRecord, allowance: int) -> None:
        opt, name = self.opt, rec.predictor
        spent0 = self.budget.spent

        def left() -> int:
            return allowance - (self.budget.spent - spent0)

        cur_instr = self._render(self.current)
        cur_key = instructions_key(cur_instr)
        # Each round starts where the last one stopped in the diagnosis pool, and cases never shown to
        # the reflector come first: otherwise an unchanged prompt re-renders the same few cases under
        # the token budget and a deterministic reflector repeats the previous round word for word.
        size = min(len(self.diag_order), opt.num_failing_cases + opt.num_passing_cases)
        start = self.diag_cursor
        batch = (self.diag_order[start:] + self.diag_order[:start])[:size]
        got = self.rollouts.evaluate(cur_key, cur_instr, self._items(batch), desc=f"round {rec.round} diagnosis",
                                     limit=diagnosis_limit(allowance, opt.acceptance_initial))
        results = [got[i] for i in batch if i in got]
        self.diag_cursor = (start + len(results)) % len(self.diag_order)
        results.sort(key=lambda r: r.example_id in self.shown_examples)
        cases = build_cases(results, self.examples, name, pass_threshold=opt.perfect_score,
                            num_failing=opt.num_failing_cases, num_passing=opt.num_passing_cases,
                            failure_only=opt.failure_only)
        rec.diagnosis_cases = [dict(case_id=c.case_id, example_id=c.example_id, passed=c.passed, score=c.score,
                                    error=c.error) for c in cases]
        if not any(not c.passed for c in cases):
            rec.notes.append("no failing diagnosis cases: nothing to revise" if cases else "no diagnosis results (budget)")
            return
        evidence, shown = opt.evidence_renderer.render(cases)
        rec.shown_case_ids = list(shown)
        self.shown_examples.update(c.example_id for c in cases if c.case_id in set(shown))
        state = self.current[name]
        ctx = ReflectionContext(name, state.seed, state.rules, state.render(), evidence, list(shown),
                                opt.num_candidates, cases,
                                tuple(e for e in self.rejected.get(cur_key, {}).values() if e))
        proposal = self._reflect(rec.round, ctx)
        rec.gradient, rec.reflection_error = proposal.gradient, proposal.error
        shown_cases = [c for c in cases if c.case_id in set(shown)]
        kept = self._assemble(rec, state, proposal, shown_cases, cur_key)
        if not kept:
            rec.notes.append("no usable candidate this round")
            return
        order = list(self.pools.update)
        random.Random(self.rng_seed * 1_000_003 + rec.round).shuffle(order)
        accepted: list[tuple[CandidateRecord, PromptState]] = []
        for cand, new_state in kept:
            if left() <= 0:
                cand.status = "skipped: round budget spent"
                continue
            cand_instr = {**cur_instr, name: new_state.render()}
            cand_key = instructions_key(cand_instr)
            cand.decision = opt.acceptance.decide(
                cand.candidate_id, order, self._pair_scores(cur_key, cur_instr, cand_key, cand_instr, left, cand.candidate_id)
            )
            cand.status = "accepted" if cand.decision.accepted else "rejected"
            if not cand.decision.accepted:
                self.rejected.setdefault(cur_key, {})[cand.instructions] = cand.edit if cand.kind == "edit" else None
            self.result.overall_fixes += cand.decision.fixes
            self.result.overall_breaks += cand.decision.breaks
            if cand.decision.accepted:
                accepted.append((cand, new_state))
        if accepted:
            best, best_state = max(accepted, key=lambda cs: (cs[0].decision.estimate, -self._tokens({"x": cs[1].render()})))
            best.status = "adopted"
            self.current = {**self.current, name: best_state}
            rec.adopted_candidate_id, rec.adopted_instructions = best.candidate_id, best_state.render()
            self.result.adopted_fixes += best.decision.fixes
            self.result.adopted_breaks += best.decision.breaks
            instr = self._render(self.current)
            self.archive.append(ArchiveEntry(best.candidate_id, rec.round, instr, self._tokens(instr), best.decision.estimate))

    def _assemble(self, rec: RoundRecord, state: PromptState, proposal: Proposal, cases: list, cur_key: str) -> list:
        """Candidates from the proposal: apply each edit to the current rules, drop unusable, duplicate
        and memorizing ones and those already rejected against this same prompt (re-testing them would
        spend budget to repeat a decision), keep at most K."""
        opt = self.opt
        kept: list[tuple[CandidateRecord, PromptState]] = []
        seen = {state.render()}
        options: list[tuple[str, str, Any, str, list[str]]] = []
        for k, e in enumerate(proposal.edits, 1):
            options.append((f"r{rec.round}c{k}", "edit", e, e.rule, list(e.cites)))
        for k, text in enumerate(proposal.texts, 1):
            options.append((f"r{rec.round}t{k}", "text", text, text.replace(state.seed, " "), []))
        for cid, kind, item, added, cites in options:
            if kind == "edit":
                cand = CandidateRecord(cid, kind, item.to_edit().describe(), "", cites)
                if item.problem:
                    cand.status = f"dropped: {item.problem}"
                    rec.candidates.append(cand)
                    continue
                rules = apply_edit(state.rules, item.to_edit(), opt.max_rules, opt.max_rule_chars)
                if isinstance(rules, str):
                    cand.status = f"dropped: {rules}"
                    rec.candidates.append(cand)
                    continue
                new_state = PromptState(state.seed, rules)
            else:
                cand = CandidateRecord(cid, kind, "full text", "", cites)
                new_state = PromptState(state.seed, state.rules, override=item)
            cand.instructions = new_state.render()
            rec.candidates.append(cand)
            if cand.instructions in seen:
                cand.status = "duplicate"
                continue
            if cand.instructions in self.rejected.get(cur_key, {}):
                cand.status = "duplicate: already rejected against the current prompt"
                continue
            verdict = opt.guard.check(added, state.seed, cases)
            cand.guard_allowed, cand.guard_reason = verdict.allowed, verdict.reason
            if not verdict.allowed:
                cand.status = "blocked"
                continue
            if len(kept) >= opt.num_candidates:
                cand.status = f"skipped: beyond num_candidates={opt.num_candidates}"
                continue
            seen.add(cand.instructions)
            cand.status = "queued"
            kept.append((cand, new_state))
        return kept

    def _pair_scores(self, cur_key, cur_instr, cand_key, cand_instr, left, cid):
        def pair_scores(ids: list[str]) -> dict[str, tuple[float, float]]:
            afford, cost = [], 0
            for i in ids:
                c = (self.rollouts.cached(cur_key, i) is None) + (self.rollouts.cached(cand_key, i) is None)
                if cost + c > min(left(), self.budget.remaining):
                    break
                cost += c
                afford.append(i)
            cur = self.rollouts.evaluate(cur_key, cur_instr, self._items(afford), desc="current")
            cand = self.rollouts.evaluate(cand_key, cand_instr, self._items(afford), desc=f"candidate {cid}")
            return {i: (cur[i].score, cand[i].score) for i in afford if i in cur and i in cand}

        return pair_scores

    def _reflect(self, round_no: int, ctx: ReflectionContext) -> Proposal:
        """The proposal for this round, from the journal when resuming, else from the reflection LM."""
        key = f"r{round_no}:{ctx.predictor}:" + hashlib.sha256(
            (ctx.evidence + "\x00" + ctx.current_text).encode("utf-8")).hexdigest()[:16]
        recorded = self.journal.replay_reflection(key) if self.journal else None
        if recorded is not None:
            proposal = Proposal.from_dict(recorded)
        else:
            meter = UsageMeter()
            lm = journaled_lm(self.reflection_lm, self.journal, key + ":") if self.journal else self.reflection_lm
            with dspy.context(lm=lm, usage_tracker=meter):
                try:
                    proposal = self.proposer.propose(ctx)
                except Exception as exc:  # a custom proposer failing must not end the run
                    proposal = Proposal(error=f"{type(exc).__name__}: {str(exc)[:300]}")
            proposal.lm_calls, proposal.input_tokens, proposal.output_tokens = meter.calls, meter.input_tokens, meter.output_tokens
            if self.journal:
                self.journal.record_reflection(key, proposal.to_dict())
        u = self.reflection_usage
        u.calls += proposal.lm_calls
        u.input_tokens += proposal.input_tokens
        u.output_tokens += proposal.output_tokens
        return proposal

    def _finish(self) -> dspy.Module:
        res = self.result
        winner = 0
        if len(self.archive) > 1:
            order = list(self.pools.selection)
            random.Random(self.rng_seed + 7).shuffle(order)

            def entry_scores(i: int, ids: list[str]) -> dict[str, float]:
                instr = self.archive[i].instructions
                got = self.rollouts.evaluate(instructions_key(instr), instr, self._items(ids),
                                             desc=f"selection {self.archive[i].entry_id}")
                return {x: got[x].score for x in ids if x in got}

            outcome = self.opt.selector.select(self.archive, order, entry_scores)
            winner = outcome.winner
            res.warnings += outcome.notes
        else:
            self.archive[0].selected = True
            msg = (f"HERO-O adopted no candidate in {len(res.rounds)} rounds; returning the seed program "
                   "unchanged (see detailed_results.rounds for why)")
            logger.warning(msg)
            res.warnings.append(msg)
        final = self.archive[winner]
        res.archive = self.archive
        res.final_entry_id, res.final_instructions = final.entry_id, dict(final.instructions)
        res.final_prompt_tokens = final.prompt_tokens
        res.total_metric_calls = self.budget.spent
        res.preflight_metric_calls = self.preflight_calls
        res.replayed_metric_calls = self.rollouts.replayed
        res.rollout_errors = self.rollouts.error_counts()
        u = self.rollouts.usage
        res.task_lm = LMUsage(u.calls, u.input_tokens, u.output_tokens)
        res.reflection_lm = self.reflection_usage
        if res.reflection_lm.calls:
            res.tokens_per_optimization_call = res.reflection_lm.tokens / res.reflection_lm.calls
        res.adopted_fix_break_ratio = res.adopted_fixes / res.adopted_breaks if res.adopted_breaks else None
        res.overall_fix_break_ratio = res.overall_fixes / res.overall_breaks if res.overall_breaks else None
        if self.budget.spent > self.total:  # Budget.take makes this impossible; fail loudly if it ever is not
            raise RuntimeError(f"metric-call budget exceeded: {self.budget.spent} > {self.total}")
        program = build_variant(self.student, final.instructions)
        program.detailed_results = res
        if self.journal:
            res.save_json(self.journal.dir / "result.json")
            self.journal.update_state(status="completed", metric_calls=self.budget.spent, final_entry_id=final.entry_id)
        logger.info("%s", res.summary())
        return program

    # ---- helpers ---------------------------------------------------------------------------------
    def _items(self, ids: list[str]) -> list[tuple[str, Any]]:
        return [(i, self.examples[i]) for i in ids]

    @staticmethod
    def _render(states: dict[str, PromptState]) -> dict[str, str]:
        return {n: s.render() for n, s in states.items()}

    @staticmethod
    def _tokens(instructions: dict[str, str]) -> int:
        return sum(approx_tokens(t) for t in instructions.values())

    def _fingerprint(self) -> str:
        opt = self.opt
        volatile = {"log_dir", "num_threads", "display_progress", "use_mlflow"}  # do not change results
        settings = {k: v for k, v in vars(opt).items()
                    if k not in volatile and isinstance(v, (int, float, str, bool, type(None), tuple))}
        return fingerprint({
            "examples": {i: ex.toDict() if hasattr(ex, "toDict") else str(ex) for i, ex in self.examples.items()},
            "instructions": {n: p.signature.instructions for n, p in self.student.named_predictors()},
            "budget": self.total,
            "settings": settings,
            # Callables cannot be compared by value; their names catch the common mistake of resuming
            # with another model or metric (which would mix journaled results of two setups).
            "task_lms": sorted({_model_name(p.lm or dspy.settings.lm) for _, p in self.student.named_predictors()}),
            "reflection_lm": _model_name(self.reflection_lm),
            "metric": _callable_name(self.opt.metric) if self.opt.metric is not None else "inferred",
        })

    def _log_round(self, rec: RoundRecord) -> None:
        n_cands = sum(c.status not in ("",) and not c.status.startswith("dropped") for c in rec.candidates)
        dec = [c.decision for c in rec.candidates if c.decision is not None]
        cum = {"round": rec.round, "adopted_fixes": self.result.adopted_fixes, "adopted_breaks": self.result.adopted_breaks,
               "metric_calls": self.budget.spent}
        self.result.cumulative_fix_break.append(cum)
        logger.info(
            "HERO-O round %d [%s]: %d cases, %d candidates, %d tested, adopted=%s, %d metric calls (total %d/%d)",
            rec.round, rec.predictor, len(rec.diagnosis_cases), n_cands, len(dec), rec.adopted_candidate_id,
            rec.metric_calls, self.budget.spent, self.total,
        )
        if self.opt.use_mlflow:
            _mlflow_log(rec, cum)


def _mlflow_start():
    """Start an MLflow run when mlflow is installed and none is active; returns its closer (or None)."""
    try:
        import mlflow
    except ImportError:
        logger.warning("use_mlflow=True but mlflow is not installed; skipping MLflow logging")
        return None
    if mlflow.active_run() is not None:
        return None
    mlflow.start_run(run_name="hero-o", nested=True)
    return mlflow.end_run


def _mlflow_log(rec: RoundRecord, cum: dict[str, Any]) -> None:
    try:
        import mlflow
    except ImportError:
        return
    if mlflow.active_run() is None:
        return
    metrics = {
        "hero.metric_calls": float(cum["metric_calls"]),
        "hero.adopted_fixes": float(cum["adopted_fixes"]),
        "hero.adopted_breaks": float(cum["adopted_breaks"]),
        "hero.round_adopted": float(rec.adopted_candidate_id is not None),
        "hero.candidates_tested": float(sum(c.decision is not None for c in rec.candidates)),
    }
    mlflow.log_metrics(metrics, step=rec.round)
