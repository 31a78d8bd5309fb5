"""Batch-1 draft strategies replayed along recorded greedy texts: exact counts, modelled seconds.

    python -m benchmarks.text_replay record --out DIR [--dataset D --split S
        --per-category N --max-tokens N] [--target T --draft D]
    python -m benchmarks.text_replay replay DIR --costs T0,T1,D0,D1,C[,H] [--cap 8]
        [--max-tokens N] [--warmup 1] [--policy NAME=JSON ...]

``record`` (vLLM, in process): the target answers each prompt greedily
(EOS ignored, ``--max-tokens`` tokens, the prompts as the paired harness
draws them, all in one batch), then the draft model scores every answer
after its prompt (``prompt_logprobs``): at each output position, its
greedy token and the probabilities of its ``TOP`` most likely tokens
(the first is the greedy token's; the others are features a per-token stop
may use). ``DIR/texts.jsonl`` (one line a prompt) and ``DIR/context.json``.

``replay`` (no engine, seconds): ``gammatune_tools.bench.greedy_replay``
replays at batch 1, over the texts in order (the first ``--warmup`` untimed),
no speculation, every fixed K up to the cap, the per-prompt oracle over
them (K >= 1, as the decode bench's), the per-token oracle, a per-token
stop calibrated in hindsight on the texts themselves at its best price,
blind (it judges the next pass by the last token, as a drafter must) and
peeking (by the next token's own probability, which no drafter knows before
its pass): what a stop could reach (``greedy_replay.hindsight_rule``); where
the texts hold the draft's top probabilities, the blind stop once more with
an estimate fitted in hindsight on the draft's other features and the
request's history, beside a table of what each tells of the next token's
acceptance (``next_token``); and ``gammatune_cost`` (cap ``--cap``,
measuring its costs from the replay's clock as in an engine), plus each
``--policy NAME=JSON``: ``gammatune_cost`` with those parameters (``{"token_stop": false}``, ``{"ablate":
["token_model"]}``, ...). Seconds from the linear costs ``--costs``: a target
step ``T0 + T1 * n`` over n tokens, a draft pass ``D0 + D1 * n``, a catch-up
``C`` per missed position, and ``H`` (default 0) the host time a plugin
policy adds to each step; take them from a ``gammatune_cost`` trace's
``step_costs`` and ``catch_up_seconds_per_token`` and its run's plugin
time per step, on the machine in question. Writes ``DIR/replay.md`` and
``.json`` (``replay_N.*`` with ``--max-tokens N``: each text's first N
tokens, the answers a shorter ``max_tokens`` gives).

Why: an engine run at batch 1 spends minutes a strategy and its time is
noisy; the counts of a greedy strategy along a fixed text are not, and the
cost model they are priced at is the plugin's own (its cycles match the
clock within a few percent: ``benchmarks.token_traces``). A change to the
plan or the per-token stop is judged here in seconds, then in an engine.
The approximation: the draft's probabilities after a rejected token are
the text's next positions' (``greedy_replay`` docstring).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from gammatune_tools.bench import next_token
from gammatune_tools.bench.tables import fmt
from gammatune_tools.bench.greedy_replay import (
    ReplayCosts,
    Text,
    drive_policy,
    fixed_k,
    hindsight_rule,
    per_text_best,
    per_token_oracle,
)

#: the draft's most likely tokens recorded at each position, by probability
TOP = 5


def record(args: argparse.Namespace) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from gammatune_tools.bench.context import run_context, write_context
    from gammatune_tools.bench.engine import generate, start_llm, stop_llm
    from gammatune_tools.bench.prompts import first_turns, load_prompts
    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    prompts = load_prompts(args.dataset, args.per_category, args.split)
    engine = {"dtype": args.dtype, "max_model_len": args.max_model_len,
              "enable_prefix_caching": False}
    llm = start_llm(target, None, **engine)
    outputs = generate(llm, first_turns(prompts),
                       SamplingParams(temperature=0.0, max_tokens=args.max_tokens,
                                      ignore_eos=True))
    answers = [(list(o.prompt_token_ids), list(o.outputs[0].token_ids)) for o in outputs]
    stop_llm(llm)
    llm = start_llm(draft, None, **engine)
    scored = llm.generate([TokensPrompt(prompt_token_ids=prompt + answer)
                           for prompt, answer in answers],
                          SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=TOP),
                          use_tqdm=False)
    stop_llm(llm)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "texts.jsonl").open("w") as f:
        for i, ((category, _), (prompt, answer), score) in enumerate(
                zip(prompts, answers, scored)):
            draft_tokens, top_probs = [], []
            for p, token in enumerate(answer):
                entry = score.prompt_logprobs[len(prompt) + p]
                ranked = sorted((lp.rank, token_id, lp.logprob) for token_id, lp in entry.items()
                                if lp.rank is not None and lp.rank <= TOP)
                draft_tokens.append(ranked[0][1])
                top_probs.append([round(math.exp(lp), 6) for _, _, lp in ranked])
            f.write(json.dumps({"name": f"{i}-{category}", "category": category,
                                "prompt_tokens": len(prompt), "output_token_ids": answer,
                                "draft_token_ids": draft_tokens,
                                "probs": [top[0] for top in top_probs],
                                "top_probs": top_probs}) + "\n")
    write_context(out, run_context(args, target, draft))
    print(f"{len(answers)} texts -> {out / 'texts.jsonl'}")


def read_texts(directory: Path, max_tokens: int | None = None) -> list[Text]:
    """The recorded texts, each cut to its first ``max_tokens`` output tokens
    (greedy with EOS ignored: the answer a shorter ``max_tokens`` gives)."""
    texts = []
    for line in (directory / "texts.jsonl").open():
        row = json.loads(line)
        matches = tuple(d == t for d, t in zip(row["draft_token_ids"], row["output_token_ids"]))
        texts.append(Text(row["name"], matches[:max_tokens], tuple(row["probs"][:max_tokens]),
                          tuple(map(tuple, row.get("top_probs", ())[:max_tokens]))))
    return texts


def replay(texts: list[Text], costs: ReplayCosts, cap: int, warmup: int,
           policies: dict[str, dict], with_features: bool = False) -> list[dict]:
    """Every strategy's row (module docstring); ``with_features``: the texts
    hold the draft's top probabilities, so the blind stop runs once more on
    ``next_token``'s estimate."""
    from vllm_gammatune.policies import CostAwarePolicy

    fixed = [fixed_k(texts, k, costs, warmup) for k in range(cap + 1)]
    best = max(fixed[1:], key=lambda o: o.row()["tokens_per_second"]).row()
    rate = best["tokens_per_second"]
    outcomes = [*fixed, per_text_best(fixed[1:]), per_token_oracle(texts, cap, costs, warmup),
                hindsight_rule(texts, cap, costs, False, rate, warmup),
                hindsight_rule(texts, cap, costs, True, rate, warmup)]
    if with_features:
        outcomes.append(hindsight_rule(
            texts, cap, costs, False, rate, warmup, next_token.estimate(texts),
            "per-token stop in hindsight, blind, with the draft's features and history"))
    for name, parameters in {"gammatune_cost": {}, **policies}.items():
        outcomes.append(drive_policy(
            texts, lambda parameters=parameters: CostAwarePolicy(cap, **parameters),
            costs, name, warmup))
    rows = []
    for outcome in outcomes:
        row = outcome.row()
        row["vs_best_fixed"] = row["tokens_per_second"] / best["tokens_per_second"]
        row["best_fixed"] = best["strategy"]
        rows.append(row)
    return rows


def next_token_markdown(texts: list[Text]) -> str:
    """What tells the next draft token's acceptance (``next_token.report``)."""
    lines = ["", "## What tells the next draft token's acceptance", "",
             "Given a draft token accepted, is the next one? ROC AUC over every such pair "
             "(0.5: no better than chance); a combination is a logistic fit judged on the "
             "texts it did not learn from. History counts every earlier position.", "",
             "| features | judged | AUC |", "|---|---|---|"]
    for row in next_token.report(texts):
        lines.append(f"| {row['features']} | {row['judged']} | {row['auc']:.3f} |")
    return "\n".join(lines)


def markdown(rows: list[dict], costs: ReplayCosts, num_texts: int, warmup: int) -> str:
    lines = ["# Batch-1 replay along recorded greedy texts", "",
             f"{num_texts} texts ({warmup} replayed untimed first); costs (s): target "
             f"{costs.target_base:g} + {costs.target_token:g} n, draft pass "
             f"{costs.draft_base:g} + {costs.draft_token:g} n, catch-up "
             f"{costs.catch_up_token:g} a position, a policy's host work "
             f"{costs.policy_step:g} a step. Best fixed K: {rows[0]['best_fixed']}.",
             "", "| strategy | tok/s (modelled) | vs best fixed K | target passes/token | "
             "draft passes/token | acceptance of drafted tokens | catch-up tokens |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['strategy']} | {fmt(row['tokens_per_second'], 2)} | "
                     f"{fmt(row['vs_best_fixed'], 3)} | "
                     f"{fmt(row['target_passes_per_token'], 3)} | "
                     f"{fmt(row['draft_passes_per_token'], 3)} | "
                     f"{fmt(row['acceptance'], 3)} | "
                     f"{'-' if row['catch_up_tokens'] is None else row['catch_up_tokens']} |")
    return "\n".join(lines)


def costs_arg(text: str) -> ReplayCosts:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in (5, 6) or min(values) < 0:
        raise argparse.ArgumentTypeError(
            f"--costs {text!r}: expected five or six non-negative numbers T0,T1,D0,D1,C[,H]")
    return ReplayCosts(*values)


def policy_arg(text: str) -> tuple[str, dict]:
    name, sep, parameters = text.partition("=")
    try:
        value = json.loads(parameters) if sep else None
    except json.JSONDecodeError:
        value = None
    if not name.strip() or not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"--policy {text!r}: expected NAME=JSON, a JSON object of gammatune_cost's "
            "parameters")
    return name.strip(), value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record greedy texts and the draft's tokens")
    rec.add_argument("--out", required=True)
    rec.add_argument("--target")
    rec.add_argument("--draft")
    rec.add_argument("--dataset",
                     default="specbench:coding+math+reasoning+writing+roleplay+stem+"
                             "humanities+extraction")
    rec.add_argument("--split", default="tune", choices=["all", "tune", "eval"])
    rec.add_argument("--per-category", type=int, default=2)
    rec.add_argument("--max-tokens", type=int, default=128)
    rec.add_argument("--dtype", default="bfloat16")
    rec.add_argument("--max-model-len", type=int, default=4096)
    rep = commands.add_parser("replay", help="replay strategies along recorded texts")
    rep.add_argument("directory", type=Path)
    rep.add_argument("--costs", type=costs_arg, required=True,
                     help="T0,T1,D0,D1,C[,H] seconds (module docstring)")
    rep.add_argument("--cap", type=int, default=8)
    rep.add_argument("--max-tokens", type=int, default=None,
                     help="replay each text's first N output tokens (default: all)")
    rep.add_argument("--warmup", type=int, default=1,
                     help="texts replayed untimed first (default 1, as the harness's "
                          "warm-up request)")
    rep.add_argument("--policy", type=policy_arg, action="append", default=[],
                     metavar="NAME=JSON")
    args = parser.parse_args(argv)
    if args.command == "replay" and args.cap < 1:
        parser.error(f"--cap must be at least 1, got {args.cap}")
    if args.command == "replay" and args.max_tokens is not None and args.max_tokens < 2:
        parser.error(f"--max-tokens must be at least 2, got {args.max_tokens}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "record":
        record(args)
        return
    texts = read_texts(args.directory, args.max_tokens)
    with_features = all(t.top_probs for t in texts)
    rows = replay(texts, args.costs, args.cap, args.warmup, dict(args.policy), with_features)
    text = markdown(rows, args.costs, len(texts), args.warmup)
    if with_features:
        text += "\n" + next_token_markdown(texts)
    stem = "replay" if args.max_tokens is None else f"replay_{args.max_tokens}"
    (args.directory / f"{stem}.md").write_text(text + "\n")
    (args.directory / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    main()
