"""The app's handlers on the tiny pair, and the launched app driven through gradio_client."""

from __future__ import annotations

import html
import json
import threading
import time
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest
import torch

from specviz import ui
from specviz.config import Limits
from specviz.engine import generate
from specviz.trace import Trace

PROMPT = "1 2 3"
LIMITS = Limits()


@pytest.fixture()
def loader(tiny):
    return lambda pair, dtype: tiny


def form(**changes) -> ui.Form:
    base = {"prompt": PROMPT, "pair": "tiny", "max_new_tokens": 20, "gamma": 3}
    return ui.Form(**{**base, **changes})


def run_all(loader, f: ui.Form) -> tuple[ui.Session, list[dict]]:
    session = ui.new_session()
    return session, list(ui.run_updates(session, f, ui.AppContext(loader, LIMITS)))


def test_run_streams_rounds_then_shows_everything(tiny, loader) -> None:
    session, frames = run_all(loader, form(seed=3))
    live = [f for f in frames[:-1] if "tokens" in f and "data-status" in f["tokens"]]
    assert live, "the token view updates before the end"
    # live frames are throttled alike for both runs; where the time goes comes at the end
    assert not any("time_split" in f for f in live)
    final = frames[-1]
    for key in (
        "tokens",
        "rounds",
        "speed",
        "summary",
        "table1",
        "acc_round",
        "theory",
        "projection",
        "insp_plot",
        "verdict",
        "time_split",
        "time_totals",
    ):
        assert key in final
    assert "speedup" in final["table1"] and "first round shown after Run" in final["summary"]
    bars = {t.name: list(t.x) for t in final["time_split"].data}
    assert list(bars.values())[0] == list(range(1, len(session.spec.rounds) + 1))
    assert "wall time" in final["time_totals"]
    # the app's traces are the engine's traces: same tokens as a plain generate()
    settings = form(seed=3).settings(LIMITS)
    assert session.spec.token_ids == generate(tiny, PROMPT, settings).token_ids
    assert session.ar.token_ids == generate(tiny, PROMPT, settings.with_(method="ar")).token_ids
    assert session.spec.stop_reason == "max_new_tokens" and session.ui_ms


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prompt": "   "}, "prompt is empty"),
        ({"gamma": 0}, "gamma must be in 1..32, got 0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"temperature": -1.0}, "temperature must be a number >= 0"),
        ({"max_new_tokens": 1000}, "exceeds the model's context"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"drafter": "no-such-drafter"}, "unknown drafter 'no-such-drafter'"),
        ({"drafter": "ngram", "tree": "2"}, "a tree needs a drafter that drafts trees"),
    ],
)
def test_bad_input_is_one_visible_line(loader, changes, message) -> None:
    handler = ui.user_errors(ui.run_updates)
    with pytest.raises(gr.Error) as err:
        list(handler(ui.new_session(), form(**changes), ui.AppContext(loader, LIMITS)))
    shown = html.unescape(err.value.message)  # the modal renders the escaped message
    assert message in shown and "\n" not in shown


def test_errors_are_escaped() -> None:
    def bad() -> None:
        raise ValueError("unknown pair '<script>alert(1)</script>'")

    with pytest.raises(gr.Error) as err:
        ui.user_errors(bad)()
    assert "<script>" not in err.value.message and "&lt;script&gt;" in err.value.message


def test_step_adds_one_round_per_press(loader) -> None:
    session = ui.new_session()
    f = form(max_new_tokens=8, gamma=2)
    counts = []
    for _ in range(20):
        out = ui.step_update(session, f, ui.AppContext(loader, LIMITS))
        counts.append(len(session.spec.rounds))
        assert "verdict" in out
        if "finished" in out["status"]:
            break
    assert counts == list(range(1, len(counts) + 1))
    assert session.spec.stop_reason == "max_new_tokens" and len(session.spec.token_ids) == 8
    ui.step_update(session, f, ui.AppContext(loader, LIMITS))  # starts over
    assert len(session.spec.rounds) == 1


def test_changing_a_control_restarts_the_stepper(loader) -> None:
    session = ui.new_session()
    ui.step_update(session, form(seed=1), ui.AppContext(loader, LIMITS))
    ui.step_update(session, form(seed=1), ui.AppContext(loader, LIMITS))
    assert len(session.spec.rounds) == 2
    ui.step_update(session, form(seed=2), ui.AppContext(loader, LIMITS))
    assert len(session.spec.rounds) == 1


def test_stop_ends_the_run_early(tiny, loader) -> None:
    session = ui.new_session()

    # Stop is pressed while the speculative run is in its third round, whatever the speed
    # of the machine: a hook on the target's forward presses it from the model thread.
    def press_stop(*_) -> None:
        if session.spec is not None and len(session.spec.rounds) == 2:
            ui.stop_session(session)

    hook = tiny.draft.model.register_forward_pre_hook(press_stop)
    try:
        list(ui.run_updates(session, form(max_new_tokens=120), ui.AppContext(loader, LIMITS)))
    finally:
        hook.remove()
    spec, ar = session.spec, session.ar
    assert spec.stop_reason == "stopped" and len(spec.rounds) == 3
    # the baseline ran in turn with it (engine.interleave) and stopped there too
    assert len(spec.token_ids) < 120 and ar.stop_reason == "stopped"
    assert 0 < len(ar.token_ids) <= len(spec.token_ids)


def test_inspector_reads_the_stored_trace(loader) -> None:
    session, _ = run_all(loader, form(own_draft_temperature=True, draft_temperature=3.0))
    rejected = next(
        (r.index, r.start + i)
        for r in session.spec.rounds
        for i, d in enumerate(r.drafted)
        if d.status == "rejected"
    )
    out = ui.inspect_changes(session.spec, *rejected)
    assert "rejected: u =" in out["verdict"] and "resampled" in out["verdict"]
    names = [t.name for t in out["insp_plot"].data]
    assert "p (target)" in names and "q (draft)" in names
    assert ui.inspect_changes(session.spec, None, 0)["insp_round"] == 1  # shown from 1
    with pytest.raises(ValueError):
        ui.inspect_changes(session.spec, 0, 999)
    # a typed round is numbered from 1, as the page shows it
    from specviz.ui.inspector_tab import typed_changes

    typed = typed_changes(session.spec, rejected[0] + 1, rejected[1])
    assert typed["insp_round"] == rejected[0] + 1 and typed["verdict"] == out["verdict"]
    last = len(session.spec.rounds)
    with pytest.raises(
        ValueError, match=f"round 0 does not exist: this run has rounds 1 to {last}$"
    ):
        typed_changes(session.spec, 0, 0)
    with pytest.raises(ValueError, match="round 1 placed no token at position 999"):
        typed_changes(session.spec, 1, 999)
    with pytest.raises(ValueError):
        ui.inspect_changes(None, 0, 0)


def test_the_verification_control_reaches_the_trace_summary_and_inspector(loader) -> None:
    session, frames = run_all(loader, form(verification="exact-match", temperature=1.0))
    assert session.spec.settings.verification == "exact-match"
    summary = html.unescape(frames[-1]["summary"])
    assert "exact-match" in summary and "sum p q" in summary
    assert summary.index("acceptance rate") < summary.index("sum p q") < summary.index("alpha")
    rejected = next(
        (r.index, r.start + i)
        for r in session.spec.rounds
        for i, d in enumerate(r.drafted)
        if d.status == "rejected"
    )
    verdict = html.unescape(ui.inspect_changes(session.spec, *rejected)["verdict"])
    assert "exact match: the target sampled '<" in verdict and "': rejected" in verdict
    assert "keeps the target's own sample" in verdict
    with pytest.raises(ValueError, match="verification must be one of rejection, exact-match"):
        form(verification="nope").settings(LIMITS)


def test_export_import_and_replay_without_a_model(loader, tmp_path) -> None:
    session, _ = run_all(loader, form())
    paths = ui.export_files(session)
    names = sorted(Path(p).name for p in paths)
    assert names == ["specviz-ar-trace.json", "specviz-rounds.csv", "specviz-trace.json"]
    spec_path = next(p for p in paths if p.endswith("specviz-trace.json"))
    frame = pd.read_csv(next(p for p in paths if p.endswith(".csv")))
    assert len(frame) == sum(len(r.drafted) + (r.added is not None) for r in session.spec.rounds)

    replayed = ui.new_session()
    frames = list(ui.import_updates(replayed, spec_path))
    assert replayed.spec.token_ids == session.spec.token_ids
    assert len(frames) == len(session.spec.rounds) + 1
    assert frames[-1]["tokens"] == ui.final_frame(session, 3)["tokens"]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "specviz-trace/1", "method": "spec"}))
    with pytest.raises(ValueError, match="missing the key"):
        list(ui.import_updates(ui.new_session(), str(bad)))
    with pytest.raises(ValueError, match="nothing to export"):
        ui.export_files(ui.new_session())


def test_an_imported_minimal_trace_shows_alpha_as_not_measured(tiny, tmp_path) -> None:
    trace = generate(tiny, PROMPT, form().settings(LIMITS).with_(trace_level="minimal"))
    path = tmp_path / "minimal.json"
    path.write_text(trace.to_json())
    session = ui.new_session()
    final = list(ui.import_updates(session, str(path)))[-1]
    assert "not measured" in final["summary"] and "0.000" not in final["summary"]
    for key in ("theory", "projection"):
        assert "alpha was not measured" in final[key].layout.annotations[0].text
    fig = ui.projection_update(session, 0.05)
    assert "alpha was not measured" in fig.layout.annotations[0].text


def test_greedy_check_agrees_in_fp32(loader) -> None:
    _, frames = run_all(loader, form(greedy=True))
    assert "identical" in frames[-1]["greedy_check"]


def test_two_sessions_at_once_get_their_own_traces(tiny, loader) -> None:
    results: dict[int, Trace] = {}

    def go(seed: int) -> None:
        session, _ = run_all(loader, form(seed=seed, max_new_tokens=30))
        results[seed] = session.spec

    threads = [threading.Thread(target=go, args=(s,)) for s in (11, 12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed, trace in results.items():
        expected = generate(tiny, PROMPT, form(seed=seed, max_new_tokens=30).settings(LIMITS))
        assert trace.token_ids == expected.token_ids


def test_presets_are_valid_settings() -> None:
    for name in ui.PRESETS:
        values = dict(zip(ui.PRESET_FIELDS, ui.apply_preset(name), strict=True))
        ui.Form(**values).settings(LIMITS)
    assert ui.PRESETS["copy-and-edit (n-gram drafter)"]["drafter"] == "ngram"
    with pytest.raises(ValueError):
        ui.apply_preset("nope")


def test_projection_uses_the_measured_alpha(loader) -> None:
    session, _ = run_all(loader, form())
    fig = ui.projection_update(session, 0.05)
    assert "PROJECTION" in fig.layout.title.text
    with pytest.raises(ValueError):
        ui.projection_update(session, 0.0)


def test_building_the_app_loads_nothing() -> None:
    def refuse(pair: str, dtype: str):
        raise AssertionError("no model may load while building the app")

    demo = ui.build_app(loader=refuse, pairs=["tiny"])
    assert isinstance(demo, gr.Blocks)
    assert "--sv-accepted" in ui.launch_options()["css"]


def test_seven_tabs_that_wrap_and_a_presentation_view() -> None:
    demo = ui.build_app(loader=lambda p, d: None, pairs=["tiny"])
    blocks = list(demo.blocks.values())
    labels = [b.label for b in blocks if isinstance(b, gr.Tab)]
    assert labels == [
        "Decision",
        "Speed",
        "Acceptance",
        "Theory",
        "Exactness",
        "Data",
        "Prompt set",
    ]
    assert [b.overflow_behavior for b in blocks if isinstance(b, gr.Tabs)] == ["wrap"]
    options = ui.launch_options()
    assert "get('view') === 'present'" in options["js"] and "ArrowRight" in options["js"]
    assert ".sv-present-mode" in options["css"]


# --- end to end through gradio_client --------------------------------------------------


@pytest.fixture(scope="module")
def served():
    """The pair the launched app serves."""
    from tests.tiny import tiny_pair

    return tiny_pair()


@pytest.fixture(scope="module")
def app_url(served):
    pair = served
    demo = ui.build_app(loader=lambda p, d: pair, pairs=["tiny"])
    demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    yield demo.local_url
    demo.close()


def client_args(**changes) -> list:
    f = form(**changes)
    return [getattr(f, name) for name in ui.FORM_FIELDS]


def untimed(trace: Trace) -> list[dict]:
    """The rounds without their timings (which differ on every run)."""
    times = ("draft_ms", "verify_ms", "t_s")
    return [{k: v for k, v in r.items() if k not in times} for r in trace.to_dict()["rounds"]]


def test_client_runs_exports_and_sees_errors(app_url) -> None:
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from tests.tiny import tiny_pair

    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    job_a = a.submit(*client_args(seed=5), api_name="/run")
    job_b = b.submit(*client_args(seed=6), api_name="/run")
    for out in (job_a.result(timeout=120), job_b.result(timeout=120)):
        assert any(isinstance(x, str) and 'data-status="' in x for x in out)
    traces = []
    for client in (a, b):
        files = client.predict(api_name="/export")
        path = next(f for f in files if str(f).endswith("specviz-trace.json"))
        traces.append(Trace.from_json(Path(path).read_bytes()))
    # each tab got its own trace: the one a plain generate() gives for its seed
    for seed, t in zip((5, 6), traces, strict=True):
        expected = generate(tiny_pair(), PROMPT, form(seed=seed).settings(LIMITS))
        assert t.settings.seed == seed and t.token_ids == expected.token_ids
        assert untimed(t) == untimed(expected)
    assert untimed(traces[0]) != untimed(traces[1])

    with pytest.raises(AppError, match="prompt is empty"):
        a.predict(*client_args(prompt="  "), api_name="/run")
    with pytest.raises(AppError, match="less than minimum value 0.05"):  # the slider's bound
        a.predict(*client_args(own_draft_temperature=True, draft_temperature=-2.0), api_name="/run")
    out = a.predict(*client_args(seed=7, max_new_tokens=5), api_name="/run")  # still serving
    assert any(isinstance(x, str) and "data-status" in x for x in out)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_cancelled_check_frees_the_model_thread(app_url, served) -> None:
    """A long check through gradio_client, cancelled while it draws: the model thread stops
    it after the sample in progress (idle within 5 s), and the next request starts at once."""
    from gradio_client import Client
    from gradio_client.utils import Status

    from specviz.modelthread import MODEL_THREAD

    calls: list[int] = []
    hook = served.target.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        client = Client(app_url, verbose=False)
        job = client.submit("", 2000, 3, "rejection", *client_args(), api_name="/check")
        # the check streams its progress after every sample: it is drawing
        wait_for(lambda: len(job.outputs()) >= 2, 120, "the check never started")
        job.cancel()
        wait_for(MODEL_THREAD.idle, 5, "the cancelled check kept the model thread busy")
        summaries = [str(o) for out in job.outputs() for o in out]
        assert not any("PASS" in x or "FAIL" in x for x in summaries)  # it never finished
        stopped_at = len(calls)
        # a client of its own: the cancelled job's stream may end its client's other jobs
        other = Client(app_url, verbose=False)
        nxt = other.submit(*client_args(max_new_tokens=4), api_name="/step")
        wait_for(lambda: nxt.done() or nxt.status().code == Status.PROCESSING, 5, "the next waited")
        out = nxt.result(timeout=60)
        assert any(isinstance(x, str) and "step mode: round 1 done" in x for x in out)
        assert len(calls) > stopped_at  # it ran, and the check did not come back
    finally:
        hook.remove()


def test_sessions_can_be_deep_copied(loader) -> None:
    import copy

    session, _ = run_all(loader, form(max_new_tokens=5))
    clone = copy.deepcopy(session)
    assert clone.spec.token_ids == session.spec.token_ids and clone.spec is not session.spec
    assert clone.stop is not session.stop and clone.stepper is None


def test_distribution_check_tab_passes_the_exact_rule_and_catches_a_wrong_one() -> None:
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=2)  # first-position overlap ~0.4
    loader = lambda name, dtype: pair  # noqa: E731
    f = form(prompt="1 2", temperature=1.0, gamma=2)
    frames, exact = drain(ui.check_updates(ui.AppContext(loader, LIMITS), f, 200, 1, "rejection"))
    assert frames[0] == {**frames[0], "check_n": 200, "check_len": 1, "check_rule": "rejection"}
    assert "PASS" in frames[-1]["check_summary"] and frames[-1]["check_plot"] is not None
    assert (
        exact.n == 200
        and exact.rule == "rejection"
        and exact.summary() in html.unescape(frames[-1]["check_summary"])
    )
    assert any("<progress" in fr.get("check_summary", "") for fr in frames[:-1])
    frames, broken = drain(
        ui.check_updates(ui.AppContext(loader, LIMITS), f, 200, 1, "resample-from-p")
    )
    assert "FAIL" in frames[-1]["check_summary"] and broken.rule == "resample-from-p"
    with pytest.raises(ValueError, match="samples must be in 200"):
        drain(ui.check_updates(ui.AppContext(loader, LIMITS), f, 50, 1, "rejection"))


def test_a_stopped_check_ends_after_the_sample_in_progress() -> None:
    """Stop (the session's stop event) ends the check after one more sample, with no
    result; the model thread is left idle."""
    from specviz.modelthread import MODEL_THREAD
    from tests.tiny import tiny_pair

    pair = tiny_pair()
    stop = threading.Event()
    ctx = ui.AppContext(lambda n, d: pair, LIMITS)
    updates = ui.check_updates(ctx, form(), 2000, 3, "rejection", stop)
    frames: list[dict] = []
    drawn_at_stop = None
    while True:
        try:
            frames.append(next(updates))
        except StopIteration as end:
            result = end.value
            break
        if drawn_at_stop is None and "<progress" in frames[-1].get("check_summary", ""):
            stop.set()  # the first sample is in: press Stop
            drawn_at_stop = len(frames)
    assert drawn_at_stop is not None
    assert result is None and "stopped" in frames[-1]["check_summary"]
    assert MODEL_THREAD.idle()
    after = [f for f in frames[drawn_at_stop:] if "<progress" in f.get("check_summary", "")]
    assert len(after) <= 1  # at most the sample in progress


def drain(updates):
    """Every frame a handler generator yields, and what it returns."""
    frames = []
    while True:
        try:
            frames.append(next(updates))
        except StopIteration as end:
            return frames, end.value


# --- untouched controls and the named API ----------------------------------------------


def cli_defaults(prompt: str = ui.DEFAULT_PROMPT) -> dict:
    """The settings `python -m specviz generate --prompt PROMPT` runs with."""
    from specviz.cli import args as cli
    from specviz.cli.main import build_parser

    args = build_parser().parse_args(["generate", "--prompt", prompt])
    return cli.settings_from_args(args).to_dict()


def initial_form(demo: gr.Blocks) -> ui.Form:
    """The Form the page sends for Run when nobody has touched a control: the initial value
    of every input of the run event, as the Blocks config gives it to the browser."""
    run = next(fn for fn in demo.fns.values() if fn.api_name == "run")
    components = [b for b in run.inputs if not isinstance(b, gr.State)]
    config = {c.elem_id or id(c): c.get_config()["value"] for c in components}
    values = [config[c.elem_id or id(c)] for c in components]
    assert len(values) == len(ui.FORM_FIELDS)
    return ui.Form(**dict(zip(ui.FORM_FIELDS, values, strict=True)))


def test_untouched_controls_run_with_the_cli_defaults() -> None:
    demo = ui.build_app(loader=lambda p, d: None, pairs=["default"])
    f = initial_form(demo)
    assert f.prompt == ui.DEFAULT_PROMPT and f.pair == "default" and f.compare
    assert f.settings(LIMITS).to_dict() == cli_defaults()
    from specviz.ui.pairs import compiled_by_default

    assert f.compile is compiled_by_default()  # the CLI's --compile auto on this machine
    # a lower deployment limit caps the sliders' starting points instead of failing
    small = Limits(max_new_tokens=16, max_gamma=2)
    f = initial_form(ui.build_app(loader=lambda p, d: None, pairs=["default"], limits=small))
    assert f.settings(small).to_dict() == {**cli_defaults(), "max_new_tokens": 16, "gamma": 2}


def test_the_draft_temperature_applies_only_when_switched_on() -> None:
    assert form(draft_temperature=0.0).settings(LIMITS).draft_temperature is None
    on = form(own_draft_temperature=True, draft_temperature=1.5).settings(LIMITS)
    assert on.draft_temperature == 1.5 and on.draft_warp().temperature == 1.5
    with pytest.raises(ValueError, match="draft temperature is empty"):
        form(own_draft_temperature=True, draft_temperature=None).settings(LIMITS)


def test_the_page_says_the_text_is_distributed_as_the_target(loader) -> None:
    _, frames = run_all(loader, form(temperature=0.7, top_p=0.9))
    note = frames[-1]["exact_note"]
    assert "distributed exactly as the target&#x27;s own sampling" in note.replace(
        "&#39;", "&#x27;"
    )
    assert "temperature 0.7 and top-p 0.9" in note
    _, frames = run_all(loader, form(greedy=True))
    assert "greedy decoding" in frames[-1]["exact_note"]


def test_generate_endpoint_takes_the_cli_names_and_defaults(app_url, tiny) -> None:
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    client = Client(app_url, verbose=False)
    api = client.view_api(print_info=False, return_format="dict")
    assert list(api["named_endpoints"]) == ["/generate"]  # the page's events stay off it
    params = {p["parameter_name"]: p for p in api["named_endpoints"]["/generate"]["parameters"]}
    expected = {
        k: v for k, v in cli_defaults().items() if k not in ("method", "top_n", "ngram_size")
    }
    expected = {k: v for k, v in expected.items() if k not in ("rule", "trace_level")}
    names = ["prompt", "pair", "draft", "target", *expected, "compare"]
    assert sorted(params) == sorted(set(names))
    assert not params["prompt"]["parameter_has_default"]
    for name, value in expected.items():
        assert params[name]["parameter_default"] == value, name
    assert params["compare"]["parameter_default"] is False

    out = client.predict(prompt=PROMPT, pair="tiny", max_new_tokens=12, api_name="/generate")
    trace = Trace.from_dict(out)  # the schema of `generate --json`
    assert trace.settings.to_dict() == {**cli_defaults(PROMPT), "max_new_tokens": 12}
    # the settings as asked ("auto"), and the drafter that drafted: on a pair with a draft
    # model and no measured choice, the draft model
    assert trace.settings.drafter == "auto" and trace.models["drafter"] == "model"
    assert "ar" not in out and "speedup" not in out
    settings = ui.Form(prompt=PROMPT, max_new_tokens=12).settings(LIMITS)
    assert trace.token_ids == generate(tiny, PROMPT, settings).token_ids

    out = client.predict(
        prompt=PROMPT,
        pair="tiny",
        gamma=2,
        greedy=True,
        max_new_tokens=8,
        compare=True,
        api_name="/generate",
    )
    ar = Trace.from_dict(out.pop("ar"))
    speedup = out.pop("speedup")
    spec = Trace.from_dict(out)
    assert ar.method == "ar" and spec.token_ids == ar.token_ids  # greedy, fp32
    # the baseline's seconds over the speculative run's, for the same tokens
    assert speedup == pytest.approx(ar.timeline[-1][0] / spec.timeline[-1][0])
    with pytest.raises(AppError, match="gamma must be in 1..32, got 0"):
        client.predict(prompt=PROMPT, pair="tiny", gamma=0, api_name="/generate")
    with pytest.raises(AppError, match="a custom pair needs a draft id and a target id"):
        client.predict(prompt=PROMPT, draft="owner/a", api_name="/generate")


def test_the_compile_box_puts_the_pair_on_the_compiled_path(tiny, monkeypatch) -> None:
    from specviz.ui.pairs import compile_choice as pairs_compile_choice
    from specviz.ui.pairs import open_pair

    loader = lambda pair, dtype: tiny  # noqa: E731
    monkeypatch.setattr("specviz.backend.packages.available", lambda: False)  # none built
    assert open_pair(loader, form()).compile_backend is None  # untouched: eager, as the CLI
    compiled = open_pair(loader, form(compile=True))
    assert compiled.compile_backend == "inductor" and compiled.target is tiny.target
    assert "compiled with inductor" in compiled.describe()["target"]
    assert open_pair(loader, form(compile=False)).compile_backend is None
    # where the set-up step built packages here, a ticked box takes them (auto): a pair
    # never compiled ahead of time on this machine stays eager rather than compiling
    monkeypatch.setattr("specviz.backend.packages.available", lambda: True)
    assert pairs_compile_choice(form(compile=True)) == "auto"
    assert open_pair(loader, form(compile=True)).compile_backend is None


def test_the_compile_box_starts_at_the_machine_s_default(monkeypatch) -> None:
    """Ticked where a CUDA device is (the compiled path is the default there), unticked on a
    CPU and on ZeroGPU; an untouched API call (None) takes the same default."""
    from specviz.ui import pairs

    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    monkeypatch.setattr("specviz.backend.packages.available", lambda: False)
    assert ui.Form().compile is None and pairs.compile_choice(ui.Form()) == "auto"
    assert pairs.compiled_by_default() is False  # this machine: a CPU, no packages built
    monkeypatch.setattr("specviz.backend.packages.available", lambda: True)
    assert pairs.compiled_by_default() is True  # a CPU whose set-up step built them
    monkeypatch.setattr("specviz.backend.packages.available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pairs.compiled_by_default() is True
    monkeypatch.setenv("SPACES_ZERO_GPU", "1")
    assert pairs.compiled_by_default() is False


def test_a_finished_run_measures_the_bandwidth_on_the_model_thread(tiny, loader, monkeypatch):
    """The first finished Run's frame measures the memory's bandwidth for its roofline rows,
    once per process, on the model thread: torch's parallel sum on a handler's thread would
    leave a second OpenMP team there, and every later model step would slow (on 2 cores
    the offline pair's autoregressive step went from about 20 to about 33 ms a token)."""
    from specviz import costs
    from specviz.modelthread import MODEL_THREAD

    threads: list[str] = []

    def measure(device: str) -> costs.Bandwidth:
        threads.append(threading.current_thread().name)
        return costs.Bandwidth(device, 10.0, 10.0, 10.0, "a test's")

    monkeypatch.setattr(costs, "_bandwidths", {})
    monkeypatch.setattr(costs, "measure_bandwidth", measure)
    costs.remember_pair(tiny)
    _, frames = run_all(loader, form(seed=5))
    assert threads == [MODEL_THREAD._name]
    assert "floor" in frames[-1]["time_totals"]  # the roofline rows, at that bandwidth
    run_all(loader, form(seed=6))
    assert threads == [MODEL_THREAD._name]  # measured once


def test_a_step_after_a_run_shows_its_own_figures_not_the_runs(loader) -> None:
    """The speed line after a Step speaks of the stepped run (no baseline: no speedup), never
    of the full Run shown before it."""
    session, ctx = ui.new_session(), ui.AppContext(loader, LIMITS)
    frames = list(ui.run_updates(session, form(seed=3), ctx))
    before = next(f["speedline"] for f in reversed(frames) if "speedline" in f)
    assert "speedup" in before
    out = ui.step_update(session, form(max_new_tokens=8, gamma=2), ctx)
    line = html.unescape(out["speedline"])
    assert "speedup" not in line and line != before
    n, calls = len(session.spec.token_ids), len(session.spec.rounds)
    assert f"{n} token" in line and f"{calls} call" in line, line
    status = html.unescape(str(out.get("status", "")))
    assert f"round 1 done, {n} token" in status and (n != 1 or "1 tokens" not in status), status


def test_counts_of_one_are_singular_in_the_speed_line_and_the_step_status() -> None:
    """ "1 token in 1 call", "round 1 done, 1 token": never "1 tokens" or "1 calls"."""
    from specviz.costs import SpeedStory
    from specviz.views import markup

    def story(tokens: int, calls: int) -> SpeedStory:
        return SpeedStory(tokens, calls, None, 0.0, None, "alpha", None, 4, None, None)

    one = html.unescape(markup.speedline_html(story(1, 1)))
    assert "1 token in 1 call: 0 saved" in one and "tokens in" not in one, one
    assert "9 tokens in 2 calls: 7 saved" in html.unescape(markup.speedline_html(story(9, 2)))


def test_no_event_of_an_opening_page_writes_a_state_another_one_reads() -> None:
    """The events a page fires when it opens run at once. gr.State given a function writes
    it in a load event of gradio's; the page's own load event reads and fills the session:
    whichever finished last won, and a lesson's link opened on a busy machine forgot its
    lesson (its first Step started a run of the visitor's own). Each visitor's session is
    made by gradio's session store when an event first reads it, one per visitor."""
    from gradio.state_holder import SessionState

    demo = ui.build_app(loader=lambda pair, dtype: None)
    states = {b._id: b for b in demo.blocks.values() if isinstance(b, gr.State)}
    loads = [fn for fn in demo.fns.values() if any(t[1] == "load" for t in fn.targets)]
    written = {o._id for fn in loads for o in fn.outputs if o._id in states}
    read = {i._id for fn in loads for i in fn.inputs if i._id in states}
    assert read, "the page's load event reads the session"
    assert not written & read, [states[i] for i in written & read]
    (sid,) = [i for i, b in states.items() if b.value is ui.new_session]
    first, second = (SessionState(demo)[sid] for _ in range(2))  # two visitors
    assert isinstance(first, ui.Session) and isinstance(second, ui.Session)
    assert first is not second and first.voter != second.voter and first.lock is not second.lock
