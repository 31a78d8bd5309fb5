"""Patch of ``vllm.v1.worker.gpu_worker`` (worker process; the CPU worker included: it subclasses it).

Runs in each worker, once, when it loads the model.

What: ``Worker.load_model`` -> ``integration.runner_choice.load_model_confirming_drafter``.
Why: a plugin method must never run silently as something else, nor hang.
  Before the weights load, each worker refuses data parallelism whose ranks
  vLLM keeps in lockstep (a mixture-of-experts target: the plugin's pass
  counts differ between ranks), in case a launch bypassed the front end's
  check; and it checks that its model runner built the plugin's drafter; if
  not (Model Runner V2, a future vLLM change), the engine fails at start
  with an error naming the runner and the drafter it built. If so, the
  worker logs what it built and marks ``vllm:gammatune_info``.
Remove when: vLLM lets a plugin register a drafter, and reports it.
"""

from vllm.v1.worker.gpu_worker import Worker

from vllm_gammatune.patches.base import rebind
from vllm_gammatune.integration.runner_choice import load_model_confirming_drafter


def apply() -> None:
    rebind(
        Worker,
        "load_model",
        load_model_confirming_drafter,
        patch_id="gpu_worker.Worker.load_model",
    )
