"""The verification rules as objects (specviz.verify): each one's exact output
distribution against a brute-force enumeration of its sampling process, TV(out, p) at
float error for the lossless rules on the real pair, the lossy rules failing the
distribution check where its power is computed to be high, and the "lossy" label in the
trace, the views and the command line."""

from __future__ import annotations

import json
from html import unescape

import pytest
import torch

from specviz import metrics
from specviz.analysis import check_power, distribution_check
from specviz.analysis.verifications import Row
from specviz.cli.main import main
from specviz.config import Settings, verification_label
from specviz.engine import generate, prompt_ids_for
from specviz.trace import Trace, decision_at
from specviz.verify import verification_for as rule_for
from specviz.verify.exact_match import ExactMatch
from specviz.verify.rejection import AcceptWithoutDraw, Rejection, ResampleFromP
from specviz.verify.top_k_match import TopKMatch
from specviz.verify.typical import Typical
from specviz.views import figures, markup
from tests.tiny import close_pair, tiny_pair

FORBIDDEN = "the text is distributed as the target's"


def rows(seed: int, vocab: int = 6, zeros: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 target row p and draft row q over a tiny vocabulary, with some tokens that
    p or q never emits."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
    q = torch.rand(vocab, generator=g, dtype=torch.float64) ** 2
    if zeros:
        p[seed % vocab] = 0.0
        q[(seed + 1) % vocab] = 0.0
    return p / p.sum(), q / q.sum()


# --- brute force: each rule's sampling process, enumerated -----------------------------------


def _emit(verdict, x: int, p_next: torch.Tensor) -> dict[int, float]:
    """What a one-draft round emits at the verified position, given its verdict: the
    accepted draft, or the distribution the engine draws the added token from."""
    if verdict.n_accepted == 1:
        return {x: 1.0}
    return {z: float(w) for z, w in enumerate(verdict.dist.tolist()) if w > 0}


RULES = {
    "rejection": Rejection(),
    "resample-from-p": ResampleFromP(),
    "accept-without-draw": AcceptWithoutDraw(),
}


def enumerate_rejection(p: torch.Tensor, q: torch.Tensor, rule: str) -> torch.Tensor:
    """Every x ~ q and every u in [0, 1), the latter by the intervals between the ratios
    p(x)/q(x) (the decision is constant inside each), through the rule's own decide."""
    out = torch.zeros_like(p)
    pp = torch.stack([p, p])  # row 1 would give the bonus: never reached with one draft
    cuts = sorted({0.0, 1.0, *[min(1.0, float(p[x] / q[x])) for x in range(len(p)) if q[x] > 0]})
    for x in range(len(p)):
        if q[x] == 0:
            continue
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            u = torch.tensor([(lo + hi) / 2], dtype=p.dtype)
            v = RULES[rule].decide(pp, q[None], torch.tensor([x]), u)
            # each rule by its definition: accept-without-draw keeps iff p >= q whatever u
            # is, the others iff u < p/q; resample-from-p replaces from p, the rest from
            # norm(max(0, p - q))
            ratio = float(p[x] / q[x])
            keeps = ratio >= 1.0 if rule == "accept-without-draw" else float(u) < ratio
            assert (v.n_accepted == 1) == keeps, (rule, x, float(u))
            if not keeps:
                want = p if rule == "resample-from-p" else (p - q).clamp_min(0)
                assert torch.allclose(v.dist, want / want.sum(), atol=1e-12), (rule, x)
            for z, w in _emit(v, x, p).items():
                out[z] += q[x] * (hi - lo) * w
    return out


def enumerate_exact_match(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Every x ~ q and every sample y ~ p of the target, through exact match's decide."""
    out = torch.zeros_like(p)
    pp = torch.stack([p, p])
    for x in range(len(p)):
        for y in range(len(p)):
            if q[x] == 0 or p[y] == 0:
                continue
            v = ExactMatch().decide(pp, q[None], torch.tensor([x]), torch.tensor([y, y]))
            emitted = x if v.n_accepted == 1 else int(v.samples[0])
            out[emitted] += q[x] * p[y]
    return out


def enumerate_kept(p: torch.Tensor, q: torch.Tensor, rule, keeps) -> torch.Tensor:
    """Every x ~ q through the rule's own decide, which must keep x exactly when the test
    keeps(p, x), written out from its definition, does; at a miss every sample of the target
    from the distribution the verdict hands the engine."""
    out = torch.zeros_like(p)
    pp = torch.stack([p, p])
    for x in range(len(p)):
        if q[x] == 0:
            continue
        v = rule.decide(pp, q[None], torch.tensor([x]), None)
        assert (v.n_accepted == 1) == keeps(p, x), (rule, x)
        for z, w in _emit(v, x, p).items():
            out[z] += q[x] * w
    return out


def typical_keeps(threshold: float, alpha: float):
    """The typical test written out from its definition, one token at a time."""

    def keeps(p: torch.Tensor, x: int) -> bool:
        h = -sum(float(v) * float(torch.log(v + 1e-5)) for v in p)
        return float(p[x]) > min(threshold, alpha * float(torch.exp(torch.tensor(-h))))

    return keeps


def top_k_keeps(k: int):
    """x among the k most likely tokens (ties with the k-th included) and p(x) > 0."""

    def keeps(p: torch.Tensor, x: int) -> bool:
        kth = sorted(p.tolist(), reverse=True)[k - 1]
        return float(p[x]) > 0 and float(p[x]) >= kth

    return keeps


@pytest.mark.parametrize("seed", range(6))
def test_out_matches_the_enumerated_process_for_every_rule(seed):
    p, q = rows(seed)
    cases = [
        (Rejection(), enumerate_rejection(p, q, "rejection")),
        (ResampleFromP(), enumerate_rejection(p, q, "resample-from-p")),
        (AcceptWithoutDraw(), enumerate_rejection(p, q, "accept-without-draw")),
        (ExactMatch(), enumerate_exact_match(p, q)),
        (Typical(0.09, 0.3), enumerate_kept(p, q, Typical(0.09, 0.3), typical_keeps(0.09, 0.3))),
        (Typical(0.3, 0.9), enumerate_kept(p, q, Typical(0.3, 0.9), typical_keeps(0.3, 0.9))),
        (TopKMatch(2), enumerate_kept(p, q, TopKMatch(2), top_k_keeps(2))),
        (TopKMatch(4), enumerate_kept(p, q, TopKMatch(4), top_k_keeps(4))),
    ]
    for rule, brute in cases:
        out = rule.out(p, q)
        assert out.dtype == torch.float64
        assert torch.allclose(out, brute, atol=1e-12), rule
        assert out.sum().item() == pytest.approx(1.0, abs=1e-12)
        tv = 0.5 * float((out - p).abs().sum())
        if rule.lossless:
            assert tv < 1e-12, rule


def test_the_wrong_and_lossy_rules_move_the_distribution_on_these_rows():
    """The enumeration above is not vacuous: on some of its rows each of these rules emits
    something other than p."""
    for rule in (ResampleFromP(), Typical(0.3, 0.9), TopKMatch(2)):
        tvs = [0.5 * float((rule.out(p, q) - p).abs().sum()) for p, q in map(rows, range(6))]
        assert max(tvs) > 0.01, rule


def test_top_k_match_never_keeps_a_token_p_never_emits():
    """Under top-p p has fewer than k tokens: a top-k over ties of zeros must not keep the
    others (they would be emitted with probability q > 0 where p is 0)."""
    p = torch.tensor([0.7, 0.3, 0.0, 0.0, 0.0], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2], dtype=torch.float64)
    rule = TopKMatch(4)
    assert rule.keep_prob(p, q).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert (rule.out(p, q)[2:] == 0).all()


def test_greedy_rows_make_every_rule_lossless():
    p = torch.tensor([0.0, 1.0, 0.0, 0.0])
    for q in (torch.tensor([0.0, 1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0, 0.0])):
        for rule in (Rejection(), ExactMatch(), Typical(0.09, 0.3), TopKMatch(3)):
            assert torch.equal(rule.out(p, q), p.double()), rule


def test_typical_bar_is_vllms():
    """min(threshold, alpha exp(-H)), H with vLLM's 1e-5 inside the logarithm."""
    p = torch.tensor([0.5, 0.25, 0.25])
    h = -float((p * torch.log(p + 1e-5)).sum())
    assert float(Typical(0.09, 0.3).bar(p)) == pytest.approx(
        min(0.09, 0.3 * float(torch.exp(torch.tensor(-h))))
    )
    assert float(Typical(0.9, 0.3).bar(p)) == pytest.approx(
        0.3 * float(torch.exp(torch.tensor(-h)))
    )


def test_rule_for_reads_the_settings():
    assert rule_for(Settings()) == Rejection()
    assert rule_for(Settings(rule="resample-from-p")) == ResampleFromP()
    assert rule_for(Settings(verification="exact-match")) == ExactMatch()
    typical = Settings(verification="typical", typical_threshold=0.2, typical_alpha=0.5)
    assert rule_for(typical) == Typical(0.2, 0.5)
    assert rule_for(Settings(verification="top-k-match", match_top_k=3)) == TopKMatch(3)
    assert [r.label for r in (Rejection(), ExactMatch(), Typical(0.09, 0.3), TopKMatch(10))] == [
        "rejection",
        "exact-match",
        "typical (lossy)",
        "top-k-match (lossy)",
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"typical_threshold": 0.0}, "typical_threshold must be in"),
        ({"typical_threshold": float("nan")}, "typical_threshold must be in"),
        ({"typical_alpha": -1.0}, "typical_alpha must be in"),
        ({"match_top_k": 0}, "match_top_k must be in"),
        ({"match_top_k": 2.5}, "match_top_k must be an integer"),
        ({"verification": "typical", "rule": "resample-from-p"}, "cannot be combined with typical"),
        ({"verification": "top-k-match", "rule": "accept-without-draw"}, "cannot be combined"),
    ],
)
def test_new_settings_are_validated(changes, message):
    with pytest.raises(ValueError, match=message) as exc:
        Settings(**changes)
    assert "\n" not in str(exc.value)


# --- the engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    return close_pair()


SAMPLED = Settings(gamma=3, temperature=1.0, top_p=1.0, max_new_tokens=24, match_top_k=3)


@pytest.mark.parametrize("verification", ["rejection", "exact-match", "typical", "top-k-match"])
def test_each_verified_draft_records_out_and_its_tv(pair, verification):
    t = generate(pair, "1 2 3", SAMPLED.with_(verification=verification), raw=True)
    lossy = verification in ("typical", "top-k-match")
    assert t.verification == verification_label(verification)
    tested = [d for r in t.rounds for d in r.verified]
    assert tested
    for r in t.rounds:
        for d in r.drafted:
            if d.status == "discarded":
                assert d.out_tv is None and all("out" not in e for e in d.top)
                continue
            assert d.out_tv is not None and d.kept_mass is not None
            assert all("out" in e for e in d.top)
            if not lossy:
                assert d.out_tv <= 1e-6
    s = t.stats
    assert s.mean_out_tv == pytest.approx(sum(d.out_tv for d in tested) / len(tested))
    assert s.max_out_tv == max(d.out_tv for d in tested)
    if lossy:
        assert s.max_out_tv > 0.01
        # a lossy rule's decisions are tests on p: kept iff a(x) = 1, and no u is drawn
        assert all(d.u is None and d.accept_prob in (0.0, 1.0) for d in tested)
        assert all((d.accept_prob == 1.0) == (d.status == "accepted") for d in tested)
    back = Trace.from_json(t.to_json())
    assert back.verification == t.verification and back.stats.max_out_tv == s.max_out_tv
    assert back.rounds[0].drafted[0].top == t.rounds[0].drafted[0].top


def test_old_traces_load_without_the_new_fields(pair):
    t = generate(pair, "1 2 3", SAMPLED, raw=True).to_dict()
    for key in ("verification", "logit_gaps"):
        t.pop(key)
    for key in ("mean_out_tv", "max_out_tv"):
        t["stats"].pop(key)
    for r in t["rounds"]:
        for d in r["drafted"]:
            d.pop("out_tv"), d.pop("kept_mass")
            for e in d["top"]:
                e.pop("out", None)
    back = Trace.from_dict(t)
    assert back.verification == "" and back.stats.mean_out_tv is None
    assert metrics.mean_out_tv(back) is None


def test_minimal_traces_do_not_measure_out(pair):
    t = generate(pair, "1 2 3", SAMPLED.with_(trace_level="minimal"), raw=True)
    assert t.stats.mean_out_tv is None and t.stats.max_out_tv is None


@pytest.mark.parametrize("verification", ["typical", "top-k-match"])
def test_greedy_lossy_verifications_equal_greedy_autoregressive(pair, verification):
    s = Settings(greedy=True, gamma=3, max_new_tokens=20, verification=verification)
    spec = generate(pair, "1 2 3", s, raw=True)
    ar = generate(pair, "1 2 3", s.with_(method="ar"), raw=True)
    assert spec.token_ids == ar.token_ids
    assert spec.stats.max_out_tv == 0.0


def test_the_engine_uses_the_rule_objects_keep_test(pair):
    """A kept draft passed the rule's own test on the recorded p; a missed one failed it."""
    s = SAMPLED.with_(verification="top-k-match", match_top_k=2, top_n=16)
    t = generate(pair, "1 2 3", s, raw=True)
    for d in (d for r in t.rounds for d in r.verified):
        kth = sorted((e["p"] for e in d.top), reverse=True)[1]
        assert (d.p >= kth and d.p > 0) == (d.status == "accepted")


# --- real rows --------------------------------------------------------------------------------


def test_lossless_rules_leave_p_unchanged_on_real_rows(offline_pair):
    """TV(out, p) at most 1e-6 for both lossless rules on the real pair's rows, with the
    draft at another temperature so that q is far from p."""
    s = Settings(temperature=1.0, draft_temperature=2.0, top_p=1.0, gamma=3, max_new_tokens=12)
    for verification in ("rejection", "exact-match"):
        t = generate(offline_pair, "The capital of France is", s.with_(verification=verification))
        assert t.stats.verified > 0
        assert t.stats.max_out_tv is not None and t.stats.max_out_tv <= 1e-6, verification


# --- the distribution check catches the lossy rules, where its power says it must ------------


CHECK_N = 400
POWER_SETTINGS = Settings(
    gamma=2, temperature=1.0, draft_temperature=2.0, top_p=1.0, max_new_tokens=2
)


@pytest.mark.parametrize(
    "changes", [{"verification": "typical"}, {"verification": "top-k-match", "match_top_k": 3}]
)
def test_each_lossy_rule_fails_the_check_with_computed_power(changes, one_thread):
    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=2)
    s = POWER_SETTINGS.with_(**changes)
    ids = prompt_ids_for(pair, "1 2", s)
    probs = distribution_check.TargetProbs(pair, ids, s.target_warp())
    p, out = distribution_check.first_token_out(pair, ids, s, probs)
    power = check_power.first_token_power(p, out, CHECK_N, distribution_check.SIGNIFICANCE)
    assert power >= 0.99, power
    r = distribution_check.run_check(pair, "1 2", s, n=CHECK_N, length=1)
    assert not r.passed, r.summary()
    assert r.predicted_tv == pytest.approx(check_power.total_variation(p, out))
    assert r.verifier == verification_label(s.verification)
    summary = r.summary()
    assert summary.startswith(f"FAIL: {r.verifier}") and "measured TV(spec, p)" in summary


def test_power_is_low_for_the_exact_rule_and_high_for_a_far_distribution():
    p = torch.tensor([0.5, 0.3, 0.2])
    assert check_power.first_token_power(p, p.double(), 400, 0.01) < 0.05
    far = torch.tensor([0.3, 0.3, 0.4])
    assert check_power.first_token_power(p, far, 400, 0.01) > 0.99
    impossible = torch.tensor([0.5, 0.5, 0.0, 0.0])
    assert (
        check_power.first_token_power(impossible, torch.tensor([0.5, 0.4, 0.0, 0.1]), 400, 0.01)
        > 0.99
    )


# --- views and command line --------------------------------------------------------------------


def test_inspector_draws_out_and_states_the_tv(pair):
    for verification, said in (
        ("rejection", "this decision leaves the target's distribution unchanged"),
        ("typical", "this decision moves TV = "),
    ):
        t = generate(pair, "1 2 3", SAMPLED.with_(verification=verification), raw=True)
        r = next(r for r in t.rounds if r.verified)
        dec = decision_at(t, r.index, r.start)
        html = unescape(markup.verdict_html(dec))
        assert said in html
        names = [tr.name for tr in figures.decision_figure(dec).data]
        assert any(n.startswith("out") for n in names)
        if verification == "typical":
            assert "typical (lossy)" in html and "residual" not in html
            assert "a(x)" in names
            note = unescape(markup.exact_note_html(t.settings))
            assert "typical (lossy)" in note and "distributed" not in note
            assert "TV(out, p)" in metrics.out_tv_row(t)[0]


@pytest.mark.parametrize("verification", ["typical", "top-k-match"])
def test_the_narration_tells_a_lossy_round_by_its_own_test(pair, verification):
    """A lossy round's narration names the verification's test on p and the target's own
    sample, never a u, greedy or the residual, which it does not use."""
    from specviz.views.narration import narrate_round, narration_html

    t = generate(pair, "1 2 3", SAMPLED.with_(verification=verification), raw=True)
    label = verification_label(verification)
    resampled = [r for r in t.rounds if r.added is not None and r.added.status == "resampled"]
    assert resampled and any(r.n_accepted for r in t.rounds)
    for r in t.rounds:
        said = " ".join(narrate_round(r, t.settings))
        assert "residual" not in said and "greedy" not in said and "u = " not in said
        assert said.count(label) >= len(r.verified)
        if r in resampled:
            assert f"{label} did not keep draft {r.n_accepted + 1}" in said
        assert unescape(narration_html(r, t.settings)).count(label) == said.count(label)
    # the rejection rule's narration is unchanged by the settings
    t = generate(pair, "1 2 3", SAMPLED, raw=True)
    assert all(narrate_round(r, t.settings) == narrate_round(r) for r in t.rounds)


def test_greedy_divergence_shows_the_logit_gap_in_both_runs(pair):
    s = Settings(greedy=True, gamma=3, max_new_tokens=10)
    spec = generate(pair, "1 2 3", s, raw=True)
    ar = generate(pair, "1 2 3", s.with_(method="ar"), raw=True)
    assert len(spec.logit_gaps) == len(spec.token_ids) and len(ar.logit_gaps) == len(ar.token_ids)
    assert spec.logit_gaps == pytest.approx(ar.logit_gaps, abs=1e-4)  # same rows, fp32
    assert metrics.greedy_divergence(spec, ar) is None
    ar.token_ids[4] += 1  # a flipped argmax at token 4
    div = metrics.greedy_divergence(spec, ar)
    assert div is not None and div.pos == 4
    assert div.spec_gap == spec.logit_gaps[4] and div.ar_gap == ar.logit_gaps[4]
    said = markup.greedy_check(spec, ar)
    assert "At token 4 the target's top-2 logit gap is" in said
    sampled = generate(pair, "1 2 3", Settings(max_new_tokens=6), raw=True)
    assert sampled.logit_gaps == []


@pytest.fixture
def cli_pair(pair, monkeypatch):
    for module in ("generate", "verifications"):
        monkeypatch.setattr(
            f"specviz.cli.{module}.load_pair_from_args", lambda args, compiled=True: pair
        )
    return pair


def test_generate_labels_a_lossy_verification(cli_pair, capsys):
    argv = ["generate", "--prompt", "1 2 3", "--raw", "--max-new-tokens", "16"]
    argv += ["--temperature", "1.0", "--verification", "top-k-match", "--match-top-k", "3"]
    assert main([*argv, "--json"]) == 0
    t = json.loads(capsys.readouterr().out)
    assert t["verification"] == "top-k-match (lossy)" and t["settings"]["match_top_k"] == 3
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "top-k-match (lossy)" in out and "TV(out, p)" in out and FORBIDDEN not in out.lower()
    assert main([*argv[:-2], "--match-top-k", "0"]) == 2
    assert "match_top_k must be in" in capsys.readouterr().err


def test_verifications_command_compares_every_verification(cli_pair, capsys):
    argv = ["verifications", "--prompt", "1 2 3", "--raw", "--max-new-tokens", "12", "--n", "200"]
    argv += ["--temperature", "1.0", "--draft-temperature", "2.0", "--top-p", "1.0"]
    argv += ["--match-top-k", "3"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    got = {r["verification"]: r for r in data["rows"]}
    assert list(got) == ["rejection", "exact-match", "typical", "top-k-match"]
    keys = {"verification", "lossy", "acceptance_rate", "tokens_per_call", "speedup"}
    keys |= {"mean_out_tv", "check_passed", "speedup_low", "speedup_high"}
    assert all(keys == set(r) for r in data["rows"])
    for name, r in got.items():
        assert r["lossy"] == (name in ("typical", "top-k-match"))
        assert r["tokens_per_call"] >= 1.0 and r["speedup"] > 0
        assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"]
        if r["lossy"]:
            assert r["mean_out_tv"] > 0.01
        else:
            assert r["mean_out_tv"] <= 1e-6 and r["check_passed"] is True
    fig = figures.verifications_figure([Row(**r) for r in data["rows"]])
    assert [tr.name for tr in fig.data][2:] == ["typical (lossy)", "top-k-match (lossy)"]
    assert main([*argv, "--no-check"]) == 0
    out = capsys.readouterr().out
    assert "typical (lossy)" in out and "top-k-match (lossy)" in out and "skipped" in out
    assert FORBIDDEN not in out.lower()


def test_check_names_the_lossy_verification(cli_pair, capsys, monkeypatch):
    from specviz.cli import check as check_cli

    monkeypatch.setattr(
        check_cli,
        "load_pair_from_args",
        lambda args: tiny_pair(vocab=8, target_seed=0, draft_seed=2),
    )
    argv = ["check", "--prompt", "1 2", "--n", "400", "--length", "1", "--gamma", "2"]
    argv += ["--temperature", "1.0", "--draft-temperature", "2.0", "--top-p", "1.0"]
    assert main([*argv, "--verification", "typical"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: typical (lossy)") and "measured TV(spec, p)" in out
    assert "moves the first token's distribution by TV = " in out


def test_the_app_compares_every_verification_and_stops_between_steps():
    """The Exactness tab's comparison: a progress bar, then one row per verification, each
    lossy name labelled, the lossless ones passing their check at TV 0; Stop ends it after
    the step in progress and leaves the model thread idle; a bad N is one clear error."""
    import threading

    from specviz import ui
    from specviz.config import Limits
    from specviz.modelthread import MODEL_THREAD
    from specviz.ui import verifications_tab

    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=2)
    ctx = ui.AppContext(lambda name, dtype: pair, Limits())
    f = ui.Form(prompt="1 2", pair="tiny", temperature=1.0, draft_temperature=2.0, top_p=1.0)
    f = ui.Form(**{**f.__dict__, "match_top_k": 3, "max_new_tokens": 8, "gamma": 2})
    updates = verifications_tab.compare_updates(ctx, f, 200, True)
    frames = []
    while True:
        try:
            frames.append(next(updates))
        except StopIteration as end:
            got = end.value
            break
    assert [r.verification for r in got] == ["rejection", "exact-match", "typical", "top-k-match"]
    assert any("<progress" in fr.get("verif_status", "") for fr in frames[:-1])
    table = frames[-1]["verif_table"]
    assert "typical (lossy)" in table and "top-k-match (lossy)" in table
    # tokens per target call leads; each speedup with its spread; what the timing can tell
    assert table.index("tokens/call") < table.index("acceptance") < table.index("speedup")
    for r in got:
        assert f"<td>{r.tokens_per_call:.2f}</td>" in table and r.speedup_text() in table
    assert "Tokens per target call, free of timing noise: " in unescape(table)
    assert FORBIDDEN not in unescape(table).lower() and "done: 4" in frames[-1]["verif_status"]
    for r in got:
        if not r.lossy:
            assert r.check_passed and r.mean_out_tv <= 1e-6
    assert [tr.name for tr in frames[-1]["verif_plot"].data][2:] == [
        "typical (lossy)",
        "top-k-match (lossy)",
    ]

    stop = threading.Event()
    updates = verifications_tab.compare_updates(ctx, f, 800, True, stop)
    frames = []
    while True:
        try:
            frames.append(next(updates))
        except StopIteration as end:
            got = end.value
            break
        if "samples" in frames[-1].get("verif_status", ""):
            stop.set()  # the first check is drawing: press Stop
    assert len(got) < 4 and "stopped after" in frames[-1]["verif_status"]
    assert MODEL_THREAD.idle()
    with pytest.raises(ValueError, match="samples must be in 200..800"):
        next(verifications_tab.compare_updates(ctx, f, 900, True))


def test_overlapping_speedups_are_said_to_be_indistinct():
    from specviz.analysis.verifications import indistinct, timing_sentence

    def row(name: str, tpc: float, value: float, low: float, high: float) -> Row:
        return Row(name, name in ("typical", "top-k-match"), 0.5, tpc, value, 0.0, None, low, high)

    # the lecturer's case: typical buys more tokens per call but times slower, within noise
    rows = [row("rejection", 3.84, 0.83, 0.70, 0.95), row("typical", 4.24, 0.71, 0.60, 0.85)]
    rows.append(row("exact-match", 3.10, 1.20, 1.10, 1.30))
    assert [(a.verification, b.verification) for a, b in indistinct(rows)] == [
        ("rejection", "typical")
    ]
    said = timing_sentence(rows)
    assert said.startswith("Tokens per target call, free of timing noise: typical (lossy) 4.24,")
    assert "cannot tell these apart" in said and "rejection and typical (lossy)" in said
    assert "exact-match and" not in said
    assert "clear of the others" in timing_sentence(rows[1:])
    assert rows[0].speedup_text() == "0.83x (0.70\u20130.95)"


def sparse_rows(seed: int, k: int, vocab: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """p [k+1, V] and q [k, V] as a warp leaves them: each row on a few tokens of its own
    (top-p or top-k cut the rest), one-hot rows and rows that share no token among them."""
    g = torch.Generator().manual_seed(seed)

    def row(width: int) -> torch.Tensor:
        r = torch.zeros(vocab)
        ids = torch.randperm(vocab, generator=g)[:width]
        r[ids] = torch.rand(width, generator=g) + 0.05
        return r / r.sum()

    widths = [1, 2, 3, 7, 12, vocab]
    pick = torch.randint(len(widths), (2 * k + 1,), generator=g).tolist()
    p = torch.stack([row(widths[i]) for i in pick[: k + 1]])
    q = torch.stack([row(widths[i]) for i in pick[k + 1 :]])
    return p, q


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"rule": "resample-from-p"},
        {"verification": "exact-match"},
        {"verification": "typical"},
        {"verification": "top-k-match", "match_top_k": 5},
        {"verification": "top-k-match", "match_top_k": 40},
    ],
)
def test_a_rounds_record_of_out_equals_the_whole_vocabulary_computation(seed, changes):
    """round_decisions works out out on the tokens p or q gives mass; TV(out, p), the
    kept mass and out in the top lists equal the same rule over the whole vocabulary."""
    from specviz.record import round_decisions
    from specviz.verify.verdict import Verdict

    k = 4
    p, q = sparse_rows(seed, k)
    drafts = [
        int(torch.multinomial(q[i], 1, generator=torch.Generator().manual_seed(i)))
        for i in range(k)
    ]
    s = Settings(temperature=1.0, top_p=1.0, top_n=6, **changes)
    rule = rule_for(s)
    for n in range(k + 1):
        ids = torch.tensor(drafts)
        p_x, q_x = p[torch.arange(k), ids], q[torch.arange(k), ids]
        a = (p_x / q_x).clamp(max=1.0)
        verdict = Verdict(n, p_x, q_x, a, p[n], u=torch.zeros(k))
        drafted, _ = round_decisions(s, str, drafts, p, q, verdict, 1, rule)
        m = min(n + 1, k)
        dense = rule.out(p[:m], q[:m])
        for i, d in enumerate(drafted[:m]):
            assert d.out_tv == pytest.approx(float(rule.out_tv(p[i], q[i])), abs=1e-12)
            assert d.kept_mass == pytest.approx(float(rule.kept_mass(p[i], q[i])), abs=1e-12)
            for entry in d.top:
                assert entry["out"] == pytest.approx(float(dense[i, entry["id"]]), abs=1e-12)
        assert all(d.out_tv is None and all("out" not in e for e in d.top) for d in drafted[m:])


@pytest.mark.parametrize("seed", range(6))
def test_a_rounds_top_lists_and_sums_equal_the_whole_vocabulary_s(seed):
    """round_decisions reads the top lists, the overlaps and exact match's sums off the
    tokens p or q gives mass: they equal the whole vocabulary's, the lists ordered by
    max(p, q) with equal scores (a 16-bit draft gives many) by lower id, each drafted token
    listed, and the added token's list by max(p, residual) alike."""
    from specviz.record import round_decisions
    from specviz.verify.verdict import Verdict

    k, top_n = 4, 5
    p, q = sparse_rows(seed, k)
    q[1] = torch.where(q[1] > 0, q[1].max(), 0.0)  # one row of equal probabilities
    q[1] = q[1] / q[1].sum()
    drafts = [int(torch.nonzero(q[i])[-1]) for i in range(k)]  # the last listed, if at all
    s = Settings(temperature=1.0, top_p=1.0, top_n=top_n)
    rule = rule_for(s)
    ids = torch.tensor(drafts)
    p_x, q_x = p[torch.arange(k), ids], q[torch.arange(k), ids]
    verdict = Verdict(1, p_x, q_x, (p_x / q_x).clamp(max=1.0), p[1], u=torch.zeros(k))
    drafted, added = round_decisions(s, str, drafts, p, q, verdict, 7, rule)

    def whole(score, first, second, chosen):
        order = sorted(range(score.numel()), key=lambda t: (-float(score[t]), t))[:top_n]
        listed = [t for t in order if first[t] > 0 or second[t] > 0 or t == chosen]
        if chosen not in listed:
            listed.append(chosen)
        return [(t, float(first[t]), float(second[t])) for t in listed]

    for i, d in enumerate(drafted):
        want = whole(torch.maximum(p[i], q[i]), p[i], q[i], drafts[i])
        assert [(e["id"], e["p"], e["q"]) for e in d.top] == want
        assert d.overlap == pytest.approx(float(torch.minimum(p[i], q[i]).double().sum()), abs=1e-6)
        assert d.match_prob == pytest.approx(float((p[i] * q[i]).double().sum()), abs=1e-6)
    assert added is not None
    dist = verdict.dist
    want = whole(torch.maximum(p[1], dist), p[1], dist, 7)
    assert [(e["id"], e["p"], e["residual"]) for e in added.top] == want
