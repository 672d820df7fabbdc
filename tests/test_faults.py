"""Faults: Stop then Run again, models that fail to load, a corrupt weights cache, and a
CUDA out-of-memory error. Each gives one clear line and the app keeps serving."""

from __future__ import annotations

import hashlib
import html
import shutil
from pathlib import Path

import gradio as gr
import pytest
import torch

from specviz import models, ui
from specviz.backend import offline
from specviz.config import Deployment, Limits
from specviz.engine import generate
from tests.conftest import set_up_threads
from tests.tiny import tiny_pair

LIMITS = Limits()


def form(**changes) -> ui.Form:
    return ui.Form(
        **{"prompt": "1 2 3", "pair": "tiny", "max_new_tokens": 24, "gamma": 3, **changes}
    )


def run(loader, f: ui.Form, session: ui.Session | None = None) -> ui.Session:
    session = session or ui.new_session()
    list(ui.user_errors(ui.run_updates)(session, f, ui.AppContext(loader, LIMITS)))
    return session


def test_stop_mid_run_then_run_again_gives_a_complete_trace(tiny) -> None:
    loader = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment())
    session = ui.new_session()
    frames = ui.run_updates(
        session, form(max_new_tokens=120, seed=4), ui.AppContext(loader, LIMITS)
    )
    for frame in frames:
        if "models" in frame:  # the worker is running
            ui.stop_session(session)
            break
    list(frames)
    assert "stopped" in (session.spec.stop_reason, session.ar.stop_reason)
    f = form(max_new_tokens=40, seed=4)
    run(loader, f, session)
    settings = f.settings(LIMITS)
    assert session.spec.stop_reason == "max_new_tokens" and len(session.spec.token_ids) == 40
    assert session.spec.token_ids == generate(tiny, "1 2 3", settings).token_ids
    assert session.ar.token_ids == generate(tiny, "1 2 3", settings.with_(method="ar")).token_ids
    assert session.spans and len(session.spans) == len(session.spec.rounds)


def failing(exc: BaseException):
    def load(*args):
        raise exc

    return load


@pytest.mark.parametrize(
    ("pair", "custom", "message"),
    [
        ("nope", failing(AssertionError()), "unknown pair 'nope'; this app offers tiny, broken"),
        ("broken", None, "loading pair 'broken' failed: header too large (corrupt file)"),
        (ui.CUSTOM, failing(OSError("no such repo")), "loading pair 'a/b -> a/c' failed: no such"),
    ],
)
def test_a_pair_that_fails_to_load_leaves_the_loaded_one_serving(pair, custom, message) -> None:
    tiny = tiny_pair()

    def loader(name: str, dtype: str):
        if name == "broken":
            raise OSError("header too large (corrupt file)\nTraceback ...")
        return tiny

    source = ui.PairSource(loader, ["tiny", "broken"], Deployment(), custom or failing(None))
    assert run(source, form()).spec.stop_reason == "max_new_tokens"
    f = form(pair=pair, custom_draft="a/b", custom_target="a/c")

    def by_run():
        yield from ui.run_updates(ui.new_session(), f, ui.AppContext(source, LIMITS))

    def by_menu():
        yield from ui.pair_updates(ui.AppContext(source, LIMITS), f)

    for handler in (by_run, by_menu):
        with pytest.raises(gr.Error) as err:
            list(ui.user_errors(handler)())
        shown = html.unescape(err.value.message)
        assert message in shown and "\n" not in shown
    assert run(source, form(seed=9)).spec.stop_reason == "max_new_tokens"  # still serving


def test_an_unknown_hub_id_gives_a_clear_message(monkeypatch) -> None:
    """The real loader, offline: the id passes the checks, the hub cache has nothing to give
    (the loader sizes a hub model before anything of it loads: specviz.hub)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = ui.PairSource(lambda p, d: tiny_pair(), ["tiny"], Deployment())
    f = form(pair=ui.CUSTOM, custom_draft="nobody/no-such-draft", custom_target="nobody/none")
    with pytest.raises(gr.Error) as err:
        list(ui.user_errors(ui.run_updates)(ui.new_session(), f, ui.AppContext(source, LIMITS)))
    shown = html.unescape(err.value.message)  # the guard sizes the target first: offline, uncached
    assert "refused nobody/none: its size could not be read" in shown and "\n" not in shown
    assert "not in this server's hub cache" in shown
    assert run(source, form()).spec.token_ids  # the loaded pair keeps serving


@pytest.fixture()
def fresh_model_cache(monkeypatch):
    """Empty per-process model caches, restored afterwards."""
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})


def copy_offline_cache(tmp_path: Path, monkeypatch) -> Path:
    from specviz.backend import draft_choice

    src = offline.offline_cache_dir()
    offline.prepare_offline()  # the suite's normal cache, converted once
    record = draft_choice.record_path()  # this machine's draft choice, when measured
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    dst = offline.offline_cache_dir()
    shutil.copytree(src, dst)
    if record.is_file():
        shutil.copy(record, draft_choice.record_path())
    return dst


def corrupt(weights: Path) -> None:
    """Overwrite the safetensors header, keeping the size the cache marker records."""
    with open(weights, "r+b") as f:
        f.write(b"\xff" * 64)


def digest(path: Path) -> str:
    """A hash of the tensors' names and bytes: the file's own header metadata may be written
    in another order by another process, so the file itself is not compared."""
    from safetensors.torch import load_file

    h = hashlib.sha256()
    for name, tensor in sorted(load_file(path).items()):
        h.update(name.encode())
        h.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_a_corrupt_weights_cache_is_rebuilt(tmp_path, monkeypatch, fresh_model_cache) -> None:
    """A real rebuild: the converted weights are corrupted, loading converts the GGUF again."""
    d = copy_offline_cache(tmp_path, monkeypatch)
    good = digest(d / "model.safetensors")
    corrupt(d / "model.safetensors")
    with set_up_threads():  # the draft choice is read from the set-up's record
        pair = models.load_pair("default", dtype="float32", device="cpu")
    assert pair.target.source == "converted from GGUF"
    assert digest(d / "model.safetensors") == good and offline._cache_is_complete(d)
    trace = generate(pair, "Hi", form(max_new_tokens=4).settings(LIMITS).with_(greedy=True))
    assert len(trace.token_ids) == 4


def test_a_corrupt_cache_that_cannot_be_rebuilt_is_one_line(
    tmp_path, monkeypatch, fresh_model_cache
) -> None:
    d = copy_offline_cache(tmp_path, monkeypatch)
    corrupt(d / "model.safetensors")

    def missing() -> Path:
        raise ValueError("the offline model is not installed: run the set-up script")

    monkeypatch.setattr(offline, "offline_gguf_path", missing)
    source = ui.PairSource(ui.default_loader, ["default"], Deployment())
    with pytest.raises(gr.Error, match="the offline model is not installed"):
        list(ui.user_errors(ui.pair_updates)(ui.AppContext(source, LIMITS), form(pair="default")))
    assert not models._pairs  # nothing half-loaded is kept


class OutOfMemoryAfter(torch.nn.Module):
    """Wraps a model; its forward raises torch.cuda.OutOfMemoryError after `calls` calls."""

    def __init__(self, model: torch.nn.Module, calls: int) -> None:
        super().__init__()
        self.inner, self.calls = model, calls
        self.config = model.config

    def forward(self, *args, **kwargs):
        self.calls -= 1
        if self.calls < 0:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize("calls", [0, 12], ids=["at-warm-up", "mid-run"])
def test_out_of_memory_suggests_a_smaller_pair(calls) -> None:
    pair = tiny_pair()
    real = pair.target.model
    pair.target.model = OutOfMemoryAfter(real, calls)
    loader = lambda p, d: pair  # noqa: E731
    session = ui.new_session()
    with pytest.raises(gr.Error) as err:
        run(loader, form(max_new_tokens=60), session)
    msg = html.unescape(err.value.message)
    assert msg.startswith("out of GPU memory while running pair") and "smaller pair" in msg
    assert session.spec is None and session.ar is None  # no half-finished trace kept
    pair.target.model = real
    assert run(loader, form(), session).spec.stop_reason == "max_new_tokens"
