"""Shared fixtures: devices to test on, one thread for tiny tensors, and the pretrained
encoder (loaded once)."""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Every test that takes the ``device`` fixture runs on each of these; CUDA cases skip
#: (and say so) on a machine without a GPU.  Parametrise with it directly as
#: ``@pytest.mark.parametrize("device", DEVICES)`` after ``from conftest import DEVICES``.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA not available on this machine"))]


def pytest_configure(config):
    config.addinivalue_line("markers", "book: builds and checks the whole executed book (slow)")


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny inputs: one thread is as fast and avoids oversubscribing a busy CPU.  Use it for
    a whole module with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def encoder():
    import attnlib
    return attnlib.encoder.load_encoder(device="cpu")
