"""Outputs a check reads are filled first with a value no right answer leaves (-7777.0), so an
element never written, or added to instead of set, fails; the message says what -7777.0 is."""
import numpy as np

from ..kit import compare, sentinel_like
from ..messages import Fail

SENTINEL = -7777.0


def filled(shape, dtype=np.float32) -> np.ndarray:
    """The value the check writes into an output before every run."""
    return sentinel_like(shape, dtype, SENTINEL)


def compare_filled(kit, name, got, want, *, repeats: int = 1, **options):
    """compare() of an output filled with the sentinel before the run; a Fail also says what
    -7777.0 means when it shows (never written), or shows through (added to, not set)."""
    got = np.asarray(got)
    try:
        compare(kit, name, got, want, initial=filled(got.shape, got.dtype), **options)
    except Fail as f:
        raise Fail(str(f) + sentinel_note(name, got, want, repeats)) from None


def sentinel_note(name, got, want, repeats: int = 1) -> str:
    """Why an output still shows the sentinel, or the sentinel plus k times the right value."""
    got, want = np.asarray(got, np.float64), np.broadcast_to(np.asarray(want, np.float64),
                                                             np.shape(got))
    wrong = ~np.isclose(got, want, rtol=1e-5, atol=1e-6)
    where = f"the check fills {name} with {SENTINEL} before every run, a value no right answer"
    if (got[wrong] == SENTINEL).any():
        return (f"\n  ({SENTINEL} is not a result: {where} leaves. An element that still holds "
                "it was never written — every element of the output must be.)")
    for k in range(1, repeats + 1):
        if np.isclose(got[wrong], SENTINEL + k * want[wrong], rtol=1e-5, atol=1e-3).any():
            times = "" if k == 1 else f" {k} times (the program ran {k} times)"
            return (f"\n  (that is {SENTINEL} + the right value{times}: {where} leaves. "
                    "Your code added to the output instead of setting it — an output does not "
                    "start at 0: set it (out[0] = total), do not add to it.)")
    return ""
