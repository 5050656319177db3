"""The labs' isolation (issue 46): whatever a learner's function does with a catchable signal,
a descriptor, a fork or a setting, the kernel lives on unchanged and nothing the check started
outlives it; a right function is never stopped for an import.

Each scenario runs in a fresh interpreter (the "kernel" here), which checks functions and then
reports its own state as JSON lines: that interpreter is what a harmful function would end.
Forked children (``process``, Linux's default) and spawned workers (``spawn``, the default on
macOS and Windows) are both exercised; ``inprocess`` (only when asked for) has its own list.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

import attnlib

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the harms below use Linux's libc and /proc")

_KERNEL = r'''
import ctypes, json, os, signal, sys, time, torch
from attnlib.exercises.labs import _sandbox, check_softmax
_sandbox.TIME_LIMIT_S = 1.0
_sandbox.WAIT_LIMIT_S = 2.0
MARK = sys.argv[1]

def sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def libc_signal(sig):
    kernel = os.getpid()            # sent with the function: a spawned worker has another parent
    def fn(x, dim=-1):
        ctypes.CDLL(None).kill(kernel, sig)
        time.sleep(0.05)
        return sm(x, dim)
    return fn

def libc_fork_then(how, path):
    """A grandchild made with libc's fork (no Python fork hooks run), moved out of the child's
    group as ``how`` says, that would write ``path`` 3 s later."""
    kernel = os.getpid()
    def fn(x, dim=-1):
        libc = ctypes.CDLL(None)
        pid = libc.fork()
        if pid == 0:
            if how == "setsid":
                os.setsid()
            elif how == "kernel_group":
                os.setpgid(0, os.getpgid(kernel))
            elif how == "double":
                if libc.fork() != 0:
                    libc._exit(0)
                os.setsid()
            time.sleep(3)
            open(path, "w").close()
            libc._exit(0)
        if how == "child_exits":
            libc._exit(0)
        return sm(x, dim)
    return fn

LIB = ctypes.CDLL(None)

def unsendable(x, dim=-1):      # holds a ctypes library, which cannot be sent to a spawned worker
    LIB.getpid()
    return sm(x, dim)

def busy(x, dim=-1):
    while True:
        pass

def sleeps(x, dim=-1):
    time.sleep(60)
    return sm(x, dim)

def heavy_import(x, dim=-1):
    import attnlib_slow_import_probe   # burns 2.5 s of CPU when first imported
    return sm(x, dim)

def alarm(x, dim=-1):
    signal.alarm(1)
    time.sleep(2)
    return sm(x, dim)

def close_fds(x, dim=-1):
    for fd in range(3, 256):
        try:
            os.close(fd)
        except OSError:
            pass
    return sm(x, dim)

def report(name, fn):
    try:
        fb = check_softmax(fn)
        out = {"correct": fb.correct, "diagnosis": fb.diagnosis, "message": fb.message}
    except BaseException as err:
        out = {"escaped": type(err).__name__}
    out["name"] = name
    print("RESULT " + json.dumps(out), flush=True)

handlers = {s: str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGALRM)}
for name in sys.argv[2].split(","):
    if name.startswith("signal_"):
        report(name, libc_signal(getattr(signal, name[len("signal_"):])))
    elif name.startswith("fork_"):
        report(name, libc_fork_then(name[len("fork_"):], os.path.join(os.environ["PROBE_DIR"], name)))
    else:
        report(name, globals()[name])
report("after", sm)
after = {s: str(signal.getsignal(s)) for s in handlers}
print("STATE " + json.dumps({"handlers_kept": after == handlers, "pid": os.getpid()}), flush=True)
time.sleep(4)     # longer than any grandchild above waits before writing its file
print("DONE", flush=True)
'''

_SLOW_MODULE = "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.5:\n    pass\n"


def _run_kernel(tmp_path, mode: str, scenarios: list[str]) -> dict:
    (tmp_path / "attnlib_slow_import_probe.py").write_text(_SLOW_MODULE)
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    root = os.path.dirname(os.path.dirname(attnlib.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, str(tmp_path)]), ATTNLIB_LAB_ISOLATION=mode,
               PROBE_DIR=str(probe))
    run = subprocess.run([sys.executable, "-c", _KERNEL, uuid.uuid4().hex, ",".join(scenarios)],
                         capture_output=True, timeout=400, env=env)
    out = {"rc": run.returncode, "stderr": run.stderr.decode(errors="replace")[-3000:], "results": {},
           "files": sorted(p.name for p in probe.iterdir())}
    for line in run.stdout.decode(errors="replace").splitlines():
        if line.startswith("RESULT "):
            item = json.loads(line[7:])
            out["results"][item.pop("name")] = item
        elif line.startswith("STATE "):
            out["state"] = json.loads(line[6:])
        elif line == "DONE":
            out["done"] = True
    return out


_FORK_HARMS = ["signal_SIGUSR1", "signal_SIGTERM", "signal_SIGHUP", "signal_SIGALRM", "fork_setsid",
               "fork_kernel_group", "fork_double", "fork_child_exits", "alarm", "close_fds", "busy", "sleeps",
               "heavy_import"]


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    return _run_kernel(tmp_path_factory.mktemp("forked"), "process", _FORK_HARMS)


def _survived(run):
    assert run["rc"] == 0 and run.get("done"), (run["rc"], run["stderr"])
    assert run["state"]["handlers_kept"], run
    after = run["results"]["after"]
    assert after.get("correct") is True, after


def test_the_kernel_survives_every_harm_of_a_forked_child(forked):
    _survived(forked)
    for name in _FORK_HARMS:
        assert "escaped" not in forked["results"][name], (name, forked["results"][name])


@pytest.mark.parametrize("name", ["signal_SIGUSR1", "signal_SIGTERM", "signal_SIGHUP", "signal_SIGALRM"])
def test_a_signal_sent_to_the_kernel_through_libc_is_discarded(forked, name):
    result = forked["results"][name]
    assert result.get("correct") is True, result      # the function itself is right; the kernel ignored it


def test_nothing_the_check_started_outlives_it(forked):
    assert forked["files"] == [], forked["files"]     # no grandchild lived 3 s to write its file


def test_a_child_that_dies_is_reported_and_its_grandchild_ended(forked):
    assert forked["results"]["fork_child_exits"]["diagnosis"] == "exited", forked["results"]["fork_child_exits"]
    assert forked["results"]["alarm"]["diagnosis"] == "exited", forked["results"]["alarm"]


def test_a_loop_is_stopped_on_cpu_time_and_a_sleep_is_told_apart(forked):
    busy, sleeps = forked["results"]["busy"], forked["results"]["sleeps"]
    assert busy["diagnosis"] == "timed_out" and "processor time" in busy["message"], busy
    assert sleeps["diagnosis"] == "timed_out" and "without computing" in sleeps["message"], sleeps


def test_a_heavy_first_import_is_not_an_endless_loop(forked):
    """The module burns 2.5 s of CPU when imported, against a 1 s limit: not counted."""
    result = forked["results"]["heavy_import"]
    assert result.get("correct") is True, result


_SPAWN_HARMS = ["signal_SIGUSR1", "fork_setsid", "busy", "heavy_import", "unsendable"]


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    return _run_kernel(tmp_path_factory.mktemp("spawned"), "spawn", _SPAWN_HARMS)


def test_a_spawned_worker_isolates_as_a_forked_child_does(spawned):
    _survived(spawned)
    results = spawned["results"]
    assert results["signal_SIGUSR1"].get("correct") is True, results["signal_SIGUSR1"]
    assert results["busy"]["diagnosis"] == "timed_out", results["busy"]
    assert results["heavy_import"].get("correct") is True, results["heavy_import"]
    assert spawned["files"] == [], spawned["files"]
    assert "inside this kernel" not in results["after"]["message"], results["after"]   # it did not fall back
    unsendable = results["unsendable"]                       # never run in the kernel instead
    assert unsendable["correct"] is False and "could not be sent" in unsendable["message"], unsendable


# ------------------------------------------------------------------ in process, when asked for

_INPROCESS = r'''
import json, os, signal, sys, torch
import attnlib
from attnlib.exercises.labs import check_softmax
CODE = attnlib.softmax.__code__

def sm(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def changes_settings(x, dim=-1):
    os.chdir("/")
    sys.setrecursionlimit(123456)
    sys.path.append("/nowhere")
    sys.meta_path.append(sys.meta_path[-1])
    torch.use_deterministic_algorithms(True)
    torch.set_anomaly_enabled(True)
    torch.set_printoptions(precision=1)
    return sm(x, dim)

def writes_fd1(x, dim=-1):
    os.write(1, b"FD-ONE-MARKER " * 1000)
    return sm(x, dim)

def rewrites_code(x, dim=-1):
    attnlib.softmax.__code__ = (lambda x, dim=-1: torch.zeros_like(x)).__code__
    return sm(x, dim)

def kernel_harm(what):
    def fn(x, dim=-1):
        if what == "alarm":
            signal.alarm(1)
        elif what == "raise_signal":
            signal.raise_signal(signal.SIGTERM)
        elif what == "close":
            os.closerange(3, 256)
        elif what == "exit":
            os._exit(3)
        return sm(x, dim)
    return fn

def wrong(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum()

assert check_softmax(sm).correct      # the check's own first imports (the encoder's) come before
before = {"cwd": os.getcwd(), "recursion": sys.getrecursionlimit(), "path": list(sys.path),
          "meta": len(sys.meta_path), "det": torch.are_deterministic_algorithms_enabled(),
          "anomaly": torch.is_anomaly_enabled(), "precision": torch._tensor_str.PRINT_OPTS.precision,
          "code": attnlib.softmax.__code__ is CODE}
out = {}
for name, fn in [("settings", changes_settings), ("fd1", writes_fd1), ("code", rewrites_code),
                 ("alarm", kernel_harm("alarm")), ("raise_signal", kernel_harm("raise_signal")),
                 ("close", kernel_harm("close")), ("exit", kernel_harm("exit")), ("wrong_after", wrong)]:
    fb = check_softmax(fn)
    out[name] = {"correct": fb.correct, "diagnosis": fb.diagnosis, "message": fb.message}
after = {"cwd": os.getcwd(), "recursion": sys.getrecursionlimit(), "path": list(sys.path),
         "meta": len(sys.meta_path), "det": torch.are_deterministic_algorithms_enabled(),
         "anomaly": torch.is_anomaly_enabled(), "precision": torch._tensor_str.PRINT_OPTS.precision,
         "code": attnlib.softmax.__code__ is CODE}
sys.stderr.write("RESULTS " + json.dumps({"out": out, "before": before, "after": after,
                                          "zeros": bool((attnlib.softmax(torch.ones(3)) == 0).all())}) + "\n")
'''


@pytest.fixture(scope="module")
def inprocess():
    root = os.path.dirname(os.path.dirname(attnlib.__file__))
    env = dict(os.environ, PYTHONPATH=root, ATTNLIB_LAB_ISOLATION="inprocess")
    run = subprocess.run([sys.executable, "-c", _INPROCESS], capture_output=True, timeout=300, env=env)
    line = next((l for l in run.stderr.decode(errors="replace").splitlines() if l.startswith("RESULTS ")), None)
    assert run.returncode == 0 and line, (run.returncode, run.stderr.decode(errors="replace")[-3000:])
    data = json.loads(line[8:])
    data["stdout"] = run.stdout.decode(errors="replace")
    return data


def test_in_process_the_kernels_settings_are_put_back(inprocess):
    assert inprocess["after"] == inprocess["before"], (inprocess["before"], inprocess["after"])
    assert inprocess["out"]["settings"]["correct"] is True, inprocess["out"]["settings"]


def test_in_process_descriptor_1_is_captured(inprocess):
    assert "FD-ONE-MARKER" not in inprocess["stdout"]
    fb = inprocess["out"]["fd1"]
    assert fb["correct"] is True and "printed 140,000 characters" in fb["message"], fb


def test_in_process_rewriting_a_functions_code_is_refused_and_undone(inprocess):
    fb = inprocess["out"]["code"]
    assert fb["diagnosis"] == "tampered" and "its code" in fb["message"], fb
    assert inprocess["zeros"] is False                       # attnlib.softmax computes again
    assert inprocess["out"]["wrong_after"]["correct"] is False, inprocess["out"]["wrong_after"]


@pytest.mark.parametrize("name", ["alarm", "raise_signal", "close", "exit"])
def test_in_process_what_would_end_the_kernel_is_refused(inprocess, name):
    fb = inprocess["out"][name]
    assert fb["diagnosis"] == "not_allowed", fb
