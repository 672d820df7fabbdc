"""The settings of one generation: :class:`Settings`, a frozen dataclass that checks
itself on construction and raises ``ValueError`` with a one-line message, the warps that
turn logits into p and q, and the tree shapes. Adding a setting is one field here (plus the
code that uses it); its Meta (specviz.config.schema) tells the front ends about it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from specviz.config.deployment import Limits
from specviz.config.schema import (
    Switch,
    _int_range,
    schema,
    setting,
)
from specviz.verify.registry import LOSSY_VERIFICATIONS as LOSSY_VERIFICATIONS
from specviz.verify.registry import OLD_RULE_NAMES, entry
from specviz.verify.registry import RULES as RULES
from specviz.verify.registry import TREE_ONLY_RULES as TREE_ONLY_RULES
from specviz.verify.registry import TREE_VERIFICATIONS as TREE_VERIFICATIONS
from specviz.verify.registry import VERIFICATIONS as VERIFICATIONS
from specviz.verify.registry import label as verification_name_label

METHODS = ("spec", "ar")
# The gammas a sweep, the cost measurement and the benchmark try unless told others: the
# range the refined prediction is judged on.
DEFAULT_GAMMAS = (1, 2, 4, 8)
# The verifications and the rejection rule's variants come from specviz.verify.registry,
# which says of each whether it is lossless and which round shapes it takes.
# A tree's node budget: each round's draft and verify calls are this wide at most.
MAX_TREE_NODES = 64
TRACE_LEVELS = ("full", "minimal")
# The compiled path's backends (specviz.backend), and what --compile takes: a backend, "off"
# (the eager path) or "auto" (compiled on CUDA; on a CPU, ahead of time where the set-up step
# built the packages; eager elsewhere). "aoti": forwards compiled ahead of time and kept on
# disk (specviz.backend.packages); the others are torch.compile's backends.
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager", "aoti")
COMPILE_CHOICES = ("auto", "off", *COMPILE_BACKENDS)
# The prompt a run starts from when nobody typed one: the app's first preset, the CLI's check.
DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."
# The smallest temperature above 0 (greedy). logits / T must stay finite in float32: at
# T = 1e-40 it overflows and softmax returns NaN. vLLM raises temperatures below 0.01 to
# 0.01 for the same reason; here they are refused instead, since a silent change would
# change the target distribution the user asked for. At 0.01 a logit gap of 0.1 already
# scales the odds by e^-10, so nothing between 0 and 0.01 differs visibly from greedy.
MIN_TEMPERATURE = 0.01


def verification_label(name: str, rule: str = "rejection") -> str:
    """A verification's name as every view prints it: a lossy one says so, and so does a
    deliberately wrong rule."""
    return verification_name_label(name, rule)


@dataclass(frozen=True)
class Warp:
    """How logits become a distribution: the same transformation is applied to p and q."""

    temperature: float
    top_k: int
    top_p: float

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Settings:
    """One generation's settings. Invalid values raise ValueError with a one-line message.

    The defaults are the CLI's and the app's untouched controls alike. Temperature 0.7 with
    top-p 0.9 keeps a small target coherent while it still samples; the output is
    distributed exactly as the target's own sampling at whatever values are chosen.

    Each field's Meta (see :func:`setting`) says where it is offered and how; ranges and
    choices in it are checked on construction, the rules between fields in __post_init__.
    """

    method: str = setting(
        "spec", "method", choices=METHODS, fronts=(), help="spec, or the autoregressive baseline"
    )
    # a drafter's name: specviz.drafters registers them (drafters may be added at run time),
    # the front ends offer its names (specviz.drafters.CHOICES) and the request check
    # refuses one it does not know, or a tree from a drafter that proposes chains; "auto"
    # is the one the pair's measurement picks, resolved per run (specviz.drafters.resolve)
    drafter: str = setting(
        "auto",
        "drafter",
        group="models",
        help="what proposes the drafts: auto (the pair's measured pick: the draft model, or "
        "an EAGLE head where one is cached and measures faster), the draft model, n-gram "
        "lookup in the text so far, or the EAGLE head",
    )
    gamma: int = setting(
        4,
        "gamma (drafts/round)",
        lo=1,
        hi="max_gamma",
        slider=(1, None, 1),
        elem_id="sv-gamma",
        help="tokens drafted per round",
    )
    adaptive_gamma: bool = setting(False, "adaptive gamma", help="grow/shrink gamma per round")
    temperature: float = setting(
        0.7,
        "temperature",
        lo=0,
        slider=(0, 2, 0.05),
        elem_id="sv-temperature",
        help="the sampling temperature of p and q, 0 for greedy",
    )
    # Temperature of the draft's q only (None: the target's). Under a lossless verification
    # the output stays exact: it corrects any q; the acceptance changes, either way.
    draft_temperature: float | None = setting(
        None,
        "draft temperature",
        lo=0,
        slider=(0.05, 3, 0.05),
        elem_id="sv-draft-temp",
        switch=Switch(
            "own_draft_temperature",
            "draft uses its own temperature (changes q only: exact under a lossless "
            "verification; acceptance changes)",
            1.5,
            elem_id="sv-own-draft-temp",
        ),
        help="changes q only; unset, the draft samples at the target's temperature",
    )
    top_p: float = setting(
        0.9,
        "top-p",
        lo=0,
        hi=1,
        lo_open=True,
        slider=(0.05, 1, 0.05),
        elem_id="sv-top-p",
        help="nucleus sampling: keep the smallest set of tokens holding this much of p and q",
    )
    top_k: int = setting(0, "top-k (0 = off)", lo=0, help="0 disables top-k")
    greedy: bool = setting(
        False, "greedy (argmax p and q)", help="argmax decoding (one-hot p and q)"
    )
    verification: str = setting(
        "rejection",
        "verification: rejection u < p/q or exact match (lossless); typical or top-k match "
        "(lossy: they keep drafts by a test on p alone, which changes the text's distribution)",
        choices=VERIFICATIONS,
        elem_id="sv-verification",
        help="rejection: u < p/q; exact-match: the target's own sample equals the draft "
        "(both lossless); typical, top-k-match: lossy",
    )
    max_new_tokens: int = setting(
        128,
        "max new tokens",
        lo=1,
        hi="max_new_tokens",
        slider=(1, 512, 1),
        elem_id="sv-max-new",
        help="tokens generated at most",
    )
    seed: int = setting(0, "seed", lo=0, hi=2**63 - 1, help="the seed of every random draw")
    top_n: int = setting(
        10, "tokens listed", lo=1, hi=100, fronts=("cli",), help="tokens listed per position"
    )
    ngram_size: int = setting(
        3,
        "n-gram size",
        lo=1,
        hi=16,
        fronts=(),
        help="the longest n-gram the n-gram drafter matches",
    )
    rule: str = setting(
        "rejection",
        "rule",
        choices=RULES,
        fronts=(),
        help="the rejection rule, or a broken variant",
    )
    trace_level: str = setting(
        "full", "trace level", choices=TRACE_LEVELS, fronts=(), help="what each round records"
    )
    # Children per depth of a drafted tree (specviz.tree), e.g. (2, 2, 1); None: a chain of
    # gamma. With a tree, gamma is its depth.
    tree: tuple[int, ...] | None = setting(
        None,
        "tree (children per depth, e.g. 2,2,1; empty: a chain of gamma)",
        lo=1,
        elem_id="sv-tree",
        help="draft a tree: children per depth, e.g. 2,2,1 (10 nodes); unset, a chain of gamma",
    )
    # The chain's confidence stop: no draft after a token whose own q (greedy: the draft's
    # softmax at temperature 1) is below this. None: draft gamma tokens.
    draft_confidence: float | None = setting(
        None,
        "draft confidence (stop drafting after a token the draft gives less than this)",
        lo=0,
        hi=1,
        lo_open=True,
        hi_open=True,
        slider=(0.05, 0.95, 0.05),
        elem_id="sv-draft-confidence",
        switch=Switch(
            "own_draft_confidence",
            "stop drafting when the draft is unsure (exact: a drafted token is never withdrawn)",
            0.4,
            elem_id="sv-own-draft-confidence",
        ),
        help="stop a round's drafting after a token whose q is below T",
    )
    # A dynamic tree's node budget (specviz.tree.draft_budget_tree): the nodes of highest
    # path confidence are expanded, depth by depth up to gamma. None: no dynamic tree.
    tree_budget: int | None = setting(
        None,
        "tree budget (nodes of a dynamic tree)",
        lo=1,
        hi=MAX_TREE_NODES,
        elem_id="sv-tree-budget",
        switch=Switch(
            "own_tree_budget",
            "draft a dynamic tree (expand the most confident paths, up to a node budget)",
            8,
            elem_id="sv-own-tree-budget",
        ),
        help="draft a dynamic tree of at most N nodes, depth up to gamma (EAGLE-2 style)",
    )
    # The lossy verifications' parameters (vLLM's defaults for typical acceptance).
    typical_threshold: float = setting(
        0.09,
        "typical threshold (lossy typical acceptance: keep x if p(x) > min(this, alpha e^-H))",
        lo=0,
        hi=1,
        lo_open=True,
        elem_id="sv-typical-threshold",
        help="typical acceptance (lossy): the posterior threshold, in (0, 1]",
    )
    typical_alpha: float = setting(
        0.3,
        "typical alpha (lossy typical acceptance: the entropy factor)",
        lo=0,
        hi=1,
        lo_open=True,
        elem_id="sv-typical-alpha",
        help="typical acceptance (lossy): the factor of exp(-H(p)), in (0, 1]",
    )
    match_top_k: int = setting(
        10,
        "top-k match k (lossy: keep a draft among the target's k most likely)",
        lo=1,
        hi=1_000_000,
        elem_id="sv-match-top-k",
        help="top-k-match (lossy): keep a draft among the target's k most likely tokens",
    )
    limits: Limits = field(default_factory=Limits, compare=False, repr=False)

    def __post_init__(self) -> None:
        for s in schema(type(self)):
            value = getattr(self, s.name)
            checked = s.check(value, self.limits)
            if checked is not value:
                object.__setattr__(self, s.name, checked)
        entry(self.verification, self.rule)  # refuses a wrong rule beside another verification
        _above_greedy("temperature", self.temperature)
        _above_greedy("draft_temperature", self.draft_temperature)
        self._check_tree()
        self._check_dynamic()

    def _check_dynamic(self) -> None:
        """The confidence stop and the dynamic tree: their ranges and what they combine with."""
        if self.draft_confidence is not None and self.drafts_tree:
            raise ValueError("draft confidence stops a chain: it cannot run on a tree")
        if self.tree_budget is None:
            return
        if self.tree is not None:
            raise ValueError("give --tree or --tree-budget, not both")
        self._check_tree_combination()

    def _check_tree_combination(self) -> None:
        """What a tree (fixed or dynamic) cannot combine with (the drafter: the request
        check, specviz.drafters.check_settings)."""
        if self.adaptive_gamma:
            raise ValueError("adaptive gamma changes a chain's length: it cannot run on a tree")
        if self.verification not in TREE_VERIFICATIONS:
            raise ValueError(
                f"{self.verification} verification is not supported on a tree "
                f"(only {', '.join(TREE_VERIFICATIONS)})"
            )
        if not entry(self.verification, self.rule).tree:
            raise ValueError(f"rule {self.rule!r} is not defined on a tree")

    @property
    def drafts_tree(self) -> bool:
        """Whether a round drafts a tree: a fixed shape or a dynamic one."""
        return self.tree is not None or self.tree_budget is not None

    def _check_tree(self) -> None:
        """Validate the tree shape and what combines with it; a tree sets gamma to its depth."""
        if self.tree is None:
            if self.rule in TREE_ONLY_RULES and self.tree_budget is None:
                raise ValueError(
                    f"rule {self.rule!r} differs from the rejection rule only on a tree: "
                    "give a tree (--tree)"
                )
            return
        shape = self.tree
        if isinstance(shape, list):
            shape = tuple(shape)
        if not isinstance(shape, tuple) or not shape:
            raise ValueError(f"tree must be a non-empty list of children per depth, got {shape!r}")
        for b in shape:
            _int_range("tree branching", b, 1, MAX_TREE_NODES)
        _int_range("tree depth", len(shape), 1, self.limits.max_gamma)
        nodes = tree_nodes(shape)
        if nodes > MAX_TREE_NODES:
            raise ValueError(
                f"tree {shape_text(shape)} has {nodes} nodes; at most {MAX_TREE_NODES}"
            )
        self._check_tree_combination()
        object.__setattr__(self, "tree", shape)
        object.__setattr__(self, "gamma", len(shape))

    @property
    def is_greedy(self) -> bool:
        """Whether this decodes greedily: the greedy switch, or temperature 0."""
        return bool(self.greedy) or self.temperature == 0

    def target_warp(self) -> Warp:
        """The warp that defines p (and the output distribution)."""
        temperature = 0.0 if self.is_greedy else float(self.temperature)
        return Warp(temperature, int(self.top_k), float(self.top_p))

    def draft_warp(self) -> Warp:
        """The warp that defines q: the target's, except for an optional draft temperature."""
        if self.is_greedy or self.draft_temperature is None:
            return self.target_warp()
        return Warp(float(self.draft_temperature), int(self.top_k), float(self.top_p))

    def with_(self, **changes: Any) -> Settings:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the trace (limits are deployment state, not a setting)."""
        d = asdict(self)
        d.pop("limits")
        return d

    def stored(self) -> Settings:
        """These settings as a trace holds them, ``from_trace(self.to_dict())``: the same
        values under the default limits (limits are deployment state); self where its
        limits are the defaults."""
        if self.limits == Limits():
            return self
        return Settings.from_trace(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any], limits: Limits | None = None) -> Settings:
        """Inverse of to_dict; unknown keys are an error."""
        known = {f for f in cls.__dataclass_fields__ if f != "limits"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return cls(**d, limits=limits or Limits())

    @classmethod
    def from_trace(cls, d: Mapping[str, Any]) -> Settings:
        """A trace's stored settings, as today's fields spell them: a field the trace lacks
        (it was written before the field existed) takes its default, an old name is mapped
        ("exact" was the rejection rule's name), and a key no field has is dropped."""
        known = {f for f in cls.__dataclass_fields__ if f != "limits"}
        values = {k: value for k, value in d.items() if k in known}
        rule = values.get("rule")
        if isinstance(rule, str) and rule in OLD_RULE_NAMES:
            values["rule"] = OLD_RULE_NAMES[rule]
        if isinstance(values.get("tree"), list):
            values["tree"] = tuple(values["tree"])
        return cls(**values)


def tree_nodes(shape: tuple[int, ...]) -> int:
    """Nodes of a tree with shape[d] children under every node of depth d: 2,2,1 has 10."""
    total, width = 0, 1
    for b in shape:
        width *= b
        total += width
    return total


def shape_text(shape: tuple[int, ...]) -> str:
    """A tree shape as the command line writes it: "2,2,1"."""
    return ",".join(str(b) for b in shape)


def _above_greedy(name: str, value: float | None) -> None:
    """A temperature is 0 (greedy) or at least MIN_TEMPERATURE (None: unset)."""
    if value is not None and 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"{name} must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {value!r}")
