"""The draft-length policy interface: everything the proposer asks of a policy.

A policy decides, per request, how many tokens the draft model proposes next
(``next_num_draft_tokens``, or ``plan_batch`` for the whole step) and learns
from each verification of that request (``observe``). Policies are pure
Python and never import vLLM or torch: the vLLM-facing proposer
(``vllm_gammatune.drafter.proposer``) keeps one state object per ``req_id`` and calls
the policy with plain numbers.

Beyond that, a policy may use optional capabilities, each a hook on
``DraftLengthPolicy`` whose default leaves it off; the proposer calls the
hooks of every policy alike and never asks which policy it has:

- per-token early stop (``stop_measure``, ``stop_threshold``): a request's
  draft ends after the first token whose top probability is below, or whose
  entropy is above, the request's threshold;
- per-token decisions while drafting (``decides_per_token``, ``draft_on``,
  ``draft_ended``, ``verification_details``): after each draft pass the
  policy reads the draft's probability of every request's new token and
  says which drafts go on, at what length the others end, and when the
  step's draft ended;
- per-token verification (``learns_per_token``, ``relaxes_verification``,
  ``accepts_mismatch``, ``verification_threshold``, ``observe_verification``):
  the policy learns at the rejection sampler from each draft token's entropy
  and distance to the target, instead of from counts, and may accept a token
  that differs from the target's (lossy);
- step timing (``times_steps``, ``observe_target_step``,
  ``observe_draft_pass``, ``observe_catch_up_pass``,
  ``observe_cycle_wall_time``): the proposer measures what the engine's steps
  cost and reports it;
- skipping the draft model (``skips_drafts``): the policy may plan 0 tokens
  for every request of a step; the proposer then runs no draft pass and
  catches the draft up before a request drafts again;
- explaining a step (``last_decision``, ``cycle_check``): what the last plan
  decided, for traces, and the policy's check against the clock, for metrics.

Vocabulary at the boundary follows vLLM's: ``num_draft_tokens`` is how many
tokens were actually proposed (after any confidence stop), ``num_accepted_tokens``
how many of them the target accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchView:
    """What a policy may know about the step beyond its own request.

    The count-based policies ignore it; the cost-aware one weighs all of it.
    """

    #: requests in the step (vLLM's ``num_reqs``)
    batch_size: int
    #: tokens the target processed this step (vLLM's ``num_scheduled_tokens``
    #: total); 0 when unknown
    num_scheduled_tokens: int = 0
    #: per request, draft positions missed while drafting was skipped, which
    #: the draft must process before that request drafts again; () = none
    catch_up_tokens: tuple[int, ...] = ()
    #: some request's query this step is a prompt chunk (longer than any
    #: decode query), so a draft pass would also prefill the draft
    has_prefill: bool = False
    #: per request, tokens it may still generate (``max_tokens`` minus those
    #: generated); () = unknown
    remaining_tokens: tuple[int, ...] = ()
    #: per request, the most draft tokens its drafter can offer this step (an
    #: n-gram drafter: the length of the text that follows its match, 0
    #: without a match); () = the cap for every request
    draft_limits: tuple[int, ...] = ()
    #: per request, the tokens of a free draft (an n-gram's) it verifies this
    #: step instead of a policy-planned draft; () = none
    free_draft_tokens: tuple[int, ...] = ()


class DraftLengthPolicy(ABC):
    """Chooses each request's draft length from its own acceptance history.

    Args:
        max_num_draft_tokens: the hard cap (vLLM's ``num_speculative_tokens``);
            a policy never returns more, because vLLM reserves KV lookahead
            slots for at most that many draft tokens.
    """

    #: Stop drafting a request at the first draft token whose top probability
    #: is below this value (None: never stop on confidence).
    confidence_threshold: float | None = None

    #: The policy learns from each verification token by token at the
    #: rejection sampler (``observe_verification``, with the draft's kept
    #: entropies), not from counts: the proposer then does not call ``observe``.
    learns_per_token: bool = False
    #: The policy may accept a draft token the target would not have emitted
    #: (``accepts_mismatch``; lossy). The proposer then keeps each draft
    #: token's distribution until its verification; only a policy that
    #: ``learns_per_token`` is verified token by token, so it needs both.
    relaxes_verification: bool = False
    #: The policy reads the step costs the proposer measures (the
    #: ``observe_*`` timing hooks). Its plan then depends on this process's
    #: clock, so with tensor parallelism every rank drafts what rank 0 planned.
    times_steps: bool = False
    #: The policy may plan 0 tokens for every request of a step: the proposer
    #: then skips the draft model, and ``BatchView`` carries what a plan needs
    #: to weigh catching the draft up (``catch_up_tokens``, ``has_prefill``,
    #: ``remaining_tokens``).
    skips_drafts: bool = False
    #: The policy chooses per request between a free draft (an n-gram
    #: lookup's, which costs no draft pass) and the draft model's
    #: (``free_draft_lengths``), and learns the free drafts' acceptance apart
    #: (``observe_free_draft``): the drafter ``ngram+draft_model`` needs it.
    plans_free_drafts: bool = False
    #: The policy decides after each draft pass which drafts go on
    #: (``draft_on``), from the draft's probability of each new token.
    decides_per_token: bool = False
    #: The policy's check of its predictions against the clock (an object
    #: with ``is_informed(num_reqs)`` and ``drafting_scale(num_reqs)``, as
    #: ``policies.cost_aware.cycle_check.CycleCheck``), whose drafting scale
    #: the metrics report; None: no such check.
    cycle_check = None

    def __init__(self, max_num_draft_tokens: int):
        if max_num_draft_tokens < 1:
            raise ValueError(
                f"max_num_draft_tokens must be >= 1, got {max_num_draft_tokens}"
            )
        self.max_num_draft_tokens = max_num_draft_tokens

    @abstractmethod
    def new_state(self) -> Any:
        """The state of a request that has not been verified yet."""

    @abstractmethod
    def next_num_draft_tokens(self, state: Any, batch: BatchView) -> int:
        """How many tokens to draft next for this request (1..cap)."""

    def plan_batch(self, states: list[Any], batch: BatchView) -> list[int]:
        """Every request's length for this step, in batch order.

        Per-request policies plan each request alone; a policy that weighs the
        requests against each other (``CostAwarePolicy``) overrides this and,
        if it ``skips_drafts``, may return 0 (no draft for that request this
        step).
        """
        return [self.next_num_draft_tokens(s, batch) for s in states]

    def observe(
        self,
        state: Any,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        batch: BatchView,
    ) -> Any:
        """Return the state after one verification of this request (counts).

        Default: the counts change nothing (a fixed length). Not called for a
        policy that ``learns_per_token``.
        """
        self._check_observation(num_draft_tokens, num_accepted_tokens)
        return state

    # -- per-token early stop ---------------------------------------------------
    @property
    def stop_measure(self) -> str | None:
        """What a draft's per-token stop compares with ``stop_threshold``:
        "confidence" (stop after a token whose top probability is below it),
        "entropy" (after a token whose entropy in bits is above it), or None
        (no early stop). Default: "confidence" when ``confidence_threshold``
        is set."""
        return None if self.confidence_threshold is None else "confidence"

    def stop_threshold(self, state: Any) -> float:
        """This request's threshold for ``stop_measure`` (read at each plan)."""
        assert self.confidence_threshold is not None
        return self.confidence_threshold

    # -- per-token decisions while drafting ---------------------------------------
    def draft_on(self, states: list[Any], position: int, token_probs: Sequence[float],
                 active: Sequence[bool]) -> list[int | None]:
        """After draft pass ``position`` (1-based), for a policy that
        ``decides_per_token``: per request, None to draft on (up to its
        plan), or the length its draft ends at (``position``, or
        ``position - 1`` to leave the new token unverified).
        ``token_probs``: the draft's probability of each request's token of
        this pass (after temperature); ``active``: which requests drafted in
        it. Default: every draft goes on."""
        return [None] * len(states)

    def draft_ended(self, num_draft_passes: int) -> None:
        """The step's draft ended after ``num_draft_passes`` passes."""

    def verification_details(self, state: Any, num_draft_tokens: int) -> dict | None:
        """What the policy knew of the request's last draft, for traces
        (read just before ``observe``); None: nothing."""
        return None

    # -- per-token verification ---------------------------------------------------
    def accepts_mismatch(self, state: Any, js_distance: float) -> bool:
        """Whether a draft token that differs from the target's is accepted,
        given the Jensen-Shannon distance of the two distributions at its
        position. Default: never (lossless)."""
        return False

    def verification_threshold(self, state: Any) -> float:
        """The distance below which ``accepts_mismatch`` accepts (reported as
        a metric). Default 0: nothing is relaxed."""
        return 0.0

    def observe_verification(
        self,
        state: Any,
        accepted_distances: Sequence[float],
        rejected: tuple[float, float] | None,
    ) -> Any:
        """Return the state after one verification, token by token (called
        at the rejection sampler for a policy that ``learns_per_token``).

        Args:
            accepted_distances: JS distance of every accepted draft token.
            rejected: (entropy in bits, JS distance) of the first rejected
                draft token, or None when every drafted token was accepted.
        """
        return state

    # -- step timing (seconds, measured by the proposer) -------------------------
    def observe_target_step(self, num_scheduled_tokens: int, seconds: float,
                            batch_size: int = 1) -> None:
        """One target step over ``num_scheduled_tokens`` tokens took ``seconds``."""

    def observe_draft_pass(self, num_tokens: int, seconds: float,
                           batch_size: int = 1) -> None:
        """One decode-regime draft pass over ``num_tokens`` tokens."""

    def observe_catch_up_pass(self, num_tokens: int, seconds: float) -> None:
        """One prefill-like draft pass (a catch-up, or the first pass over a
        prompt chunk) over ``num_tokens`` tokens."""

    def observe_cycle_wall_time(self, seconds: float) -> None:
        """The wall time since the last plan (reported just before the next)."""

    # -- how the drafter drafts ---------------------------------------------------
    def adapt_to_drafter(self, runs_every_planned_pass: bool, observation_lag: int,
                         keeps_draft_kv: bool = True) -> None:
        """Called once by a drafter that differs from the default one (the
        CUDA hot path, ``docs/cuda.md``; the n-gram drafter): it runs every
        planned draft pass (no early exit: a per-token stop only trims what
        is kept), it hands over each verification ``observation_lag`` plans
        late (1: the verification of a draft arrives after the next plan),
        and it keeps a draft KV cache that a skipped step leaves behind
        (``keeps_draft_kv``; an n-gram lookup has none, so nothing is ever
        caught up). Default: a policy whose per-draft state does not outlive
        a plan needs nothing."""

    # -- free drafts ahead of the draft model (``plans_free_drafts``) -----------------
    def free_draft_lengths(self, states: list[Any], offers: Sequence[int],
                           batch: BatchView) -> list[int]:
        """[num_reqs] the tokens of each request's free draft (``offers``:
        [num_reqs] tokens its lookup offers) to verify this step, 0 where the
        draft model drafts instead."""
        raise NotImplementedError(f"{type(self).__name__} does not plan free drafts")

    def observe_free_draft(self, state: Any, num_draft_tokens: int,
                           num_accepted_tokens: int) -> None:
        """One verification of a request's free draft."""
        raise NotImplementedError(f"{type(self).__name__} does not plan free drafts")

    # -- explaining a step -----------------------------------------------------------
    @property
    def last_decision(self) -> Any:
        """What the last ``plan_batch`` decided and why (a dataclass the trace
        writes), or None when the policy keeps no such record."""
        return None

    def _clamp(self, value: int, low: int = 1) -> int:
        return max(low, min(self.max_num_draft_tokens, value))

    @staticmethod
    def _check_observation(num_draft_tokens: int, num_accepted_tokens: int) -> None:
        if not 0 <= num_accepted_tokens <= num_draft_tokens:
            raise ValueError(
                "need 0 <= num_accepted_tokens <= num_draft_tokens, got "
                f"{num_accepted_tokens} accepted of {num_draft_tokens} drafted"
            )
