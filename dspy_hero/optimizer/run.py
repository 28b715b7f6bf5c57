"""One HERO-O compile() call: a thin loop over the strategies of `optimizer/strategies/`.

```
for plan in planner.rounds():                       # owns the budget
    cases    = diagnose(sampler.next(plan))          # current prompt on diagnosis examples
    evidence = evidence.render(cases)                # passing + failing cases, per-category slices
    for ctx in proposals.contexts(evidence):         # K calls over different slices, temperature > 0
                                                     #   (a question asked before: fresh seeds; at T=0 none)
        cands += builder.build(reflect(ctx))         # not-a-rule filter, guard, dedup vs rejected
    for c in cands: c.decision = acceptance.decide(c, update pool, a fair share, family_size=1/share(c))
    adopter.adopt(cands)                             # accepted ones only, by lower bound
final = selector.select(archive, selection pool)     # then held-out lineage is re-scored
```

Every rollout, and every extra metric execution, is charged to one Budget; completed rollouts and
reflection outputs go to the journal before the run moves on, so a resumed run replays them and
takes the same decisions (checkpoint.py).
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import asdict, dataclass
from typing import Any

import dspy

from dspy_hero.diagnosis import Diagnoser
from dspy_hero.fields import label_inputs
from dspy_hero.lm.local import server_of
from dspy_hero.lm.usage import Usage, UsageMeter
from dspy_hero.metrics.base import (
    MetricAdapter,
    MetricError,
    output_names,
    program_input_names,
    program_inputs,
    required_inputs,
)
from dspy_hero.optimizer.acceptance import RankedShares, SignTestAcceptance, family_sizes
from dspy_hero.optimizer.archive import AdaptiveSelector, ArchiveEntry
from dspy_hero.optimizer.budget import Budget, resolve_budget
from dspy_hero.optimizer.checkpoint import Journal, fingerprint, journaled_lm
from dspy_hero.optimizer.evidence import DefaultEvidenceRenderer
from dspy_hero.optimizer.guard import MemorizationGuard
from dspy_hero.optimizer.instructions import PromptState, build_variant, instructions_key, parse_instructions
from dspy_hero.optimizer.pools import DefaultPoolSplitter
from dspy_hero.optimizer.reflection import Proposal, Proposer, ReflectionContext, RuleProposer
from dspy_hero.optimizer.reflection_cases import CaseRuleProposer, FallbackProposer
from dspy_hero.optimizer.result import CandidateStatus, HeroResult, RoundRecord, lineage_row
from dspy_hero.optimizer.rollout import (
    FailFast,
    Rollouts,
    prefix_key,
)
from dspy_hero.optimizer.settings import HeroSettings, ProposalStyle
from dspy_hero.optimizer.strategies.adopter import LowerBoundAdopter
from dspy_hero.optimizer.strategies.builder import GuardedBuilder
from dspy_hero.optimizer.strategies.planner import RoundPlanner
from dspy_hero.optimizer.strategies.proposer import SlicedProposals
from dspy_hero.optimizer.strategies.protocols import Candidate, Evidence, RoundPlan
from dspy_hero.optimizer.strategies.render import CaseEvidence
from dspy_hero.optimizer.strategies.sampler import RotatingSampler
from dspy_hero.text import approx_tokens

logger = logging.getLogger("dspy_hero.optimizer")


def default_proposer(guard: Any = None, style: ProposalStyle = ProposalStyle.EVIDENCE_WIDE,
                     reflection_lm: Any = None) -> Proposer:
    """Evidence-wide rule edits and per-pattern rules (reflection_cases.py): one alone, or one as the
    fallback of the other when it yields no usable edit; which is `style` (AUTO: per-pattern alone for
    the embedded local model, see `ProposalStyle`)."""
    style = style.for_reflector(local=server_of(reflection_lm) is not None)
    if style is ProposalStyle.PER_PATTERN_ONLY:
        return CaseRuleProposer()
    if style is ProposalStyle.PER_PATTERN:
        return FallbackProposer(CaseRuleProposer(), RuleProposer(), guard=guard)
    return FallbackProposer(RuleProposer(), CaseRuleProposer(), guard=guard)


@dataclass(frozen=True)
class Overrides:
    """User-supplied strategy objects (None: the default built from the settings)."""

    pool_splitter: Any = None
    evidence_renderer: Any = None
    proposer: Any = None
    guard: Any = None
    acceptance: Any = None
    selector: Any = None
    level_shares: Any = None


def tokens_of(instructions: dict[str, str]) -> int:
    return sum(approx_tokens(t) for t in instructions.values())


def _model_name(lm: Any) -> str:
    return str(getattr(lm, "model", None) or type(lm).__name__)


def _callable_name(fn: Any) -> str:
    target = getattr(fn, "func", fn)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{getattr(target, '__module__', '') or type(target).__module__}.{name}"


class HeroRun:
    """The state of one compile() call; the optimizer object itself stays stateless across calls."""

    def __init__(self, settings: HeroSettings, overrides: Overrides, metric: Any, reflection_lm: Any,
                 student: dspy.Module, trainset: list, valset: list | None):
        self.s, self.o, self.student = settings, overrides, student
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
                raise ValueError(f"example {ex_id} has no input fields ({exc}); build examples with .with_inputs(...)") from exc
        self.user_metric = metric
        if metric is None:
            from dspy_hero.metrics.infer import infer_metric

            metric = infer_metric(trainset)
        self.input_names = program_input_names(student)
        self.preflight_usage = UsageMeter()
        metric = self._preflight_program(metric, trainset)
        self.metric = MetricAdapter(metric)
        self.total = resolve_budget(auto=settings.auto, max_full_evals=settings.max_full_evals,
                                    max_metric_calls=settings.max_metric_calls, num_predictors=len(self.predictors),
                                    trainset_size=len(trainset), valset_size=len(valset) if valset else None)
        lms = [p.lm or dspy.settings.lm for _, p in student.named_predictors()]
        if any(lm is None for lm in lms):
            raise ValueError("no task LM: call dspy.configure(lm=...) or set predictor.lm before compile()")
        self.reflection_lm = reflection_lm or dspy.settings.lm or lms[0]
        self.preflight_calls = self._preflight_metric(limit=self.total)
        self.rng_seed = 0 if settings.seed is None else int(settings.seed)

    def _preflight_program(self, metric: Any, trainset: list) -> Any:
        """Refuse, before any budget is spent, what would make every rollout fail or leak: label fields
        marked as inputs, a program that cannot take the examples' inputs, a program whose outputs lack
        the metric's `prediction_field`. Returns the metric (an inferred one reads the program's single
        output field when the language's default is not among them)."""
        for ex_id, ex in self.examples.items():
            labels = label_inputs(ex)
            if labels:
                raise ValueError(
                    f"example {ex_id} marks label field(s) {labels} as inputs: the program and HERO-O's reflector "
                    "would see the answer. Mark only the task's inputs, e.g. .with_inputs('question', 'db_schema'); "
                    "environment references (db_path, graph, ...) need not be inputs either.")
        required = required_inputs(self.student)
        for ex_id, ex in self.examples.items():
            passed = program_inputs(self.student, ex, self.input_names)
            missing = [r for r in required if r not in passed]
            if missing:
                unmarked = [m for m in missing if m in ex.keys()]
                raise ValueError(
                    f"the program's forward requires {missing}, which example {ex_id} does not provide (its inputs: "
                    f"{sorted(ex.inputs().keys())})" + (f"; {unmarked} are fields of the example not marked as inputs: "
                                                        "add them to .with_inputs(...)" if unmarked else ""))
        if isinstance(self.student, dspy.Predict):  # DSPy would warn on every call: say it once, here
            first_id, first = next(iter(self.examples.items()))
            absent = [n for n in self.input_names if n not in program_inputs(self.student, first, self.input_names)]
            if absent:
                logger.warning("HERO-O: the program's signature reads %s, which example %s does not provide", absent, first_id)
        field = getattr(metric, "prediction_field", None)
        if not isinstance(field, str):
            return metric
        outputs = self._static_outputs()
        if outputs is None:  # a custom forward: its outputs are known only by calling it (no metric call)
            ex_id, ex = next(iter(self.examples.items()))
            with dspy.context(usage_tracker=self.preflight_usage):
                try:
                    pred = self.student(**program_inputs(self.student, ex, self.input_names))
                except TypeError as exc:
                    raise ValueError(f"the program rejects the inputs of example {ex_id} "
                                     f"({sorted(program_inputs(self.student, ex, self.input_names))}): TypeError: {exc}") from exc
                except Exception as exc:  # LM failures: the rollouts' fail-fast deals with them
                    logger.warning("HERO-O pre-flight: the program raised on example %s (%s: %s); its outputs "
                                   "are checked on the rollouts", ex_id, type(exc).__name__, exc)
                    return metric
            outputs = output_names(pred)
            if outputs is None:
                return metric
        if field in outputs:
            return metric
        candidates = [o for o in outputs if o not in ("reasoning", "rationale", "raw_output")]
        if self.user_metric is None and len(candidates) == 1:
            from dspy_hero.metrics.infer import infer_metric

            logger.info("HERO-O: the program outputs %r, not %r: the inferred metric reads %r", candidates[0], field, candidates[0])
            return infer_metric(trainset, prediction_field=candidates[0])
        hint = f" pass prediction_field={candidates[0]!r} to the metric factory" if len(candidates) == 1 else \
            " pass prediction_field=<the output holding the program> to the metric factory"
        raise ValueError(f"the metric reads the prediction field {field!r}, but the program's outputs are {outputs}:{hint} "
                         f"(e.g. sql_execution_metric(prediction_field=...)) or name the program's output {field!r}")

    def _static_outputs(self) -> list[str] | None:
        """The program's output fields when its structure tells them: a Predict's signature, a module's
        `output_field` (GenerateProgram), or a DSPy library module's last predictor; None for a custom forward."""
        program = self.student
        if isinstance(program, dspy.Predict):
            return list(program.signature.output_fields)
        if isinstance(getattr(program, "output_field", None), str):
            return [program.output_field]
        if (getattr(getattr(type(program), "forward", None), "__module__", "") or "").startswith("dspy."):
            return list(list(program.named_predictors())[-1][1].signature.output_fields)
        return None

    def _preflight_metric(self, limit: int) -> int:
        """Call the metric once per distinct example field set with an empty prediction: a metric
        that raises, needs fields some examples lack, or scores outside [0, 1] fails here, before any
        rollout. These are metric calls, so they are paid from the budget (at most `limit`)."""
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

    # ---- set-up ---------------------------------------------------------------------------------
    def _build(self) -> None:
        s, o = self.s, self.o
        splitter = o.pool_splitter or DefaultPoolSplitter(s.pool_fractions, s.group_key)
        self.pools = splitter.split(self.train, self.val, self.rng_seed)
        if not self.pools.diagnosis or not self.pools.update or not self.pools.selection:
            raise ValueError(f"the pool splitter left a pool empty: {self.pools}")
        if set(self.pools.diagnosis) & set(self.pools.update):
            raise ValueError("diagnosis and update pools overlap: an example would both inspire and judge a change")
        self.journal = Journal(s.log_dir, self._fingerprint()) if s.log_dir else None
        if self.journal and self.journal.resumed:
            logger.info("HERO-O: resuming from %s (%d rollouts and %d reflection records journaled; replayed, not re-bought)",
                        self.journal.dir, len(self.journal.rollouts), len(self.journal.reflections))
        self.budget = Budget(max(0, self.total - self.preflight_calls))  # pre-flight calls already paid
        self.rollouts = Rollouts(self.student, self.metric, self.budget, num_threads=s.num_threads,
                                 failure_score=s.failure_score, journal=self.journal,
                                 display_progress=s.display_progress, order_key=prefix_key(s.group_key),
                                 input_names=self.input_names, fail_fast=FailFast(s.max_errors))
        self.sampler = RotatingSampler(self.pools.diagnosis, self.rng_seed, s.num_failing_cases + s.num_passing_cases,
                                       s.acceptance_initial)
        renderer = o.evidence_renderer or DefaultEvidenceRenderer(s.evidence_token_budget, reflection_lm=self.reflection_lm,
                                                                  training_references=s.training_references)
        self.diagnoser = Diagnoser()  # one per run: environments (graphs, sandboxes) are opened once
        self.evidence = CaseEvidence(renderer, self.examples, pass_threshold=s.perfect_score,
                                     num_failing=s.num_failing_cases, num_passing=s.num_passing_cases,
                                     failure_only=s.failure_only, diagnoser=self.diagnoser,
                                     training_references=s.training_references)
        guard = o.guard or MemorizationGuard()
        self.proposer = o.proposer or default_proposer(guard, s.proposal_style, self.reflection_lm)
        self.proposals = SlicedProposals(s.proposal_calls, s.reflection_temperature)
        self.builder = GuardedBuilder(guard, max_rules=s.max_rules, max_rule_chars=s.max_rule_chars, limit=s.num_candidates)
        # alpha is the run's false-adoption level: Bonferroni over the (at most) T rounds here, and over
        # the candidates of a round through family_size, so P(any non-improving adoption) <= alpha.
        self.acceptance = o.acceptance or SignTestAcceptance(margin=s.acceptance_margin, initial=s.acceptance_initial,
                                                             max_size=s.acceptance_max,
                                                             alpha=s.acceptance_alpha / max(1, s.num_rounds))
        level_shares = o.level_shares or RankedShares()
        # checked for every round size now, before any LM call: k -> each candidate's family size
        self.families = {k: family_sizes(level_shares, k) for k in range(1, s.num_candidates + 1)}
        self.adopter = LowerBoundAdopter(lambda text: approx_tokens(text))
        self.selector = o.selector or AdaptiveSelector(alpha=s.acceptance_alpha)
        self.current = {n: parse_instructions(p.signature.instructions) for n, p in self.student.named_predictors()}
        seed_instr = self._render(self.current)
        self.result = HeroResult(budget=self.total, seed_instructions=seed_instr, pools=self.pools.to_dict(), seed=s.seed)
        self.result.warnings += [f"pools: {n}" for n in self.pools.notes]
        # how a round sizes its tests: None funds each candidate with two first looks (share 0, or a rule that cannot say)
        self.detect = getattr(self.acceptance, "pairs_to_detect", None) if s.detectable_fix_share > 0 else None
        if s.detectable_fix_share > 0 and self.detect is None:
            note = (f"acceptance rule {type(self.acceptance).__name__} has no pairs_to_detect(): candidates are funded "
                    "with two first looks each, not by detectable_fix_share (set it to 0 to silence this)")
            logger.warning("HERO-O: %s", note)
            self.result.warnings.append(note)
        self.archive = [ArchiveEntry("seed", 0, seed_instr, tokens_of(seed_instr))]
        self.discovered = [self.preflight_calls]  # metric calls spent when each archive entry was found
        self.decisions: dict[str, Any] = {}  # archive entry id -> the decision that adopted it
        self.reflection_usage = UsageMeter()
        self.rejected: dict[str, dict[str, str | None]] = {}  # prompt key -> {rejected text: its edit (None: full text)}
        self.asked: dict[str, int] = {}  # question key -> rounds that asked it
        self.update_order_seed = self.rng_seed * 1_000_003
        cap = int(self.total * s.selection_budget_fraction)
        # final selection and lineage score each archive entry (and one more adoption) on the selection pool
        reserve = lambda: min(cap, len(self.pools.selection) * (len(self.archive) + 1))
        need = self.sampler.batch_size + (s.num_candidates + 1) * min(s.acceptance_max, len(self.pools.update))
        self.planner = RoundPlanner(self.budget, reserve=reserve, num_rounds=s.num_rounds, need=need,
                                    min_calls_per_round=s.min_calls_per_round, min_extra=s.acceptance_initial)

    # ---- the loop -------------------------------------------------------------------------------
    def execute(self) -> dspy.Module:
        self._build()
        logger.info("HERO-O: budget %d metric calls; pools diagnosis=%d update=%d selection=%d%s", self.total,
                    len(self.pools.diagnosis), len(self.pools.update), len(self.pools.selection),
                    " (reuses update)" if self.pools.selection_reuses_update else "")
        if self.planner.planned < self.s.num_rounds:
            self.result.warnings.append(
                f"budget of {self.total} metric calls funds {self.planner.planned} of num_rounds={self.s.num_rounds} "
                f"rounds at min_calls_per_round={self.s.min_calls_per_round} (calls a round leaves unused fund later "
                "rounds; set min_calls_per_round=0 to keep all)")
        mlflow_end = _mlflow_start() if self.s.use_mlflow else None
        try:
            for plan in self.planner.rounds(self.predictors):
                rec = self._round(plan)
                rec.metric_calls = self.planner.spent_this_round()
                self.result.rounds.append(rec)
                self._log_round(rec)
                if self.journal:
                    self.journal.update_state(rounds_completed=plan.round, metric_calls=self.budget.spent)
            return self._finish()
        finally:
            self.rollouts.close()
            self.diagnoser.close()
            if mlflow_end is not None:
                mlflow_end()
            if self.journal:
                self.journal.close()

    def _round(self, plan: RoundPlan) -> RoundRecord:
        rec, name = RoundRecord(plan.round, plan.predictor), plan.predictor
        cur = self._render(self.current)
        cur_key = instructions_key(cur)
        evidence = self._diagnose(plan, rec, cur, cur_key)
        if not evidence.has_failures:
            rec.notes.append("no failing diagnosis cases: nothing to revise" if evidence.cases else "no diagnosis results (budget)")
            return rec
        rejected = self.rejected.setdefault(cur_key, {})
        order = list(self.pools.update)
        random.Random(self.update_order_seed + plan.round).shuffle(order)
        if self._affordable(order, cur_key, None, 1) < self.s.acceptance_initial:
            # reflecting would cost minutes of reflection-LM time for candidates no test can look at
            rec.notes.append("the round's budget cannot fund one candidate's first look: no proposal asked")
            return rec
        asked = self._question_key(plan.predictor, evidence, rejected)
        repeat = self.asked.get(asked, 0)
        if repeat and self.s.reflection_temperature <= 0:
            rec.notes.append("the same evidence, prompt and rejected rules as an earlier round that found nothing "
                             "new: at reflection_temperature=0 asking again would repeat its answers")
            return rec
        self.asked[asked] = repeat + 1
        k = self._fundable(order, cur_key, self.s.num_candidates)
        if k < self.s.num_candidates:
            enough = (f"pairs enough to adopt a rule that fixes {self.s.detectable_fix_share:.0%} of them"
                      if self.s.detectable_fix_share > 0 else "two first looks each")
            rec.notes.append(f"the round's budget tests {k} of num_candidates={self.s.num_candidates} candidates "
                             f"with {enough}: asking for {k}")
        queued = self._propose(plan, rec, evidence, rejected, repeat, k)
        if not queued:
            rec.notes.append("no usable candidate this round")
            return rec
        tested = self._fund(queued, k)
        self._test(tested, order, cur, name)
        for cand in tested:
            accepted = cand.record.decision.accepted
            cand.record.mark(CandidateStatus.ACCEPTED if accepted else CandidateStatus.REJECTED)
            if not accepted:
                rejected[cand.record.instructions] = cand.record.edit if cand.record.kind == "edit" else None
            self.result.overall_fixes += cand.record.decision.fixes
            self.result.overall_breaks += cand.record.decision.breaks
        best = self.adopter.adopt(tested)
        if best is not None:
            self._adopt(rec, name, best)
        return rec

    # ---- round helpers ----------------------------------------------------------------------------
    def _diagnose(self, plan: RoundPlan, rec: RoundRecord, cur: dict[str, str], cur_key: str) -> Evidence:
        """Run the current prompt on the sampler's batch and render the cases (unseen ones first)."""
        batch, limit = self.sampler.next(plan)
        got = self.rollouts.run(cur_key, cur, self._items(batch), desc=f"round {plan.round} diagnosis",
                                limit=min(limit, self.planner.left()))
        done = [i for i in batch if i in got]
        evidence = self.evidence.render([got[i] for i in self.sampler.unseen_first(done)], plan.predictor)
        self.sampler.seen(done, [c.example_id for c in evidence.shown_cases()])
        rec.diagnosis_cases = [dict(case_id=c.case_id, example_id=c.example_id, passed=c.passed, score=c.score,
                                    error=c.error) for c in evidence.cases]
        rec.shown_case_ids = list(evidence.shown)
        return evidence

    def _question_key(self, predictor: str, evidence: Evidence, rejected: dict[str, str | None]) -> str:
        """What a round asks the reflector: the same key means the same prompts. It recurs when the
        diagnosis pool is exhausted and the last round changed nothing (on Spider split seed 2 a
        14-question pool was diagnosed whole in round 1, and rounds 2-5 asked round 1's question)."""
        parts = (predictor, self.current[predictor].render(), evidence.text, *sorted(rejected))
        return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()

    def _propose(self, plan: RoundPlan, rec: RoundRecord, evidence: Evidence,
                 rejected: dict[str, str | None], repeat: int, k: int) -> list[Candidate]:
        """Proposal calls over the evidence slices until `k` distinct new candidates are queued; a
        question asked before (`repeat` > 0) is asked at fresh samples."""
        state = self.current[plan.predictor]
        base = ReflectionContext(plan.predictor, state.seed, state.rules, state.render(), evidence.text,
                                 list(evidence.shown), k, evidence.cases, tuple(e for e in rejected.values() if e),
                                 repeat=repeat)
        queued: list[Candidate] = []
        taken: set[str] = set()
        for ctx in self.proposals.contexts(base, evidence):
            proposal = self._reflect(plan.round, ctx)
            rec.gradient, rec.reflection_error = rec.gradient or proposal.gradient, rec.reflection_error or proposal.error
            records, new = self.builder.build(plan.round, state, proposal, evidence.shown_cases(ctx.shown_case_ids),
                                              rejected, taken)
            for r in records:
                r.focus = ctx.focus
            rec.candidates += records
            queued += new
            base.proposed = tuple(dict.fromkeys(c.edit for c in rec.candidates if c.kind == "edit"))
            if len(queued) >= k or (proposal.error and not proposal.edits and not proposal.texts):
                break
        return queued

    def _test(self, tested: list[Candidate], order: list[str], cur: dict[str, str], name: str) -> None:
        """Every candidate's acceptance test, each at its share of alpha (`level_shares`, in proposal
        order). The looks are interleaved:
        each round of looks buys the next sample of every test still open, the same number of pairs
        for each when the round cannot afford all of them, so the allowance is split fairly and goes
        to the candidates still undecided. A rule with only `decide()` gets equal shares in turn."""
        instr = [{**cur, name: c.state.render()} for c in tested]
        scorers = [self._pair_scores(instructions_key(cur), cur, i, c.record.candidate_id) for i, c in zip(instr, tested)]
        families = self.families[len(tested)]
        if not hasattr(self.acceptance, "start"):
            for i, cand in enumerate(tested):
                pairs = self._affordable(order, instructions_key(cur), instructions_key(instr[i]), len(tested) - i)
                cand.record.decision = self.acceptance.decide(cand.record.candidate_id, order[:pairs], scorers[i],
                                                              family_size=families[i])
            return
        tests = [self.acceptance.start(c.record.candidate_id, order, family_size=f) for c, f in zip(tested, families)]
        while live := [k for k, t in enumerate(tests) if not t.done]:
            wants = {k: tests[k].want() for k in live}
            p = self._even_pairs(wants, instructions_key(cur), {k: instructions_key(instr[k]) for k in live})
            for k in live:
                tests[k].feed(wants[k], scorers[k](wants[k][:p]) if p else {})
        for cand, t in zip(tested, tests):
            cand.record.decision = t.decision

    def _even_pairs(self, wants: dict[int, list[str]], cur_key: str, keys: dict[int, str]) -> int:
        """The most pairs p such that every open test can buy want[:p] (with the current prompt's
        missing rollouts on them) from what the round has left."""
        left, cost, counted = self.planner.left(), 0, set()
        longest = max((len(w) for w in wants.values()), default=0)
        for p in range(longest):
            extra = 0
            for k, w in wants.items():
                if p < len(w):
                    extra += self.rollouts.cached(keys[k], w[p]) is None
                    if w[p] not in counted and self.rollouts.cached(cur_key, w[p]) is None:
                        extra += 1
            if cost + extra > left:
                return p
            cost += extra
            counted.update(w[p] for w in wants.values() if p < len(w))
        return longest

    @staticmethod
    def _fund(queued: list[Candidate], k: int) -> list[Candidate]:
        """The `k` candidates this round can test properly (`_fundable`; a proposal may queue more than
        it asked for); the rest are left untested, not rejected, so a later round may propose them again."""
        m = min(len(queued), k)
        for cand in queued[m:]:
            cand.record.mark(CandidateStatus.SKIPPED, f"the round's budget tests {m} candidate(s) well")
        return queued[:m]

    def _fundable(self, order: list[str], cur_key: str, limit: int) -> int:
        """How many of `limit` candidates (at least 1) get a fair share of pairs that can decide: two
        first looks, and enough pairs that a rule fixing `detectable_fix_share` of them would pass at
        the level of a family that size (or every pair a test may use, when the pool holds fewer).
        Splitting a small budget over more tests only makes each one smaller and stricter (at 120
        calls, four tests of 12-19 pairs at alpha/20 adopt a rule fixing 30% of them in 0-7% of draws)."""
        m = max(1, limit)
        usable = min(self.s.acceptance_max, len(order))
        while m > 1 and self._affordable(order, cur_key, None, m) < self._pairs_needed(m, usable):
            m -= 1
        return m

    def _pairs_needed(self, candidates: int, usable: int) -> float:
        floor = 2 * self.s.acceptance_initial
        if self.detect is None:
            return floor
        # the strictest test of the round must still be able to adopt such a rule
        n = self.detect(self.s.detectable_fix_share, family_size=max(self.families[candidates]))
        return max(floor, usable if n is None else min(n, usable))

    def _affordable(self, order: list[str], cur_key: str, cand_key: str | None, candidates: int) -> int:
        """The most pairs p each of `candidates` remaining candidates can get from what the round has
        left: the current prompt's missing rollouts on order[:p] plus p per candidate must fit."""
        left, cost, p = self.planner.left(), 0, 0
        for i in order[: self.s.acceptance_max]:
            extra = (self.rollouts.cached(cur_key, i) is None) + candidates * (
                cand_key is None or self.rollouts.cached(cand_key, i) is None)
            if cost + extra > left:
                break
            cost += extra
            p += 1
        return p

    def _pair_scores(self, cur_key: str, cur_instr: dict[str, str], cand_instr: dict[str, str], cid: str):
        cand_key = instructions_key(cand_instr)

        def pair_scores(ids: list[str]) -> dict[str, tuple[float, float]]:
            afford, cost = [], 0
            for i in ids:
                c = (self.rollouts.cached(cur_key, i) is None) + (self.rollouts.cached(cand_key, i) is None)
                if cost + c > self.planner.left():
                    break
                cost += c
                afford.append(i)
            cur = self.rollouts.run(cur_key, cur_instr, self._items(afford), desc="current")
            cand = self.rollouts.run(cand_key, cand_instr, self._items(afford), desc=f"candidate {cid}")
            return {i: (cur[i].score, cand[i].score) for i in afford if i in cur and i in cand}

        return pair_scores

    def _adopt(self, rec: RoundRecord, name: str, best: Candidate) -> None:
        best.record.mark(CandidateStatus.ADOPTED)
        self.current = {**self.current, name: best.state}
        rec.adopted_candidate_id, rec.adopted_instructions = best.record.candidate_id, best.state.render()
        self.result.adopted_fixes += best.record.decision.fixes
        self.result.adopted_breaks += best.record.decision.breaks
        instr = self._render(self.current)
        self.archive.append(ArchiveEntry(best.record.candidate_id, rec.round, instr, tokens_of(instr),
                                         best.record.decision.estimate))
        self.decisions[best.record.candidate_id] = best.record.decision
        self.discovered.append(self.preflight_calls + self.budget.spent)

    def _reflect(self, round_no: int, ctx: ReflectionContext) -> Proposal:
        """The proposal for this call, from the journal when resuming, else from the reflection LM."""
        key = f"r{round_no}:{ctx.predictor}:" + hashlib.sha256(
            (ctx.evidence + "\x00" + ctx.current_text + "\x00" + ctx.rules_and_rejected() + f"\x00{ctx.sample}").encode("utf-8")
        ).hexdigest()[:16]
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
            used = meter.total
            proposal.lm_calls, proposal.input_tokens, proposal.output_tokens = used.calls, used.input_tokens, used.output_tokens
            if self.journal:
                self.journal.record_reflection(key, proposal.to_dict())
        self.reflection_usage.add(Usage(proposal.lm_calls, proposal.input_tokens, proposal.output_tokens))
        return proposal

    # ---- the end --------------------------------------------------------------------------------
    def _scores(self, i: int, ids: list[str], desc: str) -> dict[str, float]:
        instr = self.archive[i].instructions
        got = self.rollouts.run(instructions_key(instr), instr, self._items(ids), desc=desc)
        return {x: got[x].score for x in ids if x in got}

    def _finish(self) -> dspy.Module:
        res = self.result
        winner = 0
        order = list(self.pools.selection)
        random.Random(self.rng_seed + 7).shuffle(order)
        if len(self.archive) > 1:
            outcome = self.selector.select(self.archive, order,
                                           lambda i, ids: self._scores(i, ids, f"selection {self.archive[i].entry_id}"))
            winner = outcome.winner
            res.warnings += outcome.notes
        else:
            self.archive[0].selected = True
            msg = (f"HERO-O adopted no candidate in {len(res.rounds)} rounds; returning the seed program "
                   "unchanged (see detailed_results.rounds for why)")
            logger.warning(msg)
            res.warnings.append(msg)
        final = self.archive[winner]
        self._lineage(order, winner)
        res.archive = self.archive
        res.final_entry_id, res.final_instructions = final.entry_id, dict(final.instructions)
        res.final_prompt_tokens = final.prompt_tokens
        res.total_metric_calls = self.budget.spent + self.preflight_calls  # every call the metric saw
        res.feedback_metric_calls = self.rollouts.feedback_calls
        res.preflight_metric_calls = self.preflight_calls
        res.replayed_metric_calls = self.rollouts.replayed
        res.rollout_errors = self.rollouts.error_counts()
        res.task_lm = self.rollouts.usage.total + self.preflight_usage.total
        self._gepa_fields(order, winner)
        res.reflection_lm = self.reflection_usage.total
        if res.reflection_lm.calls:
            res.tokens_per_optimization_call = res.reflection_lm.tokens / res.reflection_lm.calls
        res.adopted_fix_break_ratio = res.adopted_fixes / res.adopted_breaks if res.adopted_breaks else None
        res.overall_fix_break_ratio = res.overall_fixes / res.overall_breaks if res.overall_breaks else None
        if res.total_metric_calls > self.total:  # Budget.take makes this impossible; fail loudly if it ever is not
            raise RuntimeError(f"metric-call budget exceeded: {res.total_metric_calls} > {self.total}")
        program = build_variant(self.student, final.instructions)
        program.detailed_results = res
        if self.journal:
            res.save_json(self.journal.dir / "result.json")
            self.journal.update_state(status="completed", metric_calls=self.budget.spent, final_entry_id=final.entry_id)
        logger.log(self._level, "%s", res.summary())
        return program

    @property
    def _level(self) -> int:
        return logging.WARNING if self.s.verbose else logging.INFO

    def _gepa_fields(self, order: list[str], winner: int) -> None:
        """dspy.GEPA's result fields with HERO's meaning (see HeroResult): the archive's prompts, their
        scores on the selection pool as far as they were bought, the chain of adoptions."""
        res = self.result
        res.candidates = [dict(e.instructions) for e in self.archive]
        res.parents = [[None]] + [[i - 1] for i in range(1, len(self.archive))]
        res.discovery_eval_counts = list(self.discovered)
        res.val_subscores = []
        for e in self.archive:
            key = instructions_key(e.instructions)
            got = {i: self.rollouts.cached(key, i) for i in order}
            res.val_subscores.append({i: r.score for i, r in got.items() if r is not None})
        res.val_aggregate_scores = [sum(v.values()) / len(v) if v else None for v in res.val_subscores]
        best: dict[str, list[int]] = {}
        for i in order:
            scored = {k: v[i] for k, v in enumerate(res.val_subscores) if i in v}
            if scored:
                top = max(scored.values())
                best[i] = [k for k, v in scored.items() if v == top]
        res.per_val_instance_best_candidates = best
        res.num_full_val_evals = sum(len(v) == len(order) for v in res.val_subscores)
        res.best_idx = winner
        res.log_dir = self.s.log_dir
        res.settings = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.s).items()}

    def _lineage(self, order: list[str], winner: int) -> None:
        """Out-of-sample fix:break of every adopted update (vs. the prompt it replaced) and of the
        chain up to the final prompt (vs. the seed), re-scored on the selection pool, which decided
        none of them; paid from what is left of the budget (cached rollouts are free)."""
        res = self.result
        res.held_out_pool = "update (too little data for a separate selection pool)" if \
            self.pools.selection_reuses_update else ("valset" if self.pools.selection_is_valset else "selection")
        if len(self.archive) == 1:
            return
        scores = {i: self._scores(i, order, "held-out lineage") for i in range(len(self.archive))}
        for i in range(1, len(self.archive)):
            entry = self.archive[i]
            res.lineage.append(lineage_row(entry.entry_id, entry.round, self.decisions[entry.entry_id],
                                           scores[i - 1], scores[i], scores[0], final=i == winner))
        final = next((row for row in res.lineage if row["final"]), None)
        if final is not None:
            c = final["cumulative_held_out"]
            res.held_out_fixes, res.held_out_breaks, res.held_out_n = c["fixes"], c["breaks"], c["n"]

    # ---- helpers ----------------------------------------------------------------------------------
    def _items(self, ids: list[str]) -> list[tuple[str, Any]]:
        return [(i, self.examples[i]) for i in ids]

    @staticmethod
    def _render(states: dict[str, PromptState]) -> dict[str, str]:
        return {n: s.render() for n, s in states.items()}

    def _fingerprint(self) -> str:
        return fingerprint({
            "examples": {i: ex.toDict() if hasattr(ex, "toDict") else str(ex) for i, ex in self.examples.items()},
            "instructions": {n: p.signature.instructions for n, p in self.student.named_predictors()},
            "budget": self.total,
            "settings": self.s.fingerprint_items(),
            # Callables cannot be compared by value; their names catch the common mistake of resuming
            # with another model or metric (which would mix journaled results of two setups).
            "task_lms": sorted({_model_name(p.lm or dspy.settings.lm) for _, p in self.student.named_predictors()}),
            "reflection_lm": _model_name(self.reflection_lm),
            "metric": _callable_name(self.user_metric) if self.user_metric is not None else "inferred",
        })

    def _log_round(self, rec: RoundRecord) -> None:
        tested = sum(c.decision is not None for c in rec.candidates)
        cum = {"round": rec.round, "adopted_fixes": self.result.adopted_fixes, "adopted_breaks": self.result.adopted_breaks,
               "metric_calls": self.budget.spent}
        self.result.cumulative_fix_break.append(cum)
        logger.log(self._level, "HERO-O round %d [%s]: %d cases, %d candidates, %d tested, adopted=%s, %d metric calls (total %d/%d)",
                    rec.round, rec.predictor, len(rec.diagnosis_cases), len(rec.candidates), tested,
                    rec.adopted_candidate_id, rec.metric_calls, self.budget.spent, self.total)
        if self.s.use_mlflow:
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
    mlflow.log_metrics({
        "hero.metric_calls": float(cum["metric_calls"]),
        "hero.adopted_fixes": float(cum["adopted_fixes"]),
        "hero.adopted_breaks": float(cum["adopted_breaks"]),
        "hero.round_adopted": float(rec.adopted_candidate_id is not None),
        "hero.candidates_tested": float(sum(c.decision is not None for c in rec.candidates)),
    }, step=rec.round)
