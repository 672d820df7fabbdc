"""The store of shared runs and the handlers around it, without a browser: a run saved is
read back whole and survives a new store on the same folder (a restart); the oldest go
first beyond the count and the bytes; a malformed id, a run no longer kept and a corrupt
file are one line each; the page opened on a link shows the run with no model call, and Step
walks its rounds. A run imported from a file is shared as imported, and its page says
"imported from a file, not run on this server"; a run made here never says so."""

from __future__ import annotations

import json
import os

import pytest

from specviz.config import Deployment, Limits, Settings
from specviz.engine import generate
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from specviz.ui import share
from specviz.ui.context import AppContext
from specviz.ui.frames import final_frame
from specviz.ui.io_tab import import_updates
from specviz.ui.live import run_updates, step_update
from specviz.ui.state import IMPORTED, Form, Session


@pytest.fixture(scope="module")
def traces(tiny, one_thread):
    settings = Settings(max_new_tokens=12, gamma=3, seed=1)
    spec = generate(tiny, "1 2 3", settings)
    ar = generate(tiny, "1 2 3", settings.with_(method="ar"))
    return spec, ar


def test_a_saved_run_reads_back_and_survives_a_restart(tmp_path, traces) -> None:
    spec, ar = traces
    run_id = SharedRuns(tmp_path).save(spec, ar, imported=False)
    assert SharedRuns(tmp_path).save(spec, ar, imported=False) == run_id  # the same link
    got = SharedRuns(tmp_path).load(run_id)
    assert got.spec.to_dict() == spec.to_dict() and got.ar.to_dict() == ar.to_dict()
    assert not got.imported
    imported = SharedRuns(tmp_path).save(spec, ar, imported=True)
    assert imported != run_id and SharedRuns(tmp_path).load(imported).imported


def test_the_oldest_go_first_by_count_and_by_bytes(tmp_path, traces) -> None:
    spec, _ = traces
    store = SharedRuns(tmp_path, max_runs=2)
    ids = []
    for seed in range(3):
        s = spec.to_dict()
        s["settings"]["seed"] = seed
        ids.append(store.save(type(spec).from_dict(s), None, imported=False))
        os.utime(store.path(ids[-1]), ns=(seed * 10**9, seed * 10**9))
    assert [p.stem for p in store.kept()] == ids[1:]
    with pytest.raises(ValueError, match="no longer kept") as err:
        store.load(ids[0])
    assert "\n" not in str(err.value)
    size = store.path(ids[2]).stat().st_size
    small = SharedRuns(tmp_path, max_runs=10, max_bytes=size + 10)
    s = spec.to_dict()
    s["settings"]["seed"] = 99
    newest = small.save(type(spec).from_dict(s), None, imported=False)
    assert [p.stem for p in small.kept()] == [newest]


@pytest.mark.parametrize("bad", ["", "zz", "../../etc/passwd", "0123456789ABCDEF", None, 5])
def test_a_malformed_id_is_one_line(tmp_path, bad) -> None:
    with pytest.raises(ValueError, match="not a shared-run link"):
        SharedRuns(tmp_path).load(bad)


def test_a_corrupt_file_is_one_line(tmp_path, traces) -> None:
    store = SharedRuns(tmp_path)
    tmp_path.joinpath("0123456789abcdef.json").write_text("{not json")
    with pytest.raises(ValueError, match="could not be read"):
        store.load("0123456789abcdef")
    body = {"format": 2, "spec": traces[0].to_dict(), "ar": None, "imported": "no"}
    tmp_path.joinpath("0123456789abcdef.json").write_text(json.dumps(body))
    with pytest.raises(ValueError, match="could not be read: imported is 'no', not true"):
        store.load("0123456789abcdef")


def test_an_unfinished_run_is_not_shared(tmp_path, traces) -> None:
    spec = type(traces[0]).from_dict({**traces[0].to_dict(), "stop_reason": "running"})
    with pytest.raises(ValueError, match="has not finished"):
        SharedRuns(tmp_path).save(spec, None, imported=False)
    with pytest.raises(ValueError, match="nothing to share"):
        SharedRuns(tmp_path).save(None, None, imported=False)


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
    # the frame a shared page shows measures nothing (measure=False: no model-thread call)
    mine = final_frame(Session(spec=spec, ar=ar), spec.settings.gamma, measure=False)
    assert out["tokens"] == mine["tokens"]
    assert session.mode == "shared" and session.spec.token_ids == spec.token_ids
    n = len(spec.rounds)
    for i in range(1, n + 2):
        step = step_update(session, form, ctx)
        assert f"round {(i - 1) % n + 1} of {n}" in step["status"]
    assert MODEL_THREAD.calls == calls
    assert share.open_page(store, Session(), form, None) == {"pair_go": 1}
    bad = share.open_page(store, Session(), form, "nope")
    assert "not a shared-run link" in bad["status"] and "pair_go" not in bad


# --- where a run came from ---------------------------------------------------------------


def every_text(out: dict) -> str:
    """The page's text in a handler's output: its HTML strings, joined."""
    return "\n".join(v for v in out.values() if isinstance(v, str))


def test_an_imported_run_is_shared_as_imported_and_its_page_says_so(tmp_path, traces) -> None:
    """A trace imported in the Data tab is shown as imported; shared, its link's page says
    so, as does each Step through it; shared again from there, it stays imported. The
    server decides: a trace file claiming otherwise changes nothing."""
    spec, _ = traces
    path = tmp_path / "specviz-trace.json"
    body = spec.to_dict()
    path.write_text(json.dumps(body))
    session = Session()
    frames = list(import_updates(session, str(path)))
    assert IMPORTED in frames[0]["status"]  # replaying its rounds
    assert IMPORTED in frames[-1]["status"] and IMPORTED in frames[-1]["speedline"]
    assert session.imported

    store = SharedRuns(tmp_path / "store")
    run_id = link_id(share.share_update(store, session, "http://host:7860/"))
    assert store.load(run_id).imported
    opened, form = Session(), Form()
    out = share.open_page(store, opened, form, run_id)
    assert f"shared run {run_id}" in out["status"]
    assert f"this run was {IMPORTED}" in out["status"] and IMPORTED in out["speedline"]
    ctx = AppContext(loader=lambda *a: pytest.fail("a model was loaded"), shared=store)
    for _ in range(len(spec.rounds)):
        step = step_update(opened, form, ctx)
        assert IMPORTED in step["status"]
    assert IMPORTED in step["speedline"]  # the last round shows every view again
    again = link_id(share.share_update(store, opened, "http://host:7860/"))
    assert store.load(again).imported  # shared from the shared page: still imported
    assert IMPORTED in share.open_page(store, Session(), form, again)["status"]

    # a file cannot say it was run here: the flag is the server's, not the trace's
    for claim in ({"imported": False}, {"origin": "server"}):
        path.write_text(json.dumps({**body, **claim}))
        claimed = Session()
        try:
            list(import_updates(claimed, str(path)))
        except ValueError:
            continue  # refused by the schema: nothing imported, nothing to share
        assert claimed.imported


def test_a_run_made_here_is_shared_without_the_imported_words(tiny, tmp_path, traces) -> None:
    """Run on this server (after an import, too: Run starts afresh), shared, opened: no
    word of "imported" anywhere on the page."""
    spec, _ = traces
    path = tmp_path / "specviz-trace.json"
    path.write_text(spec.to_json())
    session = Session()
    list(import_updates(session, str(path)))
    assert session.imported
    ctx = AppContext(loader=lambda p, d: tiny, limits=Limits())
    frames = list(run_updates(session, Form(prompt="1 2 3", max_new_tokens=8), ctx))
    assert not session.imported and IMPORTED not in every_text(frames[-1])
    store = SharedRuns(tmp_path / "store")
    run_id = link_id(share.share_update(store, session, "http://host:7860/"))
    assert not store.load(run_id).imported
    out = share.open_page(store, Session(), Form(), run_id)
    assert f"shared run {run_id}" in out["status"]
    assert "imported" not in every_text(out)


def link_id(changes: dict) -> str:
    """The run id of a share_update's link."""
    return changes["share_link"].split('data-run="')[1][:16]
