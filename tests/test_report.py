"""The prompt set report (specviz.report, `python -m specviz report`, the Prompt set tab's
handlers) on tiny pairs; its statistics checked against a computation of their own from the
rounds table (metrics.rounds_frame), not from the report's code; one short run on the real
offline pair."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from specviz.cli.main import main
from specviz.config import Settings
from specviz.report import prompts as ps
from specviz.report import run as rr
from specviz.report import stats
from specviz.report.records import read_records
from tests.tiny import TinyTokenizer, close_pair

# Token texts of the word tokenizer: one of each kind, and markup.
TEXTS = [" the", "cat", ".", " ", "7", "{", " sat", "ing", ",", "\n", " 42", "<b>", "==", "x"]
TEXTS += [" on", "s"]


class WordTokenizer(TinyTokenizer):
    """Ids as TinyTokenizer reads them; each id decodes to a word-like text."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(TEXTS[i] for i in ids)


@pytest.fixture(scope="module")
def pair(one_thread):
    p = close_pair(vocab=16, noise=0.5, sharpness=2.0)
    p.tokenizer = WordTokenizer(16, None)
    return p


SETTINGS = Settings(gamma=3, max_new_tokens=14, temperature=1.0, top_p=1.0)
LINES = [
    {"prompt": "1 2 3", "category": "qa", "id": "a"},
    {"prompt": "4 5", "category": "math", "id": "b"},
    {"prompt": "6 7 8 9", "category": "qa", "id": "c"},
    {"prompt": "3 3", "category": "my own kind", "id": "d"},
    {"prompt": "2 9 4", "category": "math", "id": "e"},
]


def prompt_list() -> list[ps.Prompt]:
    return ps.parse_jsonl("\n".join(json.dumps(x) for x in LINES))


def plan(compare: bool = False, shard: rr.Shard | None = None, **changes) -> rr.Plan:
    s = SETTINGS.with_(**changes)
    return rr.Plan(
        prompt_list(),
        s,
        {"name": "tiny"},
        compare_with="ngram" if compare else None,
        compare_settings=s.with_(drafter="ngram") if compare else None,
        shard=shard or rr.Shard(),
    )


def run_into(out: Path, p: rr.Plan, pair, stop_after: int | None = None) -> rr.ReportRun:
    run = rr.ReportRun(out, p, pair, warm=False)
    progress = iter(run)
    for n, _ in enumerate(progress, start=1):
        if stop_after is not None and n >= stop_after:
            break
    progress.close()  # as Ctrl-C or the app's Stop leaves it
    run.write()
    return run


def deterministic(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())["deterministic"]


@pytest.fixture(scope="module")
def whole(pair, tmp_path_factory):
    """One uninterrupted report with the n-gram drafter beside the model drafter."""
    out = tmp_path_factory.mktemp("whole")
    run_into(out, plan(compare=True), pair)
    return out


# --- prompts -----------------------------------------------------------------------------


def test_the_builtin_set_has_six_prompts_in_each_of_six_categories() -> None:
    prompts = ps.read_prompts("builtin")
    assert len(prompts) == 36
    assert [p.category for p in prompts] == [c for c in ps.CATEGORIES for _ in range(6)]
    assert len({p.id for p in prompts}) == 36 and len({p.text for p in prompts}) == 36
    assert all(p.text.strip() and len(p.text) < 600 for p in prompts)
    assert [p.index for p in prompts] == list(range(36))


def test_a_file_keeps_unknown_categories_and_skips_blank_lines() -> None:
    text = '{"prompt": "hi", "category": "poetry"}\n\n{"prompt": "yo", "id": 7}\n'
    a, b = ps.parse_jsonl(text)
    assert (a.category, a.id, a.line) == ("poetry", "line-1", 1)
    assert (b.category, b.id, b.line, b.index) == (ps.UNCATEGORISED, "7", 3, 1)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"prompt": "ok"}', "{not json"], "line 2: not JSON"),
        (['{"prompt": "ok"}', "", '["a list"]'], "line 3: expected a JSON object"),
        (['{"text": "no prompt"}'], "line 1: 'prompt' must be a string"),
        (['{"prompt": "ok"}', '{"prompt": "   "}'], "line 2: the prompt is empty"),
        (['{"prompt": "ok", "category": 3}'], "line 1: 'category' must be a non-empty"),
        (['{"prompt": "a", "id": "x"}', '{"prompt": "b", "id": "x"}'], "line 2: id 'x' repeats"),
        (['{"prompt": "' + "x" * 50 + '"}'], "line 1: the prompt is 50 characters; at most 40"),
        (['{"prompt": "a"}'] * 4, "line 4: more than 3 prompts"),
        ([""], "the prompt file holds no prompts"),
    ],
)
def test_a_malformed_line_is_named(lines, message) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[")):
        ps.parse_jsonl("\n".join(lines), ps.PromptLimits(max_prompts=3, max_chars=40))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "fine"}\n{"prompt": "fine too"}\n{"prompt": 3}\n', "line 3: 'prompt'"),
        ('{"prompt": ""}\n', "line 1: the prompt is empty"),
        (b'{"prompt": "a"}\n{"prompt": "\xff"}\n', "line 2: not UTF-8"),
    ],
)
def test_cli_refuses_a_malformed_file_with_exit_2_and_writes_nothing(
    capsys, tmp_path, content, message
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    assert main(["report", "--prompts", str(path), "--out", str(out)]) == 2
    std, err = capsys.readouterr()
    assert std == "" and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "2/2"], "0 <= i < n"),
        (["--shard", "x"], "--shard takes i/n"),
        (["--compare-with", "gpt-9"], "--compare-with 'gpt-9'"),
        (["--compare-with", "variant:int3"], "known variants are"),
        (["--max-new-tokens", "0"], "max_new_tokens must be"),
    ],
)
def test_cli_bad_options_are_one_line(capsys, tmp_path, argv, message) -> None:
    out = tmp_path / "out"
    assert main(["report", "--prompts", "builtin", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


def test_shards_take_every_nth_prompt() -> None:
    prompts = ps.builtin_prompts()
    shards = [rr.Shard.parse(f"{i}/4") for i in range(4)]
    held = [[p.index for p in prompts if s.holds(p)] for s in shards]
    assert held[1] == list(range(1, 36, 4)) and sorted(sum(held, [])) == list(range(36))


# --- the statistics against a computation of their own -----------------------------------


def kind_of(text: str) -> str:
    """The token kinds of TEXTS, written out by hand."""
    return {
        " the": "word start",
        "cat": "word piece",
        ".": "punctuation",
        " ": "whitespace",
        "7": "digits",
        "{": "code symbol",
        " sat": "word start",
        "ing": "word piece",
        ",": "punctuation",
        "\n": "whitespace",
        " 42": "digits",
        "<b>": "other",
        "==": "code symbol",
        "x": "word piece",
        " on": "word start",
        "s": "word piece",
    }[text]


def test_token_kinds() -> None:
    assert [stats.token_kind(t) for t in TEXTS] == [kind_of(t) for t in TEXTS]
    assert stats.token_kind("") == "whitespace" and stats.token_kind(" (") == "punctuation"
    assert stats.token_kind("x1") == "word piece" and stats.token_kind(" _x") == "other"


def test_wilson_interval_matches_the_textbook_values() -> None:
    lo, hi = stats.wilson(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)  # Wilson (1927), n = 10
    assert stats.wilson(0, 0) == (0.0, 1.0)
    lo, hi = stats.wilson(0, 20)
    assert lo == 0.0 and math.isclose(hi, 1.959963984540054**2 / (20 + 1.959963984540054**2))


def test_the_bootstrap_over_prompts_keeps_a_prompts_drafts_together() -> None:
    """Ten prompts, half accepting every draft and half none: pooled 0.5 either way. Wilson
    (drafts independent) over 1,000 drafts is narrow; resampling whole prompts is as wide as
    the prompts are few. Seeded: the same interval twice, whatever the prompts' order."""
    counts = [(100, 100)] * 5 + [(0, 100)] * 5
    lo, hi = stats.prompt_bootstrap(counts)
    wlo, whi = stats.wilson(500, 1000)
    assert lo < 0.3 and hi > 0.7 and whi - wlo < 0.07 and lo < wlo and hi > whi
    assert stats.prompt_bootstrap(list(reversed(counts))) == [lo, hi]
    # prompts that agree give a narrow interval: the width comes from between prompts
    even = stats.prompt_bootstrap([(50, 100)] * 10)
    assert even == [0.5, 0.5]
    assert stats.prompt_bootstrap([(0, 0)]) is None
    r = stats.rate(500, 1000, counts)
    assert (r["prompts_lo"], r["prompts_hi"]) == (lo, hi) and r["lo"] == wlo


def expected_from_frames(traces) -> dict:
    """Acceptance, tokens per call, P(accept k | 1..k-1), the histogram and the kinds, from
    the rounds table (one row per decision) with pandas: not the report's code."""
    import pandas as pd

    frames = []
    for n, t in enumerate(traces):
        f = metrics_frame(t)
        f["trace"] = n
        frames.append(f)
    df = pd.concat(frames)
    drafted = df[(df.kind == "drafted") & (df.status != "discarded")]
    by_pos = drafted.groupby("draft_pos").status
    cond = {int(k): (int((g == "accepted").sum()), len(g)) for k, g in by_pos}
    accepted_per_round = (
        df[df.kind == "drafted"]
        .assign(acc=lambda x: x.status == "accepted")
        .groupby(["trace", "round"])
        .acc.sum()
    )
    rounds = sum(len(t.rounds) for t in traces)
    hist = accepted_per_round.value_counts().to_dict()
    hist[0] = hist.get(0, 0) + rounds - len(accepted_per_round)  # rounds that drafted nothing
    kinds = drafted.assign(k=drafted.text.map(kind_of)).groupby("k").status
    return {
        "acceptance": (drafted.status == "accepted").mean(),
        "tokens_per_call": sum(len(t.token_ids) for t in traces) / rounds,
        "conditional": cond,
        "histogram": {str(int(k)): int(v) for k, v in sorted(hist.items()) if v},
        "kinds": {k: (int((g == "accepted").sum()), len(g)) for k, g in kinds},
        "rejected": drafted[drafted.status == "rejected"],
    }


def metrics_frame(trace):
    from specviz import metrics

    return metrics.rounds_frame(trace)


def test_statistics_equal_an_independent_computation(whole) -> None:
    det = deterministic(whole)
    records = read_records((whole / "runs.jsonl").read_text())
    assert list(det["categories"]) == ["qa", "math", "my own kind"]  # builtin order first
    groups = {c: [r.spec for r in records if r.prompt.category == c] for c in det["categories"]}
    groups["overall"] = [r.spec for r in records]
    for name, traces in groups.items():
        got = det["overall"] if name == "overall" else det["categories"][name]
        want = expected_from_frames(traces)
        assert math.isclose(got["acceptance"], want["acceptance"])
        assert math.isclose(got["tokens_per_call"], want["tokens_per_call"])
        cond = {
            r["position"]: (r["accepted"], r["verified"]) for r in got["conditional_acceptance"]
        }
        assert cond == want["conditional"]
        for r in got["conditional_acceptance"]:
            assert r["lo"] <= r["rate"] <= r["hi"]
            assert r["prompts_lo"] <= r["rate"] <= r["prompts_hi"]
        boot = got["acceptance_interval_prompts"]
        assert boot[0] <= got["acceptance"] <= boot[1]
        assert got["histogram"] == want["histogram"]
        kinds = {k: (v["accepted"], v["verified"]) for k, v in got["token_kinds"].items()}
        assert kinds == want["kinds"]
    overall = expected_from_frames(groups["overall"])
    assert 0.2 < overall["acceptance"] < 0.9  # the pair both accepts and rejects
    assert len(overall["conditional"]) == 3  # gamma 3: three positions tested
    # the costliest decisions: the rejected drafts of largest p, from the table
    rej = overall["rejected"].sort_values("p", ascending=False)
    want_p = [p for p in rej.p.tolist() if p > 0][: stats.COSTLIEST]
    assert [e["p"] for e in det["costliest"]] == want_p
    first = det["costliest"][0]
    assert first["token"] in TEXTS and first["top"] and first["trace"].startswith("traces/")
    assert math.isclose(first["accept_prob"], min(1.0, first["p"] / first["q"]), rel_tol=1e-6)


def test_timing_is_apart_and_uses_the_formulas(whole) -> None:
    from specviz import metrics

    report = json.loads((whole / "report.json").read_text())
    t = report["timing"]["overall"]
    assert "speedup" not in json.dumps(report["deterministic"]["overall"])
    a = report["deterministic"]["overall"]["expected_acceptance"]
    assert t["best_gamma"] == metrics.best_gamma(a, t["c"])
    assert math.isclose(
        t["predicted_speedup"], metrics.refined_speedup(a, 3, t["c"], t["verify_steps"])
    )
    assert t["speedup"] > 0 and len(t["per_prompt_speedup"]) == len(LINES)


def test_the_n_gram_comparison_pairs_prompts_with_bootstrap_intervals(whole) -> None:
    det = deterministic(whole)
    cmp = det["compare"]
    records = read_records((whole / "runs.jsonl").read_text())
    assert {r.compare.models["drafter"] for r in records} == {"ngram"}
    seeds = [stats.settings_dict(r.compare)["seed"] for r in records]
    assert seeds == [r.seed for r in records] == list(range(len(LINES)))
    diffs = [r.compare.stats.tokens_per_call - r.spec.stats.tokens_per_call for r in records]
    d = cmp["overall"]["paired"]["tokens_per_call"]
    assert d["n"] == len(records) and math.isclose(d["mean"], sum(diffs) / len(diffs))
    assert d["lo"] <= d["mean"] <= d["hi"]
    assert min(diffs) - 1e-12 <= d["lo"] and d["hi"] <= max(diffs) + 1e-12
    assert set(cmp["categories"]) == set(det["categories"])
    assert stats.bootstrap(diffs) == stats.bootstrap(diffs)  # fixed seed
    assert stats.bootstrap([0.5, -0.25, 0.1])["verdict"] == "no measured difference"
    assert stats.bootstrap([0.5, 0.25, 0.1])["verdict"] == "B higher"
    html = (whole / "report.html").read_text()
    assert "A against B = ngram" in html
    # the conditional acceptance figure puts B's overall line beside A's, position by position
    from specviz.report.figures import conditional_figure

    fig = conditional_figure(json.loads((whole / "report.json").read_text()))
    b = {t.name: t for t in fig.data}["ngram: overall"]
    want = [r for r in cmp["overall"]["b"]["conditional_acceptance"] if r["verified"]]
    assert list(b.x) == [r["position"] for r in want] and b.line.dash == "dash"
    assert list(b.y) == [r["rate"] for r in want]


# --- resume, shards, merge ---------------------------------------------------------------


def test_an_interrupted_run_resumes_to_the_same_report(pair, whole, tmp_path) -> None:
    out = tmp_path / "r"
    first = run_into(out, plan(compare=True), pair, stop_after=2)
    assert len(first.records) == 2
    runs = out / "runs.jsonl"
    with runs.open("a") as f:  # a kill while the third line was being written
        f.write('{"index": 2, "prompt": {"ind')
    partial = json.loads((out / "report.json").read_text())
    assert partial["deterministic"]["prompts_done"] == 2
    again = run_into(out, plan(compare=True), pair)
    assert again.resumed == 2 and len(again.records) == len(LINES)
    assert len(runs.read_text().splitlines()) == len(LINES)
    assert deterministic(out) == deterministic(whole)


def test_a_run_into_a_report_of_other_settings_is_refused(pair, whole) -> None:
    with pytest.raises(ValueError, match="holds a report of other settings .settings.gamma: 3"):
        rr.ReportRun(whole, plan(compare=True, gamma=2), pair)
    with pytest.raises(ValueError, match='compare_with: "ngram" there, null here'):
        rr.ReportRun(whole, plan(), pair)


def test_a_resume_with_another_draft_is_refused(pair, whole) -> None:
    import dataclasses

    from specviz.pair import LoadedModel

    d = pair.draft
    other = LoadedModel(d.name, d.model, d.device, "bfloat16 copy", d.vocab_size, 0.0, "test")
    with pytest.raises(ValueError, match=r"was run with other models \(draft: "):
        rr.ReportRun(whole, plan(compare=True), dataclasses.replace(pair, draft=other))


def test_two_shards_merged_equal_one_run(pair, whole, tmp_path) -> None:
    dirs = [tmp_path / f"s{i}" for i in range(2)]
    for i, d in enumerate(dirs):
        run_into(d, plan(compare=True, shard=rr.Shard(i, 2)), pair)
    assert [len(read_records((d / "runs.jsonl").read_text())) for d in dirs] == [3, 2]
    merged = tmp_path / "merged"
    assert main(["report", "merge", *map(str, dirs), "--out", str(merged)]) == 0
    assert deterministic(merged) == deterministic(whole)
    assert (merged / "report.html").exists() and (merged / "traces" / "0004-spec.json").exists()


def test_merge_refuses_missing_unfinished_and_foreign_shards(pair, tmp_path, capsys) -> None:
    s0, s1, other = tmp_path / "s0", tmp_path / "s1", tmp_path / "o"
    run_into(s0, plan(shard=rr.Shard(0, 2)), pair)
    run_into(s1, plan(shard=rr.Shard(1, 2)), pair, stop_after=1)
    run_into(other, plan(shard=rr.Shard(1, 2), gamma=2), pair, stop_after=1)
    for dirs, message in (
        ([s0], "merge needs each of shards 0/2..1/2 once"),
        ([s0, s1], "shard 1/2 has 1 of 2 prompts; finish it first"),
        ([s0, other], "is a shard of another report (settings.gamma"),
    ):
        assert main(["report", "merge", *map(str, dirs), "--out", str(tmp_path / "m")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


# --- the command line on the tiny pair ---------------------------------------------------


def test_cli_ctrl_c_keeps_finished_prompts_and_the_same_command_resumes(
    pair, whole, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("specviz.cli.report.load_pair_from_args", lambda args: pair)
    monkeypatch.setattr("specviz.cli.report.pair_identity", lambda args: {"name": "tiny"})
    monkeypatch.setattr("specviz.report.run.ReportRun._warm_up", lambda self, p: None)
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in LINES))
    out = tmp_path / "out"
    argv = ["report", "--prompts", str(path), "--out", str(out), "--gamma", "3"]
    argv += ["--max-new-tokens", "14", "--temperature", "1.0", "--top-p", "1.0"]
    argv += ["--compare-with", "ngram", "--raw"]
    real = rr.run_prompt
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rr, "run_prompt", interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "[2/5] b (math)" in err and "s per prompt, about" in err and "left" in err
    assert "stopped: 2 of 5 prompts kept" in err
    monkeypatch.setattr(rr, "run_prompt", real)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "resuming after 2 finished" in err and "[5/5]" in err
    det = deterministic(out)
    det_whole = deterministic(whole)
    assert det.pop("raw") is True and det_whole.pop("raw") is False
    assert det == det_whole  # the traces and every statistic equal the uninterrupted run's
    assert main([*argv[:-1]]) == 2  # without --raw: other settings
    assert (
        "holds a report of other settings (raw: true there, false here)" in capsys.readouterr().err
    )


# --- the page and the traces -------------------------------------------------------------


def test_the_page_is_self_contained_and_escapes_prompts_and_tokens(pair, tmp_path) -> None:
    lines = [{"prompt": "1 11 2", "category": "<script>alert(1)</script>", "id": "<i>x</i>"}]
    p = rr.Plan(ps.parse_jsonl(json.dumps(lines[0])), SETTINGS, {"name": "tiny"})
    out = tmp_path / "x"
    run_into(out, p, pair)
    html = (out / "report.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<i>x</i>" not in html and "&lt;i&gt;x&lt;/i&gt;" in html
    assert "class='tok'><b>" not in html  # the token "<b>" is text wherever it shows
    assert not re.search(r"<(script|link|img)[^>]*(src|href)=", html)  # nothing to fetch
    assert "Plotly" in html and len(html) > 1_000_000  # plotly.js inline
    assert "Data</b> tab" in html  # says how to open a trace in the app


def test_every_trace_written_loads_in_the_data_tab(whole) -> None:
    from specviz.ui.io_tab import read_trace

    files = sorted((whole / "traces").glob("*.json"))
    assert len(files) == 3 * len(LINES)  # spec, ar and the n-gram drafter's
    for f in files[:1]:  # each one renders the page's frame: about 2 s
        trace = read_trace(str(f))
        assert trace.token_ids


# --- the Prompt set tab's handler on the tiny pair ---------------------------------------


@pytest.fixture()
def model_thread_one_thread():
    """The model thread computes on one thread meanwhile (tiny models gain nothing from two,
    and on a shared 2-core CPU they cost)."""
    import torch

    from specviz.modelthread import MODEL_THREAD

    threads = MODEL_THREAD.call(torch.get_num_threads)
    MODEL_THREAD.call(lambda: torch.set_num_threads(1))
    yield
    MODEL_THREAD.call(lambda: torch.set_num_threads(threads))


def test_the_tab_runs_an_upload_and_refuses_a_bad_one(
    pair, tmp_path, model_thread_one_thread, monkeypatch
) -> None:
    from specviz.config import Limits
    from specviz.ui import report_tab
    from specviz.ui.context import AppContext
    from specviz.ui.state import Form

    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in LINES[:2]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1 2"}\n{"prompt": 5}\n')
    ctx = AppContext(lambda p, d: pair, Limits())
    form = Form(prompt="1 2", pair="tiny", max_new_tokens=6, gamma=2)
    assert "2 prompts in 2 categories" in report_tab.checked_upload(str(good))["report_status"]
    assert "refused: line 2: " in report_tab.checked_upload(str(bad))["report_status"]
    state = report_tab.ReportState()
    views = list(
        report_tab.report_updates(state, form, ctx, report_tab.FILE_CHOICE, str(good), True)
    )
    last = views[-1]
    assert "report done: 2 prompts" in last["report_status"]
    names = [Path(f).name for f in last["report_files"]]
    assert names == ["report.html", "report.json", "runs.jsonl"]
    assert "acceptance" in last["report_table"] and last["report_compare"] is not None
    refused = list(
        report_tab.report_updates(state, form, ctx, report_tab.FILE_CHOICE, str(bad), False)
    )
    assert len(refused) == 1 and "refused: line 2" in refused[0]["report_status"]
    long = Form(prompt="1 2", pair="tiny", max_new_tokens=20, gamma=2)
    five = tmp_path / "five.jsonl"
    five.write_text("\n".join(json.dumps(x) for x in LINES))
    one_prompt = rr.run_prompt

    def then_stop(*args, **kwargs):  # Stop pressed while the first prompt runs, on any machine
        report_tab.stop_report(state)
        return one_prompt(*args, **kwargs)

    monkeypatch.setattr(rr, "run_prompt", then_stop)
    views = report_tab.report_updates(state, long, ctx, report_tab.FILE_CHOICE, str(five), False)
    last = list(views)[-1]  # the prompt in progress ends, and the report stops after it
    assert "report stopped after 1 of 5 prompts" in last["report_status"]
    assert len(last["report_files"]) == 3


def test_the_tab_offers_the_quick_set_first_and_runs_it_at_32_tokens(
    text_pair, model_thread_one_thread
) -> None:
    """The quick set: the first prompt of each of the six categories, chosen by one radio
    value that the tab shows first and selected; each prompt runs 32 new tokens whatever max
    new tokens says (text_pair has no EOS: every run makes its whole budget)."""
    import gradio as gr

    from specviz.config import Limits
    from specviz.ui import report_tab
    from specviz.ui.context import AppContext
    from specviz.ui.state import Form

    quick = ps.quick_prompts()
    assert [p.category for p in quick] == list(ps.CATEGORIES) and len(quick) == 6
    assert [p.text for p in quick] == [ps.BUILTIN_SET[c][0] for c in ps.CATEGORIES]
    assert ps.read_prompts(ps.QUICK) == quick
    views: dict = {}
    with gr.Blocks():
        report_tab.layout(views)
    source = views["report_source"]
    assert source.choices[0][0] == report_tab.QUICK_CHOICE == source.value
    assert "6 prompts" in report_tab.QUICK_CHOICE and "32 tokens" in report_tab.QUICK_CHOICE

    ctx = AppContext(lambda p, d: text_pair, Limits())
    form = Form(pair="tiny", max_new_tokens=8, gamma=2)
    state = report_tab.ReportState()
    out = list(report_tab.report_updates(state, form, ctx, report_tab.QUICK_CHOICE, None, False))
    assert "report done: 6 prompts" in out[-1]["report_status"]
    records = read_records((state.out / rr.RUNS).read_text())
    assert [r.prompt.id for r in records] == [p.id for p in quick]
    assert all(len(r.spec.token_ids) == len(r.ar.token_ids) == 32 for r in records)
    manifest = json.loads((state.out / rr.MANIFEST).read_text())
    assert manifest["source"] == ps.QUICK


# --- the real offline pair, once ---------------------------------------------------------


@pytest.mark.slow
def test_builtin_report_on_the_offline_pair(offline_pair, tmp_path, monkeypatch, capsys) -> None:
    """One prompt of each category (shard 0/6 of the built-in set), 6 new tokens."""
    monkeypatch.setattr("specviz.cli.report.load_pair_from_args", lambda args: offline_pair)
    out = tmp_path / "r"
    argv = ["report", "--prompts", "builtin", "--shard", "0/6", "--max-new-tokens", "6"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    det, tim = report["deterministic"], report["timing"]
    assert list(det["categories"]) == list(ps.CATEGORIES)
    for c in ps.CATEGORIES:
        d = det["categories"][c]
        assert d["prompts"] == 1 and d["acceptance"] is not None and d["tokens_per_call"] >= 1
        assert d["conditional_acceptance"][0]["position"] == 1 and d["histogram"]
        assert tim["categories"][c]["speedup"] > 0
    assert len((out / "runs.jsonl").read_text().splitlines()) == 6
    assert "[6/6]" in capsys.readouterr().err


def test_a_prompt_beyond_the_context_is_refused_before_anything_is_written(
    pair, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("specviz.cli.report.load_pair_from_args", lambda args: pair)
    monkeypatch.setattr("specviz.cli.report.pair_identity", lambda args: {"name": "tiny"})
    path = tmp_path / "p.jsonl"
    long = " ".join(["1"] * 120)  # 120 tokens: the tiny target's context is 128
    path.write_text(json.dumps({"prompt": "1 2"}) + "\n" + json.dumps({"prompt": long, "id": "x"}))
    out = tmp_path / "out"
    argv = ["report", "--prompts", str(path), "--out", str(out), "--max-new-tokens", "14"]
    assert main([*argv, "--raw"]) == 2
    err = capsys.readouterr().err
    assert "line 2 (x): prompt (120 tokens) plus max_new_tokens (14) exceeds the model's" in err
    assert err.count("\n") == 1 and not out.exists()


@pytest.mark.slow
def test_a_draft_variant_runs_beside_the_offline_pair(offline_pair) -> None:
    from specviz.cli.report import variant_pair
    from specviz.engine import generate

    other = variant_pair(offline_pair, "fp16")
    assert other.target is offline_pair.target and other.draft.dtype == "float16 copy"
    assert offline_pair.draft.model is not other.draft.model
    trace = generate(other, "Hello", SETTINGS.with_(max_new_tokens=3))
    assert len(trace.token_ids) == 3 and "fp16" in trace.models["draft"]
