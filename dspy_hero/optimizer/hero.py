"""HeroOptimizer (HERO-O): learn a program's instructions from execution evidence.

The loop (paper §4.1, C.1): for T rounds, pick a predictor round-robin, run the current program on a
diagnosis batch, render passing and failing cases, ask the reflection LM for K distinct rule edits,
drop edits that memorize answers, test each surviving candidate against the current program on
paired update-pool examples with an exact one-sided test, and adopt the accepted one with the best
lower bound. The final prompt is chosen among the seed and every adopted prompt on the selection
pool, and each adopted update is re-scored there (out-of-sample lineage). The loop lives in run.py,
one strategy object per decision in strategies/; this module maps GEPA's arguments and validates
the settings into one frozen HeroSettings.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from dspy_hero.optimizer.budget import resolve_budget
from dspy_hero.optimizer.reflection import GepaProposerAdapter
from dspy_hero.metrics.base import MetricAdapter
from dspy_hero.optimizer.mlflow_log import log_compile
from dspy_hero.optimizer.run import HeroRun, Overrides, default_proposer
from dspy_hero.optimizer.settings import HeroSettings
from dspy_hero.optimizer.strategies.sampler import diagnosis_limit

__all__ = ["HeroOptimizer", "HeroSettings", "default_proposer", "diagnosis_limit"]

logger = logging.getLogger("dspy_hero.optimizer")

# dspy.GEPA arguments with no meaning in HERO-O: accepted for drop-in use, warned about once if set.
_NO_HERO_MEANING = (
    "reflection_minibatch_size", "candidate_selection_strategy", "skip_perfect_score", "code_proposer",
    "use_merge", "max_merge_invocations", "use_wandb", "wandb_api_key", "wandb_init_kwargs",
    "track_best_outputs", "warn_on_score_mismatch", "gepa_kwargs",
)
# dspy.MIPROv2 constructor arguments with no meaning in HERO-O (it learns instructions, not demos).
_MIPRO_NO_HERO_MEANING = (
    "teacher_settings", "max_bootstrapped_demos", "max_labeled_demos", "init_temperature", "metric_threshold",
)
# dspy.MIPROv2 compile() arguments with no meaning in HERO-O.
_MIPRO_COMPILE_NO_HERO_MEANING = (
    "teacher", "max_bootstrapped_demos", "max_labeled_demos", "minibatch", "minibatch_size",
    "minibatch_full_eval_steps", "program_aware_proposer", "data_aware_proposer", "view_data_batch_size",
    "tip_aware_proposer", "fewshot_aware_proposer", "requires_permission_to_run", "provide_traceback",
)


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
    - ``max_errors`` (default ``dspy.settings.max_errors``, as dspy.Evaluate): rollouts whose program or
      metric raised (format failures excepted) that the run tolerates before it stops with
      `RolloutAbort`; the first such traceback is logged, and the run also stops when the first
      ``max_errors`` rollouts (at least 3) all failed for one same reason (optimizer/rollout.py).
    - ``num_threads`` None: ``dspy.settings.num_threads`` at compile time (so ``dspy.context(num_threads=4)``
      applies). ``verbose=True`` logs the round lines and the summary at WARNING (shown by default)
      instead of INFO.

    Mapping of `dspy.MIPROv2`'s arguments (MIPROv2-style code runs unchanged): ``prompt_model`` is the
    reflection LM, ``task_model`` the LM the program runs with during compile (``dspy.context(lm=...)``;
    predictors with their own LM keep it), ``max_errors``, ``verbose``, ``seed``, ``auto``,
    ``num_threads``, ``track_stats`` and ``log_dir`` as above, ``num_candidates`` is HERO's K (candidates
    per round); ``compile(num_trials=N)`` runs N rounds and ``compile(seed=...)`` reseeds that compile.
    No HERO meaning (accepted, warned once if set): teacher_settings, max_bootstrapped_demos,
    max_labeled_demos, init_temperature, metric_threshold, and compile's teacher, max_bootstrapped_demos,
    max_labeled_demos, minibatch, minibatch_size, minibatch_full_eval_steps, the ``*_aware_proposer``
    switches, view_data_batch_size, requires_permission_to_run and provide_traceback (HERO always logs the
    first traceback).

    HERO's own settings: ``num_rounds`` T, ``num_candidates`` K and ``acceptance_max`` default to the
    ``auto`` level's search (light: T=5, K=4, 64 pairs; medium: 8, 6, 96; heavy: 12, 8, 128; see
    settings.SEARCH_LEVELS); ``min_calls_per_round`` (default 24) plans fewer, better-funded rounds when
    the budget cannot fund T (0 keeps a fixed T); up to 32 failing and 32 passing cases
    (``failure_only`` is the ablation switch); ``evidence_token_budget`` (None: sized from the reflection
    LM's context window, so a 128K model sees 32 + 32 cases); ``training_references`` (False: the evidence
    holds label-free facts only; True adds each TRAINING case's reference program and its structural
    diff, never used at test time); ``proposal_style`` ("auto": one short reflection call per counted
    failure pattern, with no fallback, for the embedded local model, the evidence-wide prompt otherwise;
    "per_pattern" / "evidence_wide" force one, the other being the fallback; "per_pattern_only" the
    per-pattern prompt alone; see settings.ProposalStyle);
    ``reflection_temperature``
    (default 1.0, as GEPA users run the reflector) and ``max_proposal_calls`` (default K: reflection
    calls per round, over different evidence slices, until K distinct new candidates exist);
    ``pool_fractions`` (diagnosis, update, selection; default 0.3 / 0.5 / 0.2: the update pool bounds
    how many pairs a test can see, and acceptance power is what small budgets lack, while the
    evidence shows only as many diagnosis cases as fit), ``group_key`` (e.g. ``"db_id"``),
    ``selection_budget_fraction``, ``max_rules`` / ``max_rule_chars``.

    Adoption is a test (acceptance.py): a candidate is adopted only when an exact one-sided sign test
    on its paired fixes vs. breaks shows it better than the current prompt and its lower bound on
    (fixes - breaks) / n exceeds ``acceptance_margin``, at level ``acceptance_alpha / T`` per round, split
    over its K candidates by ``level_shares`` (default ``RankedShares(0.5)``: half to the first,
    pattern-ranked candidate, the rest evenly; ``EvenShares()`` is plain Bonferroni, alpha / (T * K)
    each) (``acceptance_initial`` pairs first, more only while undecided, at most
    ``acceptance_max``); a test that runs out of pairs or budget undecided is a rejection; among a
    round's accepted candidates the best lower bound is adopted. A round tests only as many candidates as
    its budget funds with enough pairs that a rule fixing ``detectable_fix_share`` of them (default 0.25)
    and breaking none would pass at its level, and asks the reflector for no more: a rule that fixes 17 of 56 demo
    questions is adopted in 0-7% of draws of 12-19 pairs at alpha / 20, in 92% of draws of 40 pairs at
    alpha / 5 (benchmarks/demo_power.py --alpha); in scripted worlds at 120 calls a +20-point rule is kept
    in 7 of 16 seeds against 0 of 16, noise in none (benchmarks/small_budget_funding.py). 0 funds every
    candidate that gets two first looks. False-adoption rate: a run adopts a
    candidate that is not better than the prompt it replaces with probability <= ``acceptance_alpha``
    (default 0.1; exact before the first adoption, see acceptance.py). Measured (scripted worlds,
    ``benchmarks/acceptance.py``): noise kept in 1 of 8 seeds (old rule: 7 of 8), a +20-point rule
    adopted in 8 of 8, a rule that fixes 10% and breaks 20% never; over 160 seeds noise is kept in 6
    with ranked shares and in 6 with even shares, the +20-point rule in 152 and in 146.

    The decision objects ``pool_splitter``, ``evidence_renderer``, ``proposer``, ``guard``,
    ``acceptance``, ``selector`` and ``level_shares`` replace the defaults.
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
        num_rounds: int | None = None,
        min_calls_per_round: int = 24,
        num_candidates: int | None = None,
        num_failing_cases: int = 32,
        num_passing_cases: int = 32,
        failure_only: bool = False,
        evidence_token_budget: int | None = None,
        training_references: bool = False,
        proposal_style: str = "auto",
        acceptance_margin: float = 0.0,
        acceptance_initial: int = 8,
        acceptance_max: int | None = None,
        acceptance_alpha: float = 0.1,
        detectable_fix_share: float = 0.25,
        pool_fractions: tuple[float, float, float] = (0.3, 0.5, 0.2),
        group_key: str | None = None,
        selection_budget_fraction: float = 0.2,
        max_rules: int = 12,
        max_rule_chars: int = 300,
        display_progress: bool = True,
        reflection_temperature: float = 1.0,
        max_proposal_calls: int | None = None,
        pool_splitter: Any = None,
        evidence_renderer: Any = None,
        proposer: Any = None,
        guard: Any = None,
        acceptance: Any = None,
        selector: Any = None,
        level_shares: Any = None,
        max_errors: int | None = None,
        verbose: bool = False,
        # dspy.MIPROv2's arguments
        prompt_model: Any = None,
        task_model: Any = None,
        teacher_settings: dict | None = None,
        max_bootstrapped_demos: int | None = None,
        max_labeled_demos: int | None = None,
        init_temperature: float | None = None,
        metric_threshold: float | None = None,
    ):
        super().__init__()
        if prompt_model is not None and reflection_lm is not None and prompt_model is not reflection_lm:
            raise ValueError("give either reflection_lm (GEPA's name) or prompt_model (MIPROv2's), not two different LMs")
        reflection_lm = reflection_lm if reflection_lm is not None else prompt_model
        self.task_model = task_model
        self.max_errors, self.verbose = max_errors, bool(verbose)
        if metric is not None:
            MetricAdapter(metric)  # fail now on an unusable signature
        if component_selector != "round_robin":
            raise ValueError(f"component_selector={component_selector!r}: HERO-O supports 'round_robin' only")
        resolve_budget(auto=auto, max_full_evals=max_full_evals, max_metric_calls=max_metric_calls,
                       num_predictors=1, trainset_size=1, valset_size=None)  # validate the combination now
        self.metric = metric
        self.auto, self.max_full_evals, self.max_metric_calls = auto, max_full_evals, max_metric_calls
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
        self.training_references = training_references
        self.proposal_style = proposal_style
        self.acceptance_margin, self.acceptance_initial = acceptance_margin, acceptance_initial
        self.acceptance_max, self.acceptance_alpha = acceptance_max, acceptance_alpha
        self.detectable_fix_share = detectable_fix_share
        self.pool_fractions, self.group_key = tuple(pool_fractions), group_key
        self.selection_budget_fraction = selection_budget_fraction
        self.max_rules, self.max_rule_chars = max_rules, max_rule_chars
        self.display_progress = display_progress
        self.reflection_temperature, self.max_proposal_calls = reflection_temperature, max_proposal_calls
        self.settings = self._settings(num_threads)  # validates every setting now, before any compile
        if proposer is None and instruction_proposer is not None:
            proposer = instruction_proposer if hasattr(instruction_proposer, "propose") else GepaProposerAdapter(instruction_proposer)
        self.pool_splitter, self.evidence_renderer, self.proposer = pool_splitter, evidence_renderer, proposer
        self.guard, self.acceptance, self.selector, self.level_shares = guard, acceptance, selector, level_shares
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
        mipro = dict(teacher_settings=teacher_settings or None, max_bootstrapped_demos=max_bootstrapped_demos,
                     max_labeled_demos=max_labeled_demos, init_temperature=init_temperature,
                     metric_threshold=metric_threshold)
        self.ignored_mipro_args = sorted(k for k, v in mipro.items() if v is not None)
        if self.ignored_mipro_args:
            logger.warning("HeroOptimizer ignores dspy.MIPROv2 options with no HERO-O meaning (it learns "
                           "instructions, not demos): %s", ", ".join(self.ignored_mipro_args))

    def compile(self, student: dspy.Module, trainset: list | None = None, *, teacher: Any = None,
                valset: list | None = None, num_trials: int | None = None, seed: int | None = None,
                **mipro_kwargs: Any) -> dspy.Module:
        """Return a deep copy of `student` with optimized instructions and `.detailed_results`.

        The student is never mutated. `valset`, when given, is the selection pool (the user's
        held-out data picks the final prompt); the trainset is split into diagnosis and update pools.
        Bad input (empty trainset, examples without inputs, label fields marked as inputs, a program
        that rejects the examples' inputs or lacks the metric's prediction field, a metric that raises
        or returns a score outside [0, 1]) is reported before any budget is spent.
        `num_trials` (MIPROv2) is the number of rounds of this compile, `seed` reseeds it; MIPROv2's
        other compile arguments are accepted and warned about once (class docstring).
        """
        unknown = sorted(set(mipro_kwargs) - set(_MIPRO_COMPILE_NO_HERO_MEANING))
        if unknown:
            raise TypeError(f"HeroOptimizer.compile() got unexpected keyword argument(s) {unknown}")
        ignored = sorted(k for k, v in {"teacher": teacher, **mipro_kwargs}.items() if v is not None)
        if ignored:
            logger.warning("HeroOptimizer.compile ignores dspy.MIPROv2 options with no HERO-O meaning: %s",
                           ", ".join(ignored))
        settings = self._settings(self.num_threads)
        changes = {k: v for k, v in (("num_rounds", num_trials), ("seed", seed)) if v is not None}
        if changes:
            settings = HeroSettings(**{**settings.__dict__, **changes})
        overrides = Overrides(self.pool_splitter, self.evidence_renderer, self.proposer, self.guard,
                              self.acceptance, self.selector, self.level_shares)
        with dspy.context(lm=self.task_model) if self.task_model is not None else contextlib.nullcontext():
            run = HeroRun(settings, overrides, self.metric, self.reflection_lm, student, list(trainset or []),
                          list(valset) if valset else None)
            program = run.execute()
        log_compile(self.get_params(), program.detailed_results)  # no-op unless MLflow is active
        return program

    def _settings(self, num_threads: int | None) -> HeroSettings:
        """The frozen settings of a run (`num_threads` None: dspy.settings.num_threads, as dspy.Evaluate)."""
        return HeroSettings.resolve(
            auto=self.auto, max_full_evals=self.max_full_evals, max_metric_calls=self.max_metric_calls,
            num_threads=num_threads or getattr(dspy.settings, "num_threads", None) or 1,
            max_errors=self.max_errors if self.max_errors is not None else getattr(dspy.settings, "max_errors", 10),
            verbose=self.verbose,
            failure_score=self.failure_score, perfect_score=self.perfect_score, log_dir=self.log_dir,
            use_mlflow=self.use_mlflow, seed=self.seed, num_rounds=self.num_rounds,
            min_calls_per_round=self.min_calls_per_round, num_candidates=self.num_candidates,
            num_failing_cases=self.num_failing_cases, num_passing_cases=self.num_passing_cases,
            failure_only=self.failure_only, evidence_token_budget=self.evidence_token_budget,
            training_references=self.training_references, proposal_style=self.proposal_style,
            acceptance_margin=self.acceptance_margin, acceptance_initial=self.acceptance_initial,
            acceptance_max=self.acceptance_max, acceptance_alpha=self.acceptance_alpha,
            detectable_fix_share=self.detectable_fix_share, pool_fractions=self.pool_fractions, group_key=self.group_key,
            selection_budget_fraction=self.selection_budget_fraction, max_rules=self.max_rules,
            max_rule_chars=self.max_rule_chars, display_progress=self.display_progress,
            reflection_temperature=self.reflection_temperature, max_proposal_calls=self.max_proposal_calls)



