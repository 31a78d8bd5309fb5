"""Progress bars for the long steps (download, assembly, conversion)."""

from __future__ import annotations


class NullBar:
    """A progress bar that shows nothing, for when tqdm is missing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_bar(progress: bool, **kwargs):
    """A tqdm bar (hidden unless ``progress``); a :class:`NullBar` without tqdm."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm ships with vLLM
        return NullBar()
    return tqdm(disable=not progress, **kwargs)
