"""Shared fixtures: tiny real models built from configs, and the real offline pair (loaded
once per test session from the converted cache; no network)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def offline_pair():
    from specviz.models import load_pair

    return load_pair("default", dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def tiny():
    from tests.tiny import tiny_pair

    return tiny_pair()


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny-model tests: tiny models gain nothing from a
    second thread, and on a shared 2-core CPU it costs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
