"""Index lists such as ``0-30`` or ``0,3,5-7`` (folds, runs), bounded before they are built.

``range(0, 3000000000)`` costs nothing, but the set of its members would fill the memory: the count
of a range is checked against ``limit`` first, so a typo is one line, not an out-of-memory kill.
"""

from __future__ import annotations

#: the most indices one list may name (far beyond any cross-validation's folds)
MAX_INDICES = 10_000


def parse_index_ranges(text: str, flag: str, error: type[Exception], limit: int = MAX_INDICES) -> list[int]:
    """``"0-30"``, ``"0,3,5"`` or ``"0-3,7"`` -> sorted unique non-negative indices; anything else, or
    more than ``limit`` of them, raises ``error`` with one line naming ``flag`` and the part at fault."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
                if hi < lo:
                    raise ValueError
            else:
                lo = hi = int(part)
        except ValueError:
            raise error(f"{flag}: {part!r} is neither an index nor a range a-b") from None
        if hi - lo + 1 + len(out) > limit:
            raise error(f"{flag}: {part!r} names {hi - lo + 1:,} indices; at most {limit:,} in all (a typo?)")
        out.update(range(lo, hi + 1))
    if not out or min(out) < 0:
        raise error(f"{flag} {text!r}: expected non-negative indices such as 0-30")
    return sorted(out)
