"""Hostile input: path-like and URL model ids, trust_remote_code, bad trace files, and
markup in tokens, model names and error messages."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import gradio as gr
import pytest

from specviz import models, ui
from specviz.config import Deployment, Limits
from specviz.engine import generate

ROOT = Path(__file__).resolve().parent.parent
LIMITS = Limits()
XSS = "<img src=x onerror=alert(1)><script>alert(1)</script>"

BAD_IDS = [
    "../secrets",
    "owner/../../etc",
    "/etc/passwd",
    "~/model",
    "C:\\models\\x",
    "https://example.com/model",
    "file:///etc/passwd",
    "hf://owner/name",
    "owner/name/extra",
    "owner/na me",
    "owner/na\x00me",
    ".hidden/name",
    "a" * 200,
    "offline:other",
    XSS,
]


def shown_error(handler, *args) -> str:
    """The message a handler's gr.Error carries, as the page holds it (escaped)."""
    with pytest.raises(gr.Error) as err:
        list(ui.user_errors(handler)(*args))
    return err.value.message


@pytest.mark.parametrize("model_id", BAD_IDS)
def test_path_like_and_url_model_ids_are_refused(model_id) -> None:
    with pytest.raises(ValueError, match="refused model id|unknown offline model"):
        models.check_model_id(model_id)


def test_refused_ids_reach_the_page_as_one_escaped_line(tiny) -> None:
    loaded = []
    source = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment(), lambda *a: loaded.append(a))
    for model_id in BAD_IDS:
        f = ui.Form(prompt="1 2", pair=ui.CUSTOM, custom_draft="owner/ok", custom_target=model_id)
        shown = shown_error(ui.run_updates, ui.new_session(), f, ui.AppContext(source, LIMITS))
        assert "<" not in shown and "\n" not in shown
    assert not loaded  # nothing was asked of the loader


def test_allow_list_and_custom_switch_are_enforced_on_the_server(tiny) -> None:
    only = Deployment(allowed_models=frozenset({"owner/a", "owner/b"}))
    source = ui.PairSource(lambda p, d: tiny, ["tiny"], only, lambda d, t, dt: tiny)
    assert source.custom("owner/a", "owner/b", "auto") is tiny
    with pytest.raises(ValueError, match="'owner/c' is not allowed on this deployment"):
        source.custom("owner/a", "owner/c", "auto")
    off = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment(custom_models=False))
    with pytest.raises(ValueError, match="custom model ids are turned off"):
        off.custom("owner/a", "owner/b", "auto")
    with pytest.raises(ValueError, match="unknown pair 'qwen2.5'"):  # not offered here
        off("qwen2.5", "auto")


def test_trust_remote_code_is_never_turned_on(monkeypatch, tiny) -> None:
    import transformers

    calls: list[dict] = []

    def record(result):
        def from_pretrained(*args, **kwargs):
            calls.append(kwargs)
            return result

        return staticmethod(from_pretrained)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", record(tiny.tokenizer))
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", record(tiny.target.model)
    )
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})
    models.load_pair(draft="owner/draft", target="owner/target", device="cpu")
    assert len(calls) == 4 and all(c.get("trust_remote_code") is False for c in calls)
    for path in (ROOT / "specviz").glob("*.py"):
        assert not re.search(r"trust_remote_code\s*=\s*True", path.read_text()), path


# --- trace files -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_trace_dict(tiny) -> dict:
    settings = ui.Form(prompt="1 2 3", max_new_tokens=12, gamma=3).settings(LIMITS)
    return generate(tiny, "1 2 3", settings).to_dict()


def bad_files(good: dict) -> dict[str, tuple[bytes, str]]:
    def variant(**changes) -> bytes:
        return json.dumps({**good, **changes}).encode()

    first = good["rounds"][0]
    return {
        "oversized": (b" " * ui.MAX_IMPORT_BYTES + b"{}", "larger than 5 MB"),
        "not JSON": (b"{'schema': 1,", "not a JSON trace"),
        "not UTF-8": (b"\xff\xfe\x00garbage", "not a JSON trace"),
        "empty": (b"", "not a JSON trace"),
        "a list": (b"[1, 2, 3]", "trace must be dict"),
        "nested 100000 deep": (b"[" * 100_000 + b"]" * 100_000, "not a JSON trace"),
        "other schema": (variant(schema="evil/9"), "unsupported trace schema"),
        "method": (variant(method="exec"), "trace.method must be 'spec' or 'ar'"),
        "missing key": (
            json.dumps({k: v for k, v in good.items() if k != "rounds"}).encode(),
            "missing the key 'rounds'",
        ),
        "token ids as text": (variant(token_ids=["1", "2"]), "trace.token_ids must be int"),
        "NaN probability": (
            variant(rounds=[{**first, "drafted": [{**first["drafted"][0], "p": float("nan")}]}]),
            "must be number",
        ),
        "status": (
            variant(rounds=[{**first, "drafted": [{**first["drafted"][0], "status": "pwned"}]}]),
            "status must be one of",
        ),
        "stop reason": (variant(stop_reason="rm -rf"), "trace.stop_reason must be one of"),
        "settings": (
            variant(settings={**good["settings"], "gamma": "many"}),
            "trace.settings: gamma must be an integer",
        ),
    }


def test_bad_trace_files_are_refused_with_a_clear_message(tmp_path, good_trace_dict, tiny) -> None:
    session = ui.new_session()
    list(
        ui.run_updates(
            session,
            ui.Form(prompt="1 2", max_new_tokens=6),
            ui.AppContext(lambda p, d: tiny, LIMITS),
        )
    )
    before = session.spec.token_ids
    seen = {}
    for name, (data, message) in bad_files(good_trace_dict).items():
        path = tmp_path / "trace.json"
        path.write_bytes(data)
        shown = html.unescape(shown_error(ui.import_updates, session, str(path)))
        seen[name] = shown
        assert message in shown, (name, shown)
        assert "\n" not in shown and len(shown) < 400, name
        assert session.spec.token_ids == before  # the tab's own trace is untouched
    good = tmp_path / "good.json"
    good.write_text(json.dumps(good_trace_dict))
    frames = list(ui.import_updates(session, str(good)))
    assert session.spec.token_ids == good_trace_dict["token_ids"] and frames


# --- escaping ---------------------------------------------------------------------------


def test_markup_in_tokens_and_model_names_is_escaped(tmp_path, good_trace_dict) -> None:
    d = json.loads(json.dumps(good_trace_dict))
    d["models"] = {"pair": XSS, "target": XSS, "draft": XSS}
    d["prompt"] = XSS
    for r in d["rounds"]:
        for x in r["drafted"]:
            x["text"] = XSS
            for t in x["top"]:
                t["text"] = XSS
        if r["added"]:
            r["added"]["text"] = XSS
    d["token_texts"] = [XSS] * len(d["token_ids"])
    path = tmp_path / "xss.json"
    path.write_text(json.dumps(d))
    session = ui.new_session()
    frames = list(ui.import_updates(session, str(path)))
    html_out = [v for f in frames for v in f.values() if isinstance(v, str)]
    assert any("&lt;script&gt;" in v for v in html_out)
    assert any("&lt;img" in v for v in frames[-1]["models"].split("<td>"))
    for text in html_out:
        assert (
            "<script" not in text
            and "<img" not in text
            and "onerror=alert" not in text.replace("onerror=alert(1)&gt;", "")
        )


def test_markup_in_error_messages_is_escaped(tiny) -> None:
    source = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment())
    for f in (
        ui.Form(prompt="1 2", pair=XSS),
        ui.Form(prompt="1 2", pair=ui.CUSTOM, custom_draft=XSS, custom_target="a/b"),
        ui.Form(prompt="1 2", pair="tiny", drafter=XSS),
    ):
        shown = shown_error(ui.run_updates, ui.new_session(), f, ui.AppContext(source, LIMITS))
        assert "<" not in shown and "&lt;" in shown
