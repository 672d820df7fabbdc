"""A target whose layers a device map spreads out (accelerate's hooks), and the setting
SPECVIZ_DEVICE_MAP that asks for it.

On a CPU-only machine the only other place accelerate can put a block is the disk: the
split target below keeps one layer and its final norm in memory, and its embedding, second
layer and LM head offloaded to disk, run on the CPU by hooks that load their weights for
each call. That exercises the same dispatch, hooks and meta-device parameters as layers
spread over several GPUs; that logits from the last GPU are handed over on the rule's
device is checked with the meta device standing in for another one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from specviz import models
from specviz.config import Settings
from specviz.engine import generate
from specviz.lm import CachedLM
from specviz.pair import LoadedModel, ModelPair
from tests.tiny import TinyTokenizer, tiny_model

VOCAB = 16
SPLIT = {
    "model.embed_tokens": "disk",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "cpu",
    "lm_head": "disk",
}


def two_layer_target(seed: int = 0) -> LlamaForCausalLM:
    return tiny_model(VOCAB, seed, layers=2)


@pytest.fixture(scope="module")
def saved_target(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("target")
    two_layer_target().save_pretrained(d)
    return d


def pair_with(target: torch.nn.Module) -> ModelPair:
    def loaded(name: str, model: torch.nn.Module) -> LoadedModel:
        return LoadedModel(name, model, torch.device("cpu"), "float32", VOCAB, 0.0, "test")

    return ModelPair(
        name="tiny",
        target=loaded("tiny-target", target),
        draft=loaded("tiny-draft", tiny_model(VOCAB, seed=1)),
        tokenizer=TinyTokenizer(VOCAB, None),
        eos_ids=frozenset(),
        context_len=128,
    )


@pytest.fixture(scope="module")
def whole_and_split(saved_target, tmp_path_factory) -> tuple[ModelPair, ModelPair]:
    load = AutoModelForCausalLM.from_pretrained
    whole = load(saved_target, dtype=torch.float32).eval()
    offload = tmp_path_factory.mktemp("offload")
    split = load(saved_target, dtype=torch.float32, device_map=SPLIT, offload_folder=offload)
    return pair_with(whole), pair_with(split.eval())


def test_the_split_target_really_is_dispatched(whole_and_split) -> None:
    split = whole_and_split[1].target.model
    assert split.hf_device_map == SPLIT
    assert hasattr(split.model.layers[1], "_hf_hook")  # accelerate runs it
    assert split.model.layers[1].mlp.up_proj.weight.device.type == "meta"  # not in memory
    assert split.model.layers[0].mlp.up_proj.weight.device.type == "cpu"
    assert whole_and_split[1].target.describe() == "tiny-target on cpu+disk (float32)"
    assert "on cpu" in whole_and_split[0].target.describe()


@pytest.mark.parametrize("method", ["spec", "ar"])
@pytest.mark.parametrize("greedy", [True, False])
def test_a_split_target_generates_exactly_like_the_whole_one(
    whole_and_split, one_thread, method, greedy
) -> None:
    s = Settings(method=method, greedy=greedy, gamma=3, max_new_tokens=24, seed=7)
    whole, split = (generate(pair, "1 2 3", s) for pair in whole_and_split)
    assert len(whole.token_ids) == 24
    assert split.token_ids == whole.token_ids
    assert decisions(split) == decisions(whole)  # the same u, p, q and statuses every round


def decisions(trace) -> list[dict]:
    """The rounds without their timings."""
    clocks = ("draft_ms", "verify_ms", "t_s")
    return [{k: v for k, v in vars(r).items() if k not in clocks} for r in trace.rounds]


def test_logits_are_handed_over_on_the_rules_device() -> None:
    model = tiny_model(VOCAB, seed=0)
    lm = CachedLM(model, VOCAB, out_device=torch.device("meta"))
    assert lm.device.type == "cpu"  # the input ids still go where the model is
    assert lm.logits([1, 2, 3], keep=2).device.type == "meta"
    assert CachedLM(model, VOCAB).logits([1, 2]).device.type == "cpu"


# --- the setting --------------------------------------------------------------------------


@pytest.fixture()
def fake_hub(monkeypatch, saved_target):
    """load_pair on custom ids, with the hub replaced by the saved tiny target: records the
    device_map each from_pretrained call gets, and loads with it for real."""
    for name in ("_models", "_tokenizers", "_pairs"):
        monkeypatch.setattr(models, name, {})
    monkeypatch.setattr(models, "_get_tokenizer", lambda model_id: TinyTokenizer(VOCAB, None))
    maps: dict[str, object] = {}
    real = AutoModelForCausalLM.from_pretrained

    def from_pretrained(model_id, **kw):
        maps[model_id] = kw.get("device_map")
        return real(saved_target, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.delenv("SPECVIZ_DEVICE_MAP", raising=False)
    return maps


def load() -> ModelPair:
    return models.load_pair(draft="owner/draft", target="owner/target", device="cpu")


def test_by_default_both_models_load_straight_onto_the_device(fake_hub) -> None:
    pair = load()
    assert fake_hub == {"owner/target": "cpu", "owner/draft": "cpu"}
    assert pair.target.model.device.type == "cpu"


def test_the_setting_spreads_the_target_only(fake_hub, monkeypatch, one_thread) -> None:
    s = Settings(max_new_tokens=12, seed=3)
    plain = generate(load(), "1 2", s)
    monkeypatch.setenv("SPECVIZ_DEVICE_MAP", "auto")  # read at the next load, not before
    pair = load()
    assert fake_hub == {"owner/target": "auto", "owner/draft": "cpu"}
    # accelerate finds one CPU here, so "auto" places the whole target on it
    assert generate(pair, "1 2", s).token_ids == plain.token_ids


def test_a_bad_setting_is_one_line_naming_the_variable(fake_hub, monkeypatch) -> None:
    monkeypatch.setenv("SPECVIZ_DEVICE_MAP", "everywhere")
    with pytest.raises(ValueError, match="^environment variable SPECVIZ_DEVICE_MAP must be") as e:
        load()
    assert "\n" not in str(e.value) and not fake_hub


def test_the_readme_documents_the_setting() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Deploying", 1)[1].split("\n## ", 1)[0]
    assert "| `SPECVIZ_DEVICE_MAP` |" in section and "SPECVIZ_DEVICE_MAP=auto" in section
