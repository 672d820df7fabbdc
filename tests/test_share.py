"""The store of shared runs and the handlers around it, without a browser: a run saved is
read back whole and survives a new store on the same folder (a restart); the oldest go
first beyond the count and the bytes; a malformed id, a run no longer kept and a corrupt
file are one line each; the page opened on a link shows the run with no model call, and Step
walks its rounds."""

from __future__ import annotations

import os

import pytest

from specviz.config import Deployment, Settings
from specviz.engine import generate
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from specviz.ui import share
from specviz.ui.context import AppContext
from specviz.ui.frames import final_frame
from specviz.ui.live import step_update
from specviz.ui.state import Form, Session


@pytest.fixture(scope="module")
def traces(tiny, one_thread):
    settings = Settings(max_new_tokens=12, gamma=3, seed=1)
    spec = generate(tiny, "1 2 3", settings)
    ar = generate(tiny, "1 2 3", settings.with_(method="ar"))
    return spec, ar


def test_a_saved_run_reads_back_and_survives_a_restart(tmp_path, traces) -> None:
    spec, ar = traces
    run_id = SharedRuns(tmp_path).save(spec, ar)
    assert SharedRuns(tmp_path).save(spec, ar) == run_id  # the same run: the same link
    got_spec, got_ar = SharedRuns(tmp_path).load(run_id)
    assert got_spec.to_dict() == spec.to_dict() and got_ar.to_dict() == ar.to_dict()


def test_the_oldest_go_first_by_count_and_by_bytes(tmp_path, traces) -> None:
    spec, _ = traces
    store = SharedRuns(tmp_path, max_runs=2)
    ids = []
    for seed in range(3):
        s = spec.to_dict()
        s["settings"]["seed"] = seed
        ids.append(store.save(type(spec).from_dict(s), None))
        os.utime(store.path(ids[-1]), ns=(seed * 10**9, seed * 10**9))
    assert [p.stem for p in store.kept()] == ids[1:]
    with pytest.raises(ValueError, match="no longer kept") as err:
        store.load(ids[0])
    assert "\n" not in str(err.value)
    size = store.path(ids[2]).stat().st_size
    small = SharedRuns(tmp_path, max_runs=10, max_bytes=size + 10)
    s = spec.to_dict()
    s["settings"]["seed"] = 99
    newest = small.save(type(spec).from_dict(s), None)
    assert [p.stem for p in small.kept()] == [newest]


@pytest.mark.parametrize("bad", ["", "zz", "../../etc/passwd", "0123456789ABCDEF", None, 5])
def test_a_malformed_id_is_one_line(tmp_path, bad) -> None:
    with pytest.raises(ValueError, match="not a shared-run link"):
        SharedRuns(tmp_path).load(bad)


def test_a_corrupt_file_is_one_line(tmp_path) -> None:
    store = SharedRuns(tmp_path)
    tmp_path.joinpath("0123456789abcdef.json").write_text("{not json")
    with pytest.raises(ValueError, match="could not be read"):
        store.load("0123456789abcdef")


def test_an_unfinished_run_is_not_shared(tmp_path, traces) -> None:
    spec = type(traces[0]).from_dict({**traces[0].to_dict(), "stop_reason": "running"})
    with pytest.raises(ValueError, match="has not finished"):
        SharedRuns(tmp_path).save(spec, None)
    with pytest.raises(ValueError, match="nothing to share"):
        SharedRuns(tmp_path).save(None, None)


def test_the_limits_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SPECVIZ_SHARED_RUNS", "7")
    monkeypatch.setenv("SPECVIZ_SHARED_MB", "3")
    dep = Deployment.from_env()
    assert (dep.shared_runs, dep.shared_mb) == (7, 3)
    monkeypatch.setenv("SPECVIZ_SHARED_RUNS", "many")
    with pytest.raises(ValueError, match="SPECVIZ_SHARED_RUNS"):
        Deployment.from_env()


def test_a_link_opens_the_run_and_step_walks_it_with_no_model_call(tmp_path, traces) -> None:
    spec, ar = traces
    store = SharedRuns(tmp_path)
    run_id = share.share_update(store, Session(spec=spec, ar=ar), "http://host:7860/?x=1")[
        "share_link"
    ]
    assert "http://host:7860/?run=" in run_id
    run_id = run_id.split('data-run="')[1][:16]
    ctx = AppContext(loader=lambda *a: pytest.fail("a model was loaded"), shared=store)
    session, form = Session(), Form()
    calls = MODEL_THREAD.calls
    out = share.open_page(store, session, form, run_id)
    assert "pair_go" not in out and f"shared run {run_id}" in out["status"]
    assert out["tokens"] == final_frame(Session(spec=spec, ar=ar), spec.settings.gamma)["tokens"]
    assert session.mode == "shared" and session.spec.token_ids == spec.token_ids
    n = len(spec.rounds)
    for i in range(1, n + 2):
        step = step_update(session, form, ctx)
        assert f"round {(i - 1) % n + 1} of {n}" in step["status"]
    assert MODEL_THREAD.calls == calls
    assert share.open_page(store, Session(), form, None) == {"pair_go": 1}
    bad = share.open_page(store, Session(), form, "nope")
    assert "not a shared-run link" in bad["status"] and "pair_go" not in bad
