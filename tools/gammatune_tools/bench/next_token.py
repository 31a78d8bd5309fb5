"""What tells, right after a draft token, whether the next one will be accepted.

A per-token stop decides after each draft pass whether to pay the next
one; the next token's own probability comes only with that pass. So what
it can judge by is what it has in hand: the token just drafted (its
probability, the entropy of the draft's distribution there, the margin to
the second token) and the request's history (its recent acceptance, the run
of tokens accepted in a row). Over recorded greedy texts
(``greedy_replay.Text`` with ``top_probs``) this module measures how well
each of these tells the next token's acceptance apart, given the current
one accepted (``report``: ROC AUC alone, and combined by a logistic fit
judged on texts it did not learn from), and fits them together in hindsight
on the texts themselves (``estimate``) for ``greedy_replay.hindsight_rule``:
a bound on what a blind stop reaches with all of them. The history here
counts every earlier position of the text, drafted or not (a drafter sees
only the ones it drafted): optimistic, as a bound should be.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from gammatune_tools.bench.greedy_replay import Text

#: the features of a token, in ``features``' columns
FEATURES = ("probability", "entropy", "margin to the second", "recent acceptance",
            "accepted run")
#: the decay of the recent acceptance's moving average, a token at a time
HISTORY_DECAY = 0.8
#: ``report``'s combinations, by column
COMBINATIONS = ((0, 1, 2), (0, 3, 4), (0, 1, 2, 3, 4))
#: bins of the fitted estimate, calibrated in hindsight as the probability's are
BINS = 20


def features(text: Text) -> np.ndarray:
    """[num_output_tokens, len(FEATURES)] per output position ``i``: the
    draft's token there (logit of its probability, entropy of the recorded
    top probabilities with the rest as one outcome, the top two's margin)
    and the request's history before ``i`` (acceptance averaged with decay
    ``HISTORY_DECAY``, starting at 0.7; log of 1 + the run of accepted
    tokens ending just before ``i``)."""
    if len(text.top_probs) != len(text):
        raise ValueError(f"text {text.name!r}: needs the draft's top probabilities at every "
                         f"output position, has {len(text.top_probs)} of {len(text)}")
    rows, recent, run = [], 0.7, 0
    for matched, top in zip(text.matches, text.top_probs):
        rest = max(1.0 - sum(top), 1e-9)
        entropy = -sum(t * math.log(t) for t in top if t > 0) - rest * math.log(rest)
        q = min(max(top[0], 1e-6), 1 - 1e-6)
        second = top[1] if len(top) > 1 else 0.0
        rows.append((math.log(q / (1 - q)), entropy, top[0] - second, recent,
                     math.log1p(run)))
        recent = HISTORY_DECAY * recent + (1 - HISTORY_DECAY) * matched
        run = run + 1 if matched else 0
    return np.asarray(rows)


def pairs(texts: Sequence[Text], tables: Sequence[np.ndarray] | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [num_pairs, F], next accepted [num_pairs], text index
    [num_pairs]) over every accepted token with a next one (``tables``:
    each text's ``features``, where the caller has them)."""
    if tables is None:
        tables = [features(text) for text in texts]
    xs, ys, groups = [], [], []
    for index, (text, table) in enumerate(zip(texts, tables)):
        for i in range(1, len(text) - 1):
            if text.matches[i]:
                xs.append(table[i])
                ys.append(float(text.matches[i + 1]))
                groups.append(index)
    return np.asarray(xs), np.asarray(ys), np.asarray(groups)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC (ties count half): the chance a positive outscores a negative."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = np.cumsum(counts) - (counts - 1) / 2.0  # mean rank of each distinct score
    positives = labels.sum()
    negatives = len(labels) - positives
    if not positives or not negatives:
        raise ValueError("auc needs both accepted and rejected next tokens")
    return float((ranks[inverse][labels == 1].sum() - positives * (positives + 1) / 2)
                 / (positives * negatives))


def fit(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3,
        iterations: int = 50) -> Callable[[np.ndarray], np.ndarray]:
    """A logistic regression of ``y`` on standardised ``x`` (Newton's method,
    a small ridge); returns its predicted probabilities for new rows."""
    mean, scale = x.mean(0), x.std(0) + 1e-9
    design = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-design @ w))
        hessian = (design * (p * (1 - p))[:, None]).T @ design + ridge * np.eye(len(w))
        w -= np.linalg.solve(hessian, design.T @ (p - y) + ridge * w)

    def predict(rows: np.ndarray) -> np.ndarray:
        z = np.hstack([(rows - mean) / scale, np.ones((len(rows), 1))]) @ w
        return 1.0 / (1.0 + np.exp(-z))

    return predict


def report(texts: Sequence[Text]) -> list[dict]:
    """Per feature alone (its AUC over every pair; entropy counts low as
    confident) and per combination in ``COMBINATIONS`` (the AUC of a fit
    that never saw the text it judges: leave one text out)."""
    x, y, groups = pairs(texts)
    rows = [{"features": name, "auc": auc(-x[:, j] if name == "entropy" else x[:, j], y),
             "judged": "alone"} for j, name in enumerate(FEATURES)]
    for columns in COMBINATIONS:
        held_out = np.empty(len(y))
        for g in np.unique(groups):
            mine = groups == g
            held_out[mine] = fit(x[~mine][:, columns], y[~mine])(x[mine][:, columns])
        rows.append({"features": " + ".join(FEATURES[c] for c in columns),
                     "auc": auc(held_out, y), "judged": "leave one text out"})
    return rows


def estimate(texts: Sequence[Text]) -> Callable[[Text, int], float]:
    """The next token's acceptance after the token at ``i`` of a text, from
    all of ``FEATURES`` fitted in hindsight on ``texts`` and calibrated by
    ``BINS`` bins of the fit (Laplace-smoothed shares, as
    ``hindsight_rule``'s own calibration)."""
    tables = [features(text) for text in texts]
    x, y, _ = pairs(texts, tables)
    predict = fit(x, y)
    bins = np.minimum((predict(x) * BINS).astype(int), BINS - 1)
    calibrated = (np.bincount(bins, y, BINS) + 1) / (np.bincount(bins, None, BINS) + 2)
    by_text = {id(text): np.minimum((predict(table) * BINS).astype(int), BINS - 1)
               for text, table in zip(texts, tables)}
    return lambda text, i: float(calibrated[by_text[id(text)][i]])
