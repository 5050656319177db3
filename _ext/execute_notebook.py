"""Execute one chapter top to bottom in a fresh kernel, the way the book build does.

* the per-cell timeout is the book's (``execute.timeout`` in ``_config.yml``), so a hung cell
  fails fast instead of waiting forever;
* the nbclient wake-up fix (``_ext/nbclient_wakeup.py``) is installed, as in the book build;
* the first cell that fails or times out is named: chapter, cell index (as in the executed
  ``.ipynb``), its first source line, and the error; the exit status is then 1;
* on success, the chapter's time and its slowest cells are printed.

Usage (``make chapter NB=...`` runs it with the course's .venv):

    .venv/bin/python _ext/execute_notebook.py chapters/05_masking.md [-o _build/check.ipynb]
        [--timeout SECONDS]

``bench/bench_book.py`` imports :func:`execute_chapter` for its per-chapter timings.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import nbclient_wakeup  # noqa: E402


def book_cell_timeout() -> int:
    """The book's per-cell timeout in seconds (``execute.timeout`` in ``_config.yml``)."""
    import yaml
    return int(yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"])


def first_line(source: str) -> str:
    """The first non-blank source line of a cell that is not a comment-only line, shortened."""
    lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
    code = [ln for ln in lines if not ln.startswith("#")] or lines or ["(empty cell)"]
    return code[0] if len(code[0]) <= 100 else code[0][:97] + "..."


def transport_encryption() -> str:
    """How the kernels started here protect their sockets: ``"auto"`` where pyzmq has CurveZMQ
    (jupyter_client then provisions Curve keys for kernels whose kernelspec declares support,
    as ipykernel's does), else ``"disabled"``.  Without keys, ipykernel warns at every start
    that it "is running over TCP without encryption" (ipykernel/kernelapp.py, init_sockets);
    with them that warning has no cause and other warnings still show."""
    try:
        import zmq
        from jupyter_client import KernelManager
    except ImportError:
        return "disabled"
    if not KernelManager.class_traits().get("transport_encryption") or not zmq.has("curve"):
        return "disabled"   # an older jupyter_client, or a libzmq built without libsodium
    return "auto"


def kernel_config():
    """The traitlets config for nbclient's kernel manager (:func:`transport_encryption`)."""
    from traitlets.config import Config
    config = Config()
    if transport_encryption() == "auto":
        config.KernelManager.transport_encryption = "auto"
    return config


class ChapterError(RuntimeError):
    """A cell of a chapter failed or timed out; the message names the chapter and the cell."""


def execute_chapter(path: str | Path, timeout: int | None = None, output: str | Path | None = None,
                    cwd: str | Path | None = None) -> dict:
    """Execute the notebook ``path`` (MyST Markdown via jupytext, or ``.ipynb``) in a fresh kernel.

    Returns ``{"chapter", "seconds", "cells": [(index, seconds, first line), ...]}`` with the
    code cells' wall-clock times (request sent -> reply received).  Raises
    :class:`ChapterError` naming the chapter and the cell when a cell fails or exceeds
    ``timeout`` seconds (default: the book's).  Writes the executed notebook to ``output``
    (also when a cell failed, so its outputs can be read).  The kernel runs in ``cwd``
    (default: the notebook's folder, as in the book build).
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nbclient_wakeup.install()
    path = Path(path).resolve()
    try:
        name = str(path.relative_to(ROOT))
    except ValueError:
        name = str(path)
    timeout = book_cell_timeout() if timeout is None else int(timeout)
    nb = jupytext.read(path)
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    started: dict[int, float] = {}
    cells: list[tuple[int, float, str]] = []
    current = {"index": None}

    def on_execute(cell, cell_index, **_):
        current["index"] = cell_index
        started[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index, **_):
        cells.append((cell_index, time.perf_counter() - started[cell_index], first_line(cell.source)))

    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, on_cell_execute=on_execute,
                            on_cell_executed=on_executed, config=kernel_config(),
                            resources={"metadata": {"path": str(Path(cwd) if cwd else path.parent)}})
    t0 = time.perf_counter()
    try:
        client.execute()
    except (CellTimeoutError, CellExecutionError, DeadKernelError) as err:
        i = current["index"]
        where = f"{name}, cell {i} (`{first_line(nb.cells[i].source)}`)" if i is not None else name
        if isinstance(err, CellTimeoutError):
            what = f"timed out: still running after the per-cell timeout of {timeout} s"
        elif isinstance(err, DeadKernelError):
            what = f"the kernel died: {err}"
        else:
            what = f"raised {err.ename}: {err.evalue}"
        raise ChapterError(f"{where} {what}") from err
    finally:
        if output is not None:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(output))
    return {"chapter": name, "seconds": time.perf_counter() - t0, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebook", help="chapter source, e.g. chapters/05_masking.md")
    ap.add_argument("-o", "--output", help="write the executed notebook here (.ipynb)")
    ap.add_argument("--timeout", type=int, help="per-cell timeout in seconds (default: the book's)")
    args = ap.parse_args(argv)
    try:
        result = execute_chapter(args.notebook, args.timeout, args.output)
    except ChapterError as err:
        print(f"FAILED: {err}", file=sys.stderr)
        if args.output:
            print(f"(outputs so far in {args.output})", file=sys.stderr)
        return 1
    slowest = sorted(result["cells"], key=lambda c: -c[1])[:3]
    print(f"{result['chapter']}: executed in {result['seconds']:.1f} s; slowest cells: "
          + "; ".join(f"cell {i} {s:.1f} s (`{line}`)" for i, s, line in slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
