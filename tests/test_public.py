"""A public deployment loads only what its host allows: no custom pair where SPACE_ID (or
SPECVIZ_PUBLIC) says the server is public, hub ids sized from the hub's metadata before any
weight or tokenizer file downloads and refused above the server's budget, one hub load at a
time, and a bounded set of loaded pairs. The hub is never reached: its metadata is stubbed,
the small JSON files the size check reads are served from the test, and every other
function that would download is replaced by one that records the call (tests/test_hub_size.py
covers which files are counted)."""

from __future__ import annotations

import html
import json
import threading
from types import SimpleNamespace

import gradio as gr
import huggingface_hub
import huggingface_hub.constants
import pytest
import transformers
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
from huggingface_hub.hf_api import RepoSibling

from specviz import hub, models, ui
from specviz.backend.offline import OFFLINE_DRAFT, OFFLINE_TARGET
from specviz.config import Deployment, Limits
from specviz.engine import Run, generate
from tests.tiny import tiny_model

LIMITS = Limits()
DRAFT, TARGET = "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"
# what the hub lists for them (sizes in bytes, as model_info(files_metadata=True) gives them)
REPOS = {
    DRAFT: {"model.safetensors": 988_097_824, "config.json": 659, "tokenizer.json": 7_031_645},
    TARGET: {
        **{f"model-0000{i}-of-00004.safetensors": 3_800_000_000 for i in range(1, 5)},
        "model.safetensors.index.json": 27_000,
        "original/consolidated.safetensors": 15_200_000_000,  # never loaded by transformers
        "config.json": 663,
    },
    # no model.safetensors: transformers loads the .bin, whatever the decoy beside it
    "someone/decoy": {"decoy.safetensors": 1_000, "pytorch_model.bin": 20_000_000_000},
    # shards without their index: nothing transformers would load
    "someone/no-index": {f"model-0000{i}-of-00002.safetensors": 1_000 for i in (1, 2)},
    "small/draft": {"model.safetensors": 100_000_000},
    "small/target": {"model.safetensors": 400_000_000},
}
# the JSON files the size check reads (config.json is {} where not given here)
BODIES = {
    (TARGET, "model.safetensors.index.json"): {
        "metadata": {"total_size": 15_200_000_000},
        "weight_map": {f"layer.{i}": f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)},
    }
}
GATED, MISSING = "meta-llama/Llama-3.1-8B-Instruct", "nobody/no-such-model"


def http_error(cls: type, status: int, model_id: str) -> Exception:
    """The hub library's own exception, as its HTTP layer raises it."""
    try:
        import httpx2 as httpx
    except ImportError:  # the HTTP client huggingface_hub uses, under its usual name
        import httpx
    url = f"https://huggingface.co/api/models/{model_id}"
    response = httpx.Response(status, request=httpx.Request("GET", url))
    return cls(f"{status} Client Error.\n\nRepository Not Found for url: {url}.", response=response)


@pytest.fixture()
def stub_hub(monkeypatch, tmp_path):
    """The hub online, answering model_info from REPOS (a gated and a missing repository
    raise the hub library's exceptions) and hf_hub_download of a listed JSON file (a config,
    an index: what the size check reads) from BODIES; every other download records its call
    in the list it returns. The server has 24 GB of memory: its budget is 40 % of that,
    9.6 GB."""
    asked: list[str] = []
    downloads: list[tuple] = []

    def model_info(self, repo_id, *, files_metadata=False, **kwargs):
        asked.append(repo_id)
        assert files_metadata  # sizes come only with the files' metadata
        if repo_id == GATED:
            raise http_error(GatedRepoError, 401, repo_id)
        if repo_id not in REPOS:
            raise http_error(RepositoryNotFoundError, 404, repo_id)
        siblings = [RepoSibling(name, size=size) for name, size in REPOS[repo_id].items()]
        return SimpleNamespace(id=repo_id, siblings=siblings)

    def download(name):
        def record(*args, **kwargs):
            downloads.append((name, args))
            raise AssertionError(f"{name} was called")

        return record

    def hf_hub_download(repo_id, filename, **kwargs):
        if not filename.endswith(".json") or filename not in REPOS.get(repo_id, {}):
            return download("hf_hub_download")(repo_id, filename)
        path = tmp_path / repo_id.replace("/", "--") / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(BODIES.get((repo_id, filename), {})))
        return str(path)

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    for name in ("hf_hub_download", "snapshot_download"):
        monkeypatch.setattr(huggingface_hub.file_download, name, download(name), raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download("snapshot_download"))
    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", staticmethod(download(cls.__name__)))
    monkeypatch.setattr(hub, "ram_bytes", lambda: 24_000_000_000)
    monkeypatch.delenv("SPECVIZ_MODEL_BUDGET_GB", raising=False)
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})
    return SimpleNamespace(asked=asked, downloads=downloads)


def custom(draft: str, target: str, **changes) -> ui.Form:
    return ui.Form(
        prompt="1 2 3",
        pair=ui.CUSTOM,
        custom_draft=draft,
        custom_target=target,
        max_new_tokens=8,
        **changes,
    )


def shown_error(source: ui.PairSource, form: ui.Form) -> str:
    """The one line the page shows for a run of this form (the gr.Error's message)."""
    with pytest.raises(gr.Error) as err:
        list(ui.user_errors(ui.run_updates)(ui.new_session(), form, ui.AppContext(source, LIMITS)))
    return html.unescape(err.value.message)


REFUSALS = [
    pytest.param(
        DRAFT,
        TARGET,
        "refused Qwen/Qwen2.5-7B-Instruct: 15.2 GB of weights, above this server's budget of "
        "9.6 GB (40 % of its memory)",
        id="over-budget",
    ),
    pytest.param(
        DRAFT,
        "someone/decoy",
        "refused someone/decoy: 20.0 GB of weights, above this server's budget of 9.6 GB (40 % "
        "of its memory)",
        id="decoy",
    ),
    pytest.param(
        DRAFT,
        "someone/no-index",
        "refused someone/no-index: it has no weight file transformers loads (model.safetensors, "
        "model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json at its "
        "top level)",
        id="unsizeable",
    ),
    pytest.param(
        DRAFT,
        GATED,
        f"refused {GATED}: the repository is gated on the hub, and this server has no access",
        id="gated",
    ),
    pytest.param(
        DRAFT,
        MISSING,
        f"refused {MISSING}: no model of that id on the hub (or it is private)",
        id="missing",
    ),
    pytest.param(
        DRAFT,
        "owner/../../etc",
        "refused model id 'owner/../../etc': expected a hub id like 'owner/name'",
        id="malformed",
    ),
]


@pytest.mark.parametrize(("draft", "target", "line"), REFUSALS)
def test_a_refused_hub_id_is_one_line_before_any_download(stub_hub, tiny, draft, target, line):
    source = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment())  # the real custom loader
    shown = shown_error(source, custom(draft, target))
    assert line in shown and "\n" not in shown, shown
    assert not stub_hub.downloads  # refused before anything was fetched
    malformed = ".." in target
    assert stub_hub.asked == ([] if malformed else [target])  # the target is sized first
    session = ui.new_session()  # the app keeps serving: a following run works
    again = ui.Form(prompt="1 2 3", pair="tiny", max_new_tokens=6)
    frames = list(ui.run_updates(session, again, ui.AppContext(source, LIMITS)))
    assert frames and len(session.spec.token_ids) == 6
    assert not models._pairs and not models._models  # nothing half-loaded is kept


def test_refusals_reach_a_served_apps_client_as_one_line(stub_hub, tiny) -> None:
    """Against the launched app, through gradio_client's /generate: each refusal is one
    line, nothing downloads, and the next request is served."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    demo = ui.build_app(loader=lambda p, d: tiny, pairs=["tiny"], deployment=Deployment())
    demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    try:
        client = Client(demo.local_url, verbose=False)
        for case in REFUSALS:
            draft, target, line = case.values
            with pytest.raises(AppError) as err:
                client.predict(prompt="1 2 3", draft=draft, target=target, api_name="/generate")
            shown = html.unescape(str(err.value))
            assert line in shown and "\n" not in shown, shown
            out = client.predict(
                prompt="1 2 3", pair="tiny", max_new_tokens=5, api_name="/generate"
            )
            assert len(out["token_ids"]) == 5
    finally:
        demo.close()
    assert not stub_hub.downloads


def test_the_budget_is_a_share_of_memory_or_the_hosts_setting(monkeypatch) -> None:
    import torch

    monkeypatch.delenv("SPECVIZ_MODEL_BUDGET_GB", raising=False)
    monkeypatch.setattr(hub, "ram_bytes", lambda: 16_000_000_000)
    b = hub.budget(torch.device("cpu"))
    assert (b.bytes, b.text()) == (6_400_000_000, "6.4 GB (40 % of its memory)")
    monkeypatch.setenv("SPECVIZ_MODEL_BUDGET_GB", "2.5")
    assert hub.budget(torch.device("cpu")).text() == "2.5 GB (SPECVIZ_MODEL_BUDGET_GB)"
    for bad in ("0", "-1", "lots", "inf"):
        monkeypatch.setenv("SPECVIZ_MODEL_BUDGET_GB", bad)
        with pytest.raises(ValueError, match="SPECVIZ_MODEL_BUDGET_GB must be a number of GB"):
            hub.budget(torch.device("cpu"))
    assert 0 < hub.ram_bytes()  # the machine's own, cgroup limit included
    monkeypatch.delenv("SPECVIZ_MODEL_BUDGET_GB")
    gpu = SimpleNamespace(total_memory=80_000_000_000)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: gpu)
    cuda = torch.device("cuda")
    assert hub.budget(cuda).text() == "32.0 GB (40 % of its GPU's memory)"
    assert hub.budget(cuda, spread=True).text() == "64.0 GB (40 % of its GPUs' memory)"

    def no_gpu_yet(i):
        raise RuntimeError("no CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_gpu_yet)
    assert hub.budget(cuda).text() == "6.4 GB (40 % of its memory)"  # ZeroGPU's start-up


def test_a_pair_is_refused_when_its_models_fit_alone_but_not_together(stub_hub, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MODEL_BUDGET_GB", "0.45")
    with pytest.raises(ValueError) as err:
        models.load_pair(draft="small/draft", target="small/target", device="cpu", guarded=True)
    assert str(err.value) == (
        "refused small/target with small/draft: 500.0 MB of weights together, above this "
        "server's budget of 450.0 MB (SPECVIZ_MODEL_BUDGET_GB)"
    )
    assert not stub_hub.downloads


def test_the_size_comes_from_the_hub_cache_when_the_hub_is_offline(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE=1: nothing is asked of the hub; a cached model is sized from its
    cached files (links into blobs/, as the hub client stores them), one not cached is
    refused in one line."""
    from tests.test_hub import REVISION

    repo = tmp_path / "models--owner--cached"
    snapshot, blobs = repo / "snapshots" / REVISION, repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    files = {"config.json": b"{}", "model.safetensors": b"x" * 3_000, "extra.bin": b"x" * 50}
    for name, data in files.items():
        (blobs / name).write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/{name}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda *a, **k: pytest.fail("asked"))
    assert hub.weight_bytes("owner/cached") == 3_000 + 2  # the weights and config.json
    with pytest.raises(ValueError) as err:
        hub.weight_bytes("owner/elsewhere")
    assert str(err.value) == (
        "refused owner/elsewhere: its size could not be read (the hub is offline here: "
        "HF_HUB_OFFLINE=1) and it is not in this server's hub cache"
    )


# --- a public deployment -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "custom_on"),
    [
        ({}, True),
        ({"SPACE_ID": "someone/specviz"}, False),
        ({"SPECVIZ_PUBLIC": "1"}, False),
        ({"SPACE_ID": "someone/specviz", "SPECVIZ_CUSTOM_MODELS": "1"}, True),
        ({"SPECVIZ_CUSTOM_MODELS": "0"}, False),
    ],
)
def test_a_public_deployment_offers_no_custom_pair(monkeypatch, env, custom_on) -> None:
    for name in ("SPACE_ID", "SPECVIZ_PUBLIC", "SPECVIZ_CUSTOM_MODELS", "SPECVIZ_ALLOWED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    dep = Deployment.from_env()
    assert dep.custom_models == custom_on
    assert dep.public == ("SPACE_ID" in env or "SPECVIZ_PUBLIC" in env)
    demo = ui.build_app(loader=lambda p, d: None, runner=ui.LocalRunner())  # as app.py builds it
    config = demo.get_config_file()
    props = [c["props"] for c in config["components"]]
    menu = next(p for p in props if p.get("label", "").startswith("pair"))
    assert (ui.CUSTOM in [choice[0] for choice in menu["choices"]]) == custom_on
    boxes = [p for p in props if p.get("label", "").startswith("custom")]
    assert len(boxes) == 2
    by_id = {c["id"]: c for c in config["components"]}
    parent = _parents(config["layout"])
    for box in boxes:
        node, shown = next(c["id"] for c in config["components"] if c["props"] is box), True
        while node in parent:  # hidden where the box or any block around it is
            shown = shown and by_id[node]["props"].get("visible", True) is not False
            node = parent[node]
        assert shown == custom_on
    if not custom_on:  # and a custom pair sent anyway is refused on the server
        source = ui.PairSource(lambda p, d: None, ["default"], dep)
        with pytest.raises(ValueError, match="custom model ids are turned off"):
            source.custom(DRAFT, TARGET, "auto")


def _parents(node: dict, parent: int | None = None, out: dict | None = None) -> dict[int, int]:
    """Each component's parent in the Blocks' layout tree."""
    out = {} if out is None else out
    if parent is not None:
        out[node["id"]] = parent
    for child in node.get("children", []):
        _parents(child, node["id"], out)
    return out


# --- one hub load at a time ----------------------------------------------------------------


def test_a_second_hub_load_meanwhile_is_one_line_and_waits_for_nobody(tiny, monkeypatch):
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})
    loading, release = threading.Event(), threading.Event()

    def slow_custom(draft, target, dtype):
        loading.set()
        assert release.wait(30)
        return tiny

    source = ui.PairSource(lambda p, d: tiny, ["tiny"], Deployment(), slow_custom)
    first = ui.new_session()
    errors: list[BaseException] = []

    def visitor_a():
        try:
            list(
                ui.run_updates(first, custom("a/draft", "a/target"), ui.AppContext(source, LIMITS))
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    a = threading.Thread(target=visitor_a)
    a.start()
    try:
        assert loading.wait(30)
        shown = shown_error(source, custom("b/draft", "b/target"))
        assert shown == (
            "another model is loading (a/draft -> a/target); try again when it has loaded"
        )
    finally:
        release.set()
        a.join(60)
    assert not errors and first.spec.token_ids
    assert not hub.LOADS.busy()
    second = ui.new_session()  # once the first has loaded, the second visitor's load runs
    list(ui.run_updates(second, custom("b/draft", "b/target"), ui.AppContext(source, LIMITS)))
    assert second.spec.token_ids


# --- a bounded set of loaded pairs ---------------------------------------------------------


@pytest.fixture()
def fake_hub_models(monkeypatch, tiny):
    """Hub ids that load as fresh tiny models (one object per id and load), with the tiny
    tokenizer, and empty model caches; the list records every model load."""
    loads: list[str] = []

    def model(model_id, **kwargs):
        loads.append(model_id)
        return tiny_model(8, seed=len(loads))

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", staticmethod(model))
    monkeypatch.setattr(
        transformers.AutoTokenizer, "from_pretrained", staticmethod(lambda *a, **k: tiny.tokenizer)
    )
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})
    monkeypatch.delenv("SPECVIZ_MODEL_BUDGET_GB", raising=False)
    return loads


def load(draft: str, target: str, guarded: bool = False):
    return models.load_pair(
        draft=draft, target=target, device="cpu", dtype="float32", guarded=guarded
    )


def kept_ids() -> set[str]:
    return {k[0] for k in models._models}


def test_the_least_recently_used_pair_is_released_beyond_the_count(fake_hub_models, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "2")
    a = load("x/draft", "a/target")
    b = load("x/draft", "b/target")  # shares its draft with a
    assert load("x/draft", "a/target") is a  # a is now the most recently used
    settings = ui.Form(prompt="1 2 3", max_new_tokens=6).settings(LIMITS)
    in_flight = Run(b, "1 2 3", settings)  # a visitor's run of b, one round in
    updates = iter(in_flight)
    next(updates)
    c = load("c/draft", "c/target")
    assert [p.target.name for p in models._pairs.values()] == ["a/target", "c/target"]
    assert kept_ids() == {"x/draft", "a/target", "c/draft", "c/target"}  # b's target went
    list(updates)  # the run in flight ends as it would have: it holds b's models
    assert in_flight.trace.token_ids == generate(b, "1 2 3", settings).token_ids
    assert len(in_flight.trace.token_ids) == 6
    load("c/draft", "a/target")  # a's draft x is used by no kept pair once a goes
    assert [p.target.name for p in models._pairs.values()] == ["c/target", "a/target"]
    assert "x/draft" not in kept_ids() and c is models._pairs[next(iter(models._pairs))]
    assert fake_hub_models.count("a/target") == 1  # kept as the new pair's target, not reloaded


def test_the_offline_pair_is_pinned(fake_hub_models, monkeypatch, tiny):
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "1")
    pinned = ("default", OFFLINE_DRAFT, OFFLINE_TARGET, "cpu", "torch.float32", "", "auto")
    models._pairs[pinned] = tiny
    load("x/draft", "a/target")
    load("x/draft", "b/target")
    assert list(models._pairs)[0] == pinned and len(models._pairs) == 2


def test_the_kept_weights_stay_within_the_budget(fake_hub_models, monkeypatch):
    """Two pairs are allowed by count, but the budget holds one: the older is released
    before the newer loads."""
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "4")
    one = sum(t.numel() * t.element_size() for t in tiny_model(8, 0).state_dict().values())
    monkeypatch.setattr(hub, "weight_bytes", lambda model_id: one)
    monkeypatch.setenv("SPECVIZ_MODEL_BUDGET_GB", str(3.5 * one / 1e9))  # three models' worth
    load("a/draft", "a/target", guarded=True)
    load("b/draft", "b/target", guarded=True)
    assert [p.target.name for p in models._pairs.values()] == ["b/target"]
    assert kept_ids() == {"b/draft", "b/target"}
