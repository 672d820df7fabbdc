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
import torch

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
                self.durations.append(duration(*args) if callable(duration) else duration)
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
    # the baseline runs in turn with it (engine.interleave), so it stopped there too
    assert session.spec.stats is not None and session.ar is not None
    assert session.ar.stop_reason == "stopped" and session.ar.stats is not None
    assert len(session.ar.token_ids) <= len(session.spec.token_ids)


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


# --- compiled ahead of time: spaces.aoti_* at start-up ------------------------------------


class FakeCompiled:
    """What the stand-in's aoti_compile returns: the exported program, run eagerly. It
    crosses the process boundary as the real one does (saved and loaded, weights and all),
    and counts its calls."""

    calls = 0

    def __init__(self, exported) -> None:
        self.exported, self.module = exported, exported.module()

    def __call__(self, *args):
        FakeCompiled.calls += 1
        return self.module(*args)

    def __reduce__(self):
        import io

        buf = io.BytesIO()
        torch.export.save(self.exported, buf)
        return FakeCompiled.load, (buf.getvalue(),)

    @staticmethod
    def load(data: bytes) -> FakeCompiled:
        import io

        return FakeCompiled(torch.export.load(io.BytesIO(data)))


class FakeAotiSpaces(FakeSpaces):
    """The stand-in with spaces' ahead-of-time API: aoti_capture records the arguments of
    the module's next call (and stops it, as the real one does), aoti_compile keeps the
    exported program to run it eagerly, aoti_apply puts it on the module; each call is
    recorded."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.aoti: list[tuple] = []
        self.fail = fail

    def aoti_capture(self, module):
        import contextlib
        from types import SimpleNamespace

        spaces = self

        class Captured(Exception):
            pass

        @contextlib.contextmanager
        def capture():
            call = SimpleNamespace(args=(), kwargs={})

            def record(*args, **kwargs):
                call.args, call.kwargs = args, kwargs
                raise Captured

            module.forward = record
            try:
                yield call
            except Captured:
                pass
            finally:
                del module.forward
            spaces.aoti.append(("capture", module.width, tuple(call.args[0].shape)))

        return capture()

    def aoti_compile(self, exported):
        self.aoti.append(("compile", type(exported).__name__))
        if self.fail:
            raise RuntimeError("inductor failed\nsecond line")
        return FakeCompiled(exported)

    def aoti_apply(self, compiled, module):
        self.aoti.append(("apply", type(compiled).__name__))
        module.forward = compiled


@pytest.fixture(scope="module")
def compiled():
    """One start-up, compiled ahead of time through the stand-in, for the module's tests
    (exporting four shapes takes a while on two cores): its stand-in, its pair, the
    forwards it applied, what it printed and the runner's state after it."""
    import contextlib
    import io

    from specviz.backend import aoti
    from tests.tiny import tiny_pair

    pair = tiny_pair()
    fake = FakeAotiSpaces()
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setitem(sys.modules, "spaces", fake)
        mp.setenv("SPACES_ZERO_GPU", "true")
        mp.setattr(pairs, "default_loader", lambda name, dtype: pair)
        mp.setattr(aoti, "FORWARDS", aoti.AotiForwards())
        runner = ui.choose_runner()
        before = runner.compiles
        loaded = runner.preload(Deployment())
        forwards = aoti.FORWARDS
    return {"fake": fake, "pair": pair, "forwards": forwards, "err": err.getvalue(),
            "runner": runner, "before": before, "loaded": loaded}  # fmt: skip


@pytest.fixture()
def zero_aoti(monkeypatch, compiled):
    from specviz.backend import aoti

    monkeypatch.setitem(sys.modules, "spaces", compiled["fake"])
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(pairs, "default_loader", lambda name, dtype: compiled["pair"])
    monkeypatch.setattr(aoti, "FORWARDS", compiled["forwards"])
    FakeCompiled.calls = 0
    return compiled


def test_the_start_up_compiles_ahead_of_time_and_shows_the_box(zero_aoti) -> None:
    fake, runner, tiny = zero_aoti["fake"], zero_aoti["runner"], zero_aoti["pair"]
    assert zero_aoti["before"] is False  # nothing compiled before the start-up
    assert zero_aoti["loaded"] is tiny
    g = Settings().gamma
    # each shape: captured, exported and compiled inside the GPU call, then applied here
    captures = [a for a in fake.aoti if a[0] == "capture"]
    assert [(w, shape) for _, w, shape in captures] == [(1, (1, 1)), (g + 1, (1, g + 1)),
                                                       (1, (1, 1)), (2, (1, 2))]  # fmt: skip
    assert [a for a in fake.aoti if a[0] == "compile"] == [("compile", "ExportedProgram")] * 4
    assert [a[0] for a in fake.aoti[-4:]] == ["apply"] * 4
    assert fake.durations == [zerogpu.AOTI_SECONDS]  # one GPU call for all of it
    assert "compiled ahead of time for draft 1, draft 2, target 1, target 5" in zero_aoti["err"]
    assert runner.compiles is True and zerogpu.compiled_ahead(tiny)
    demo = ui.build_app(loader=lambda p, d: None, pairs=["tiny"], runner=runner)
    box = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sv-compile")
    assert box.visible is not False and box.value is True
    assert "ahead of time" in box.label


def test_a_compiled_run_is_the_eager_run_greedy_and_sampled(zero_aoti) -> None:
    tiny = zero_aoti["pair"]
    built = ctx()
    for greedy in (True, False):
        f = form(seed=5, gamma=4, compare=True, max_new_tokens=16, greedy=greedy)
        session = ui.new_session()
        list(ui.run_updates(session, f, built))
        settings = f.settings(LIMITS)
        spec, ar = (
            generate(tiny, PROMPT, settings),
            generate(tiny, PROMPT, settings.with_(method="ar")),
        )
        assert session.spec.token_ids == spec.token_ids and session.ar.token_ids == ar.token_ids
        if greedy:
            assert session.spec.token_ids == session.ar.token_ids
        assert zerogpu.AOTI_NOTE in session.spec.models["target"]
        assert zerogpu.AOTI_NOTE in session.spec.models["draft"]
    assert FakeCompiled.calls > 0  # the compiled forwards ran, not the eager ones


def test_the_box_unticked_or_an_uncompiled_shape_runs_eager(zero_aoti, capsys) -> None:
    tiny = zero_aoti["pair"]
    session = ui.new_session()
    list(ui.run_updates(session, form(seed=1, gamma=4, compile=False), ctx()))
    assert FakeCompiled.calls == 0 and zerogpu.AOTI_NOTE not in session.spec.models["target"]
    capsys.readouterr()
    # gamma 3: the verify call's width has no compiled forward; the draft's calls do
    list(ui.run_updates(session, form(seed=1, gamma=3), ctx()))
    err = capsys.readouterr().err
    assert "no ahead-of-time forward for 4 positions on a cache of 1024" in err
    assert FakeCompiled.calls > 0
    settings = form(seed=1, gamma=3).settings(LIMITS)
    assert session.spec.token_ids == generate(tiny, PROMPT, settings).token_ids


def test_a_tree_request_runs_eager_and_says_why(zero_aoti, capsys) -> None:
    tiny = zero_aoti["pair"]
    f = form(seed=1, gamma=4)
    settings = f.settings(LIMITS).with_(tree=(2, 1))
    assert zerogpu.run_class(tiny, f, settings, 3) is zerogpu.Run
    assert "ZeroGPU runs this request eager: a tree's verify call" in capsys.readouterr().err
    long = f.settings(LIMITS).with_(max_new_tokens=1500)
    assert zerogpu.run_class(tiny, f, long, 3) is zerogpu.Run
    assert "more than the compiled cache's 1024 positions" in capsys.readouterr().err
    assert zerogpu.run_class(tiny, f, f.settings(LIMITS), 3) is zerogpu.AotiRun


def test_a_failed_compilation_leaves_eager_with_one_line(monkeypatch, tiny, capsys) -> None:
    from specviz.backend import aoti

    fake = FakeAotiSpaces(fail=True)
    monkeypatch.setitem(sys.modules, "spaces", fake)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(pairs, "default_loader", lambda name, dtype: tiny)
    monkeypatch.setattr(aoti, "FORWARDS", aoti.AotiForwards())
    runner = ui.choose_runner()
    runner.preload(Deployment())
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ZeroGPU runs eager: ahead-of-time compilation failed (RuntimeError: inductor failed)"
    ]
    assert runner.compiles is False and not aoti.FORWARDS.serving()
    # a spaces package without the aoti functions: eager, one line
    monkeypatch.setitem(sys.modules, "spaces", FakeSpaces())
    assert zerogpu.compile_ahead("tiny", tiny) is False
    assert "this spaces package has no aoti_capture, aoti_compile, aoti_apply" in (
        capsys.readouterr().err
    )
