"""One contract for every verification in the registry (specviz.verify.registry).

Each entry runs on a chain, a tree 2,2,1 and a dynamic tree (where it takes that shape),
with the model drafter and the n-gram drafter (chains), greedy and sampled. For every
decision the engine recorded:
- the keep probability a reveal shows (the object's shown_keep) is the one the engine
  decided with, and u < a exactly when the draft was kept (exact match: its sample equals
  the draft; greedy and draw-free tests: a = 1 exactly when kept);
- a lossless entry's TV(out, p) is at float error;
- the replacement's source is the one an independent reading of the round gives, and the
  inspector's, the narration's, lesson step 3's, the verifier game's reveal and the decision
  chart's sentences name that source and no other;
- the game's reveal shows the a(x) the engine decided with (from p′ where siblings came
  first), says "u < a(x)" only where a drawn u decided, and the chart's bar is named by
  the object's keep label.
Beside it, each entry's exact out on a node's siblings is checked against an independent
enumeration of the sibling procedure, written here from the rules' definitions; and each
entry's probability of rejecting, on a chain against the rate its own decide_chain rejects
at (Monte Carlo), on a node's siblings against the same enumeration, and as a round's
record holds it (over p' at a node of b children).
"""

from __future__ import annotations

import functools
import itertools
from html import unescape

import pytest
import torch

from specviz.config import Settings
from specviz.engine import generate
from specviz.lesson_statements import first_rejection, rejection_statement
from specviz.trace import Drafted, Round, Trace, decision_at, round_number
from specviz.verify import ENTRIES, verification_for, verification_of_entry
from specviz.verify.base import normalised, total_variation
from specviz.verify.words import SHORT_SOURCES
from specviz.views import figures, markup, narration
from specviz.views import verifier_game as vg
from tests.tiny import close_pair

PARAMS = {"typical_threshold": 0.09, "typical_alpha": 0.3, "match_top_k": 3}
SHAPES = {"chain": {}, "tree": {"tree": (2, 2, 1)}, "dynamic": {"tree_budget": 6}}
RESIDUAL = "residual norm(max(0, p − q))"
# the phrase each source's sentences must name
PHRASES = {
    "residual": "norm(max(0, p − q))",
    "siblings": "left after every sibling was rejected",
    "p": "from p",
    "sample": "sample",
}


def cases():
    for e, shape, drafter, greedy in itertools.product(
        ENTRIES, SHAPES, ("model", "ngram"), (False, True)
    ):
        tree = shape != "chain"
        if (tree and not e.tree) or (not tree and not e.chain) or (tree and drafter == "ngram"):
            continue
        yield pytest.param(
            e,
            shape,
            drafter,
            greedy,
            id=f"{e.verification}-{e.rule}-{shape}-{drafter}-{'greedy' if greedy else 'sampled'}",
        )


@pytest.fixture(scope="module")
def pair():
    return close_pair(vocab=12, noise=0.5)


def expected_source(entry, rnd: Round) -> str:
    """Where the replacement came from, read from the round and the rule's definition."""
    if entry.verification == "exact-match":
        return "sample"
    if entry.verification in ("typical", "top-k-match") or entry.rule == "resample-from-p":
        return "p"
    if rnd.nodes is None or entry.rule == "same-target-for-siblings":
        return "residual"
    depth = rnd.n_accepted + 1
    tried = [n for n in rnd.nodes if n.depth == depth and n.trial is not None]
    return "siblings" if len(tried) > 1 else "residual"


def run(pair, entry, shape, drafter, greedy, seed) -> Trace:
    prompt = "1 2 3 1 2 3 1 2" if drafter == "ngram" else "3 1 4"
    s = Settings(
        verification=entry.verification,
        rule=entry.rule,
        drafter=drafter,
        temperature=0.0 if greedy else 1.0,
        top_p=1.0,
        max_new_tokens=16,
        seed=seed,
        gamma=3,
        **PARAMS,
        **SHAPES[shape],
    )
    return generate(pair, prompt, s, raw=True)


@pytest.mark.parametrize(("entry", "shape", "drafter", "greedy"), list(cases()))
def test_every_decision_agrees_with_the_object_and_its_sentences(
    pair, entry, shape, drafter, greedy
):
    v = verification_of_entry(entry, PARAMS)
    seen_resampled = 0
    for seed in range(4):
        t = run(pair, entry, shape, drafter, greedy, seed)
        # a decision's chart, built once (a rejected draft's position is also where the
        # round's replacement is checked): a chart is a function of the stored trace alone
        chart = functools.cache(lambda i, pos, t=t: figures.decision_figure(decision_at(t, i, pos)))
        assert verification_for(t.settings) == v
        assert ("lossy" in t.verification or "wrong" in t.verification) == (not v.lossless)
        for rnd in t.rounds:
            for d in rnd.verified:
                a = v.shown_keep(d)
                assert a == pytest.approx(d.accept_prob, abs=1e-6)
                kept = d.status == "accepted"
                if d.target_sample is not None:
                    assert (d.target_sample == d.id) == kept
                elif d.u is not None and v.draws == "u":
                    assert (d.u < a) == kept, (d, a)
                else:
                    assert (a >= 1.0) == kept, (d, a)
                if v.lossless and d.out_tv is not None:
                    assert d.out_tv < 1e-6
                if d.reject_prob is not None and rnd.nodes is None:  # a chain's position
                    assert d.reject_prob == pytest.approx(1.0 - d.kept_mass, abs=1e-9)
                    if entry.key == ("rejection", "rejection"):
                        assert d.reject_prob == pytest.approx(1.0 - d.overlap, abs=1e-5)
                    if entry.verification == "exact-match":
                        assert d.reject_prob == pytest.approx(1.0 - d.match_prob, abs=1e-5)
            for n in rnd.nodes or []:
                if n.trial is not None and n.u is not None:
                    assert (n.u < n.accept_prob) == (n.status == "accepted")
            game = vg.deal(t, round_number(rnd.index)) if rnd.verified else None
            for i, d in enumerate(game.drafts if game else []):
                shown = vg.draw_sentence(game, i)
                assert f"= {markup.num(v.shown_keep(d))}." in shown, (d, shown)
                assert ("p′" in shown) == (d.p_prime is not None), shown
                verdict = vg.verdict_sentence(game, i)
                assert verdict.startswith("Kept" if d.status == "accepted" else "Rejected")
                assert ("u <" in verdict or "u ≥" in verdict) == (
                    v.draws == "u" and d.u is not None
                ), verdict
                bars = [tr.name for tr in chart(rnd.index, rnd.start + i).data]
                assert v.keep_label(d) in bars
            a = rnd.added
            if a is None or a.status != "resampled":
                continue
            seen_resampled += 1
            src = expected_source(entry, rnd)
            assert a.source == src
            dec = decision_at(t, rnd.index, rnd.start + rnd.n_accepted)
            said = {
                "inspector": v.replace_text(a),
                "inspector html": unescape(markup.verdict_html(dec)),
                "narration": unescape(narration.narration_html(rnd, t.settings)),
            }
            said["verifier game"] = vg.verdict_sentence(game, len(game.drafts) - 1)
            # a title wrapped onto lines reads as one line of text
            titles = [
                x.text.replace("<br>", " ") for x in chart(rnd.index, dec.pos).layout.annotations
            ]
            said["decision chart"] = " ".join(titles)
            assert f"resampled: drawn from {SHORT_SOURCES[src]}" in titles
            found = first_rejection(t)
            if found is not None and found[0].index == rnd.index:
                said["lesson step 3"] = unescape(rejection_statement(t))
            for where, text in said.items():
                assert PHRASES[src] in text, (where, src, text)
                if src != "residual":
                    assert RESIDUAL not in text, (where, src, text)
            note = unescape(markup.exact_note_html(t.settings))
            assert ("distributed exactly" in note) == (v.lossless or greedy), note
    if not greedy and drafter == "model":
        assert seen_resampled, "no replacement was drawn: the case tests nothing"


def sibling_law(rule: str, p: torch.Tensor, q: torch.Tensor, b: int) -> torch.Tensor:
    """The emitted token's law at a node with b children i.i.d. from q, by enumerating every
    tuple of children, written from each rule's definition (float64)."""
    out = torch.zeros_like(p)
    for kids in itertools.product(range(len(p)), repeat=b):
        w = float(torch.prod(q[list(kids)]))
        if w == 0:
            continue
        pp, reach = p.clone(), 1.0
        for x in kids:
            target = p if rule == "same-target-for-siblings" else pp
            if rule == "accept-without-draw":
                a = 1.0 if target[x] >= q[x] else 0.0
            else:
                a = min(1.0, float(target[x] / q[x]))
            out[x] += w * reach * a
            reach *= 1.0 - a
            if rule != "same-target-for-siblings":
                r = (pp - q).clamp_min(0)
                pp = r / r.sum() if r.sum() > 0 else pp
        if rule == "same-target-for-siblings":
            r = (p - q).clamp_min(0)
            final = r / r.sum() if r.sum() > 0 else p
        elif rule == "resample-from-p":
            final = p
        else:
            final = pp
        out += w * reach * final
    return out


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.tree], ids=lambda e: e.rule)
@pytest.mark.parametrize("b", [1, 2, 3])
def test_out_on_siblings_matches_the_enumerated_procedure(entry, b):
    v = verification_of_entry(entry, PARAMS)
    g = torch.Generator().manual_seed(b)
    for _ in range(3):
        p = normalised(torch.rand(4, generator=g, dtype=torch.float64) ** 2)
        q = normalised(torch.rand(4, generator=g, dtype=torch.float64) ** 2)
        out = v.out_siblings(p, q, b)
        assert float(out.sum()) == pytest.approx(1.0, abs=1e-12)
        if entry.verification == "exact-match":
            want = p  # y ~ p is drawn first and emitted whether or not a child equals it
        else:
            want = sibling_law(entry.rule, p, q, b)
        assert torch.allclose(out, want, atol=1e-12), (entry.rule, b)
        tv = float(total_variation(out, p))
        if v.lossless:
            assert tv < 1e-12
    # the example: b = 2, same p and q, the wrong sibling rule is off by TV 0.10
    p, q = torch.tensor([0.5, 0.3, 0.2]).double(), torch.tensor([0.2, 0.2, 0.6]).double()
    if entry.rule == "same-target-for-siblings" and b == 2:
        assert float(total_variation(v.out_siblings(p, q, 2), p)) == pytest.approx(0.1)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.tree], ids=lambda e: e.rule)
def test_a_later_siblings_shown_keep_reads_p_prime(entry):
    """A later sibling's a(x), as a reveal shows it, is the object's own sibling keep at the
    updated target p′, never at p: here p(x) = 0.3 < q(x) = 0.4 < p′(x) = 0.6, so every
    rule's keep differs between the two (min(1, p/q), p(x), [p ≥ q])."""
    v = verification_of_entry(entry, PARAMS)
    p_prime, q = torch.tensor([[0.6, 0.4]]), torch.tensor([[0.4, 0.6]])
    d = Drafted(0, "a", 0.3, 0.4, 0.0, 0.5, "accepted", None, [], p_prime=0.6)
    at_p_prime = float(v.sibling_keep(p_prime.double(), q.double())[0, 0])
    at_p = float(v.sibling_keep(torch.tensor([[0.3, 0.7]]).double(), q.double())[0, 0])
    assert at_p_prime != at_p
    assert v.shown_keep(d) == pytest.approx(at_p_prime)


def sibling_reject(entry, p: torch.Tensor, q: torch.Tensor, b: int) -> float:
    """The probability that all b children (i.i.d. from q) of a node are rejected, by
    enumerating every tuple of children (and, for exact match, the target's own y), written
    from each rule's definition."""
    total = 0.0
    for kids in itertools.product(range(len(p)), repeat=b):
        w = float(torch.prod(q[list(kids)]))
        if w == 0:
            continue
        if entry.verification == "exact-match":  # rejected iff no child equals y ~ p
            total += w * sum(float(p[y]) for y in range(len(p)) if y not in kids)
            continue
        pp, reach = p.clone(), 1.0
        for x in kids:
            target = p if entry.rule == "same-target-for-siblings" else pp
            if entry.rule == "accept-without-draw":
                a = 1.0 if target[x] >= q[x] else 0.0
            else:
                a = min(1.0, float(target[x] / q[x]))
            reach *= 1.0 - a
            r = (pp - q).clamp_min(0)
            pp = r / r.sum() if r.sum() > 0 else pp
        total += w * reach
    return total


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.chain], ids=lambda e: e.cls)
def test_the_rejection_probability_is_the_rate_the_decision_rejects_at(entry):
    """reject_prob(p, q) against the share of drafts x ~ q that the entry's own decide_chain
    rejects, over many seeded draws (4000 a row: 5 standard errors are at most 0.04); for the
    rejection rule it is 1 - sum min(p, q), for exact match 1 - sum p q, which differ here."""
    v = verification_of_entry(entry, PARAMS)
    g = torch.Generator().manual_seed(5)
    n = 4000
    for _ in range(2):
        p = normalised(torch.rand(5, generator=g, dtype=torch.float64) ** 3)
        q = normalised(torch.rand(5, generator=g, dtype=torch.float64) ** 3)
        want = float(v.reject_prob(p, q))
        drafts = torch.multinomial(q, n, replacement=True, generator=g)
        rejected = 0
        for x in drafts.tolist():
            verdict = v.decide_chain(
                torch.stack([p, p]), q[None], torch.tensor([x]), g, greedy=False
            )
            rejected += verdict.n_accepted == 0
        assert rejected / n == pytest.approx(want, abs=0.04), (entry.cls, want)
        if entry.key == ("rejection", "rejection"):
            assert want == pytest.approx(1.0 - float(torch.minimum(p, q).sum()), abs=1e-12)
        if entry.verification == "exact-match":
            assert want == pytest.approx(1.0 - float((p * q).sum()), abs=1e-12)
            overlap = float(torch.minimum(p, q).sum())
            assert abs(want - (1.0 - overlap)) > 0.05  # 1 - overlap would be wrong here


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.tree], ids=lambda e: e.rule)
@pytest.mark.parametrize("b", [1, 2, 3])
def test_the_rejection_probability_on_siblings_matches_the_enumerated_procedure(entry, b):
    v = verification_of_entry(entry, PARAMS)
    g = torch.Generator().manual_seed(10 + b)
    for _ in range(3):
        p = normalised(torch.rand(4, generator=g, dtype=torch.float64) ** 2)
        q = normalised(torch.rand(4, generator=g, dtype=torch.float64) ** 2)
        got = float(v.reject_prob_siblings(p, q, b))
        assert got == pytest.approx(sibling_reject(entry, p, q, b), abs=1e-12), (entry.rule, b)
        if b == 1:
            assert got == pytest.approx(float(v.reject_prob(p, q)), abs=1e-12)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.tree], ids=lambda e: e.rule)
def test_a_rounds_record_holds_the_rejection_probability_over_p_prime(entry):
    """A tree round's recorded path, built by specviz.record: at a node of b = 2 children the
    recorded rejection probability is that both are rejected (the enumeration above), not
    the first child's 1 - sum q a at p; at a node of one child it is the chain's."""
    from specviz.record import round_decisions
    from specviz.verify.verdict import Verdict

    v = verification_of_entry(entry, PARAMS)
    g = torch.Generator().manual_seed(3)
    p = normalised(torch.rand(3, 4, generator=g, dtype=torch.float64) ** 2).float()
    q = normalised(torch.rand(2, 4, generator=g, dtype=torch.float64) ** 2).float()
    drafts = [1, 2]
    ids = torch.tensor(drafts)
    p_x, q_x = p[torch.arange(2), ids], q[torch.arange(2), ids]
    verdict = Verdict(1, p_x, q_x, (p_x / q_x).clamp(max=1.0), p[1], u=torch.zeros(2))
    s = Settings(
        temperature=1.0,
        top_p=1.0,
        tree=(2, 1),
        verification=entry.verification,
        rule=entry.rule,
    )
    drafted, _ = round_decisions(s, str, drafts, p, q, verdict, 0, v, fan=[2, 1])
    pd, qd = p.double(), q.double()
    assert drafted[0].reject_prob == pytest.approx(sibling_reject(entry, pd[0], qd[0], 2), abs=1e-6)
    assert drafted[1].reject_prob == pytest.approx(float(v.reject_prob(pd[1], qd[1])), abs=1e-6)
    if entry.key == ("rejection", "rejection"):
        assert drafted[0].reject_prob != pytest.approx(1.0 - drafted[0].overlap, abs=1e-3)


POINTWISE = [e for e in ENTRIES if verification_of_entry(e, PARAMS).pointwise]


@pytest.mark.parametrize("entry", POINTWISE, ids=lambda e: f"{e.verification}-{e.rule}")
def test_a_pointwise_keep_probability_reads_p_and_q_at_x_alone(entry):
    """A verification that says its keep_prob is elementwise (a chain's decision then
    computes it at the drafts only) gives at each x what it gives over the whole rows,
    bit for bit, zeros in p and q included."""
    v = verification_of_entry(entry, PARAMS)
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(4, 9, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(3, 9, generator=g) * 3, -1)
    p[:, ::4], q[:, 1::4] = 0.0, 0.0
    for drafts in (torch.tensor([0, 1, 2]), torch.tensor([5, 4, 8]), torch.tensor([3, 7, 6])):
        idx = torch.arange(3)
        whole = v.keep_prob(p[:3], q)[idx, drafts]
        assert torch.equal(v.keep_prob(p[idx, drafts], q[idx, drafts]), whole)
