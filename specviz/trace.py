"""The trace: the engine's record of a generation, one Round per target call.

This is the contract that the app, the exports and the benchmarks read. Plain Python values
only (no tensors), so a trace survives a JSON round trip unchanged; ``Trace.from_dict``
checks a loaded file against the schema and raises ValueError with a one-line message.
The lookups every reader shares live here too: the verified drafts (``Round.verified``,
:func:`verified`) and the decision at one output position (:func:`decision_at`).

p is the target's distribution and q the draft's, both after temperature, top-k and top-p:
exactly the distributions the verification used. Which verification that was (the rejection
rule or exact match) is in the settings, a :class:`specviz.config.Settings` (a trace written
before a setting existed loads with that setting's default); fields added after the first
traces were written (the exact-match ones, match_prob) are optional when loading.

A round that drafted a tree (specviz.tree) also records its shape and every node
(:class:`Node`: parent index, depth, its trial among its siblings). Such a trace is written
under schema version 2; a trace without tree rounds is written under version 1, exactly as
before, and both versions load. A tree round's ``drafted`` is its recorded path: one entry per
depth it reached (the accepted nodes, then the first child tried where every child was
rejected, then that child's first descendants, discarded), so every positional reader works
on it unchanged; the nodes hold the rest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from specviz.config import Settings
from specviz.verify.words import SOURCES

SCHEMA_CHAIN = "specviz-trace/1"
SCHEMA = "specviz-trace/2"  # adds tree rounds: Round.tree and Round.nodes
SCHEMAS = (SCHEMA_CHAIN, SCHEMA)
# Why a round stopped drafting: it drafted what was asked (gamma, or a tree's full depth),
# the draft was unsure (--draft-confidence), it drafted EOS, the token budget left no room
# for more, the n-gram drafter found no longer match, a dynamic tree spent its nodes, or
# (the first round of a draft that takes the target's keys and values of the prompt) the
# target read the prompt alone.
STOPS = ("gamma", "confidence", "eos", "budget", "lookup", "nodes", "prompt")
NODE_STATUSES = ("accepted", "rejected", "untried")
DRAFT_STATUSES = ("accepted", "rejected", "discarded")
ADDED_STATUSES = ("resampled", "bonus")
TOKEN_STATUSES = ("accepted", "rejected", "resampled", "bonus")
STOP_REASONS = ("eos", "max_new_tokens", "stopped", "running", "matched")
# matched: an autoregressive baseline ended at its speculative run's length (engine.interleave)


@dataclass
class Drafted:
    """One drafted token and the decision the verification made about it."""

    id: int
    text: str
    p: float  # target probability of this token
    q: float  # draft probability it was drawn with
    # the probability that this draft is accepted: min(1, p/q) under the rejection rule,
    # p under exact match
    accept_prob: float
    # the rejection rule's uniform draw; None when not drawn (greedy, exact match, discarded)
    u: float | None
    status: str  # accepted | rejected | discarded
    overlap: float | None  # sum_x min(p(x), q(x)) over the vocabulary; None: not measured
    # [{"id", "text", "p", "q"}], most likely under p or q first; a verified draft's
    # entries also hold "out", the verification's computed output distribution there
    top: list[dict[str, Any]]
    # sum_x p(x) q(x): exact match's acceptance probability here; None: not measured
    match_prob: float | None = None
    # exact match: the target's own sample y ~ p at this position (accepted iff it equals
    # id; at a rejection it is the added token); None under the rejection rule or discarded
    target_sample: int | None = None
    target_text: str | None = None
    # TV(out, p): how far the verification's computed output distribution at this position
    # (specviz.verify) lies from p; float error for a lossless verification. None:
    # not measured (a "minimal" trace, a discarded draft, an older trace)
    out_tv: float | None = None
    # sum_x q(x) a(x): the probability that this verification keeps a draw from q here
    kept_mass: float | None = None
    # a tree's later sibling: the updated target p'(x) it was tried against, left by the
    # siblings rejected before it (accept_prob is computed from it); None where p' = p
    p_prime: float | None = None
    # the probability that the verification's decision here ends in its fallback draw, from
    # the verification itself: on a chain 1 - kept_mass (1 - sum_x min(p, q) under the
    # rejection rule only); at a tree's node of b children, that all b are rejected, each
    # tried against the updated p'. None: not measured (minimal, discarded, older traces)
    reject_prob: float | None = None


@dataclass
class Node:
    """One node of a drafted tree and the trial it got (if any) among its siblings."""

    id: int
    text: str
    parent: int  # index of its parent in Round.nodes; -1: a child of the root
    depth: int  # 1 for the root's children
    q: float  # draft probability it was drawn with, at its parent
    p: float  # target probability at its parent (the original p)
    status: str  # accepted | rejected | untried (its parent was not reached, or a sibling won)
    trial: int | None = None  # its turn among its siblings, from 0; None: untried
    # the updated target p'(x) at its trial (p itself at the first trial; exact match: p)
    p_prime: float | None = None
    # min(1, p'(x)/q(x)) under the rejection rule, p(x) under exact match; None: untried
    accept_prob: float | None = None
    u: float | None = None  # the rejection rule's uniform; None: untried, greedy, exact match


@dataclass
class Added:
    """The token the target adds at the end of a round."""

    id: int
    text: str
    # resampled: it replaces the rejected draft (rejection rule: drawn from the residual;
    # exact match: the target's own sample there, from p) | bonus: from p after a full accept
    status: str
    p: float  # target probability of this token
    prob: float  # its probability under the distribution it was drawn from
    # [{"id", "text", "p", "residual"}]; "residual" is the distribution the token was drawn
    # from: norm(max(0, p - q)) for a token resampled by the rejection rule, p itself for a
    # bonus token and for exact match's sample at a mismatch.
    top: list[dict[str, Any]]
    # where it was drawn from, a key of specviz.verify.words.SOURCES ("residual", "siblings",
    # "p", "sample", "bonus"); None in traces written before it was recorded
    source: str | None = None


@dataclass
class Round:
    """One round: drafts, one target call, verdicts and the added token."""

    index: int
    start: int  # position in the output of the round's first token
    gamma: int  # drafts asked for (the drafter may propose fewer)
    drafted: list[Drafted]
    added: Added | None  # None only when an accepted draft was EOS
    draft_ms: float
    verify_ms: float
    t_s: float  # seconds since the start of the generation when the round ended
    tree: list[int] | None = None  # children per depth; None: a chain round
    nodes: list[Node] | None = None  # the tree's nodes, breadth first; None: a chain round
    # why drafting stopped (one of STOPS); None in traces written before it was recorded
    stop: str | None = None

    @property
    def trials(self) -> int:
        """Drafts the verification tested: every tried node of a tree, the verified drafts of
        a chain."""
        if self.nodes is None:
            return len(self.verified)
        return sum(n.trial is not None for n in self.nodes)

    @property
    def verified(self) -> list[Drafted]:
        """The drafts the verification tested (accepted or rejected), in order: a prefix of drafted,
        since the drafts after a rejection are discarded untested."""
        return [d for d in self.drafted if d.status != "discarded"]

    @property
    def n_accepted(self) -> int:
        return sum(d.status == "accepted" for d in self.drafted)

    @property
    def exact_match(self) -> bool:
        """Whether exact match verified this round: its tested drafts record the target's
        samples (a round that drafted nothing cannot tell, and needs not)."""
        return any(d.target_sample is not None for d in self.drafted)

    @property
    def emitted(self) -> int:
        """Tokens this round appended to the output."""
        return self.n_accepted + (self.added is not None)


@dataclass
class Stats:
    """Summary figures; the definitions are in specviz.metrics."""

    new_tokens: int = 0
    rounds: int = 0
    target_calls: int = 0  # target forwards; the first one also reads the prompt
    drafted: int = 0  # drafted tokens, discarded ones included
    verified: int = 0  # drafted tokens the verification tested: accepted + rejected
    accepted: int = 0
    acceptance_rate: float = 0.0  # accepted / verified
    # mean overlap sum_x min(p, q) over verified positions; None when not measured (trace
    # level "minimal" records no overlaps) or when no draft was verified
    alpha: float | None = None
    # mean sum_x p(x) q(x) over verified positions (exact match's expected acceptance);
    # None as for alpha, and in traces written before it was recorded
    match_alpha: float | None = None
    tokens_per_call: float = 0.0  # new_tokens / target_calls
    # mean and largest TV(out, p) over verified positions: the distortion the verification
    # adds per decision (0 up to float error for a lossless one); None as for alpha
    mean_out_tv: float | None = None
    max_out_tv: float | None = None
    first_token_ms: float = 0.0  # until the first call (which reads the prompt) emitted
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    wall_s: float = 0.0  # start to last token: prompt, decoding and trace building
    ms_per_token: float = 0.0  # wall_s / new_tokens


@dataclass
class Trace:
    """A whole generation: settings, output, one Round per target call, stats."""

    method: str
    prompt: str
    prompt_ids: list[int]
    settings: Settings  # a mapping (a trace's stored settings) is parsed into one
    models: dict[str, Any]  # target, draft, device, dtype: what produced this trace
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)  # the text of each output token
    rounds: list[Round] = field(default_factory=list)
    # [[seconds since start, tokens so far]] after every round (spec) or token (ar)
    timeline: list[list[float]] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = "running"
    # greedy runs: the target's top-2 logit gap at each output position (empty otherwise,
    # and in traces written before it was recorded)
    logit_gaps: list[float] = field(default_factory=list)
    # the verification as views name it, "(lossy)" after a lossy one ("typical (lossy)");
    # "" for an autoregressive run and for traces written before it was recorded
    verification: str = ""
    # where it ran and what else the machine ran meanwhile (specviz.threads.Load.to_dict:
    # the CPU, the cores, the threads it computed on, the rest's CPU use); {} where not
    # measured, and in traces written before it was recorded
    machine: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA_CHAIN  # to_dict writes SCHEMA when the trace has tree rounds

    def __post_init__(self) -> None:
        if isinstance(self.settings, Mapping):
            self.settings = Settings.from_trace(self.settings)

    def append_call(
        self,
        new_ids: list[int],
        texts: list[str],
        t_s: float,
        rnd: Round | None = None,
        gaps: list[float] | None = None,
    ) -> None:
        """Append one target call's output: its round (spec; None for an ar step), its tokens
        and their texts, the timeline's point [t_s, tokens so far], and (greedy) the target's
        top-2 logit gap at each new token. The one place a trace grows, for the engine and
        for a trace rebuilt from streamed pieces alike."""
        if rnd is not None:
            self.rounds.append(rnd)
        if gaps is not None:
            self.logit_gaps.extend(gaps)
        self.token_ids.extend(new_ids)
        self.token_texts.extend(texts)
        self.timeline.append([t_s, float(len(self.token_ids))])

    def to_dict(self) -> dict[str, Any]:
        """Plain values; a trace without tree rounds is written as schema version 1."""
        d = asdict(self)
        d["settings"] = self.settings.to_dict()
        tree = any(r.nodes is not None for r in self.rounds)
        if not tree:
            for r in d["rounds"]:
                del r["tree"], r["nodes"]
        d["schema"] = SCHEMA if tree else SCHEMA_CHAIN
        return d

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JSON trace: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, d: Any) -> Trace:
        """Build a Trace from plain values, checking every field against the schema."""
        _expect(d, dict, "trace")
        if d.get("schema", SCHEMA_CHAIN) not in SCHEMAS:
            raise ValueError(
                f"unsupported trace schema {d.get('schema')!r}, "
                f"expected one of {', '.join(SCHEMAS)}"
            )
        method = _get(d, "method", str, "trace")
        if method not in ("spec", "ar"):
            raise ValueError(f"trace.method must be 'spec' or 'ar', got {method!r}")
        rounds = [_round(r, i) for i, r in enumerate(_get(d, "rounds", list, "trace"))]
        try:
            settings = Settings.from_trace(_get(d, "settings", dict, "trace"))
        except ValueError as exc:
            raise ValueError(f"trace.settings: {exc}") from None
        stop = d.get("stop_reason", "running")
        if stop not in STOP_REASONS:
            raise ValueError(f"trace.stop_reason must be one of {', '.join(STOP_REASONS)}")
        return cls(
            method=method,
            prompt=_get(d, "prompt", str, "trace"),
            prompt_ids=_ints(_get(d, "prompt_ids", list, "trace"), "trace.prompt_ids"),
            settings=settings,
            models=_get(d, "models", dict, "trace"),
            text=_get(d, "text", str, "trace"),
            token_ids=_ints(_get(d, "token_ids", list, "trace"), "trace.token_ids"),
            token_texts=[_expect(t, str, "trace.token_texts") for t in d.get("token_texts", [])],
            rounds=rounds,
            timeline=[_point(x) for x in _get(d, "timeline", list, "trace")],
            stats=_stats(_get(d, "stats", dict, "trace")),
            stop_reason=stop,
            verification=_optional(d, "verification", str, "trace") or "",
            machine=_machine(d.get("machine", {})),
            logit_gaps=[
                float(_expect(g, float, "trace.logit_gaps")) for g in d.get("logit_gaps", [])
            ],
        )


# --- lookups in a trace ----------------------------------------------------------------


def round_number(index: int) -> int:
    """A round as people read it: the page, the narration and the CSV export number rounds
    from 1. ``Round.index`` (the JSON's "index", the token spans' data-round) counts from 0."""
    return index + 1


def has_overlaps(trace: Trace) -> bool:
    """Whether a trace recorded overlaps (a speculative run with the full trace)."""
    return trace.method == "spec" and trace.settings.trace_level == "full"


def verified(trace: Trace) -> list[Drafted]:
    """The verified drafts of every round of a trace, in order."""
    return [d for r in trace.rounds for d in r.verified]


@dataclass
class Decision:
    """What the verification decided at one output position of one round."""

    round: Round
    pos: int
    drafted: Drafted | None  # the draft tested at this position, if any
    added: Added | None  # the token the target added here, if any
    # the trace's settings (which verification decided, and its parameters)
    settings: Settings = field(default_factory=Settings)


def round_of(trace: Trace, pos: int) -> int | None:
    """The round that placed output position pos (None if out of range)."""
    for r in trace.rounds:
        if r.start <= pos < r.start + max(1, r.emitted):
            return r.index
    return None


def decision_at(trace: Trace, round_index: int | None, pos: int) -> Decision:
    """The decision at (round, pos); round None means the round that placed pos."""
    if round_index is None:
        round_index = round_of(trace, pos)
    if round_index is None or not 0 <= round_index < len(trace.rounds):
        raise ValueError(
            f"no round placed position {pos}"
            if round_index is None
            else f"round {round_index} does not exist (0..{len(trace.rounds) - 1})"
        )
    rnd = trace.rounds[round_index]
    i = pos - rnd.start
    drafted = rnd.drafted[i] if 0 <= i < len(rnd.drafted) else None
    if drafted is not None and drafted.status == "discarded":
        drafted = None
    added = rnd.added if rnd.added is not None and i == rnd.n_accepted else None
    if drafted is None and added is None:
        raise ValueError(f"round {round_index} placed no token at position {pos}")
    return Decision(rnd, pos, drafted, added, trace.settings)


# --- schema checking -------------------------------------------------------------------


def _expect(value: Any, kind: type, where: str) -> Any:
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        name = "number" if kind is float else kind.__name__
        raise ValueError(f"{where} must be {name}, got {type(value).__name__}")
    return value


def _get(d: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in d:
        raise ValueError(f"{where} is missing the key {key!r}")
    return _expect(d[key], kind, f"{where}.{key}")


def _ints(values: list[Any], where: str) -> list[int]:
    for value in values:
        _expect(value, int, where)
    return list(values)


def _num(d: dict[str, Any], key: str, where: str) -> float:
    return float(_get(d, key, float, where))


def _opt_num(d: dict[str, Any], key: str, where: str, optional: bool = False) -> float | None:
    """A number that may be null (not measured); the key itself must be present unless
    optional (a field that older traces lack)."""
    if (key in d and d[key] is None) or (optional and key not in d):
        return None
    return _num(d, key, where)


def _optional(d: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """A value that may be missing or null (a field that older traces lack)."""
    value = d.get(key)
    return None if value is None else _expect(value, kind, f"{where}.{key}")


MACHINE_KEYS = 12  # a machine record holds a few plain values


def _machine(d: Any) -> dict[str, Any]:
    """A machine record (Trace.machine): a mapping of at most MACHINE_KEYS names to plain
    values (text, numbers, booleans, null, or a mapping of names to numbers)."""
    _expect(d, dict, "trace.machine")
    if len(d) > MACHINE_KEYS:
        raise ValueError(f"trace.machine holds at most {MACHINE_KEYS} entries")
    for key, value in d.items():
        where = f"trace.machine.{key}"
        if isinstance(value, dict):
            for number in value.values():
                _expect(number, float, where)
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"{where} must be a plain value, got {type(value).__name__}")
        if isinstance(value, str) and len(value) > 200:
            raise ValueError(f"{where} is longer than 200 characters")
    return dict(d)


def _point(x: Any) -> list[float]:
    _expect(x, list, "trace.timeline entry")
    if len(x) != 2:
        raise ValueError("trace.timeline entries must be [seconds, tokens]")
    return [float(_expect(value, float, "trace.timeline value")) for value in x]


def _top(entries: Any, second: str, where: str) -> list[dict[str, Any]]:
    _expect(entries, list, where)
    out = []
    for e in entries:
        _expect(e, dict, where)
        entry = {
            "id": _get(e, "id", int, where),
            "text": _get(e, "text", str, where),
            "p": _num(e, "p", where),
            second: _num(e, second, where),
        }
        if "out" in e:  # the computed output distribution, recorded for verified drafts
            entry["out"] = _num(e, "out", where)
        out.append(entry)
    return out


def _round(r: Any, i: int) -> Round:
    where = f"trace.rounds[{i}]"
    _expect(r, dict, where)
    drafted = []
    for j, x in enumerate(_get(r, "drafted", list, where)):
        w = f"{where}.drafted[{j}]"
        _expect(x, dict, w)
        status = _get(x, "status", str, w)
        if status not in DRAFT_STATUSES:
            raise ValueError(f"{w}.status must be one of {', '.join(DRAFT_STATUSES)}")
        u = x.get("u")
        drafted.append(
            Drafted(
                id=_get(x, "id", int, w),
                text=_get(x, "text", str, w),
                p=_num(x, "p", w),
                q=_num(x, "q", w),
                accept_prob=_num(x, "accept_prob", w),
                u=None if u is None else float(_expect(u, float, f"{w}.u")),
                status=status,
                overlap=_opt_num(x, "overlap", w),
                top=_top(x.get("top", []), "q", f"{w}.top"),
                match_prob=_opt_num(x, "match_prob", w, optional=True),
                target_sample=_optional(x, "target_sample", int, w),
                target_text=_optional(x, "target_text", str, w),
                out_tv=_opt_num(x, "out_tv", w, optional=True),
                kept_mass=_opt_num(x, "kept_mass", w, optional=True),
                p_prime=_opt_num(x, "p_prime", w, optional=True),
                reject_prob=_opt_num(x, "reject_prob", w, optional=True),
            )
        )
    added = r.get("added")
    if added is not None:
        w = f"{where}.added"
        _expect(added, dict, w)
        status = _get(added, "status", str, w)
        if status not in ADDED_STATUSES:
            raise ValueError(f"{w}.status must be one of {', '.join(ADDED_STATUSES)}")
        added = Added(
            id=_get(added, "id", int, w),
            text=_get(added, "text", str, w),
            status=status,
            p=_num(added, "p", w),
            prob=_num(added, "prob", w),
            top=_top(added.get("top", []), "residual", f"{w}.top"),
            source=_source(added, w),
        )
    tree, nodes = r.get("tree"), r.get("nodes")
    if tree is not None:
        tree = _ints(_expect(tree, list, f"{where}.tree"), f"{where}.tree")
    if nodes is not None:
        _expect(nodes, list, f"{where}.nodes")
        nodes = [_node(x, f"{where}.nodes[{j}]", j) for j, x in enumerate(nodes)]
    return Round(
        index=_get(r, "index", int, where),
        start=_get(r, "start", int, where),
        gamma=_get(r, "gamma", int, where),
        drafted=drafted,
        added=added,
        draft_ms=_num(r, "draft_ms", where),
        verify_ms=_num(r, "verify_ms", where),
        t_s=_num(r, "t_s", where),
        tree=tree,
        nodes=nodes,
        stop=_stop(r, where),
    )


ADDED_SOURCES = tuple(SOURCES)  # where an added token can come from


def _source(a: dict[str, Any], where: str) -> str | None:
    source = _optional(a, "source", str, where)
    if source is not None and source not in ADDED_SOURCES:
        raise ValueError(f"{where}.source must be one of {', '.join(ADDED_SOURCES)}")
    return source


def _stop(r: dict[str, Any], where: str) -> str | None:
    stop = r.get("stop")
    if stop is not None and stop not in STOPS:
        raise ValueError(f"{where}.stop must be one of {', '.join(STOPS)}")
    return stop


def _node(x: Any, w: str, j: int) -> Node:
    _expect(x, dict, w)
    status = _get(x, "status", str, w)
    if status not in NODE_STATUSES:
        raise ValueError(f"{w}.status must be one of {', '.join(NODE_STATUSES)}")
    parent = _get(x, "parent", int, w)
    if not -1 <= parent < j:
        raise ValueError(f"{w}.parent must be -1 or an earlier node, got {parent}")
    return Node(
        id=_get(x, "id", int, w),
        text=_get(x, "text", str, w),
        parent=parent,
        depth=_get(x, "depth", int, w),
        q=_num(x, "q", w),
        p=_num(x, "p", w),
        status=status,
        trial=_optional(x, "trial", int, w),
        p_prime=_opt_num(x, "p_prime", w, optional=True),
        accept_prob=_opt_num(x, "accept_prob", w, optional=True),
        u=_opt_num(x, "u", w, optional=True),
    )


_LATER_STATS = {"match_alpha", "mean_out_tv", "max_out_tv"}  # stats that older traces lack


def _stats(d: dict[str, Any]) -> Stats:
    values: dict[str, Any] = {}
    for name, f in Stats.__dataclass_fields__.items():
        if f.type == "int":
            values[name] = _get(d, name, int, "trace.stats")
        elif "None" in str(f.type):
            values[name] = _opt_num(d, name, "trace.stats", optional=name in _LATER_STATS)
        else:
            values[name] = _num(d, name, "trace.stats")
    return Stats(**values)


_DESCRIBED_DTYPE = re.compile(r" on \S+ \(([^;()]+)[;)]")


def target_dtype(trace: Trace) -> str | None:
    """The dtype the trace's target ran in, read from its description in trace.models
    ("name on cpu (float32; ...)", as specviz.pair.LoadedModel.describe writes it); None
    when the trace does not say."""
    m = _DESCRIBED_DTYPE.search(str(trace.models.get("target", "")))
    return m.group(1).strip() if m else None
