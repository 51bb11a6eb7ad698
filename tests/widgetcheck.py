"""What widget tests assert about a figure: that a control change really redraws it."""

from __future__ import annotations


def png(out) -> bytes | str:
    """The one PNG an explorer's ``plot`` Output holds (exactly one: a redraw replaces, never appends)."""
    assert len(out.outputs) == 1, f"{len(out.outputs)} outputs in the plot, expected exactly one"
    return out.outputs[0]["data"]["image/png"]


def redraws(out, change) -> None:
    """``change()`` (a control moved) leaves one figure in ``out``, and a different one."""
    before = png(out)
    change()
    assert png(out) != before, "the control changed but the figure did not"
