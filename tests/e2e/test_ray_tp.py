"""More than one process: Ray, and tensor parallelism on vLLM's CPU backend.

Ray (``pip install vllm-gammatune[ray]``): vLLM 0.32's Ray executor refuses the
CPU platform before it starts a worker (``initialize_ray_cluster``:
``ValueError: current platform cpu does not support ray.``, because
``CpuPlatform.ray_device_key`` is empty), so on this machine the tests show
(1) that refusal, exactly, and (2) the plugin registering itself inside a Ray
worker process through vLLM's plugin loader and running an adaptive method
there (a whole in-process engine inside a Ray task).
"""

from __future__ import annotations

import os

import pytest
from llm_helpers import PROMPTS, make_llm


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                                       "VLLM_CPU_KVCACHE_SPACE": "1"}})
    try:
        yield
    finally:
        ray.shutdown()


def test_vllm_ray_executor_refuses_cpu(tiny, ray_cluster):
    spec = {"method": "gammatune", "model": tiny["draft"], "num_speculative_tokens": 6}
    with pytest.raises(ValueError, match="current platform cpu does not support ray"):
        make_llm(tiny["target"], spec, distributed_executor_backend="ray")


def _adaptive_run_in_ray_worker(target: str, draft: str) -> dict:
    """Runs in a Ray worker process: what vLLM's Ray workers do, then an engine."""
    import os

    from vllm.plugins import load_general_plugins

    load_general_plugins()  # as vLLM's WorkerWrapperBase.init_worker does
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    patched = getattr(GPUModelRunner.__init__, "__vllm_gammatune_patch__", None)
    from vllm import SamplingParams
    from llm_helpers import drafter, metrics_by_name, running_llm

    spec = {"method": "gammatune", "model": draft, "num_speculative_tokens": 6}
    with running_llm(target, spec) as llm:
        outs = llm.generate(PROMPTS[:4], SamplingParams(temperature=0, max_tokens=24),
                            use_tqdm=False)
        metrics = metrics_by_name(llm)
        result = {
            "pid": os.getpid(),
            "patched": patched,
            "drafter": type(drafter(llm)).__name__,
            "texts": [o.outputs[0].text for o in outs],
            "draft_lengths": metrics["vllm:gammatune_draft_length"].count,
            "drafted": metrics["vllm:spec_decode_num_draft_tokens"].value,
        }
    return result


def test_plugin_runs_inside_ray_worker(tiny, ray_cluster):
    import sys

    import ray

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    remote = ray.remote(num_cpus=1, runtime_env={"env_vars": {
        "PYTHONPATH": os.pathsep.join([os.path.join(tests_dir, "e2e"), tests_dir]
                                      + sys.path)}})(_adaptive_run_in_ray_worker)
    result = ray.get(remote.remote(tiny["target"], tiny["draft"]), timeout=400)
    assert result["pid"] != os.getpid()
    assert result["patched"] == "gpu_model_runner.GPUModelRunner.__init__"
    assert result["drafter"] == "AdaptiveDraftModelProposer"
    assert result["draft_lengths"] > 0 and result["drafted"] > 0
    assert all(result["texts"])


# -- tensor parallelism: every rank takes the same draft-length decisions -----

def _record_draft_lengths(worker) -> int:
    """Runs in each TP worker: log every ``propose`` result of its drafter."""
    drafter = worker.model_runner.drafter
    drafter.tp_test_log = []
    original = drafter.propose

    def propose(*args, **kwargs):
        drafts = original(*args, **kwargs)
        req_ids = list(worker.model_runner.input_batch.req_ids)
        drafter.tp_test_log.append(list(zip(req_ids, [len(d) for d in drafts])))
        return drafts

    drafter.propose = propose
    return worker.rank


def _draft_length_log(worker):
    return worker.rank, worker.model_runner.drafter.tp_test_log


TP_METHODS = {
    "gammatune_plus": {"confidence_threshold": 0.5},
    # decides from each rank's own clock: the ranks must still agree (rank 0's
    # plan is broadcast), or their draft forwards would hang
    "gammatune_cost": {},
}


@pytest.fixture(scope="module", params=list(TP_METHODS))
def tp_run(tiny, request):
    """``tensor_parallel_size=2``: both workers' draft lengths."""
    from vllm import SamplingParams

    spec = {"method": request.param, "model": tiny["draft"],
            "num_speculative_tokens": 6, **TP_METHODS[request.param]}
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_HOST_IP": "127.0.0.1",
           "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        llm = make_llm(tiny["target"], spec, tensor_parallel_size=2,
                       distributed_executor_backend="mp")
        try:
            ranks = llm.collective_rpc(_record_draft_lengths)
            outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32),
                                use_tqdm=False)
            logs = dict(llm.collective_rpc(_draft_length_log))
        finally:
            from gammatune_tools.bench.engine import stop_llm

            stop_llm(llm)
    return {"ranks": ranks, "outs": outs, "logs": logs}


def test_tensor_parallel_ranks_take_the_same_draft_lengths(tp_run):
    assert sorted(tp_run["ranks"]) == [0, 1]
    rank0, rank1 = tp_run["logs"][0], tp_run["logs"][1]
    assert len(rank0) > 10
    assert rank0 == rank1
    lengths = {n for step in rank0 for _, n in step}
    assert len(lengths) > 1, lengths  # the lengths did adapt


def test_tensor_parallel_greedy_equals_target_alone(tiny, tp_run):
    from vllm import SamplingParams
    from llm_helpers import running_llm

    with running_llm(tiny["target"]) as llm:
        ref = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32),
                           use_tqdm=False)
    assert [o.outputs[0].text for o in tp_run["outs"]] == [o.outputs[0].text for o in ref]
