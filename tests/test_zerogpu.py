"""ZeroGPU wiring: the runner chosen once when the app's context is built, the start-up load,
the decorated streaming run, Stop, Step and the named API, with a stand-in for ``spaces`` in
ZeroGPU mode (the real package needs the Spaces
infrastructure there; off ZeroGPU it is tested in test_deploy). The stand-in sends every
argument and every yield through pickle, as the process boundary of a GPU call does."""

from __future__ import annotations

import pickle
import sys
import types

import pytest

from specviz import ui
from specviz.config import Deployment, Limits, Settings
from specviz.engine import generate
from specviz.ui import pairs, zerogpu

PROMPT = "1 2 3"
LIMITS = Limits()


class FakeSpaces:
    """``spaces`` in ZeroGPU mode: GPU(duration=...) wraps a function whose arguments and
    results cross a process boundary, and records the duration each call asked for."""

    def __init__(self) -> None:
        self.durations: list[int] = []

    def GPU(self, duration):  # noqa: N802 - the real decorator's name
        def decorate(fn):
            def call(*args):
                self.durations.append(duration(*args))
                args = pickle.loads(pickle.dumps(args))
                out = fn(*args)
                if isinstance(out, types.GeneratorType):
                    return (pickle.loads(pickle.dumps(x)) for x in out)
                return pickle.loads(pickle.dumps(out))

            return call

        return decorate


@pytest.fixture()
def zero(monkeypatch, tiny):
    fake = FakeSpaces()
    monkeypatch.setitem(sys.modules, "spaces", fake)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    loaded: list[str] = []
    monkeypatch.setattr(pairs, "default_loader", lambda name, dtype: loaded.append(name) or tiny)
    fake.loaded = loaded
    return fake


def form(**changes) -> ui.Form:
    return ui.Form(
        **{"prompt": PROMPT, "pair": "tiny", "max_new_tokens": 20, "gamma": 3, **changes}
    )


def ctx() -> ui.AppContext:
    """The context an app builds here: its runner chosen for this process."""
    built, menu = ui.app_context(Deployment(limits=LIMITS), lambda p, d: None, ["tiny"])
    assert menu[0] == "tiny"
    return built


def test_the_runner_is_chosen_once_when_the_context_is_built(zero, tiny, monkeypatch) -> None:
    built = ctx()
    assert isinstance(built.runner, ui.ZeroGpuRunner) and ui.has_gpu(built.runner)
    # the context keeps its runner: the handlers never ask again
    monkeypatch.delenv("SPACES_ZERO_GPU")
    assert isinstance(ui.choose_runner(), ui.LocalRunner)
    session = ui.new_session()
    list(ui.run_updates(session, form(seed=2, max_new_tokens=6), built))
    assert len(zero.durations) == 1  # the run went through one GPU call
    with pytest.raises(ValueError, match="does not run on ZeroGPU"):
        list(ui.sweep_updates(session, form(), built, [1, 2], "", 1))


def test_a_zerogpu_page_hides_the_compiled_path(zero) -> None:
    demo = ui.build_app(loader=lambda p, d: None, pairs=["tiny"])
    box = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sv-compile")
    assert box.visible is False


def test_the_run_streams_out_of_one_gpu_call(zero, tiny) -> None:
    session = ui.new_session()
    frames = list(ui.run_updates(session, form(seed=2), ctx()))
    live = [f for f in frames[:-1] if "data-status" in f.get("tokens", "")]
    assert len(live) >= 2, "rounds arrive while the call runs"
    settings = form(seed=2).settings(LIMITS)
    spec, ar = generate(tiny, PROMPT, settings), generate(tiny, PROMPT, settings.with_(method="ar"))
    assert session.spec.token_ids == spec.token_ids and session.ar.token_ids == ar.token_ids
    assert [r.drafted for r in session.spec.rounds] == [r.drafted for r in spec.rounds]
    assert session.spec.stats.accepted == spec.stats.accepted
    assert session.spec.stop_reason == spec.stop_reason and session.spec.text == spec.text
    assert zero.durations == [zerogpu.duration(form(seed=2), settings)]
    assert "speedup" in frames[-1]["table1"]


def test_the_duration_grows_with_the_run_and_is_capped() -> None:
    small, big = form(max_new_tokens=16), form(max_new_tokens=2048, compare=True)
    s_small, s_big = small.settings(LIMITS), big.settings(LIMITS)
    assert zerogpu.duration(small, s_small) < zerogpu.duration(
        big, s_small.with_(max_new_tokens=64)
    )
    assert zerogpu.duration(big, s_big) == zerogpu.GPU_SECONDS_MAX


def test_stop_closes_the_gpu_call(zero, tiny) -> None:
    session = ui.new_session()
    frames = ui.run_updates(session, form(max_new_tokens=120, seed=1), ctx())
    for _ in frames:
        if session.spec is not None and len(session.spec.rounds) >= 2:
            ui.stop_session(session)
            break
    list(frames)
    assert session.spec.stop_reason == "stopped" and len(session.spec.token_ids) < 120
    assert session.spec.stats is not None and session.ar is None


def test_step_replays_one_round_more_per_gpu_call(zero, tiny) -> None:
    session, f = ui.new_session(), form(seed=4, max_new_tokens=12)
    reference = generate(tiny, PROMPT, f.settings(LIMITS))
    for n in range(1, len(reference.rounds) + 1):
        out = ui.step_update(session, f, ctx())
        assert [r.drafted for r in session.spec.rounds] == [r.drafted for r in reference.rounds[:n]]
    assert session.spec.token_ids == reference.token_ids
    assert session.spec.stop_reason == reference.stop_reason and "summary" in out
    ui.step_update(session, f, ctx())  # finished: Step starts over
    assert len(session.spec.rounds) == 1


def test_the_named_api_and_the_start_up_load(zero, tiny) -> None:
    spec, ar = ui.complete_traces(
        ctx(), form(seed=3, compare=True), form().settings(LIMITS).with_(seed=3)
    )
    settings = Settings(gamma=3, max_new_tokens=20, seed=3)
    assert spec.token_ids == generate(tiny, PROMPT, settings).token_ids and ar.method == "ar"
    zero.loaded.clear()
    assert ui.choose_runner().preload(Deployment()) is tiny
    assert zero.loaded == ["smollm2"]  # the first pair a GPU Space offers


def test_nothing_is_preloaded_off_zerogpu(monkeypatch) -> None:
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    monkeypatch.setattr(pairs, "default_loader", lambda *a: pytest.fail("loaded off ZeroGPU"))
    runner = ui.choose_runner()
    assert isinstance(runner, ui.LocalRunner) and runner.preload(Deployment()) is None
    demo = ui.build_app(loader=lambda p, d: None, pairs=["default"])
    box = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sv-compile")
    assert box.visible is not False
