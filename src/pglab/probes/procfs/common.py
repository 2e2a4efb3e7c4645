"""What the procfs parsers share."""

from __future__ import annotations

MIB = 1024 * 1024


def ints(words: list[str]) -> list[int]:
    return [int(w) for w in words]
