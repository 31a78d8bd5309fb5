"""Per-cycle view of gammatune_cost at batch 4 on the real pair (in process).

    PYTHONPATH=. python benchmarks/results/issue6_rounds/cycle_diag.py 4 [cost|skip|nospec]

Records every cycle of the clock check (its prediction, timed parts, wall
time, validity), the plans and catch-up passes, and the engine-core step
times, into <tag>_b<batch>.json next to this file. A diagnostic, not a
benchmark: one engine, 3 x batch prompts of 64 tokens.
"""
import os, sys, time, json
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

def main():
    from bench_common import load_prompts
    from vllm import SamplingParams
    from vllm_gammatune.evaluation import METHODS, start_llm, stop_llm
    from vllm_gammatune.model_prep import prepare_pair
    from vllm_gammatune.policies import cycle_check as cc, cost_aware as ca
    records = []
    orig_close = cc.CycleCheck.close
    def close(self):
        cyc = self._open
        out = orig_close(self)
        if cyc is not None:
            records.append(dict(b=cyc.batch_size, passes=cyc.num_draft_passes, timed=cyc.draft_passes_timed,
                                tb=cyc.target_batch_size, pt=cyc.predicted_tokens, ps=cyc.predicted_seconds,
                                parts=cyc.seconds, wall=cyc.wall_seconds, acc=cyc.accepted_tokens,
                                ok=out is not None, scale=self.drafting_scale(cyc.batch_size)))
        return out
    cc.CycleCheck.close = close
    events = []
    oc = ca.CostAwarePolicy.observe_catch_up_pass
    def catch(self, n, sec):
        events.append(("catch", n, sec)); return oc(self, n, sec)
    ca.CostAwarePolicy.observe_catch_up_pass = catch
    od = ca.CostAwarePolicy.observe_draft_pass
    def dp(self, n, sec, batch_size=1):
        events.append(("draft", n, sec)); return od(self, n, sec, batch_size)
    ca.CostAwarePolicy.observe_draft_pass = dp
    pb = ca.CostAwarePolicy.plan_batch
    def plan(self, states, batch):
        out = pb(self, states, batch)
        events.append(("plan", batch.num_scheduled_tokens, list(out), list(batch.catch_up_tokens), time.perf_counter()))
        return out
    ca.CostAwarePolicy.plan_batch = plan
    from vllm.v1.engine import core as engine_core
    steps = []
    for name in ("step", "step_with_batch_queue"):
        orig = getattr(engine_core.EngineCore, name, None)
        if orig is None:
            continue
        def wrapped(self, *a, _orig=orig, **k):
            t0 = time.perf_counter(); out = _orig(self, *a, **k)
            steps.append((t0, time.perf_counter())); return out
        setattr(engine_core.EngineCore, name, wrapped)
    target, draft = prepare_pair()
    spec = {"method": "gammatune_cost", "model": draft, "num_speculative_tokens": 8}
    if len(sys.argv) > 2 and sys.argv[2] == "nospec":
        spec = None
    if len(sys.argv) > 2 and sys.argv[2] == "skip":
        spec["fixed_step_costs"] = {"target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 100.0, "draft_token_s": 0.0}
    b = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    llm = start_llm(target, spec, max_model_len=4096, dtype="bfloat16", max_num_seqs=b)
    convs = [[{"role": "user", "content": t[0]}] for _, t in load_prompts("specbench", 2, "eval")][:3 * b]
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    t = time.perf_counter()
    for i in range(0, len(convs), b):
        llm.chat(convs[i:i + b], params, use_tqdm=False)
    print("wall", time.perf_counter() - t)
    tag = sys.argv[2] if len(sys.argv) > 2 else "cost"
    json.dump({"cycles": records, "events": events, "steps": steps}, open(os.path.join(HERE, f"{tag}_b{b}.json"), "w"))
    stop_llm(llm)

if __name__ == "__main__":
    main()
