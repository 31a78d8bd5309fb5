"""gammatune_tools.model_prep.progress: bars that stay silent when asked to."""

from __future__ import annotations

from gammatune_tools.model_prep.progress import NullBar, progress_bar


def test_a_bar_without_progress_writes_nothing(capsys):
    with progress_bar(False, total=3, desc="download target", unit="part") as bar:
        bar.set_postfix_str("part1")
        bar.update(3)
    bar.close()
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_a_bar_with_progress_shows_its_description(capsys):
    bar = progress_bar(True, total=2, desc="assemble draft", unit="B")
    bar.update(2)
    bar.close()
    assert "assemble draft" in capsys.readouterr().err


def test_the_null_bar_takes_every_call():
    with NullBar() as bar:
        bar.update()
        bar.update(5)
        bar.set_postfix_str("x")
    assert bar.close() is None
