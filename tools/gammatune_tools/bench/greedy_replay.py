"""Batch-1 decoding replayed along recorded greedy texts: exact counts of any
draft strategy, in seconds.

Greedy, the target emits the same text whatever drafts it verifies (its
argmax at every position). So one recording of the text and, at every
position ``p`` of its output, of the draft model's greedy token there (after
the prompt and the first ``p`` output tokens) and its probability, says for
any strategy which of its draft tokens verification accepts: a draft from
``p`` of ``k`` tokens keeps its leading tokens that equal the text's
(``Text.accepted``), and the step emits those and one token more. Along the
accepted tokens the draft's tokens and probabilities are exactly the
recorded ones (the draft saw the text's tokens). After the first rejected
one the draft would continue from its own wrong token, which the recording
does not hold: those tokens are never accepted, and their probabilities,
which only a per-token stop reads (to decide whether to run another pass),
are taken from the text's next positions (``Text.prob``): the one
approximation.

Strategies at batch 1, each over the texts in order, after the first
``warmup`` texts replayed untimed (the paired harness's warm-up request: a
policy learns from it too):

- a fixed K (vLLM's ``draft_model``): K passes and K verified tokens a step;
- the per-token oracle: drafts exactly the tokens verification accepts
  (none, without a pass, where the first is rejected);
- a per-token stop calibrated in hindsight on the texts (``hindsight_rule``):
  bounds on what a stop reaches with the draft's probabilities;
- a ``DraftLengthPolicy`` driven as vLLM's drafter drives it
  (``drive_policy``): one ``StepObservation`` before each plan with the last
  step's verification and timings, the plan, then the passes with the
  per-token stop (``draft_on``) after each; a skipped step leaves its token
  to catch up before the next draft.

Seconds come from a linear cost model (``ReplayCosts``: a target step over
``n`` tokens, a draft pass over ``n`` tokens, a catch-up per token), the
shape the plugin's own cost fits take, and the decisions of a measuring
policy come from the same clock. Counts are exact: tokens past the text's
end (``max_tokens``) are not accepted tokens; draft passes are batched
forwards. Pure Python but the policy; ``benchmarks.text_replay`` records
the texts and writes the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Text:
    """One request's greedy output as the draft model sees it.

    Output token 0 comes from the prompt step; drafting starts at 1.
    """

    name: str
    #: [num_output_tokens] per position p, whether the draft's greedy token
    #: there is the text's
    matches: tuple[bool, ...]
    #: [num_output_tokens] the draft's probability of its greedy token at p
    probs: tuple[float, ...]
    #: [num_output_tokens, top] the draft's largest probabilities at p, the
    #: greedy token's first (empty where not recorded)
    top_probs: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self):
        if len(self.matches) != len(self.probs) or not self.matches:
            raise ValueError(f"text {self.name!r}: matches and probs need one entry per "
                             f"output token, got {len(self.matches)} and {len(self.probs)}")

    def __len__(self) -> int:
        return len(self.matches)

    def accepted(self, p: int, k: int) -> int:
        """Draft tokens verification accepts of a draft of ``k`` from ``p``:
        its leading tokens equal to the text's, none past the text's end."""
        n = 0
        while n < k and p + n < len(self.matches) and self.matches[p + n]:
            n += 1
        return n

    def prob(self, p: int, position: int) -> float:
        """The draft's probability of its ``position``-th token (1-based) of a
        draft from ``p`` (past the end: the last recorded one)."""
        return self.probs[min(p + position - 1, len(self.probs) - 1)]


@dataclass(frozen=True)
class ReplayCosts:
    """Seconds: a target step over ``n`` tokens ``target_base + target_token * n``,
    a draft pass over ``n`` tokens ``draft_base + draft_token * n``, a
    catch-up of ``n`` missed positions ``catch_up_token * n``, and the host
    work a policy adds to each step it plans (``policy_step``: its plan and
    per-token decisions, which the measured step costs leave out)."""

    target_base: float
    target_token: float
    draft_base: float
    draft_token: float
    catch_up_token: float = 0.0
    policy_step: float = 0.0

    def target(self, num_tokens: int) -> float:
        return self.target_base + self.target_token * num_tokens

    def draft_pass(self, num_tokens: int) -> float:
        return self.draft_base + self.draft_token * num_tokens

    def step(self, drafted: int, passes: int, first_pass_tokens: int) -> float:
        """Seconds of a step that verifies ``drafted`` tokens after
        ``passes`` draft passes, the first over ``first_pass_tokens``."""
        seconds = self.target(1 + drafted)
        if passes:
            seconds += self.draft_pass(first_pass_tokens) + (passes - 1) * self.draft_pass(1)
        return seconds


@dataclass
class Outcome:
    """A strategy's totals over the timed texts."""

    name: str
    tokens: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    catch_up_tokens: int = 0
    seconds: float = 0.0
    #: per timed text: (tokens, seconds)
    per_text: list[tuple[int, float]] = field(default_factory=list)
    #: the counts are kept (not for a choice among strategies in hindsight)
    counted: bool = True

    def add_text(self, tokens: int, seconds: float) -> None:
        self.per_text.append((tokens, seconds))

    def row(self) -> dict:
        tokens = max(self.tokens, 1)
        drafting = self.drafted_tokens
        counted = self.counted
        return {"strategy": self.name, "tokens": self.tokens,
                "tokens_per_second": self.tokens / self.seconds if self.seconds else 0.0,
                "target_passes_per_token": self.target_passes / tokens if counted else None,
                "draft_passes_per_token": self.draft_passes / tokens if counted else None,
                "acceptance": self.accepted_tokens / drafting if drafting else None,
                "catch_up_tokens": self.catch_up_tokens if counted else None}


class _Step:
    """One decode step's count and seconds, added to an ``Outcome`` when timed."""

    def __init__(self, outcome: Outcome | None):
        self.outcome = outcome

    def add(self, text: Text, p: int, drafted: int, passes: int, seconds: float,
            catch_up: int = 0) -> int:
        """Verify ``drafted`` tokens from ``p``; returns the tokens emitted."""
        accepted = text.accepted(p, drafted)
        emitted = min(accepted + 1, len(text) - p)
        if self.outcome is not None:
            o = self.outcome
            o.tokens += emitted
            o.target_passes += 1
            o.draft_passes += passes
            o.drafted_tokens += drafted
            o.accepted_tokens += min(accepted, emitted - 1)  # none past max_tokens
            o.catch_up_tokens += catch_up
            o.seconds += seconds
        return emitted


def _replay(texts: Sequence[Text], name: str, warmup: int,
            run_text: Callable[[Text, _Step], None]) -> Outcome:
    outcome = Outcome(name)
    for text in texts[:warmup]:
        run_text(text, _Step(None))
    for text in texts:
        before = (outcome.tokens, outcome.seconds)
        run_text(text, _Step(outcome))
        outcome.add_text(outcome.tokens - before[0], outcome.seconds - before[1])
    return outcome


def fixed_k(texts: Sequence[Text], k: int, costs: ReplayCosts, warmup: int = 0) -> Outcome:
    """vLLM's ``draft_model`` at K = ``k`` (0: no speculation): every step
    ``k`` passes, the first over the tokens the last step emitted."""

    def run(text: Text, step: _Step) -> None:
        p, last = 1, 1
        while p < len(text):
            last = step.add(text, p, k, k, costs.step(k, k, last))
            p += last

    return _replay(texts, "no speculation" if k == 0 else f"fixed K={k}", warmup, run)


def per_token_oracle(texts: Sequence[Text], cap: int, costs: ReplayCosts,
                     warmup: int = 0) -> Outcome:
    """Drafts exactly the tokens verification accepts, at most ``cap``; a
    step whose first draft token would be rejected runs no pass (the draft
    sees the emitted token in its next first pass, at no extra cost)."""

    def run(text: Text, step: _Step) -> None:
        p, last = 1, 1
        while p < len(text):
            k = text.accepted(p, cap)
            emitted = step.add(text, p, k, k, costs.step(k, k, last))
            last = emitted if k else last + emitted
            p += emitted

    return _replay(texts, "per-token oracle", warmup, run)


def per_text_best(outcomes: Sequence[Outcome], name: str = "per-prompt oracle") -> Outcome:
    """Per text, the fastest of ``outcomes`` (same texts, same order) in
    hindsight: their counts are not kept, their tokens and seconds are."""
    best = Outcome(name, counted=False)
    for texts in zip(*(o.per_text for o in outcomes)):
        tokens, seconds = max(texts, key=lambda t: t[0] / t[1] if t[1] else 0.0)
        best.tokens += tokens
        best.seconds += seconds
        best.add_text(tokens, seconds)
    return best


def drive_policy(texts: Sequence[Text], make_policy: Callable[[], object], costs: ReplayCosts,
                 name: str, warmup: int = 0) -> Outcome:
    """A ``DraftLengthPolicy`` (a ``TokenRule`` too, if it has ``draft_on``),
    one engine-wide instance for every text, each text a request of its own,
    driven as the drafter drives it at batch 1 (module docstring)."""
    from vllm_gammatune.policies import (
        BatchView,
        CatchUpPassTiming,
        CycleTimings,
        CycleWallTime,
        DraftPassTiming,
        PassesRun,
        StepObservation,
        TargetStepTiming,
        Verification,
    )

    policy = make_policy()
    rule = getattr(policy, "draft_on", None)
    clock = {"step": 0, "pending": (), "cycle": None}

    def run(text: Text, step: _Step) -> None:
        state = policy.new_state()
        req_id = f"{text.name}-{clock['step']}"
        p, last, catch_up = 1, 1, 0
        clock["pending"] = ()  # the last request's last verification: it has left
        while p < len(text):
            s = clock["step"] = clock["step"] + 1
            states = {req_id: state}
            policy.observe_step(StepObservation(s, clock["pending"], clock["cycle"] or ()),
                                states)
            state = states[req_id]
            batch = BatchView(1, 1, (catch_up,), False, (len(text) - p,))
            planned = policy.plan_batch([state], batch)[0]
            drafting, drafted, passes, caught_up = [], 0, 0, 0
            seconds = costs.policy_step
            if planned:
                if catch_up:
                    caught_up = catch_up
                    drafting.append(CatchUpPassTiming(catch_up, costs.catch_up_token * catch_up))
                    seconds += costs.catch_up_token * catch_up
                    catch_up = 0
                while passes < planned:
                    passes += 1
                    n = last if passes == 1 else 1
                    pass_seconds = costs.draft_pass(n)
                    seconds += pass_seconds
                    drafting.append(DraftPassTiming(n, pass_seconds, 1))
                    drafted = passes
                    if rule is not None:
                        said = rule([state], passes, [text.prob(p, passes)], [True])[0]
                        if said is not None:
                            drafted = said
                            break
                drafting.append(PassesRun(passes))
            target_seconds = costs.target(1 + drafted)
            seconds += target_seconds
            emitted = step.add(text, p, drafted, passes, seconds, caught_up)
            if not planned:  # the draft missed its first pass over the last tokens
                catch_up += last
            last = emitted
            clock["pending"] = ((Verification(req_id, s, drafted,
                                              text.accepted(p, drafted)),) if drafted else ())
            clock["cycle"] = (CycleTimings(tuple(drafting), (
                CycleWallTime(seconds), TargetStepTiming(1 + drafted, target_seconds, 1))),)
            p += emitted

    return _replay(texts, name, warmup, run)


#: bins of the draft's probability in ``hindsight_rule``'s calibration
_HINDSIGHT_BINS = 20
#: rates R tried by ``hindsight_rule``, as fractions of its reference rate
_HINDSIGHT_RATES = tuple(0.6 + 0.02 * i for i in range(51))


def _bin(q: float) -> int:
    return min(int(q * _HINDSIGHT_BINS), _HINDSIGHT_BINS - 1)


def _calibration(texts: Sequence[Text]) -> tuple[float, list[float], list[float]]:
    """In hindsight, over every position of the texts: the share of the
    draft's greedy tokens that are the text's, and per bin of the draft's
    probability ``q`` of a token, the share of those tokens that are the
    text's and the share whose next token is too (given that they are)."""
    counts = [[0, 0] for _ in range(_HINDSIGHT_BINS)]
    nexts = [[0, 0] for _ in range(_HINDSIGHT_BINS)]
    for text in texts:
        for p in range(1, len(text)):
            b = _bin(text.probs[p])
            counts[b][0] += 1
            counts[b][1] += text.matches[p]
            if p + 1 < len(text) and text.matches[p]:
                nexts[b][0] += 1
                nexts[b][1] += text.matches[p + 1]
    total = sum(n for n, _ in counts)
    first = sum(m for _, m in counts) / total if total else 0.0
    # Laplace-smoothed, so an empty bin reads 1/2
    return first, [(m + 1) / (n + 2) for n, m in counts], [(m + 1) / (n + 2) for n, m in nexts]


def hindsight_rule(texts: Sequence[Text], cap: int, costs: ReplayCosts, peek: bool,
                   reference_rate: float, warmup: int = 0,
                   next_estimate: Callable[[Text, int], float] | None = None,
                   name: str | None = None) -> Outcome:
    """A per-token stop calibrated in hindsight on the very texts it runs
    on, at the best price: what a stop could reach with the draft's
    probabilities, not a strategy an engine could run. After each pass it
    keeps the token while its chance of being accepted with every token
    before it, ``S``, pays its verification (``S >= R * c_token``); it runs
    the next pass while ``S`` times the next token's estimated acceptance
    pays the pass and the token (``> R * (c_pass + c_token)``). That estimate
    is, blind (``peek`` False), the acceptance of a token that follows one
    at this token's probability (the first token's: that of any token), as
    the plugin's stop must judge it; with ``peek``, that of a token at the
    next token's own probability, known before its pass is paid (no drafter
    knows it). ``next_estimate(text, i)``, where given, replaces the blind
    estimate after the token at output position ``i`` (default: by the bin
    of that token's probability; ``next_token.estimate``: from the request's
    history too). ``R`` is the best of a grid around
    ``reference_rate`` (the best fixed K's tokens/s, which the caller has);
    seconds include ``costs.policy_step`` a step."""
    first, accepted_at, next_after = _calibration(texts)
    if next_estimate is None:
        def next_estimate(text: Text, i: int) -> float:
            return next_after[_bin(text.probs[i])]
    c_token = costs.target_token + costs.draft_token
    c_pass = costs.draft_pass(1)

    def at_rate(rate: float) -> Outcome:
        def run(text: Text, step: _Step) -> None:
            p, last = 1, 1
            while p < len(text):
                survival, drafted, passes = 1.0, 0, 0
                while passes < cap:
                    q_next = text.prob(p, passes + 1)
                    estimate = (accepted_at[_bin(q_next)] if peek else first if passes == 0
                                else next_estimate(text, min(p + passes - 1, len(text) - 1)))
                    if survival * estimate <= rate * (c_pass + c_token):
                        break
                    passes += 1
                    kept = survival * accepted_at[_bin(q_next)]
                    if kept < rate * c_token:
                        break
                    survival, drafted = kept, passes
                emitted = step.add(text, p, drafted, passes,
                                   costs.policy_step + costs.step(drafted, passes, last))
                last = emitted if passes else last + emitted
                p += emitted

        return _replay(texts, name or "per-token stop in hindsight, "
                       + ("peeking" if peek else "blind"), warmup, run)

    return max((at_rate(f * reference_rate) for f in _HINDSIGHT_RATES),
               key=lambda o: o.row()["tokens_per_second"])
