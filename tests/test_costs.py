"""Where a round's time goes (specviz.costs), the refined prediction, the guard's sentence,
and the offline draft chosen by measurement (specviz.backend.draft_choice)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from specviz import costs, metrics
from specviz.backend import draft_choice
from specviz.config import Limits, Settings
from tests.tiny import tiny_model, tiny_pair

# --- the refined formula ---------------------------------------------------------------


def test_refined_speedup_against_hand_computed_values():
    # alpha 0.8, gamma 4: E = (1 - 0.8^5) / 0.2 = 3.3616
    assert metrics.expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616)
    # v = 1, o = o_ar = 0 is Leviathan's formula: 3.3616 / (4 * 0.25 + 1) = 1.6808
    assert metrics.refined_speedup(0.8, 4, 0.25, 1.0) == pytest.approx(1.6808)
    assert metrics.refined_speedup(0.8, 4, 0.25, 1.0) == pytest.approx(
        metrics.expected_speedup(0.8, 4, 0.25)
    )
    # a verify call of 1.5 steps and 0.1 steps of overhead: 3.3616 / (1 + 1.5 + 0.1)
    assert metrics.refined_speedup(0.8, 4, 0.25, 1.5, 0.1) == pytest.approx(1.292923, rel=1e-5)
    # the baseline's own overhead of 0.05 steps per token scales the AR side
    assert metrics.refined_speedup(0.8, 4, 0.25, 1.5, 0.1, 0.05) == pytest.approx(
        1.292923 * 1.05, rel=1e-5
    )
    # alpha 1: every draft accepted, gamma + 1 tokens per round: 5 / (4 * 0.5 + 2) = 1.25
    assert metrics.refined_speedup(1.0, 4, 0.5, 2.0) == pytest.approx(1.25)
    # ... and every round opens with the draft's two-token call: 5 / (3 * 0.5 + 0.9 + 2)
    assert metrics.refined_speedup(1.0, 4, 0.5, 2.0, c2=0.9) == pytest.approx(5 / 4.4)
    # at alpha 0.8 that call comes after a full accept only: 0.8^4 = 0.4096 of the rounds
    d = 4 * 0.25 + 0.4096 * (0.4 - 0.25)
    assert metrics.refined_speedup(0.8, 4, 0.25, 1.5, c2=0.4) == pytest.approx(3.3616 / (d + 1.5))


def step_costs(**changes) -> costs.StepCosts:
    base = {
        "device": "cpu",
        "threads": 2,
        "draft_variant": "bf16",
        "target_step_ms": 40.0,
        "draft_step_ms": 10.0,
        "draft_step2_ms": 16.0,
        "verify": [costs.VerifyCost(3, 60.0, 1.5), costs.VerifyCost(5, 80.0, 2.0)],
        "overhead_ms_per_round": 4.0,
        "overhead_ms_by_gamma": {2: 4.0, 4: 6.0},
        "ar_overhead_ms_per_token": 2.0,
    }
    return costs.StepCosts(**(base | changes))


def test_step_costs_interpolate_verify_and_fit_the_overhead():
    sc = step_costs()
    assert sc.c == pytest.approx(0.25)
    assert sc.verify_steps(1) == 1.0  # one step by definition
    assert sc.verify_steps(3) == pytest.approx(1.5)
    assert sc.verify_steps(4) == pytest.approx(1.75)  # between the measured widths
    assert sc.verify_steps(7) == pytest.approx(2.5)  # beyond: the last segment extended
    assert sc.overhead_steps(4) == pytest.approx(6.0 / 40)
    assert sc.overhead_steps(3) == pytest.approx(5.0 / 40)  # the fitted line
    # the prediction is the refined formula at those values
    want = metrics.refined_speedup(0.8, 4, 0.25, 2.0, 6.0 / 40, 2.0 / 40, 0.4)
    assert sc.predicted(0.8, 4) == pytest.approx(want)
    g, best = sc.best(0.8, range(1, 9))
    assert best == max(sc.predicted(0.8, k) for k in range(1, 9)) and sc.predicted(0.8, g) == best


def test_step_costs_round_trip_through_json():
    sc = step_costs()
    back = costs.StepCosts.from_dict(json.loads(json.dumps(sc.to_dict())))
    assert back == sc


# --- the guard ---------------------------------------------------------------------------


def test_the_guard_speaks_when_no_gamma_can_win():
    # the AVX2 machine: c 1.9 at alpha 0.96
    text = costs.guard_sentence(0.96, 1.9)
    assert text is not None and "\n" not in text
    assert "c = 1.90" in text and "alpha = 0.96" in text
    best = max(metrics.expected_speedup(0.96, g, 1.9) for g in metrics.GAMMAS)
    assert f"{best:.2f}x" in text and "gamma 1" in text
    assert "cannot beat plain decoding" in text


def test_the_guard_is_silent_when_a_gamma_wins():
    assert costs.guard_sentence(0.96, 0.3) is None
    assert costs.guard_sentence(None, 1.9) is None  # alpha not measured: nothing to say


def test_the_guard_uses_measured_verify_costs():
    # Leviathan's formula says 1.2x here, but a verify call of 2 steps makes every gamma lose
    assert costs.guard_sentence(0.5, 0.2) is None
    steps = {1: 1.0, **{w: 2.0 for w in range(2, 10)}}
    text = costs.guard_sentence(0.5, 0.2, steps)
    assert text is not None and "measured step and verify costs" in text


# --- costs measured on tiny models --------------------------------------------------------


def test_costs_json_schema(one_thread):
    pair = tiny_pair(vocab=32)
    s = Settings(temperature=1.0, top_p=1.0)
    sc = costs.measure_costs(pair, s, gammas=(1, 3), prompt="1 2 3 4", reps=3, tokens=12)
    d = json.loads(json.dumps(sc.to_dict()))
    required = {
        "device": str,
        "threads": int,
        "target_step_ms": float,
        "draft_step_ms": float,
        "c": float,
        "verify": list,
        "overhead_ms_per_round": float,
    }
    for key, kind in required.items():
        assert isinstance(d[key], kind), key
    assert "draft_variant" in d
    assert [v["width"] for v in d["verify"]] == [2, 4]
    for v in d["verify"]:
        assert set(v) == {"width", "ms", "steps"} and v["ms"] > 0
        assert v["steps"] == pytest.approx(v["ms"] / d["target_step_ms"])
    assert d["c"] == pytest.approx(d["draft_step_ms"] / d["target_step_ms"])
    assert set(d["overhead_ms_by_gamma"]) == {"1", "3"}
    assert 0.0 <= d["alpha"] <= 1.0


class BusyLM:
    """A model call of a fixed cost that a spell of other work on the machine, calls
    spell[0] to spell[1] of all the models' calls, makes three times dearer."""

    def __init__(self, ms: float, calls: list[int], spell: tuple[int, int]) -> None:
        self.ms, self.calls, self.spell, self.busy_s = ms, calls, spell, 0.0

    def logits(self, seq, keep=1):
        n = self.calls[0] = self.calls[0] + 1
        self.busy_s += self.ms * (3 if self.spell[0] <= n < self.spell[1] else 1) / 1e3

    def rollback(self, seq):
        pass


def test_a_spell_of_other_work_falls_on_every_model_timed_together():
    reps = 9

    def timers(spell):
        calls = [0]
        return [costs.Timer(BusyLM(ms, calls, spell), [1, 2, 3]) for ms in (10.0, 4.0)]

    # calls 1 and 2 are the prefills; timed one model after the other, calls 3 to 12 are the
    # first model's warm-up and repetitions, 13 to 22 the second's. A spell of 7 calls in the
    # second's falls on most of its repetitions, and it looks dearer than the first.
    spell = (14, 21)
    target, draft = timers(spell)
    apart = target.medians([1], reps, warmup=1)[1], draft.medians([1], reps, warmup=1)[1]
    assert apart[1] / apart[0] == pytest.approx(1.2)  # 12 ms against 10: c of 1.2
    target, draft = timers(spell)
    timed = costs.interleaved_medians({"t": (target, [1]), "d": (draft, [1])}, reps, warmup=1)
    assert timed["t"][1] == pytest.approx(10.0)
    assert timed["d"][1] == pytest.approx(4.0)  # c of 0.4, as without the spell


def test_costs_refuses_a_pair_without_a_draft():
    import dataclasses

    pair = dataclasses.replace(tiny_pair(vocab=32), draft=None)
    with pytest.raises(ValueError, match="no draft model"):
        costs.measure_costs(pair, Settings(), gammas=(1,), prompt="1 2")


# --- the offline draft chosen by measurement ----------------------------------------------


def cand(variant: str, step_ms: float, alpha: float | None, step2_ms: float | None = None):
    v = {w: 1.0 + 0.1 * (w - 1) for w in range(1, 10)}
    return draft_choice.candidate(variant, step_ms, step2_ms or step_ms, alpha, 40.0, v)


def test_a_faster_step_loses_to_a_better_alpha():
    fast = cand("w8-bf16", 10.0, 0.5)  # c 0.25
    close = cand("fp16", 14.0, 0.99)  # c 0.35
    assert fast.step_ms < close.step_ms
    assert draft_choice.choose([fast, close]) is close
    assert close.predicted > fast.predicted
    # each is also judged at its own best gamma
    assert close.gamma > fast.gamma and close.predicted_best >= close.predicted


def test_a_dear_two_token_call_counts_against_a_draft():
    # alike on one token and in alpha, but one pays 2x for the call after a full accept
    cheap = cand("w8-bf16", 12.0, 0.98, step2_ms=12.5)
    dear = cand("fp16", 11.0, 0.98, step2_ms=24.0)
    assert dear.step_ms < cheap.step_ms
    assert draft_choice.choose([dear, cheap]) is cheap
    want = metrics.refined_speedup(0.98, 4, 12.0 / 40, 1.4, c2=12.5 / 40)
    assert cheap.predicted == pytest.approx(want)


def test_a_draft_as_slow_as_the_target_is_never_measured_for_alpha():
    slow = cand("w8-fp32", 60.0, None)  # c 1.5
    assert slow.predicted < 1.0 and slow.predicted_best < 1.0  # the bound at alpha 1 loses
    assert draft_choice.choose([slow, cand("bf16", 20.0, 0.9)]).variant == "bf16"


def _eager_choice(*cands) -> draft_choice.DraftChoice:
    v = {w: 1.0 + 0.1 * (w - 1) for w in range(1, 10)}
    return draft_choice.DraftChoice(
        variant=draft_choice.choose(list(cands)).variant,
        forced=False,
        candidates=list(cands),
        target_step_ms=40.0,
        verify_steps=v,
        machine={},
        measured_s=1.0,
    )


def test_the_choice_on_the_compiled_path_ranks_by_what_runs_there():
    """Eagerly the fp16 copy wins; compiled ahead of time the int8 draft's step falls to a
    third and the fp16 copy's does not, so the packaged ranking takes w8-bf16. A shortlisted
    draft without packages is timed eager beside the packaged target, and a candidate
    outside the shortlist is ranked by its eager step against the packaged target; the
    record keeps both timings and which path decided, and reads back the same."""
    eager = _eager_choice(
        cand("fp16", 14.0, 0.99),
        cand("w8-bf16", 16.0, 0.96),
        cand("w4-bf16", 15.0, 0.87),
        cand("bf16", 30.0, 0.98),
        cand("w8-fp32", 60.0, None),
    )
    assert eager.variant == "fp16" and eager.decided_by == "eager"
    assert draft_choice.shortlist(eager) == ["fp16", "w8-bf16", "w4-bf16"][: draft_choice.SHORTLIST]
    timed = {
        "target": {1: 20.0, 5: 25.0},
        "fp16": {1: 9.0, 2: 10.0},
        "w8-bf16": {1: 5.0, 2: 6.0},
        "w4-bf16": {1: 15.0, 2: 16.0},  # eager: its packages failed
    }
    whys = {"fp16": None, "w8-bf16": None, "w4-bf16": "its build failed (Refused: x)"}
    said: list[str] = []
    got = draft_choice.rerank(eager, timed, whys, said.append)
    assert got.variant == "w8-bf16" and got.decided_by == "packaged"
    assert got.packaged_target_ms == 20.0 and got.packaged_verify_steps == 1.25
    by = {c.variant: c for c in got.candidates}
    g = draft_choice.judge_gamma()
    want = metrics.refined_speedup(0.96, g, 5.0 / 20, 1.25, c2=6.0 / 20)
    assert by["w8-bf16"].packaged_predicted == pytest.approx(want)
    assert by["w8-bf16"].packaged_step_ms == 5.0 and by["w8-bf16"].packaged_why is None
    assert by["w4-bf16"].packaged_step_ms is None and "Refused" in by["w4-bf16"].packaged_why
    # bf16, not shortlisted: its eager 30 ms step against the packaged 20 ms target
    assert by["bf16"].packaged_predicted == pytest.approx(
        metrics.refined_speedup(0.98, g, 1.5, 1.25, c2=1.5)
    )
    assert by["w8-fp32"].packaged_predicted is None  # c >= 1: never a candidate
    assert len(said) == 3 and any("eager beside the packaged target" in x for x in said)
    assert "of the compiled path: c 0.25" in got.summary()
    again = draft_choice.DraftChoice.from_dict(json.loads(json.dumps(got.to_dict())))
    assert again == got
    # a record from before the packaged fields existed still reads (decided eagerly)
    old = eager.to_dict()
    for c in old["candidates"]:
        for k in ("packaged_step_ms", "packaged_step2_ms", "packaged_predicted", "packaged_why"):
            c.pop(k)
    for k in ("decided_by", "packaged_target_ms", "packaged_verify_steps"):
        old.pop(k)
    assert draft_choice.DraftChoice.from_dict(old).decided_by == "eager"


def test_the_choice_is_keyed_by_the_settings_it_was_judged_at(monkeypatch):
    """The judge's gamma is the default settings' gamma, not a second literal, and the
    record's key holds the settings judged at: a changed default finds no record."""
    from specviz.config import Settings

    assert draft_choice.judge_gamma() == Settings().gamma
    cpu = torch.device("cpu")
    key = draft_choice.machine_key(cpu)
    assert key["judged_at"]["gamma"] == Settings().gamma
    monkeypatch.setattr(
        draft_choice, "judged_at", lambda: {"gamma": 7, "warp": [], "draft_warp": []}
    )
    assert draft_choice.machine_key(cpu) != key and draft_choice.judge_gamma() == 7


class TinyTok:
    """A tokenizer stand-in for the tiny model: the alpha text is ids 1..24."""

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [1 + i % 30 for i in range(24)]}

    def __len__(self) -> int:
        return 32


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    # the kernel library the set-up step built (the same sources, flags and torch: the same
    # file name), so that the set-up runs here find it as they would on this machine rather
    # than compile it again (about 20 s; tests/test_kernels.py tests its build)
    from specviz.backend import kernels

    library = kernels.library_path()
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    if library.is_file():
        kernels.library_path().parent.mkdir(parents=True)
        shutil.copy2(library, kernels.library_path())
    monkeypatch.delenv(draft_choice.ENV, raising=False)
    # a tiny network's copies are no cheaper than itself: keep its choice all the same
    monkeypatch.setattr(draft_choice, "MIN_KEPT_PREDICTION", 0.0)
    monkeypatch.setattr(draft_choice, "_made_here", {})  # a fresh process's
    return tmp_path


def test_a_choice_that_predicts_no_speedup_is_not_kept(cache, base, monkeypatch, one_thread):
    """Not saved: the rest of this process runs the same choice (read without measuring,
    so the set-up's printed choice is the one its packages are built for), and the next
    process measures again."""
    calls = measured(monkeypatch)
    monkeypatch.setattr(draft_choice, "MIN_KEPT_PREDICTION", 1e9)  # nothing reaches it
    _, first = draft_choice.offline_draft(base, TinyTok(), torch.device("cpu"))
    assert not draft_choice.record_path().exists()
    _, again = draft_choice.offline_draft(base, TinyTok(), torch.device("cpu"))
    assert len(calls) == 1 and again.variant == first.variant
    monkeypatch.setattr(draft_choice, "_made_here", {})  # the next process
    draft_choice.offline_draft(base, TinyTok(), torch.device("cpu"))
    assert len(calls) == 2  # measured again on the next load


@pytest.fixture(scope="module")
def base():
    return tiny_model(32, seed=1, hidden_size=64, intermediate_size=128).eval()


def measured(monkeypatch) -> list[tuple[str, ...]]:
    """Record each measurement's variants (and let it run for real)."""
    calls: list[tuple[str, ...]] = []
    real = draft_choice.measure

    def spy(base, tok, device, variants=draft_choice.VARIANTS, **kw):
        calls.append(tuple(variants))
        return real(base, tok, device, variants, reps=3, **kw)

    monkeypatch.setattr(draft_choice, "measure", spy)
    return calls


def test_the_choice_is_measured_once_then_read_from_the_cache(cache, base, monkeypatch, one_thread):
    calls = measured(monkeypatch)
    cpu = torch.device("cpu")
    model, choice = draft_choice.offline_draft(base, TinyTok(), cpu)
    assert calls == [draft_choice.VARIANTS]
    assert choice.variant in draft_choice.VARIANTS and not choice.forced
    assert {c.variant for c in choice.candidates} == set(draft_choice.VARIANTS)
    assert choice.chosen.predicted == max(c.predicted for c in choice.candidates)
    assert choice.machine == draft_choice.machine_key(cpu)
    assert sorted(choice.verify_steps) == list(range(1, 10))
    _, again = draft_choice.offline_draft(base, TinyTok(), cpu)
    assert calls == [draft_choice.VARIANTS]  # not measured again
    assert again.variant == choice.variant and again.candidates == choice.candidates
    # remeasure forces a new measurement
    draft_choice.offline_draft(base, TinyTok(), cpu, remeasure=True)
    assert len(calls) == 2


def test_the_target_and_the_variants_are_timed_together(base, monkeypatch, one_thread):
    plans: list[dict[str, list[int]]] = []
    real = costs.interleaved_times

    def spy(plan, reps, warmup=2):
        plans.append({name: sorted(ws) for name, (_, ws) in plan.items()})
        return real(plan, reps, warmup)

    monkeypatch.setattr(costs, "interleaved_times", spy)
    # forced: no variant is left out as slower than the target (a tiny network's copies
    # are no cheaper than itself)
    variants = ("w8-bf16", "bf16")
    cpu = torch.device("cpu")
    choice, built = draft_choice.measure(base, TinyTok(), cpu, variants, forced=True, reps=3)
    assert set(built) == set(variants)
    together = [p for p in plans if "target" in p]
    assert together == [  # each variant's first look on a short context, then the full timing
        {"target": [1], "w8-bf16": [1, 2]},
        {"target": [1], "bf16": [1, 2]},
        {"target": list(range(1, 10)), "w8-bf16": [1, 2], "bf16": [1, 2]},
    ]
    for c in choice.candidates:
        assert c.c == pytest.approx(c.step_ms / choice.target_step_ms)


def test_another_machines_record_is_ignored(cache, base, monkeypatch, one_thread):
    calls = measured(monkeypatch)
    cpu = torch.device("cpu")
    _, choice = draft_choice.offline_draft(base, TinyTok(), cpu)
    other = dict(choice.machine, cpu="Another CPU", flags=["avx2"])
    assert draft_choice.load_record(other) is None
    monkeypatch.setattr(draft_choice, "machine_key", lambda device: other)
    draft_choice.offline_draft(base, TinyTok(), cpu)
    assert len(calls) == 2  # measured again on "another machine"
    # both machines' records are kept, each under its own key
    data = json.loads(draft_choice.record_path().read_text())
    assert len(data["records"]) == 2


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"format": 1, "records": {"x": 1}}), json.dumps({"format": 99})],
)
def test_a_corrupt_or_stale_record_is_measured_again(cache, base, monkeypatch, one_thread, content):
    calls = measured(monkeypatch)
    cpu = torch.device("cpu")
    _, choice = draft_choice.offline_draft(base, TinyTok(), cpu)
    path = draft_choice.record_path()
    key = draft_choice._key_id(choice.machine)
    if content.startswith('{"format": 1'):  # this machine's entry itself is corrupt
        content = json.dumps({"format": 1, "records": {key: {"variant": "bf16"}}})
    path.write_text(content)
    _, again = draft_choice.offline_draft(base, TinyTok(), cpu)
    assert len(calls) == 2
    assert draft_choice.load_record(choice.machine) is not None  # rewritten whole


def test_forcing_a_variant(cache, base, monkeypatch, one_thread):
    calls = measured(monkeypatch)
    monkeypatch.setenv(draft_choice.ENV, "w8-fp32")
    model, choice = draft_choice.offline_draft(base, TinyTok(), torch.device("cpu"))
    assert calls == [("w8-fp32",)]
    assert choice.variant == "w8-fp32" and choice.forced
    assert choice.chosen.alpha is not None  # measured even though it may be slow
    assert "forced by SPECVIZ_OFFLINE_DRAFT" in choice.summary()
    assert not draft_choice.record_path().exists()  # one variant measured: no record
    assert any(type(m).__name__ == "Int8WeightLinear" for m in model.modules())


def test_forcing_reads_a_full_record(cache, base, monkeypatch, one_thread):
    calls = measured(monkeypatch)
    cpu = torch.device("cpu")
    _, first = draft_choice.offline_draft(base, TinyTok(), cpu)
    rec = draft_choice.load_record(first.machine)  # bf16 measured whole (alpha known)
    rec.candidates = [
        dataclasses.replace(c, alpha=0.9) if c.variant == "bf16" else c for c in rec.candidates
    ]
    draft_choice.save_record(rec)
    monkeypatch.setenv(draft_choice.ENV, "bf16")
    model, choice = draft_choice.offline_draft(base, TinyTok(), cpu)
    assert len(calls) == 1 and choice.variant == "bf16" and choice.forced
    assert choice.chosen.alpha == 0.9  # read from the record
    assert next(model.parameters()).dtype == torch.bfloat16


def test_forcing_a_variant_the_record_only_glanced_at_measures_it(
    cache, base, monkeypatch, one_thread
):
    calls = measured(monkeypatch)
    cpu = torch.device("cpu")
    _, choice = draft_choice.offline_draft(base, TinyTok(), cpu)
    rec = draft_choice.load_record(choice.machine)
    rec.candidates = [
        dataclasses.replace(c, alpha=None) if c.variant == "bf16" else c for c in rec.candidates
    ]
    draft_choice.save_record(rec)
    monkeypatch.setenv(draft_choice.ENV, "bf16")
    _, forced = draft_choice.offline_draft(base, TinyTok(), cpu)
    assert calls[-1] == ("bf16",) and forced.chosen.alpha is not None


def test_an_unknown_variant_is_refused(monkeypatch):
    monkeypatch.setenv(draft_choice.ENV, "int4")
    with pytest.raises(ValueError, match="SPECVIZ_OFFLINE_DRAFT must be auto or one of"):
        draft_choice.requested()
    monkeypatch.setenv(draft_choice.ENV, "auto")
    assert draft_choice.requested() == "auto"


def test_an_unknown_variant_is_one_line_and_exit_2_in_the_cli(monkeypatch, capsys):
    from specviz.cli.main import main

    monkeypatch.setenv(draft_choice.ENV, "int4")
    assert main(["generate", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SPECVIZ_OFFLINE_DRAFT" in err


def test_every_variant_builds_and_leaves_the_target_alone(base):
    before = {k: v.clone() for k, v in base.state_dict().items()}
    x = torch.tensor([[1, 2, 3]])
    for v in draft_choice.VARIANTS:
        m = draft_choice.build(base, v)
        with torch.inference_mode():
            assert m(input_ids=x).logits.shape == (1, 3, 32)
        assert draft_choice.describe_variant(v)
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k])


def test_the_theory_figure_draws_the_refined_curve_below_leviathans():
    from specviz.views import theory_figures

    steps = {w: 1.0 + 0.12 * (w - 1) for w in range(1, 10)}
    fig = theory_figures.theory_figure(0.8, 0.2, 4, 1.5, steps)
    lev = next(t for t in fig.data if t.name == "expected (Leviathan)")
    ref = next(t for t in fig.data if t.name.startswith("refined"))
    assert list(ref.x) == list(range(1, 9))
    for g, y in zip(ref.x, ref.y, strict=True):
        assert y == pytest.approx(metrics.refined_speedup(0.8, g, 0.2, steps[g + 1]))
        assert y < lev.y[g - 1]
    assert len(theory_figures.theory_figure(0.8, 0.2, 4, 1.5).data) == len(fig.data) - 1


def slow_draft_pair():
    """A tiny target drafted by a much larger network: every draft step costs more than a
    target step, so no gamma can win."""
    from specviz.pair import LoadedModel

    pair = tiny_pair(vocab=32)
    big = tiny_model(32, seed=3, layers=6, hidden_size=256, intermediate_size=1024)
    import dataclasses

    draft = LoadedModel("tiny-big-draft", big, torch.device("cpu"), "float32", 32, 0.0, "test")
    return dataclasses.replace(pair, draft=draft)


def test_verify_steps_are_measured_from_a_compared_run(one_thread):
    from specviz.engine import generate

    pair = tiny_pair(vocab=32)
    s = Settings(gamma=3, max_new_tokens=24, temperature=1.0, top_p=1.0)
    spec = generate(pair.without_eos(), "1 2 3", s)
    ar = generate(pair.without_eos(), "1 2 3", s.with_(method="ar"))
    steps = metrics.verify_steps(spec, ar)
    assert steps is not None and set(steps) == {1, 4} and steps[1] == 1.0 and steps[4] > 0


def test_generate_compare_prints_the_guard_when_the_draft_is_too_slow(monkeypatch, capsys):
    from specviz.cli import generate
    from specviz.cli import main as cli

    pair = slow_draft_pair()
    monkeypatch.setattr(generate, "load_pair_from_args", lambda args, compiled=True: pair)
    code = cli.main(
        ["generate", "--prompt", "1 2 3", "--compare", "--max-new-tokens", "24", "--raw"]
    )
    out = capsys.readouterr().out
    assert code == 0
    guard = [line for line in out.splitlines() if "slower than plain decoding" in line]
    assert len(guard) == 1 and "c = " in guard[0] and "alpha = " in guard[0]
    assert "No gamma is predicted to beat plain decoding" in guard[0]
    head = out.splitlines()[:2]  # the header names both models
    assert head[0].startswith("target: tiny-target") and head[1].startswith("draft: tiny-big")


def test_the_page_states_the_guard_in_the_status_and_the_speed_tab(one_thread):
    from specviz import ui

    pair = slow_draft_pair()
    f = ui.Form(prompt="1 2 3", pair="tiny", max_new_tokens=24, gamma=3)
    ctx = ui.AppContext(lambda name, dtype: pair, Limits())
    frames = list(ui.run_updates(ui.new_session(), f, ctx))
    final = frames[-1]
    said = "No gamma is predicted to beat plain decoding"
    assert said in final["status"] and "sv-status-warn" in final["status"]
    assert said in final["table1"] and "sv-speedline-warn" in final["speedline"]


def test_setup_reads_a_recorded_choice_without_loading_a_model(
    cache, base, monkeypatch, one_thread
):
    """`python -m specviz prepare` (every set-up run) with this machine's record: the record,
    and no model loaded; without one it loads the base network, measures, and on a CPU with
    packages on ranks the shortlist on the compiled path once (a record decided there is
    not ranked again); with packages off, the eager record stands."""
    from specviz import models

    loads: list[str] = []
    ranks: list[str] = []
    monkeypatch.setattr(
        models, "_get_model", lambda name, *a: loads.append(name) or SimpleNamespace(model=base)
    )
    monkeypatch.setattr(models, "_get_tokenizer", lambda name: TinyTok())
    monkeypatch.setattr(models, "default_cache_len", lambda tok: 256)

    def rank(choice, *a, **k):
        ranks.append(choice.variant)
        return dataclasses.replace(choice, decided_by="packaged")

    monkeypatch.setattr(draft_choice, "rank_packaged", rank)
    calls = measured(monkeypatch)
    first = models.prepare_offline_pair("cpu")
    assert loads == [models.OFFLINE_TARGET] and calls == [draft_choice.VARIANTS]
    assert len(ranks) == 1 and first.decided_by == "packaged"
    again = models.prepare_offline_pair("cpu")
    assert loads == [models.OFFLINE_TARGET] and len(calls) == 1  # read, nothing loaded
    assert again.variant == first.variant and again.candidates == first.candidates
    assert len(ranks) == 1 and again.decided_by == "packaged"
    models.prepare_offline_pair("cpu", remeasure=True)
    assert len(loads) == 2 and len(calls) == 2 and len(ranks) == 2
    # a choice made on the compiled path is saved whatever it predicts: a second set-up
    # measures nothing
    monkeypatch.setattr(draft_choice, "MIN_KEPT_PREDICTION", 1e9)
    said: list[str] = []
    models.prepare_offline_pair("cpu", remeasure=True, say=said.append)
    assert len(ranks) == 3 and any("--remeasure" in line for line in said)
    again = models.prepare_offline_pair("cpu")
    assert len(ranks) == 3 and len(calls) == 3 and again.decided_by == "packaged"
    monkeypatch.setenv("SPECVIZ_AOTI", "off")
    off = models.prepare_offline_pair("cpu", remeasure=True)
    assert len(calls) == 4 and len(ranks) == 3 and off.decided_by == "eager"


# --- the EAGLE head beside the draft ------------------------------------------------------


def _save_head(base, seed: int):
    """A random head for base, saved where train-head keeps one; the head."""
    from safetensors.torch import save_file

    from specviz.drafters.head import FeatureHead
    from specviz.head_cache import head_file

    torch.manual_seed(seed)
    head = FeatureHead.for_target(base)
    path = head_file(base)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: t.contiguous() for k, t in head.own_state().items()}, str(path))
    return head


def test_the_heads_alpha_is_what_its_drafting_cache_gives(base, one_thread):
    """head_alpha's batched one-step computation against the head's own drafting cache
    (HeadLM, fed the target's features position by position as a run feeds them)."""
    from specviz.drafters.head import FeatureHead, HeadLM, target_features
    from specviz.sampling import warp

    torch.manual_seed(3)
    head = FeatureHead.for_target(base)
    ids = TinyTok()("")["input_ids"]
    n, w = len(ids), Settings().target_warp()
    got = draft_choice.head_alpha(base, head, ids, torch.device("cpu"), 32)
    features = target_features(base, torch.tensor([ids]))[0]
    lm = HeadLM(head, 32)
    rows = []
    for i in range(1, n):  # slot i reads the target's feature at i - 1: q of token i + 1
        lm.feed_known(ids[: i + 1], features[:i], 0)
        rows.append(lm.logits(ids[: i + 1])[-1])
    with torch.inference_mode():
        p = warp(base(input_ids=torch.tensor([ids])).logits[0, 1:, :32].float(), w)
    q = warp(torch.stack(rows), w)
    want = float(torch.minimum(p, q).sum(-1).mean())
    assert got == pytest.approx(want, abs=1e-5) and 0.0 < got < 1.0


def test_a_cached_head_is_measured_beside_the_draft_once_per_head_file(
    cache, base, monkeypatch, one_thread
):
    """The set-up step measures the head cached for the offline target beside the chosen
    draft and keeps it in the record; it measures it again only when the head file changes
    (or with remeasure), and a head no longer cached leaves the record. The measurement
    picks the drafter whose prediction is larger."""
    from specviz import models

    loads: list[str] = []
    monkeypatch.setattr(
        models, "_get_model", lambda name, *a: loads.append(name) or SimpleNamespace(model=base)
    )
    monkeypatch.setattr(models, "_get_tokenizer", lambda name: TinyTok())
    monkeypatch.setattr(models, "default_cache_len", lambda tok: 256)
    measured(monkeypatch)
    heads: list[str] = []
    real = draft_choice.measure_head

    def spy(choice, *a, **k):
        heads.append(a[4])
        return real(choice, *a, **{**k, "reps": 3})

    monkeypatch.setattr(draft_choice, "measure_head", spy)
    monkeypatch.setenv("SPECVIZ_AOTI", "off")
    first = models.prepare_offline_pair("cpu")
    assert first.head is None and heads == []  # no head cached: none measured
    _save_head(base, 1)
    choice = models.prepare_offline_pair("cpu")
    assert len(heads) == 1 and choice.head is not None and choice.head_id == heads[0]
    head = choice.head
    assert head.variant == draft_choice.HEAD and 0.0 < head.alpha < 1.0
    assert head.c == pytest.approx(head.step_ms * head.c2 / head.step2_ms)
    assert head.gamma == draft_choice.judge_gamma() and head.predicted > 0.0
    kept = draft_choice.load_record(draft_choice.machine_key(torch.device("cpu")))
    assert kept is not None and kept.head == head and kept.head_id == choice.head_id
    assert choice.drafter == ("eagle" if head.ranked > choice.chosen.ranked else "model")
    assert "EAGLE head" in choice.summary()
    before = len(loads)
    models.prepare_offline_pair("cpu")
    assert len(heads) == 1 and len(loads) == before  # the same file: the record, no load
    _save_head(base, 2)
    again = models.prepare_offline_pair("cpu")
    assert len(heads) == 2 and again.head_id != choice.head_id
    remeasured = models.prepare_offline_pair("cpu", remeasure=True)
    assert len(heads) == 3
    from specviz.head_cache import head_file

    head_file(base).write_bytes(b"not a head")  # a damaged file: said, not measured
    said: list[str] = []
    damaged = models.prepare_offline_pair("cpu", say=said.append)
    assert len(heads) == 3 and damaged.variant == remeasured.variant and damaged.head is None
    assert any("could not be read" in line and "train-head" in line for line in said)
    head_file(base).unlink()
    gone = models.prepare_offline_pair("cpu")
    assert gone.head is None and len(heads) == 3
    kept = draft_choice.load_record(draft_choice.machine_key(torch.device("cpu")))
    assert kept is not None and kept.head is None


def test_the_measurement_picks_the_head_only_where_it_predicts_more():
    cand = draft_choice.Candidate("w8-fp32", 5.0, 6.0, 0.25, 0.3, 0.95, 1.8, 4, 1.8)
    choice = draft_choice.DraftChoice("w8-fp32", False, [cand], 20.0, {5: 1.3}, {}, 1.0)
    assert choice.drafter == "model" and "EAGLE" not in choice.summary()
    head = dataclasses.replace(cand, variant=draft_choice.HEAD, alpha=0.3, predicted=0.7)
    slower = dataclasses.replace(choice, head=head, head_id="x")
    assert slower.drafter == "model" and "the draft model is picked" in slower.summary()
    faster = dataclasses.replace(choice, head=dataclasses.replace(head, predicted=2.2))
    assert faster.drafter == "eagle" and "the head is picked" in faster.summary()
    back = draft_choice.DraftChoice.from_dict(json.loads(json.dumps(faster.to_dict())))
    assert back.head == faster.head and back.drafter == "eagle"
    bad = faster.to_dict() | {"head": dataclasses.asdict(cand)}
    with pytest.raises(ValueError, match="unknown head"):
        draft_choice.DraftChoice.from_dict(bad)
