"""Serve the app on the tiny test pair, as app.py serves it (the load test serves the same
app in its own process): python -m tests.tiny_app, on GRADIO_SERVER_PORT, loopback only."""

from __future__ import annotations

from specviz import ui
from tests.tiny import tiny_pair

if __name__ == "__main__":
    pair = tiny_pair()
    ui.serve(ui.build_app(loader=lambda p, d: pair, pairs=["tiny"]), server_name="127.0.0.1")
