"""The Gradio app: the only package that imports gradio.

Modules, each with one job (imports point down this list, never up):
    layout        the Blocks from its sections, its tabs composed (listed there); serving
    blocks        gr.Blocks, with the outputs a frame leaves alone sent at no cost
    controls      the left column and its own events (presets, pair loading)
    api           the named endpoint /generate
    lesson_panel  the guided lesson's panel: each step's action through the handlers below
    live          Run, Step and Stop: both runs streamed, a finished Run logged
    token_view    the token view, overlap shading and its legend, the Step narration box
    present       the presentation mode: toggle, ?mode=present, Space or → takes a Step
    race          the race replay of a compared run's measured timings (Speed tab)
    inspector_tab, runs_tab, theory_tab, sweep_tab, check_tab, verifications_tab, io_tab
                  one module per section with handlers, layout and events together; the
                  tabs Decision, Acceptance, Theory, Exactness and Data hold them (layout
                  composes them: no tab module imports another)
    page          what the sections share once built: context, session, components by
                  name, the one mapping of a handler's names onto components, options
    context       AppContext (what may load, the limits, the runner) and building it
    runners       where the models run, chosen once: the local model thread, or ZeroGPU
    frames        what the page is sent for stored traces: the rounds' cached HTML, live,
                  final and logged frames, summaries, the inspector's views, the log and
                  calibration views
    worker        the thread driving model iterators on the model thread, and its polling
    zerogpu       ZeroGPU as documented: start-up load, decorated streaming generators
    warm          a pair warmed once per process before its first measured run
    pairs         what may load, and whether this is a ZeroGPU Space
    errors        failures as one line (out of memory included), ValueError -> gr.Error
    content       presets, help text
    assets        the page's scripts, one file each under assets/
    state         Form, Session

Handlers are plain functions over a per-session Session and a Form, taking an AppContext
(what may load, the limits, the runner); they yield dicts keyed by component name, so they
are testable without a browser. The sweep's and the check's handlers return their typed
results (rows, CheckResult) beside the views they yield.
"""

from specviz.config import DEFAULT_PROMPT
from specviz.ui.api import api_result, generate_endpoint
from specviz.ui.check_tab import CHECK_MAX_SAMPLES, check_updates
from specviz.ui.content import PRESET_FIELDS, PRESETS, apply_preset
from specviz.ui.context import AppContext, app_context
from specviz.ui.controls import pair_updates
from specviz.ui.errors import failure, user_errors
from specviz.ui.frames import final_frame, inspect_changes, runs_changes
from specviz.ui.io_tab import (
    MAX_IMPORT_BYTES,
    export_files,
    import_updates,
    read_trace,
    replay_updates,
)
from specviz.ui.layout import build_app, launch_options, serve
from specviz.ui.live import complete_traces, run_updates, step_update, stop_session
from specviz.ui.pairs import CUSTOM, PairSource, default_loader, offered_pairs, zero_gpu
from specviz.ui.race import race_update
from specviz.ui.runners import LocalRunner, Runner, ZeroGpuRunner, choose_runner, has_gpu
from specviz.ui.runs_tab import load_run, log_file
from specviz.ui.state import DEFAULTS, FORM_FIELDS, Form, Session, new_session
from specviz.ui.sweep_tab import stop_sweep, sweep_updates
from specviz.ui.theory_tab import projection_update
from specviz.ui.token_view import shade_update

__all__ = [
    "CHECK_MAX_SAMPLES",
    "CUSTOM",
    "DEFAULTS",
    "DEFAULT_PROMPT",
    "FORM_FIELDS",
    "MAX_IMPORT_BYTES",
    "PRESETS",
    "PRESET_FIELDS",
    "AppContext",
    "LocalRunner",
    "Runner",
    "ZeroGpuRunner",
    "app_context",
    "choose_runner",
    "Form",
    "PairSource",
    "Session",
    "api_result",
    "apply_preset",
    "build_app",
    "check_updates",
    "complete_traces",
    "default_loader",
    "export_files",
    "failure",
    "final_frame",
    "generate_endpoint",
    "has_gpu",
    "import_updates",
    "inspect_changes",
    "launch_options",
    "load_run",
    "log_file",
    "new_session",
    "offered_pairs",
    "pair_updates",
    "projection_update",
    "race_update",
    "read_trace",
    "replay_updates",
    "run_updates",
    "runs_changes",
    "serve",
    "shade_update",
    "step_update",
    "stop_session",
    "stop_sweep",
    "sweep_updates",
    "user_errors",
    "zero_gpu",
]
