"""The verifications specviz knows, as plain data (no torch): what each is called, whether
it is lossless, what round shapes it takes, and which Settings fields its decision reads.

A verification is chosen by two settings: ``verification`` (how a round decides) and, for
the rejection rule only, ``rule`` (the papers' rule or one of its deliberately wrong
variants, kept so that the distribution check can show it catches a broken algorithm).
Each (verification, rule) pair is one :class:`Entry`, and one class in this package
(``Entry.cls``, imported on first use by :func:`specviz.verify.verification_for`). The
choice tuples of specviz.config come from here.

Adding a verification: one module in specviz/verify with its class, one Entry below, and
its tests (tests/test_verify_contract.py runs every entry).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One verification: its settings, its promise and where its class lives."""

    verification: str  # Settings.verification
    rule: str  # Settings.rule ("rejection" for every verification but the rejection rule's)
    lossless: bool  # its output is distributed as the target's p, for every q
    wrong: bool  # a deliberately wrong rule (for the distribution check)
    chain: bool  # runs on a chain of drafts
    tree: bool  # runs on a tree of drafts (siblings tried one after another)
    reads: tuple[str, ...]  # the Settings fields its decision reads beyond p, q and the draw
    cls: str  # "module:Class" inside specviz.verify

    @property
    def key(self) -> tuple[str, str]:
        return (self.verification, self.rule)


ENTRIES: tuple[Entry, ...] = (
    Entry("rejection", "rejection", True, False, True, True, (), "rejection:Rejection"),
    Entry("rejection", "resample-from-p", False, True, True, True, (), "rejection:ResampleFromP"),
    Entry(
        "rejection",
        "accept-without-draw",
        False,
        True,
        True,
        True,
        (),
        "rejection:AcceptWithoutDraw",
    ),
    Entry(
        "rejection",
        "same-target-for-siblings",
        False,
        True,
        False,
        True,
        (),
        "rejection:SameTargetForSiblings",
    ),
    Entry("exact-match", "rejection", True, False, True, True, (), "exact_match:ExactMatch"),
    Entry(
        "typical",
        "rejection",
        False,
        False,
        True,
        False,
        ("typical_threshold", "typical_alpha"),
        "typical:Typical",
    ),
    Entry(
        "top-k-match",
        "rejection",
        False,
        False,
        True,
        False,
        ("match_top_k",),
        "top_k_match:TopKMatch",
    ),
)
BY_KEY = {e.key: e for e in ENTRIES}

# The choice tuples of specviz.config, in the order above.
VERIFICATIONS = tuple(dict.fromkeys(e.verification for e in ENTRIES))
RULES = tuple(dict.fromkeys(e.rule for e in ENTRIES if e.verification == "rejection"))
LOSSY_VERIFICATIONS = tuple(
    name for name in VERIFICATIONS if not any(e.lossless for e in ENTRIES if e.verification == name)
)
TREE_VERIFICATIONS = tuple(
    name
    for name in VERIFICATIONS
    if any(e.tree and not e.wrong for e in ENTRIES if e.verification == name)
)
TREE_ONLY_RULES = tuple(e.rule for e in ENTRIES if e.tree and not e.chain)
CHAIN_ONLY_RULES = tuple(e.rule for e in ENTRIES if e.chain and not e.tree and e.wrong)
# The rejection rule's name in traces written before it was "rejection".
OLD_RULE_NAMES = {"exact": "rejection"}


def entry(verification: str, rule: str = "rejection") -> Entry:
    """The entry of a (verification, rule) pair; ValueError (one line) for one not known."""
    rule = OLD_RULE_NAMES.get(rule, rule)
    try:
        return BY_KEY[(verification, rule)]
    except KeyError:
        if verification != "rejection" and rule != "rejection":
            raise ValueError(
                f"rule {rule!r} is a broken rejection rule: it cannot be combined with "
                f"{verification} verification"
            ) from None
        raise ValueError(f"unknown verification {verification!r} with rule {rule!r}") from None


def label(verification: str, rule: str = "rejection") -> str:
    """A verification's name as every view prints it: a lossy one says so, and a
    deliberately wrong rule is named as one."""
    e = entry(verification, rule)
    if e.wrong:
        return f"{e.verification} with the deliberately wrong rule {e.rule}"
    return e.verification if e.lossless else f"{e.verification} (lossy)"
