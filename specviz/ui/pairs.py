"""What may load, and loading it: the pair policy (offered pairs, custom hub ids, the
allow-list) and the loaders behind it, and whether this is a ZeroGPU Space. A load that
fails is one line (specviz.ui.errors).

The app's loaders are guarded (specviz.models.load_pair): a hub model is sized from the
hub's metadata before anything downloads, and refused above the server's budget. One hub
load runs at a time (specviz.hub.LOADS): a visitor asking for another while one loads is
told so in one line at once, rather than queued on the model thread behind a download.

Models load once per process (specviz.models caches them) and every model call runs on the
model thread (specviz.modelthread). On a ZeroGPU Space (the ``spaces`` package importable
and SPACES_ZERO_GPU set) each event is one GPU-decorated call instead, which streams its
rounds out as they are made (specviz.ui.runners, specviz.ui.zerogpu).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from specviz.backend import auto_backend
from specviz.backend.offline import OFFLINE_IDS
from specviz.config import Deployment, on_zero_gpu
from specviz.hub import LOADS
from specviz.models import PAIRS, check_model_id, load_pair, needs_hub_load, resolve_device
from specviz.modelthread import MODEL_THREAD
from specviz.pair import ModelPair
from specviz.threads import policy
from specviz.ui.errors import model_failures
from specviz.ui.state import Form

CUSTOM = "custom"  # the pair-menu entry for a draft and target given by hub ids


Loader = Callable[[str, str], ModelPair]


CustomLoader = Callable[[str, str, str], ModelPair]  # (draft id, target id, dtype)


def default_loader(pair: str, dtype: str) -> ModelPair:
    """The registry's pairs through specviz.models (cached, guarded: a hub pair is sized
    before it downloads)."""
    return load_pair(pair, dtype=dtype, guarded=True)


def default_custom_loader(draft: str, target: str, dtype: str) -> ModelPair:
    """A custom pair of hub ids through specviz.models (cached, guarded: sized before
    anything downloads, refused above the server's budget)."""
    return load_pair(draft=draft, target=target, dtype=dtype, guarded=True)


def zero_gpu() -> bool:
    """Whether this is a ZeroGPU Space: SPACES_ZERO_GPU set and ``spaces`` importable (asked
    once, by specviz.ui.runners.choose_runner, when the app's context is built)."""
    return on_zero_gpu() and spaces_module() is not None


def spaces_module() -> Any | None:
    try:
        import spaces
    except ImportError:
        return None
    return spaces


def offered_pairs(deployment: Deployment, gpu_present: bool) -> list[str]:
    """The registry pairs this deployment allows: hub pairs first where a GPU is present,
    the offline pair first on a CPU; "custom" last when custom ids are on."""
    names = [
        n for n, p in PAIRS.items() if deployment.allows(p.draft) and deployment.allows(p.target)
    ]
    offline = [n for n in names if PAIRS[n].target in OFFLINE_IDS]
    hub = [n for n in names if n not in offline]
    ordered = hub + offline if gpu_present else offline + hub
    return ordered + ([CUSTOM] if deployment.custom_models else [])


class PairSource:
    """What this app may load: the offered registry pairs and, when allowed, custom hub ids
    inside the allow-list. Called like a Loader for registry pairs."""

    def __init__(
        self,
        loader: Loader,
        pairs: list[str],
        deployment: Deployment,
        custom_loader: CustomLoader = default_custom_loader,
    ) -> None:
        self.loader, self.custom_loader = loader, custom_loader
        self.pairs = [p for p in pairs if p != CUSTOM]
        self.deployment = deployment

    def __call__(self, pair: str, dtype: str) -> ModelPair:
        self.check(pair)
        return self.loader(pair, dtype)

    def check(self, pair: str, draft: str = "", target: str = "") -> tuple[str, str]:
        """Raise ValueError unless this pair may load; return the checked custom ids."""
        if pair != CUSTOM:
            if pair not in self.pairs:
                raise ValueError(f"unknown pair {pair!r}; this app offers {', '.join(self.pairs)}")
            return "", ""
        if not self.deployment.custom_models:
            raise ValueError("custom model ids are turned off on this deployment")
        if not (str(draft or "").strip() and str(target or "").strip()):
            raise ValueError("a custom pair needs a draft id and a target id")
        ids = check_model_id(draft), check_model_id(target)
        for model_id in ids:
            self.deployment.check_allowed(model_id)
        return ids

    def custom(self, draft: str, target: str, dtype: str) -> ModelPair:
        """A custom pair of hub ids, once they pass :meth:`check`."""
        d, t = self.check(CUSTOM, draft, target)
        return self.custom_loader(d, t, dtype)


def pair_label(form: Form) -> str:
    if form.pair == CUSTOM:
        return f"{form.custom_draft} -> {form.custom_target}"
    return str(form.pair)


def open_pair(loader: Loader, form: Form) -> ModelPair:
    """The form's pair, loaded once per process, on the path the form asks for.
    Any failure is one ValueError line; pairs already loaded stay loaded and keep serving."""
    pair = _load(loader, form).with_compile(compile_choice(form))
    remember(pair)
    return pair


def remember(pair: ModelPair) -> None:
    """Let the Speed tab's roofline find the bytes a step of each model reads
    (specviz.costs.remember_pair; a model it cannot size is left out)."""
    from specviz.costs import remember_pair

    try:
        remember_pair(pair)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        pass


def compile_choice(form: Form) -> str:
    """The path the form asks for: the box's state, or the machine's default (None). A
    ticked box on a CPU with packages built ahead of time takes them ("auto" finds them,
    and leaves a tree to the eager path); elsewhere it means torch.compile's inductor."""
    if form.compile is None:
        return "auto"
    if not form.compile:
        return "off"
    return "auto" if auto_backend(resolve_device("auto")) == "aoti" else "inductor"


def compiled_by_default() -> bool:
    """Whether a pair loaded here runs compiled unless asked otherwise (the box's start):
    where specviz.backend.auto_backend compiles, and on ZeroGPU where the start-up
    compiled the pair's calls ahead of time (specviz.backend.aoti.FORWARDS)."""
    from specviz.backend import aoti

    return auto_backend(resolve_device("auto")) is not None or aoti.FORWARDS.serving()


def _held(load: Callable[[], ModelPair]) -> Callable[[], ModelPair]:
    """A load at the count the app computes at on a quiet machine, whatever the machine
    does meanwhile: the offline draft's choice is measured and read at that count."""

    def held() -> ModelPair:
        with policy().holding():
            return load()

    return held


def _load(loader: Loader, form: Form) -> ModelPair:
    with model_failures(f"loading pair {pair_label(form)!r}"):
        if form.pair != CUSTOM:
            with one_hub_load(form, pair=form.pair):
                return MODEL_THREAD.call(_held(lambda: loader(form.pair, form.dtype)))
        if not isinstance(loader, PairSource):
            raise ValueError("custom pairs are not available in this app")
        source = loader
        draft, target = source.check(CUSTOM, form.custom_draft, form.custom_target)
        with one_hub_load(form, draft=draft, target=target):
            return MODEL_THREAD.call(_held(lambda: source.custom(draft, target, form.dtype)))


@contextmanager
def one_hub_load(form: Form, **pair: str) -> Iterator[None]:
    """Around a load: where the pair (a registry name, or checked custom ids) still has a hub
    model to load, claim the one hub load (a second visitor meanwhile gets one line at
    once); a kept pair, the offline pair and the test loaders' pairs pass freely."""
    if "pair" in pair and pair["pair"] not in PAIRS:
        yield
        return
    if not needs_hub_load(**pair, dtype=form.dtype):
        yield
        return
    with LOADS.claim(pair_label(form)):
        yield


def load_default(form: Form) -> ModelPair:
    """The form's pair through the default loaders (cached once per process): inside a
    ZeroGPU call, where only the form crosses the process boundary."""
    if form.pair == CUSTOM:
        return default_custom_loader(form.custom_draft, form.custom_target, form.dtype)
    return default_loader(form.pair, form.dtype)
