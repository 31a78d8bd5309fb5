"""Probing: when a request at length 0 drafts one token to learn its acceptance.

A request at length 0 learns nothing about its draft, so after
``probe_interval`` steps without drafting it drafts one token, a probe, and
every other request at length 0 that is at least half-way due joins it, so
they share the draft pass. Each further probe without drafting in between
doubles the request's interval, up to ``max_probe_interval``; drafting for its
own sake resets it. A new request's first probe is due at once
(``ProbeRecord.probe_interval`` starts at 1), its later ones at the
base interval; at batch 1, after a probe the target accepts, the next is due
at once again (``on_verified``), and a rejected one returns to the base
interval and its back-off.

A request probes only if some acceptance rate could make its drafting pay at
the step's batch and costs, its catch-up included: where even a draft that
is always right loses, a probe cannot change the decision. Under the pace
rule (``planner``) that is the batch's question: where one request's catch-up
would hold the batch back even were every draft right, none probes. That
search uses the model alone, without the clock's correction (so the
correction cannot stop the measurements that correct it), and spreads each
catch-up over the steps the request would draft were the steps at its batch
size to draft as often as they lately did. A step whose prompt chunk waits
(``prompt_chunks``) runs no probe either. The policy weighs both before it
asks for probes (the ``draft_limits`` of ``add_probes``).

Budget. A probe that makes a step draft which otherwise would not (one in a
step that drafts anyway shares its passes) is held to an engine-wide budget:
the seconds such probes lose (their step's time minus what its expected
tokens would take at the rate of the step without them) stay within
``budget`` of the predicted engine time over a decayed window of about 200
steps, the probe about to run included. The window counts as full from the
first step, so a young engine may probe at once. Without the budget, under
request churn probing would never back off, since every new request probes
at once.

Why each rule, with the runs behind it: ``docs/cost-aware.md``, "Probing".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vllm_gammatune.policies.cost_aware.planner import predicted_step
from vllm_gammatune.policies.cost_aware.request_state import ProbeRecord
from vllm_gammatune.policies.cost_aware.step_costs import StepCosts

#: weight kept by the probe budget's sums per step (a window of ~200 steps)
_BUDGET_MEMORY = 0.995


@dataclass(frozen=True)
class ProbedPlan:
    """A step's plan with its probes, and what the model expects of it."""

    #: [num_reqs] which requests probe
    probes: list[bool]
    #: [num_reqs] the lengths: the plan's, 1 for a probe
    lengths: list[int]
    predicted_tokens: float
    predicted_seconds: float


class ProbeScheduler:
    """Which requests probe, and the engine-wide budget of probe steps.

    Args:
        probe_interval: steps at length 0 before a request probes.
        max_probe_interval: the interval's ceiling after backoff.
        budget: the share of predicted engine time that probes may lose in
            steps that would not draft otherwise (1.0: no limit); settable
            while the engine runs.
    """

    def __init__(self, probe_interval: int, max_probe_interval: int, budget: float):
        if probe_interval < 1 or max_probe_interval < probe_interval:
            raise ValueError("need 1 <= probe_interval <= max_probe_interval")
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"probe_budget must be in (0, 1], got {budget}")
        self.probe_interval = probe_interval
        self.max_probe_interval = max_probe_interval
        self.budget = budget
        #: decayed sums of the predicted seconds that probes lost, and of
        #: all predicted step seconds (the budget's window)
        self._probe_seconds = 0.0
        self._engine_seconds = 0.0
        self._engine_steps = 0.0

    @staticmethod
    def is_due(state: ProbeRecord, num_draft_tokens: int) -> bool:
        return num_draft_tokens == 0 and state.steps_since_draft + 1 >= state.probe_interval

    def any_due(self, states: list[ProbeRecord], plan: list[int]) -> bool:
        # only a request at length 0 can be due: most steps have none
        return 0 in plan and any(self.is_due(s, k) for s, k in zip(states, plan))

    def add_probes(self, states: list[ProbeRecord], plan: list[int], may_probe: bool,
                   costs: StepCosts, rates: Sequence[float],
                   catch_up_tokens: Sequence[int],
                   draft_limits: Sequence[int] = ()) -> ProbedPlan:
        """The plan with its probes (none unless ``may_probe``;
        none for a request whose ``draft_limits`` is 0: its drafter has
        nothing to offer, or not even a draft that is always right would
        pay), priced at ``costs``; charges the budget."""
        probes = self._probe_mask(states, plan, may_probe)
        if draft_limits:
            probes = [probe and limit > 0 for probe, limit in zip(probes, draft_limits)]
        probed = [1 if probe else k for probe, k in zip(probes, plan)]
        tokens, seconds = predicted_step(costs, rates, probed, catch_up_tokens)
        lost = 0.0
        if probed != plan:
            # the seconds the probes lose: their step's time minus what its
            # tokens would take at the rate of the plan without them
            base_tokens, base_seconds = predicted_step(costs, rates, plan, catch_up_tokens)
            lost = max(0.0, seconds - tokens * base_seconds / base_tokens)
            if max(plan) == 0 and self._probe_seconds + lost > self._allowance(seconds):
                probes, probed, lost = [False] * len(plan), plan, 0.0
                tokens, seconds = base_tokens, base_seconds
        self._probe_seconds = _BUDGET_MEMORY * self._probe_seconds + lost
        self._engine_seconds = _BUDGET_MEMORY * self._engine_seconds + seconds
        self._engine_steps = _BUDGET_MEMORY * self._engine_steps + 1.0
        return ProbedPlan(probes, probed, tokens, seconds)

    def _allowance(self, seconds: float) -> float:
        """The seconds probes may lose: ``budget`` of a full window of
        steps at the mean predicted step seconds, the step about to run
        included."""
        mean_step_seconds = ((_BUDGET_MEMORY * self._engine_seconds + seconds)
                             / (_BUDGET_MEMORY * self._engine_steps + 1.0))
        return self.budget * mean_step_seconds / (1.0 - _BUDGET_MEMORY)

    def _probe_mask(self, states: list[ProbeRecord], plan: list[int],
                    may_probe: bool) -> list[bool]:
        """Which requests probe (draft one token) this step: when one is due,
        every request at length 0 at least half-way due joins it."""
        if not (may_probe and self.any_due(states, plan)):
            return [False] * len(plan)
        return [k == 0 and 2 * (s.steps_since_draft + 1) >= s.probe_interval
                for s, k in zip(states, plan)]

    @staticmethod
    def on_verified(state: ProbeRecord, num_draft_tokens: int,
                    num_accepted_tokens: int, num_reqs: int) -> None:
        """A probe the target accepted in a step of one request: the
        request's next probe is due at once, and counts as a first probe
        (the base interval after it)."""
        if (num_reqs == 1 and state.probing
                and 0 < num_draft_tokens == num_accepted_tokens):
            state.probing = False
            state.probe_interval = 1

    def advance(self, states: list[ProbeRecord], plan: list[int],
                probes: list[bool]) -> None:
        """Per request: back off after a probe that did not pay, reset when
        drafting for its own sake, count the steps at length 0."""
        for state, k, probe in zip(states, plan, probes):
            if probe:
                if state.probing:  # the last probe did not pay: back off
                    state.probe_interval = min(2 * state.probe_interval,
                                               self.max_probe_interval)
                else:  # a first probe (or one after drafting): the base interval
                    state.probe_interval = max(state.probe_interval, self.probe_interval)
                state.probing = True
                state.steps_since_draft = 0
            elif k > 0:
                state.probing = False
                state.probe_interval = self.probe_interval
                state.steps_since_draft = 0
            else:
                state.steps_since_draft += 1
