"""One test over many cases, every failing case reported together: the form of the realdata tests, which run on
the demo the cases that the synthetic tier runs one test each (a failure names the case and what went wrong)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def failures(cases: Iterable[tuple[str, Callable[[], object]]]) -> list[str]:
    """`name: error` of every case whose check raises; a raising case does not stop the others."""
    found = []
    for name, check in cases:
        try:
            check()
        except Exception as err:  # an assertion or an error in the product: either fails this case alone
            found.append(f"{name}: {type(err).__name__}: {err}")
    return found


def assert_all_pass(cases: Iterable[tuple[str, Callable[[], object]]]) -> None:
    """Run every case; fail naming each failing one (and fail when there is no case: nothing would be tested)."""
    cases = list(cases)
    assert cases, "no case to run"
    found = failures(cases)
    assert not found, f"{len(found)} of {len(cases)} case(s) failed:\n" + "\n".join(found)
