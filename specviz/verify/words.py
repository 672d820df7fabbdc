"""Plain-text pieces every verification's sentences share (no torch): how numbers are
written, and the names of the distributions an added token can come from.

An added token records its ``source`` (specviz.trace.Added): the key of the distribution
the engine drew it from. Every sentence that says where a token came from reads it here,
so no view can name another distribution than the one that was used.
"""

from __future__ import annotations

# Where an added token was drawn from, as the engine records it (Added.source).
SOURCES: dict[str, str] = {
    "residual": "the residual norm(max(0, p − q))",
    "siblings": "the updated target p′ left after every sibling was rejected "
    "(p′ ← norm(max(0, p′ − q)) after each rejection)",
    "p": "p, the target's own distribution at that position",
    "sample": "the target's own sample y ~ p at that position",
    "bonus": "p at the next position, after every draft was accepted",
}


# The same, short enough for a chart's title or legend.
SHORT_SOURCES: dict[str, str] = {
    "residual": "the residual norm(max(0, p − q))",
    "siblings": "p′, left after every sibling was rejected",
    "p": "p, the target's own distribution",
    "sample": "the target's own sample from p",
    "bonus": "p at the next position",
}


def source_text(source: str) -> str:
    """The distribution named by an Added.source key, as a noun phrase."""
    return SOURCES[source]


def num(x: float) -> str:
    """A probability, readable whatever its size, with digits enough to check a ratio of
    two: two decimals from 0.1 up (at least two significant figures), three significant
    figures below 0.1 ("0.0146", "0.00300", "1.23e-05"), where two decimals would leave one
    figure or none."""
    if x >= 0.1 or x == 0:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def pq(x: float) -> str:
    """p or q beside min(1, p/q): three significant figures whatever its size ("0.183",
    "0.0146", "1.23e-05", "1.00"; "0" for 0), so that a reader can compute the ratio."""
    if x == 0:
        return "0"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def pair_fmt(a: float, b: float) -> tuple[str, str]:
    """Format two numbers as num does, with more digits where that would not tell them
    apart."""
    sa, sb = num(a), num(b)
    if sa != sb or a == b:
        return sa, sb
    for digits in (3, 4, 6):
        sa, sb = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if sa != sb or a == b:
            return sa, sb
    return f"{a:.3g}", f"{b:.3g}"
