"""Validated settings, the schema the front ends read them through, and the deployment.

No torch and no gradio here, so the CLI, the app and the tests can validate input before any
model is touched. Three modules, one concern each:

- :mod:`specviz.config.settings`: :class:`Settings` (everything a user can set for one
  generation, a frozen dataclass that checks itself and raises ``ValueError`` with a
  one-line message), :class:`Warp`, the tree shapes, and the choices (the verifications and
  rules come from specviz.verify.registry);
- :mod:`specviz.config.schema`: the machinery that makes Settings the one schema of the
  front ends: each field's :class:`Meta`, read back as :class:`Setting` records from which
  specviz.cli.args derives the flags, specviz.ui the form, its widgets and the API
  signature, and specviz.lesson its starting controls;
- :mod:`specviz.config.deployment`: the input limits (:class:`Limits`) and the app's
  deployment (:class:`Deployment`: queue size, concurrency, which model ids may load), read
  from environment variables when they are built, never at import time.

The names every caller uses are importable from ``specviz.config`` itself.
"""

from __future__ import annotations

from typing import Any

from specviz.config import schema as _schema
from specviz.config.deployment import Deployment as Deployment
from specviz.config.deployment import Limits as Limits
from specviz.config.deployment import on_zero_gpu as on_zero_gpu
from specviz.config.schema import APP_GROUPS as APP_GROUPS
from specviz.config.schema import FRONT_ENDS as FRONT_ENDS
from specviz.config.schema import SCHEMA_KEY as SCHEMA_KEY
from specviz.config.schema import Meta as Meta
from specviz.config.schema import Setting as Setting
from specviz.config.schema import Switch as Switch
from specviz.config.schema import setting as setting
from specviz.config.settings import COMPILE_BACKENDS as COMPILE_BACKENDS
from specviz.config.settings import COMPILE_CHOICES as COMPILE_CHOICES
from specviz.config.settings import DEFAULT_GAMMAS as DEFAULT_GAMMAS
from specviz.config.settings import DEFAULT_PROMPT as DEFAULT_PROMPT
from specviz.config.settings import LOSSY_VERIFICATIONS as LOSSY_VERIFICATIONS
from specviz.config.settings import MAX_TREE_NODES as MAX_TREE_NODES
from specviz.config.settings import METHODS as METHODS
from specviz.config.settings import MIN_TEMPERATURE as MIN_TEMPERATURE
from specviz.config.settings import RULES as RULES
from specviz.config.settings import TRACE_LEVELS as TRACE_LEVELS
from specviz.config.settings import TREE_ONLY_RULES as TREE_ONLY_RULES
from specviz.config.settings import TREE_VERIFICATIONS as TREE_VERIFICATIONS
from specviz.config.settings import VERIFICATIONS as VERIFICATIONS
from specviz.config.settings import Settings as Settings
from specviz.config.settings import Warp as Warp
from specviz.config.settings import shape_text as shape_text
from specviz.config.settings import tree_nodes as tree_nodes
from specviz.config.settings import verification_label as verification_label


def schema(cls: type[Settings] | None = None) -> tuple[Setting, ...]:
    """The settings of cls (default :class:`Settings`, or a subclass), in field order."""
    return _schema.schema(cls or Settings)


def offered(front: str, cls: type[Settings] | None = None) -> tuple[Setting, ...]:
    """The settings one front end (see :data:`FRONT_ENDS`) offers, in field order."""
    return _schema.offered(front, cls or Settings)


def form_defaults(cls: type[Settings] | None = None) -> dict[str, Any]:
    """The app's settings controls as an untouched page has them, by form field."""
    return _schema.form_defaults(cls or Settings)
