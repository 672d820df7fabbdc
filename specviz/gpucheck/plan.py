"""The GPU check's plan and networks: the sizes measured (about 1B drafting for about 8B,
or tiny ones on the CPU), Llama networks with random weights built from ``LlamaConfig``
(nothing is downloaded), and the token ids they read."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.config import Settings
from specviz.pair import LoadedModel, ModelPair

SCHEMA = "specviz-gpu-check/1"


ALPHAS = (0.6, 0.8, 0.9)


MAX_VERIFY = 9  # positions of the largest verify call measured: gamma up to 8


GAMMA = Settings().gamma  # drafts per round in the engine-overhead comparison: the default


def shape(
    hidden: int, ffn: int, layers: int, heads: int, kv_heads: int, vocab: int, tied: bool
) -> dict[str, Any]:
    """LlamaConfig fields of one network's shape."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


# Llama 3.2 1B and Llama 3.1 8B shapes; tiny ones for the CPU run.
SHAPES = {
    "gpu": {
        "draft": shape(2048, 8192, 16, 32, 8, 128256, tied=True),
        "target": shape(4096, 14336, 32, 32, 8, 128256, tied=False),
    },
    "tiny": {
        "draft": shape(32, 64, 1, 4, 2, 512, tied=True),
        "target": shape(64, 128, 2, 4, 2, 512, tied=False),
    },
}


@dataclass(frozen=True)
class Plan:
    """How much to measure: the GPU run's sizes (the defaults), or the tiny CPU run's."""

    size: str = "gpu"  # "gpu" | "tiny"
    device: torch.device = torch.device("cuda")
    dtype: torch.dtype = torch.bfloat16
    prompt_tokens: int = 256
    warm: int = 5  # warm-up calls before timed ones
    reps: int = 30  # timed calls of one model step
    runs: int = 3  # timed generations per contender and length
    rounds: tuple[int, int] = (8, 32)  # rounds of the short and the long generation
    compile: str = "inductor"  # "inductor" | "eager" | "off"
    budget_s: float = 300.0  # compiling is skipped once this much time has gone
    check_n: int = 1000  # samples per rule in the distribution check on the device

    @classmethod
    def make(cls, tiny: bool, compile: str | None, budget_s: float | None) -> Plan:
        if not tiny and not torch.cuda.is_available():
            raise ValueError("no CUDA device is available: run with --tiny for the CPU run")
        plan = TINY if tiny else cls()
        return replace(plan, compile=compile or plan.compile, budget_s=budget_s or plan.budget_s)


# Every stage of the GPU run, at toy sizes on the CPU.
TINY = Plan(
    "tiny",
    torch.device("cpu"),
    torch.float32,
    prompt_tokens=16,
    warm=1,
    reps=3,
    runs=1,
    rounds=(2, 4),
    compile="eager",
    budget_s=120.0,
    check_n=300,
)


def build(
    fields: dict[str, Any],
    plan: Plan,
    seed: int,
    zero_norm: bool = True,
    sharpness: float | None = None,
) -> LlamaForCausalLM:
    """A random-weight Llama network on the plan's device, final norm zeroed (see above)
    unless zero_norm is False; a sharpness scales the output layer to that standard
    deviation, so that its distributions are far from uniform."""
    config = LlamaConfig(max_position_embeddings=4096, rope_theta=500000.0, **fields)
    with torch.random.fork_rng(devices=[]), torch.device(plan.device):
        torch.manual_seed(seed)
        model = LlamaForCausalLM._from_config(config, dtype=plan.dtype)
    with torch.no_grad():
        if zero_norm:
            model.model.norm.weight.zero_()
        if sharpness is not None:
            model.lm_head.weight.mul_(sharpness / model.lm_head.weight.std())
    return model.eval()


def close_draft(target: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """The target with its output layer perturbed by noise times its standard deviation (a
    copy): a draft whose greedy and sampled drafts are often, not always, accepted."""
    draft = copy.deepcopy(target)
    w = draft.lm_head.weight
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w.add_((torch.randn(w.shape, generator=g) * noise * w.std().item()).to(w))
    return draft.eval()


def pair_of(
    draft: LlamaForCausalLM, target: LlamaForCausalLM, plan: Plan, draft_name: str
) -> ModelPair:
    """The engine's pair of two of the check's networks, with the id tokenizer."""
    vocab = target.config.vocab_size
    dev, dt = plan.device, str(plan.dtype).removeprefix("torch.")
    return ModelPair(
        name="gpu-check",
        target=LoadedModel("target", target, dev, dt, vocab, 0.0, "random"),
        draft=LoadedModel(draft_name, draft, dev, dt, vocab, 0.0, "random"),
        tokenizer=IdTokenizer(vocab),
        eos_ids=frozenset(),
        context_len=target.config.max_position_embeddings,
    )


def twin(model: LlamaForCausalLM, plan: Plan) -> LlamaForCausalLM:
    """A second module holding the very same weight tensors (no copy): a draft = target."""
    with torch.device(plan.device):
        other = LlamaForCausalLM._from_config(model.config, dtype=plan.dtype)
    other.load_state_dict(model.state_dict(), assign=True)
    return other.eval()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class IdTokenizer:
    """Token i is the text "<i>"; a prompt is a space-separated list of ids."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(f"<{i}>" for i in ids)

    def __len__(self) -> int:
        return self.vocab


def prompt_ids(plan: Plan, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, vocab, (plan.prompt_tokens,), generator=g).tolist()


def error_line(exc: BaseException) -> str:
    """A failed stage in one line: the exception's type and first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
