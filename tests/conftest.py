"""Shared fixtures: devices to test on, one thread for tiny tensors, and the pretrained
encoder (loaded once)."""
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The trained-model cache (attnlib.model_cache): the project's _build/cache unless the caller
# chose one (CI does), so that the tests' workers and kernels share chapter 7's runs and never
# write into the user's own cache folder.
os.environ.setdefault("ATTNLIB_CACHE", str(Path(__file__).resolve().parents[1] / "_build" / "cache"))

#: Every test that takes the ``device`` fixture runs on each of these; CUDA cases skip
#: (and say so) on a machine without a GPU.  Parametrise with it directly as
#: ``@pytest.mark.parametrize("device", DEVICES)`` after ``from conftest import DEVICES``.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA not available on this machine"))]


#: Per-dtype tolerances of a comparison with an oracle (PyTorch's kernels, float64 loops),
#: defined once: ``torch.testing.assert_close(ours, oracle, **TOL[dtype])``.  float32: a few
#: products and reductions over widths up to 128 (multi-head attention's four projections are
#: the longest chain); float16 / bfloat16: their 11- and 8-bit mantissas.
TOL = {torch.float64: dict(atol=1e-12, rtol=1e-12), torch.float32: dict(atol=2e-5, rtol=2e-5),
       torch.float16: dict(atol=2e-3, rtol=2e-3), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


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
