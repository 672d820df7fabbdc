"""The app's context, :class:`AppContext`: the one object every handler receives, holding
what may load (specviz.ui.pairs), the deployment's input limits, and where the models run
(specviz.ui.runners), chosen once here when the app is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.config import Deployment, Limits, Settings
from specviz.pair import ModelPair
from specviz.sharestore import SharedRuns
from specviz.ui.pairs import (
    CUSTOM,
    CustomLoader,
    Loader,
    PairSource,
    default_custom_loader,
    default_loader,
    offered_pairs,
    open_pair,
)
from specviz.ui.runners import LocalRunner, Runner, choose_runner, has_gpu
from specviz.ui.state import Form


@dataclass(frozen=True)
class AppContext:
    """What every handler needs from the app: what may load (a :class:`PairSource` in the
    app; any Loader in tests), the deployment's input limits, the runner, and the store of
    shared runs."""

    loader: Loader
    limits: Limits = field(default_factory=Limits)
    runner: Runner = field(default_factory=LocalRunner)
    shared: SharedRuns = field(default_factory=SharedRuns)

    def settings(self, form: Form) -> Settings:
        """The form's validated settings under this deployment's limits."""
        return form.settings(self.limits)

    def pair(self, form: Form) -> ModelPair:
        """The form's pair, loaded once per process."""
        return open_pair(self.loader, form)


def app_context(
    dep: Deployment,
    loader: Loader | None = None,
    pairs: list[str] | None = None,
    custom_loader: CustomLoader | None = None,
    runner: Runner | None = None,
    shared: SharedRuns | None = None,
) -> tuple[AppContext, list[str]]:
    """The context of an app serving this deployment, and its pair menu: the registry pairs
    given (default: those the deployment allows, ordered for this machine's device), then
    "custom" when custom ids are on. The runner is the one given, else chosen here; the
    shared runs are kept where given, else under the specviz cache within the deployment's
    limits."""
    runner = runner or choose_runner()
    offered = pairs or offered_pairs(dep, gpu_present=has_gpu(runner))
    menu = [p for p in offered if p != CUSTOM] + ([CUSTOM] if dep.custom_models else [])
    source = PairSource(loader or default_loader, menu, dep, custom_loader or default_custom_loader)
    shared = shared or SharedRuns(max_runs=dep.shared_runs, max_bytes=dep.shared_mb * 1_000_000)
    return AppContext(source, dep.limits, runner, shared), menu
