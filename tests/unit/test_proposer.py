"""drafter.proposer: what its draft-loop exit relies on in vLLM's ``propose``.

The proposer leaves vLLM's draft loop by raising ``EveryRequestStopped`` from
its ``_sample_draft_tokens`` and catching it around ``super().propose``
(listed in ``compat.internals`` as ``DraftModelProposer.propose``). That is
sound only while vLLM's ``propose`` samples once per draft pass inside its
loop and does nothing after the loop but stack the tokens and set
``_last_draft_probs``, which the proposer sets itself. These tests read the
installed vLLM's source and fail when that changes.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

pytest.importorskip("vllm")

from vllm.v1.spec_decode.draft_model import DraftModelProposer  # noqa: E402

from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer  # noqa: E402

SAMPLE = "_sample_draft_tokens"


def _propose() -> ast.FunctionDef:
    source = textwrap.dedent(inspect.getsource(DraftModelProposer.propose))
    return ast.parse(source).body[0]


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == name]


def test_the_plugins_drafter_is_vllms_draft_model_proposer():
    assert issubclass(AdaptiveDraftModelProposer, DraftModelProposer)
    overridden = {"propose", "prepare_inputs_padded", SAMPLE}
    assert overridden <= set(vars(AdaptiveDraftModelProposer))


def test_vllms_draft_loop_samples_once_per_pass():
    propose = _propose()
    loops = [stmt for stmt in propose.body if isinstance(stmt, ast.For)]
    assert len(loops) == 1, "one draft loop at the top of propose"
    assert len(_calls(loops[0], SAMPLE)) == 1
    # outside the loop: the first pass's sample (and the one-token early exit)
    assert 1 <= len(_calls(propose, SAMPLE)) - 1 <= 2


def test_nothing_after_vllms_draft_loop_that_the_exit_would_skip():
    propose = _propose()
    index = next(i for i, stmt in enumerate(propose.body) if isinstance(stmt, ast.For))
    after = propose.body[index + 1:]
    assert all(isinstance(stmt, (ast.Assign, ast.If, ast.Return)) for stmt in after)
    assigned = {ast.unparse(target) for stmt in after for node in ast.walk(stmt)
                if isinstance(node, ast.Assign) for target in node.targets}
    # the stacked tokens (the proposer stacks its own) and the draft probs
    # (the proposer sets them from its own step)
    assert assigned == {"draft_token_ids", "self._last_draft_probs"}
