"""Serve the specviz app: host and port from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT."""

import os

from specviz.ui import build_app, launch_options

if __name__ == "__main__":
    demo = build_app()
    demo.queue().launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        **launch_options(),
    )
