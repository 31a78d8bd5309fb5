"""``vllm-gammatune doctor``: does the plugin take effect on this machine?

One command a user runs where they deploy. It prints the vLLM version and
platform; checks the plugin's environment variables (``envs``), the vLLM
series and every vLLM internal the plugin touches
(``internals``); lists the patches applied; shows which model runner vLLM
builds for each plugin method and for plain ``draft_model`` (with
``--assume-triton``, the decision a CUDA machine makes, on the config alone);
and, given a target and a draft (tiny ones are fine), starts an engine with a
plugin method, generates a few tokens and confirms from ``/metrics``
(``vllm:gammatune_info``) that the worker built the plugin's drafter and that
it drafted. Each check prints PASS, FAIL or SKIP; any FAIL exits with 1.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable

_ENGINE_METHOD_DEFAULT = "gammatune"


class Report:
    def __init__(self, out=sys.stdout):
        self.out = out
        self.failed = 0

    def line(self, status: str, text: str) -> None:
        if status == "FAIL":
            self.failed += 1
        print(f"{status:<5}{text}", file=self.out, flush=True)

    def check(self, name: str, run: Callable[[], str]) -> bool:
        """Run one check: its return value is the PASS detail, an exception a FAIL."""
        try:
            detail = run()
        except Exception as exc:  # a check's failure is reported, not raised
            self.line("FAIL", f"{name}: {type(exc).__name__}: {exc}")
            return False
        self.line("PASS", f"{name}: {detail}")
        return True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-gammatune doctor",
        description="Check that vllm-gammatune takes effect with this machine's vLLM.")
    parser.add_argument("--target", help="target model (a directory or a name vLLM can "
                        "load); with --draft, starts an engine to confirm the drafter")
    parser.add_argument("--draft", help="draft model sharing the target's vocabulary")
    parser.add_argument("--method", default=_ENGINE_METHOD_DEFAULT,
                        help="plugin method for the engine check (default: %(default)s)")
    parser.add_argument("--assume-triton", action="store_true",
                        help="decide runners as a machine with Triton (every CUDA "
                        "machine) would; config only, no engine")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--verbose", action="store_true", help="show vLLM's own logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if bool(args.target) != bool(args.draft):
        parser.error("--target and --draft go together (both, or neither)")
    if not args.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

    from vllm_gammatune.methods import PLUGIN_METHODS

    if args.method not in PLUGIN_METHODS:
        parser.error(f"--method: {args.method!r} is not a vllm-gammatune method; "
                     f"allowed: {', '.join(PLUGIN_METHODS)}")
    report = Report()
    _environment(report)
    _settings(report)
    compatible = _compatibility(report)
    if compatible:
        _decisions(report, args)
        _engine(report, args)
    verdict = "all checks passed" if not report.failed else f"{report.failed} check(s) failed"
    print(f"\nvllm-gammatune doctor: {verdict}")
    return 1 if report.failed else 0


def _environment(report: Report) -> None:
    import torch
    import vllm
    from vllm.platforms import current_platform

    import vllm_gammatune
    from vllm_gammatune.compat.internals import VllmSource

    try:
        import vllm.config.vllm as vllm_config_module
        triton = "present" if vllm_config_module.HAS_TRITON else "absent"
    except ImportError:
        triton = "unknown"
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    report.line("INFO", f"vllm-gammatune {vllm_gammatune.__version__}, vLLM "
                f"{vllm.__version__} ({VllmSource.installed().root / 'vllm'})")
    report.line("INFO", f"platform {current_platform.device_type}, torch {torch.__version__}, "
                f"CUDA device: {cuda}, Triton: {triton}, Python {platform.python_version()}, "
                f"{platform.machine()}")
    env = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    report.line("INFO", f"VLLM_USE_V2_MODEL_RUNNER={env if env is not None else '(unset)'}")


def _settings(report: Report) -> None:
    """The plugin's own environment variables (``envs``): which are set, and
    whether each holds a value the plugin accepts."""
    import vllm_gammatune.envs as envs

    def check() -> str:
        envs.allow_untested_vllm()
        envs.cuda_hot_path()
        set_ = [f"{name}={value}" for name, value in envs.settings().items() if value]
        return ", ".join(set_) if set_ else "none set"

    report.check("plugin environment variables", check)


def _compatibility(report: Report) -> bool:
    from vllm_gammatune.compat import internals
    from vllm_gammatune.compat import pin
    from vllm_gammatune.patches import base

    ok = report.check("vLLM series", lambda: (
        f"{pin.check_vllm_version()} (run-tested: {pin.RUN_TESTED_VLLM_SERIES}.x; "
        f"source-checked: {', '.join(s + '.x' for s in pin.SOURCE_CHECKED_VLLM_SERIES)})"))

    def check_internals() -> str:
        internals.check_vllm(internals.VllmSource.installed())
        return f"{len(internals.INTERNALS)} checked, every one present as the plugin needs it"

    ok = report.check("vLLM internals", check_internals) and ok

    def check_patches() -> str:
        import vllm_gammatune

        vllm_gammatune.register()
        expected = internals.rebind_targets()
        applied = set(base.APPLIED.values())
        if applied != expected:
            raise RuntimeError(f"applied {sorted(applied)}, expected {sorted(expected)}")
        return f"{len(applied)} rebinds: " + ", ".join(
            name for _, name in sorted(base.APPLIED.values()))

    return report.check("patches applied", check_patches) and ok


def _decisions(report: Report, args) -> None:
    if not args.target:
        report.line("SKIP", "runner decision per method: give --target and --draft "
                    "(tiny models are fine)")
        return
    import vllm.config.vllm as vllm_config_module
    from vllm.engine.arg_utils import EngineArgs

    from vllm_gammatune.methods import PLUGIN_METHODS

    saved = vllm_config_module.HAS_TRITON
    if args.assume_triton:
        vllm_config_module.HAS_TRITON = True
    triton = "present" if vllm_config_module.HAS_TRITON else "absent"
    try:
        for method in (*PLUGIN_METHODS, "draft_model"):
            spec = {"method": method, "model": args.draft, "num_speculative_tokens": 4}

            def decide(spec=spec, method=method) -> str:
                config = EngineArgs(model=args.target, speculative_config=spec,
                                    max_model_len=args.max_model_len,
                                    enforce_eager=True).create_engine_config()
                runner = "Model Runner V2" if config.use_v2_model_runner else "V1 model runner"
                if method != "draft_model" and config.use_v2_model_runner:
                    raise RuntimeError(f"vLLM chose {runner}, where the plugin's drafter "
                                       "does not exist")
                return runner

            report.check(f"runner for {method!r} (Triton {triton})", decide)
    finally:
        vllm_config_module.HAS_TRITON = saved


def _engine(report: Report, args) -> None:
    if not args.target:
        report.line("SKIP", "engine check: give --target and --draft to start an engine "
                    f"with {args.method!r} and confirm its drafter")
        return
    if args.assume_triton:
        report.line("SKIP", "engine check: not with --assume-triton (the engine would "
                    "need the Triton this machine lacks)")
        return

    def run() -> str:
        from vllm import LLM, SamplingParams
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        llm = LLM(model=args.target, max_model_len=args.max_model_len,
                  enforce_eager=current_platform.is_cpu(), disable_log_stats=False,
                  speculative_config={"method": args.method, "model": args.draft,
                                      "num_speculative_tokens": 4})
        try:
            llm.generate(["def fibonacci(n):"], SamplingParams(temperature=0, max_tokens=24),
                         use_tqdm=False)
            metrics = {m.name: m for m in llm.get_metrics()}
        finally:
            del llm
        info = metrics.get("vllm:gammatune_info")
        if info is None or info.value != 1:
            raise RuntimeError("no worker confirmed the plugin's drafter "
                               "(vllm:gammatune_info absent)")
        steps = metrics.get("vllm:gammatune_steps")
        drafted = metrics.get("vllm:spec_decode_num_draft_tokens")
        return (f"{info.labels.get('method')} on the {info.labels.get('runner')} runner, "
                f"drafter {info.labels.get('drafter')}; {getattr(steps, 'value', 0)} steps "
                f"seen by the drafter, {getattr(drafted, 'value', 0)} draft tokens verified")

    report.check(f"engine with {args.method!r}", run)


if __name__ == "__main__":
    sys.exit(main())
