"""Shared fixtures: devices to test on, and the pretrained encoder (loaded once)."""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA not available on this machine"))]


def pytest_configure(config):
    config.addinivalue_line("markers", "book: builds and checks the whole executed book (slow)")


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(scope="session")
def encoder():
    import attnlib
    return attnlib.load_encoder(device="cpu")
