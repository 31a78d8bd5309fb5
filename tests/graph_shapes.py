"""Which CUDA graph each target forward would get on CUDA, measured on the CPU.

On CUDA, vLLM's V1 model runner asks
``GPUModelRunner._determine_batch_execution_and_padding`` once per target
forward; it calls the batch "uniform decode" only when every request's query
is exactly ``1 + num_speculative_tokens``, and its ``CudagraphDispatcher``
replays a FULL graph only for such a batch (every other one runs PIECEWISE,
or eager above the largest capture size). On the CPU cudagraphs are off, so
the runner's own answer is always NONE. Instead:

- ``record_target_steps(runner)`` records what the runner asks on each target
  forward (the arguments of that call, plus whether any request is still in
  its prompt). The draft model's forwards never reach it: vLLM's proposers
  decide their own batches (``SpecDecodeBaseProposer``).
- ``cuda_dispatcher(...)`` builds vLLM's own ``CudagraphDispatcher`` the way
  the CUDA path would, and ``replay(...)`` hands it each recorded step through
  vLLM's own ``_determine_batch_execution_and_padding``: the verdict is
  vLLM's, nothing of its decision is rewritten here.

How the stand-in config differs from one built on a CUDA machine (the
dispatcher reads only the parts named): the ``VllmConfig`` is built on the CPU
(whose platform hook turns cudagraphs off), then given a fresh
``CompilationConfig(mode=VLLM_COMPILE, cudagraph_mode=FULL_AND_PIECEWISE)``
with vLLM's attention splitting ops, and the capture sizes are derived by
vLLM's ``VllmConfig._set_cudagraph_sizes`` with stand-ins for the two configs
it reads (``model_config.enforce_eager=False``; a ``speculative_config`` with
the engine's ``num_speculative_tokens``, not dynamic); the capture ceiling is
that of a GPU outside the Blackwell data-center family (512 tokens). The
attention backend's support is taken as FlashAttention 2's
(``AttentionCGSupport.UNIFORM_BATCH``; FA3's ``ALWAYS`` resolves to the same
FULL_AND_PIECEWISE mode), handed to ``resolve_cudagraph_mode_and_sizes``,
which rounds the sizes to multiples of ``1 + num_speculative_tokens`` as on
CUDA. No LoRA, no data parallelism, no encoder.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import types

import numpy as np


@dataclasses.dataclass(frozen=True)
class StepShape:
    """What the runner asked about one target forward."""

    num_tokens: int
    query_lens: tuple[int, ...]
    #: no request is in its prompt (every scheduled token follows the prompt)
    decode: bool
    num_encoder_reqs: int = 0

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)


def decode_shape(query_lens) -> StepShape:
    """A hand-made decode step (for unit tests)."""
    query_lens = tuple(int(q) for q in query_lens)
    return StepShape(num_tokens=sum(query_lens), query_lens=query_lens, decode=True)


@dataclasses.dataclass
class Recording:
    #: one per target forward, as the runner asked about it
    steps: list[StepShape] = dataclasses.field(default_factory=list)
    #: the scheduled tokens of each ``execute_model`` call that had any,
    #: counted apart from ``steps``: one step per forward, none for the drafter
    forwards: list[int] = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def record_target_steps(runner):
    """Record a ``StepShape`` per target forward of ``runner`` (an in-process
    V1 model runner) until the block ends; yields the ``Recording``.

    Only calls made from ``execute_model`` count: ``_dummy_run`` (profiling,
    warm-up) asks the same question about made-up batches."""
    recording = Recording()
    determine = runner._determine_batch_execution_and_padding
    execute = runner.execute_model
    inside = []

    def execute_model(scheduler_output, *args, **kwargs):
        if scheduler_output.total_num_scheduled_tokens:
            recording.forwards.append(scheduler_output.total_num_scheduled_tokens)
        inside.append(True)
        try:
            return execute(scheduler_output, *args, **kwargs)
        finally:
            inside.pop()

    def determining(*args, **kwargs):
        if inside:
            bound = _bind(determine, args, kwargs)
            num_reqs = bound["num_reqs"]
            batch = runner.input_batch
            # the runner's batch holds this step's requests in this order,
            # their computed counts as of the step's start
            computed = batch.num_computed_tokens_cpu[:num_reqs]
            prompt = batch.num_prompt_tokens[:num_reqs]
            recording.steps.append(StepShape(
                num_tokens=int(bound["num_tokens"]),
                query_lens=tuple(int(q) for q in bound["num_scheduled_tokens_np"][:num_reqs]),
                decode=bool(np.all(computed >= prompt)),
                num_encoder_reqs=int(bound.get("num_encoder_reqs", 0)),
            ))
        return determine(*args, **kwargs)

    with _instance_attributes(runner, execute_model=execute_model,
                              _determine_batch_execution_and_padding=determining):
        yield recording


@contextlib.contextmanager
def _instance_attributes(obj, **values):
    """Set attributes on ``obj`` for the block, then put back what was there:
    an earlier wrapper on the instance, or nothing (the class's method)."""
    missing = object()
    before = {name: obj.__dict__.get(name, missing) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


def _bind(method, args, kwargs) -> dict:
    return inspect.signature(method).bind(*args, **kwargs).arguments


def cuda_dispatcher(max_num_seqs: int, num_speculative_tokens: int,
                    max_num_batched_tokens: int = 8192):
    """vLLM's ``CudagraphDispatcher`` as the CUDA path configures it for
    FULL_AND_PIECEWISE (see the module docstring for what is a stand-in).
    ``max_num_batched_tokens`` trims the capture sizes only where it is below
    the ceiling vLLM derives (``2 * max_num_seqs * (1 + K)``, at most 512)."""
    from vllm.config import CompilationConfig, CUDAGraphMode, SchedulerConfig, VllmConfig
    from vllm.config.compilation import CompilationMode
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    config = VllmConfig(scheduler_config=SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_num_batched_tokens, is_encoder_decoder=False))
    compilation = CompilationConfig(mode=CompilationMode.VLLM_COMPILE,
                                    cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    compilation.set_splitting_ops_for_v1(all2all_backend=config.parallel_config.all2all_backend)
    config.compilation_config = compilation
    config.model_config = types.SimpleNamespace(enforce_eager=False)
    config.speculative_config = types.SimpleNamespace(
        num_speculative_tokens=num_speculative_tokens,
        uses_dynamic_speculative_decoding=lambda: False)
    config._set_cudagraph_sizes()
    query_len = config.uniform_decode_query_len
    mode = compilation.resolve_cudagraph_mode_and_sizes(
        AttentionCGSupport.UNIFORM_BATCH, "FLASH_ATTN", query_len)
    dispatcher = CudagraphDispatcher(config)
    dispatcher.initialize_cudagraph_keys(mode, query_len)
    return dispatcher


def replay(dispatcher, shape: StepShape):
    """The CUDA graph mode vLLM's runner would pick for ``shape``: vLLM's
    ``_determine_batch_execution_and_padding`` run with just the runner state
    it reads (no LoRA, one data-parallel rank)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    config = dispatcher.vllm_config
    runner = types.SimpleNamespace(
        uniform_decode_query_len=dispatcher.uniform_decode_query_len,
        cudagraph_dispatcher=dispatcher,
        vllm_config=config,
        parallel_config=config.parallel_config,
        model_config=types.SimpleNamespace(is_encoder_decoder=False),
        input_batch=types.SimpleNamespace(lora_id_to_lora_request={}),
        _is_uniform_decode=GPUModelRunner._is_uniform_decode,
    )
    query_lens = np.array(shape.query_lens, dtype=np.int32)
    mode, *_ = GPUModelRunner._determine_batch_execution_and_padding(
        runner,
        num_tokens=shape.num_tokens,
        num_reqs=shape.num_reqs,
        num_scheduled_tokens_np=query_lens,
        max_num_scheduled_tokens=int(query_lens.max()),
        num_encoder_reqs=shape.num_encoder_reqs,
    )
    return mode


def decode_verdicts(dispatcher, steps) -> collections.Counter:
    """{"FULL"/"PIECEWISE"/"NONE": decode steps} over the recorded steps."""
    counts = collections.Counter({"FULL": 0, "PIECEWISE": 0, "NONE": 0})
    for shape in steps:
        if shape.decode:
            counts[replay(dispatcher, shape).name] += 1
    return counts
