"""Write the README's "Measured figures" section from the committed benchmark outputs.

Every number that section quotes is read from a file under ``bench/results/`` that a
benchmark script wrote (its settings are stored beside the numbers), so that the README
cannot drift from what was measured:

* ``book.json``: ``bench/bench_book.py`` (each chapter executed in a fresh kernel);
* ``attention_cpu.json``: ``bench/bench_attention.py`` (interleaved rounds, median ratios);
* ``explorables.json``: ``bench/bench_explorables.py`` (headless Chromium);
* ``binder.json``: ``bench/bench_binder.py`` (the Binder environment built and its notebooks run);
* ``browser_model.json``, ``circuit_lab.json``: ``bench/bench_browser_model.py`` and
  ``bench/bench_circuit_lab.py`` (chapter 9's and chapter 7's in-page models, headless Chromium);
* ``language_model.json``: ``bench/bench_language_model.py`` (the language model in a kernel);
* ``lm_page.json``: ``bench/bench_lm_page.py`` (the language model in the page, headless Chromium);
* ``attention_cuda.json``, ``triton_cuda.json``: ``make gpu-check`` on a CUDA machine.

    python bench/readme_figures.py           # rewrite the section between the markers in README.md
    python bench/readme_figures.py --check   # exit 1 if README.md differs from the results

``tests/test_readme_figures.py`` runs the check, so a benchmark re-run that is not carried
into the README (or a figure edited by hand) fails the tests.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BEGIN = "<!-- figures:begin (written by bench/readme_figures.py from bench/results; do not edit by hand) -->"
END = "<!-- figures:end -->"

CHAPTER_NAMES = {
    "intro.md": "preface",
}


def _load(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def _chapter_label(path: str) -> str:
    if path in CHAPTER_NAMES:
        return f"{CHAPTER_NAMES[path]} (`{path}`)"
    return f"`{path}`"


# mybinder.org's memory and CPUs per session, with their source, and the heavy-kernel threshold:
# defined once, in _ext/notebook_convert.py, which writes the same advice into the notebooks.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
from make_notebooks import BINDER_CAP, BINDER_CPUS, BINDER_GUARANTEE, BINDER_SOURCE, HEAVY_MIB  # noqa: E402


def binder_peaks() -> dict[str, int]:
    """Each page's kernel peak (MiB) as a learner's notebook in the Binder environment, by page
    stem (``bench/bench_binder.py --execute``); empty when binder.json has none."""
    b = _load("binder.json") or {}
    return {Path(r["notebook"]).stem: r["peak_mib"] for r in b.get("execute", {}).get("notebooks", [])
            if "peak_mib" in r}


def book_section(book: dict) -> list[str]:
    peaks = binder_peaks()
    stems = {Path(r["chapter"]).stem for r in book["chapters"]}
    apart = sorted(stems ^ set(peaks)) if peaks else []
    if apart:      # the two records name different pages (one predates a renumbering): not joined
        peaks = {}
    lines = [f"Each chapter executed in a fresh kernel (`make bench`, `bench/bench_book.py`, "
             f"{book['date']}, {book['machine']}; `bench/results/book.md`)"
             + (", each with an empty trained-model cache of its own, as from a fresh clone: "
                + " and ".join(f"`{r['chapter']}` trains {r['trains']} model{'s' if r['trains'] > 1 else ''}"
                               for r in book["chapters"] if r.get("trains"))
                + " (chapter 7's; in one build or session the first page to need a model trains it, the others "
                  "load it)" if any(r.get("trains") for r in book["chapters"]) else "")
             + (f"; the last column is the same page as a learner's notebook in the Binder environment "
                f"(`bench/bench_binder.py`, {_load('binder.json')['date']}; `bench/results/binder.md`), the kernel's "
                "process tree at its peak: the figure to plan memory by" if peaks else "") + ":", "",
             "| chapter | execution (s) | peak RSS (MiB) |" + (" peak in Binder (MiB) |" if peaks else ""),
             "|---|---:|---:|" + ("---:|" if peaks else "")]
    for row in book["chapters"]:
        lines.append(f"| {_chapter_label(row['chapter'])} | {row['seconds']:.1f} | {row['peak_rss_mib']:.0f} |"
                     + (f" {peaks.get(Path(row['chapter']).stem, '')} |" if peaks else ""))
    slowest = max(book["chapters"], key=lambda r: r["seconds"])
    lines += ["", f"Slowest chapter: `{slowest['chapter']}`, {slowest['seconds']:.1f} s."]
    if apart:
        lines += [f"(`bench/results/book.json` and the Binder record name different pages ({', '.join(apart)}): "
                  "the Binder peaks are listed with the Binder environment below, not joined to this table.)"]
    if book.get("make_html_seconds") is not None:
        lines += [f"The whole `make html` (every chapter executed, then Sphinx, from an empty `_build`) took "
                  f"{book['make_html_seconds']:.1f} s."]
    return lines


def block_regrets(att: dict, min_T: int = 512) -> dict:
    """For each measured block size of ``tiled_attention``: its worst slowdown against the fastest
    measured block, over every length ``T >= min_T`` and every mask of the run (1.0 = always the
    fastest).  The default block is the one with the smallest worst slowdown."""
    by = {(r["impl"], r["T"], r["mask"]): r["time_ratio"] for r in att["rows"]}
    blocks = att["config"]["block_sizes"]
    cases = [(T, m) for T in att["config"]["Ts"] if T >= min_T for m in att["config"]["masks"]]
    return {b: max(by[(f"tiled-{b}", T, m)] / min(by[(f"tiled-{c}", T, m)] for c in blocks) for T, m in cases)
            for b in blocks}


def chosen_block(att: dict) -> int:
    regrets = block_regrets(att)
    return min(regrets, key=regrets.get)


def _default_block() -> int:
    import ast
    tree = ast.parse((ROOT / "attnlib" / "tiled.py").read_text(encoding="utf-8"))
    return next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "DEFAULT_BLOCK_SIZE" for t in node.targets))


def attention_section(att: dict) -> list[str]:
    cfg, meta = att["config"], att["meta"]
    rows = att["rows"]
    T = max(cfg["Ts"])
    runs = cfg.get("repeats", 1)
    default = _default_block()

    def row(impl, mask):
        return next(r for r in rows if r["impl"] == impl and r["T"] == T and r["mask"] == mask)

    def ratio(r):
        if r["impl"] == "torch":
            return "1.0"
        if "ratio_range" in r and runs > 1:
            return f"{r['time_ratio']:.1f} ({r['ratio_range'][0]:.1f}-{r['ratio_range'][1]:.1f})"
        return f"{r['time_ratio']:.1f}"

    blocks = cfg["block_sizes"]
    lines = [f"Attention on the CPU (`bench/bench_attention.py`, {meta['date'][:10]}, "
             f"{meta['machine']['cpu']}; `bench/results/attention_cpu.md`): one head, d_head {cfg['d_head']}, "
             f"{cfg['dtype']}, {cfg['threads']} thread; in each of {runs} independent runs the implementations run "
             "interleaved in one process, and a run's ratio is the median of the per-round ratio to PyTorch's fused "
             "kernel (`torch.nn.functional.scaled_dot_product_attention`); the table gives the median over the runs "
             "and, in brackets, the runs' lowest and highest ratio.  At T = " + f"{T}:", "",
             "| implementation | no mask: ms | x torch | causal: ms | x torch | peak memory added (MiB) |",
             "|---|---:|---:|---:|---:|---:|"]
    for impl in cfg["impls"]:
        a, c = row(impl, "none"), row(impl, "causal") if "causal" in cfg["masks"] else None
        label = att["labels"][impl]
        if impl.startswith("tiled-") and int(impl.split("-")[1]) == default:
            label += ", the default"
        causal = [f"{c['time_s'] * 1e3:.0f}", ratio(c)] if c else ["-", "-"]
        lines.append(f"| {label} | {a['time_s'] * 1e3:.0f} | {ratio(a)} | " + " | ".join(causal)
                     + f" | {a['peak_mib']:.1f} |")
    weights = T * T * 4 / 2 ** 20
    regrets = block_regrets(att)
    lines += ["", f"One float32 T x T weight matrix is {weights:.0f} MiB at this length; the reference path "
              "holds the scores and the weights, `tiled_attention` never more than a few "
              f"(block x block) tiles (block sizes measured: {', '.join(map(str, blocks))}).  The default block, "
              f"{default}, is the measured block whose worst slowdown against the fastest block, at any T from 512 "
              "up with or without the causal mask, is smallest: "
              + ", ".join(f"{b}: x{regrets[b]:.2f}" for b in blocks) + "."]
    if runs > 1:
        load = sorted(r["load_1min"] for x in rows for r in x.get("runs", []))
        lines[-1] += (f"  Load average (1 min) when the cases started: {load[0]:.1f} to {load[-1]:.1f} on "
                      f"{meta['machine']['logical_cores']} logical cores.")
    return lines


def gpu_section(att: dict | None, tri: dict | None) -> list[str]:
    """The GPU runs of ``make gpu-check`` (``bench/gpu_check.sh``), or a sentence saying none exists."""
    if att is None and tri is None:
        return ["GPU figures have not been measured (no GPU was available; `make gpu-check` is prepared)."]
    lines = []
    if att is not None:
        cfg, meta = att["config"], att["meta"]
        T = max(cfg["Ts"])
        by = {(r["impl"], r["T"], r["mask"]): r for r in att["rows"]}
        lines += [f"Attention on a GPU (`make gpu-check`: `bench/bench_attention.py --device cuda`, {meta['date'][:10]}, "
                  f"{meta['machine']['gpu']}, CUDA {meta['machine']['cuda']}, PyTorch {meta['machine']['torch']}; "
                  f"`bench/results/attention_cuda.md`): one head, d_head {cfg['d_head']}, {cfg['dtype']}, CUDA-event "
                  f"medians.  At T = {T}, no mask:", "",
                  "| implementation | ms | x torch | peak memory added (MiB) |", "|---|---:|---:|---:|"]
        for impl in cfg["impls"]:
            r = by[impl, T, "none"]
            lines.append(f"| {att['labels'][impl]} | {r['time_s'] * 1e3:.2f} | {r['time_ratio']:.1f} | {r['peak_mib']:.1f} |")
        lines.append("")
    if tri is not None:
        cfg, m = tri["config"], tri["meta"]["machine"]
        ratios = [r["time_ratio"] for r in tri["rows"] if r["impl"] == "triton"]
        big = max(cfg["Ts"])
        at_big = [r["time_ratio"] for r in tri["rows"] if r["impl"] == "triton" and r["T"] == big]
        peak = {r["impl"]: r["peak_mib"] for r in tri["rows"] if r["T"] == big and not r["causal"]}
        lines.append(f"The Triton FlashAttention kernel (`bench/bench_triton.py`, {tri['meta']['date'][:10]}, {m['gpu']}, "
                     f"Triton {m['triton']}; `bench/results/triton_cuda.md`; {cfg['heads']} heads of width {cfg['d_head']}, "
                     f"{cfg['dtype']}, T = {min(cfg['Ts']):,} to {big:,}, with and without the causal mask): "
                     f"{min(ratios):.2f}x to {max(ratios):.2f}x the time of PyTorch's fused kernel "
                     f"({min(at_big):.2f}x to {max(at_big):.2f}x at T = {big:,}); its peak memory there is {peak['triton']:.0f} MiB "
                     f"against PyTorch's {peak['torch']:.0f} MiB (both linear in T: no T x T matrix).")
    tests = RESULTS / "gpu_tests.txt"
    if tests.is_file():
        text = tests.read_text().strip().splitlines()
        # gpu_tests.txt: its first line says when (and why) it ran, its second the GPU, its last pytest's summary.
        lines += ["", f"The CUDA cases of the unit tests (`bench/results/gpu_tests.txt`, {text[0]}, {text[1]}): "
                      f"{text[-1]}."]
    return lines


def explorables_section(xp: dict) -> list[str]:
    worst = xp["worst_p95_layout_ms"]
    best = min(v["layout"][1] for v in xp["views"].values())
    return [f"Explorables in headless Chromium {xp['chromium']}, T = {xp['T']} "
            f"(`bench/bench_explorables.py`, {xp['date']}; `bench/results/explorables.md`): one update, "
            f"including layout and raster, takes {best:.1f}-{worst:.1f} ms at the 95th percentile "
            f"({'inside' if worst < 16.7 else 'over'} one 16.7 ms frame)."]


def binder_section(b: dict) -> list[str]:
    """The Binder environment (bench/bench_binder.py): build time, size, pip check, per-notebook times."""
    load = b["load_average_after"][1]
    text = (f"The Binder environment, built from `binder/` alone as repo2docker builds it (`bench/bench_binder.py`, "
            f"{b['date']}, {b['machine']}, load average {b['load_average_before'][1]:.1f} at the start and {load:.1f} "
            f"at the end; `bench/results/binder.md`): "
            f"the build (a fresh venv, `binder/requirements.txt`, then `binder/postBuild`"
            + (_postbuild_clause(b["generate"]) if "generate" in b else "")
            + f") took **{b['build_seconds'] / 60:.1f} min**"
            + (" (the venv and requirements steps timed from the file times of an earlier run of the same "
               "build, which stopped when chapter 7's training cell passed the book's 120 s per-cell limit; "
               "postBuild's limit is now 600 s)" if "--reuse" in b.get("requirements", "") else "")
            + f", and the environment takes **{b['venv_mb']:,} MB** "
            f"on disk ({b['n_packages']} packages, torch {b['torch']}, triton {b.get('triton') or 'absent'}; "
            f"book and test tools installed: {', '.join(b['forbidden_installed']) or 'none'}).  `pip check` "
            + ("reports nothing." if not b["pip_check"] else
               "reports only " + "; ".join(f"\"{line}\"" for line in b["pip_check"]) + " (the model package, "
               "installed without its declared dependency, as in `.venv`).")
            + (f"  postBuild wrote {len(b['generate']['notebooks'])} notebooks." if "generate" in b else ""))
    lines = [text]
    if "execute" in b:
        e = b["execute"]
        rows = e["notebooks"]
        slowest = max(rows, key=lambda r: r["seconds"])
        failed = [r["notebook"] for r in rows if not r["ok"]]
        cores = re.search(r"(\d+) CPU cores", b["machine"])
        shared = (", more than one runnable process per core: the machine was shared"
                  if cores and max(e["load_average_before"][1], e["load_average_after"][1]) > int(cores[1]) else "")
        lanes = e.get("lanes") or []
        order = f"{len(lanes)} at a time" if len(lanes) > 1 else "one after the other"
        cpu = (f", each kernel limited to {len(lanes[0]) if lanes else len(e['cpus'])} core of its own as mybinder.org "
               f"gives a session {e['binder_cpus']} CPU (`os.sched_setaffinity`, as `taskset -c`)" if "cpus" in e
               else ", on every core of the machine")
        took = (f"{e['seconds'] / 60:.1f} min of kernel time, {e['wall_seconds'] / 60:.1f} min of wall time"
                if "wall_seconds" in e else f"{e['seconds'] / 60:.1f} min in all")
        lines += ["", f"Then every notebook ran top to bottom in a fresh kernel of that environment, "
                      f"{order}{cpu} ({took}, load average {e['load_average_before'][1]:.1f} "
                      f"before and {e['load_average_after'][1]:.1f} after{shared}); "
                      f"{'failures: ' + ', '.join(failed) if failed else 'none failed'}.  The slowest was "
                      f"`{slowest['notebook']}`, {slowest['seconds']:.0f} s:", "",
                  "| notebook | run time (s) |" + (" kernel peak (MiB) |" if "peak_mib" in rows[0] else ""),
                  "|---|---:|" + ("---:|" if "peak_mib" in rows[0] else "")]
        lines += [f"| `{r['notebook']}` | {r['seconds']:.0f} |" + (f" {r['peak_mib']} |" if "peak_mib" in r else "")
                  for r in rows]
        lines += memory_advice(b)
    if "three_chapters" in b:
        lines += ["", f"Three chapters running at once (three kernels, with their nbclient runners) peaked "
                      f"at {b['three_chapters']['peak_total_rss_mib']:,} MiB in all."]
    return lines


def _postbuild_clause(g: dict) -> str:
    """How postBuild's notebook step got each page's outputs in the recorded run."""
    if "reused" not in g:
        return ", which executes every page into the notebooks"
    reused, executed = len(g["reused"]), len(g["executed"])
    return (", whose notebook step executes every page on mybinder.org; here it took "
            f"{reused} page{'s' if reused != 1 else ''}' outputs from the book build's run and executed "
            f"{executed} page{'s' if executed != 1 else ''}, so that "
            + ("every page ran once in this environment, in the run below" if not executed else
               f"{executed} page{'s' if executed != 1 else ''} ran twice"))


def memory_advice(b: dict) -> list[str]:
    """What the kernels' and the server's peaks mean against mybinder.org's guarantee and limit
    (BINDER_GUARANTEE, BINDER_CAP, with their source, in _ext/notebook_convert.py), and which
    chapters to run alone."""
    rows = [r for r in b["execute"]["notebooks"] if "peak_mib" in r]
    if not rows:
        return []
    top = max(rows, key=lambda r: r["peak_mib"])
    low = min(rows, key=lambda r: r["peak_mib"])
    server = b.get("server", {}).get("rss_mib")
    heavy = [r for r in rows if r["peak_mib"] > HEAVY_MIB]
    mib = lambda n: f"{n / 2**20:,.0f} MiB"
    text = (f"mybinder.org guarantees a session {mib(BINDER_GUARANTEE)} of memory and {BINDER_CPUS} CPU, and stops "
            f"its kernel at {mib(BINDER_CAP)} ({BINDER_SOURCE}); above the guarantee a session runs on memory its "
            "machine has spare, and is the first to be stopped when that machine runs short.  The kernels peak at "
            f"{low['peak_mib']:,} MiB (`{low['notebook']}`) to {top['peak_mib']:,} MiB (`{top['notebook']}`)"
            + (f"; the JupyterLab server itself holds {server} MiB (no kernel open), so the heaviest chapter with "
               f"the server needs {top['peak_mib'] + server:,} MiB" if server else "") + ".  ")
    if len(heavy) == len(rows):
        text += (f"Every kernel needs more than the guarantee on its own, so every notebook's first cell says to "
                 "run it alone: JupyterLab keeps the kernel of a closed tab alive, so shut down the previous "
                 "chapter's kernel first (Kernel > Shut Down All Kernels, or the Running panel).  ")
    elif heavy:
        names = ", ".join(f"`{r['notebook']}` ({r['peak_mib']:,} MiB)" for r in heavy)
        text += (f"Kernels that need more than the guarantee on their own ({HEAVY_MIB} MiB): {names}; their "
                 "notebooks' first cell says to run them alone: JupyterLab keeps the kernel of a closed tab alive, "
                 "so shut down the previous chapter's kernel first (Kernel > Shut Down All Kernels, or the Running "
                 "panel).  ")
    else:
        text += f"Every kernel stays within the guarantee ({HEAVY_MIB} MiB).  "
    two = sum(sorted(r["peak_mib"] for r in rows)[-2:]) + (server or 0)
    text += (f"Two of the heaviest open at once would need {two:,} MiB with the server"
             + (f", past the {mib(BINDER_CAP)} limit." if two * 2**20 > BINDER_CAP else
                f": under the limit, but {two - BINDER_GUARANTEE // 2**20:,} MiB above the guarantee."))
    return ["", text.rstrip()]


def browser_model_section(m: dict) -> list[str]:
    desk, phone = m["settings"]["desktop 1280 px"], m["settings"]["phone 390 px, CPU 4x slower"]
    short, long = sorted(int(k) for k in m["sentences"])
    return [f"The in-page model of chapter 9's lab in headless Chromium (`bench/bench_browser_model.py`, "
            f"{m['machine']['date']}, {m['machine']['cores']} cores; `bench/results/browser_model.md`): the reader "
            f"downloads {m['download_bytes']['encoder.onnx'] / 1e6:.1f} MB of model (float16 weights) and "
            f"{sum(m['runtime_bytes'].values()) / 1e6:.1f} MB of onnxruntime-web once, on request; loading from a local "
            f"server takes {desk['load_ms'] / 1e3:.1f} s, then a {short}-token sentence runs in "
            f"{desk[f'T={short}']['median_ms']:.0f} ms and a {long}-token one in {desk[f'T={long}']['median_ms']:.0f} ms "
            f"(median; {phone[f'T={short}']['median_ms']:.0f} ms and {phone[f'T={long}']['median_ms']:.0f} ms at 390 px "
            f"with the CPU throttled 4x), in a Web Worker.  On a reader's path by taps (Load, Run the {long}-token "
            f"sentence, switch a head off) the longest main-thread task is {_longest(desk['longest_main_thread_task_ms'])} "
            f"at 1280 px and {_longest(phone['longest_main_thread_task_ms'])} at 390 px with the CPU throttled 4x (load "
            f"average {m['load_1min_before']:.1f}-{m['load_1min_after']:.1f}).  Its attention weights differ from PyTorch's by "
            f"at most {m['max_weight_diff_vs_pytorch']:.1e} on those sentences."]


def circuit_lab_section(c: dict) -> list[str]:
    """Chapter 7's circuit lab in the page (bench/bench_circuit_lab.py): bytes, load, run, table, longest task."""
    desk, slow = c["settings"]["desktop 1280 px"], c["settings"]["phone 390 px, CPU 4x slower"]
    run, table = desk["run_32"], desk["table_pair"]
    goals = c["goals"]
    met = lambda value, goal: "within" if value <= goal else "OVER"   # noqa: E731
    return [f"Chapter 7's circuit lab in headless Chromium (`bench/bench_circuit_lab.py`, {c['machine']['date']}, "
            f"{c['machine']['cores']} cores, load average (1 min) {c['load_average_before'][0]:.1f} before and "
            f"{c['load_average_after'][0]:.1f} after; "
            f"`bench/results/circuit_lab.md`): on the reader's first Load it fetches "
            f"{c['lab_total_bytes'] / 1e6:.2f} MB of its own, of which its {c['n_models']} models ({c['n_models'] - 1} "
            f"training checkpoints and the one-layer control) are {c['checkpoint_bytes'] / 1e6:.2f} MB ({met(c['checkpoint_bytes'], goals['checkpoint_bytes'])} "
            f"the {goals['checkpoint_bytes'] / 1e6:.0f} MB goal), plus {c['runtime_total_bytes'] / 1e6:.1f} MB of "
            f"onnxruntime-web, the same files as chapter 9's lab; loading from a local server takes "
            f"{desk['load_ms'] / 1e3:.1f} s.  A 32-word run takes {run['median_ms']:.1f} ms (median, round trip; "
            f"{run['worker_median_ms']:.1f} ms in the worker; {slow['run_32']['median_ms']:.1f} ms at 390 px with the CPU "
            f"throttled 4x; goal {goals['run_ms']:.0f} ms), and the full noising and denoising table of the lab's first "
            f"pair ({table['T']} words, {table['runs']} runs) {table['median_ms']:.0f} ms ({slow['table_pair']['median_ms']:.0f} ms "
            f"throttled; goal under {goals['table_ms'] / 1e3:.0f} s).  Over {c['path_repeats']} readers' paths by taps (Load, "
            f"Repeat it, the step slider, a head off, the whole patching table) the longest main-thread task is "
            f"{_longest(desk['longest_main_thread_task_ms'])} at 1280 px and "
            f"{_longest(slow['longest_main_thread_task_ms'])} at 390 px with the CPU throttled 4x."
            + ("  The bench's machine was shared (load above its core count), so the times include other processes' "
               "work." if max(c["load_average_before"][0], c["load_average_after"][0]) > c["machine"]["cores"] else "")]


def _longest(ms: float) -> str:
    """A longest main-thread task: the Long Tasks API reports only tasks of 50 ms or more."""
    return "under 50 ms (no long task)" if ms == 0 else f"{ms:.0f} ms"


def exercises_section(e: dict) -> list[str]:
    import statistics
    return [f"Exercises graded in the page (`bench/bench_exercises.py`, {e['date']}, {e['cpus']} cores, load average "
            f"{e['load_1min_before']:.1f}-{e['load_1min_after']:.1f}; `bench/results/exercises.md`): the first check "
            f"loads {statistics.median(e['bytes_first_check']) / 2 ** 20:.1f} MiB (Pyodide and the graders) in a Web "
            f"Worker and answers in {statistics.median(e['first_check_ms']) / 1e3:.1f} s (median of "
            f"{len(e['first_check_ms'])}; {statistics.median(e['first_check_ms_cpu_4x']) / 1e3:.1f} s with the page's "
            f"CPU throttled 4x), while the longest main-thread task is "
            f"{_longest(max(e['longest_main_thread_task_ms']))} ({_longest(max(e['longest_main_thread_task_ms_cpu_4x']))} "
            f"throttled); a later check takes {e['warm_check_ms_median']:.1f} ms (median)."
            + ("  The bench's machine was shared (load above its core count before the run), so the load times "
               "include other processes' work." if e["load_1min_before"] > e["cpus"] else "")]


def figures_section(f: dict) -> list[str]:
    a = f.get("after")
    if not a:
        return []
    return [f"The book's figures in headless Chromium (`bench/bench_figures.py`; `bench/results/figures.md`): "
            f"{a['n_figures']} figures; at 1280 px none is shrunk and the smallest text on screen is "
            f"{min(a['min_text_shown_1280']):.1f} px; at 390 px {a['n_phone_rendering_390']} show their phone rendering, "
            f"smallest text {min(a['min_text_shown_390']):.1f} px, and {a['n_zoom_link_390']} open a zoom rendering "
            f"on a tap."]


PHASE_NAMES = {"setup": "set-up (a fresh `.venv`)", "unit": "unit tests", "book": "the book built",
               "pages": "the checks of the built book", "binder": "Binder (built, then every notebook run)"}


def ci_section(c: dict) -> list[str]:
    """What CI costs (bench/bench_ci.py): each phase of `.ci/run` on a clean clone, and the total."""
    m = c["meta"]
    phases = ", ".join(f"{PHASE_NAMES.get(r['phase'], r['phase'])} {r['seconds']:.0f} s" for r in c["phases"])
    loads = [r["load_before"][0] for r in c["phases"]] + [r["load_after"][0] for r in c["phases"]]
    text = (f"What CI costs (`bench/bench_ci.py`, {m['date']}, {m['machine']}, {m['cpus']} CPU cores, commit "
            f"{m['commit']} cloned afresh; `bench/results/ci.md`): `.ci/run`'s phases took {phases}; "
            f"**{c['total_seconds'] / 60:.1f} min** in all"
            + ("" if c.get("all_passed") else " (NOT all passed)")
            + f" (load average {min(loads):.1f} to {max(loads):.1f}).")
    b = next((r.get("binder") for r in c["phases"] if r["phase"] == "binder" and r.get("binder")), None)
    if b and "build_seconds" in b:
        text += (f"  Of the Binder phase, the environment's build took {b['build_seconds']:.0f} s and running its "
                 f"{b.get('notebooks', '?')} notebooks {b.get('execute_seconds', float('nan')):.0f} s.")
    return [text]


def model_cache_section(mc: dict) -> list[str]:
    """The trained-model cache against training (bench/bench_model_cache.py)."""
    m = mc["meta"]
    runs = "; ".join(f"the {r['n_layers']}-layer model trained in {r['train_seconds']:.1f} s and loaded from the cache "
                     f"in {r['load_seconds']:.2f} s ({r['ratio'] * 100:.1f} % of its training time"
                     + (", the same logits" if r["same"] else ", DIFFERENT logits") + ")" for r in mc["rows"])
    return [f"Chapter 7's runs and the trained-model cache (`bench/bench_model_cache.py`, {m['date']}, {m['machine']}, "
            f"{m['cpus']} CPU cores, torch {m['torch']}; each call in a fresh process; `bench/results/model_cache.md`): "
            f"{runs}."]


def language_model_section(m: dict) -> list[str]:
    """The language model in a kernel (bench/bench_language_model.py)."""
    rows = m["model_by_threads"]
    best = rows[max(rows, key=int)]
    one = rows[min(rows, key=int)]
    return [f"The language model in a kernel (`bench/bench_language_model.py`, {m['date']}, {m['machine']['cpus']} CPU "
            f"cores, load average {m['load_before'][0]:.1f} before and {m['load_after'][0]:.1f} after; each row a fresh "
            f"process; `bench/results/language_model.md`): SmolLM2-135M-Instruct (Q4_1) loads in "
            f"{best['load_seconds']:.1f} s (the SHA-256 check, reading the GGUF file, dequantizing to float32); a "
            f"{best['tokens']}-token run keeping every activation takes {best['run_seconds']:.2f} s "
            f"({one['run_seconds']:.2f} s on one thread); the process holding the model and a run peaks at "
            f"{best['peak_rss_mb']:.0f} MB.  The tokenizer is built from the file once "
            f"({m['tokenizer_first']['seconds']:.1f} s, with transformers) and then read in "
            f"{m['tokenizer_kept']['seconds']:.2f} s."]


def lm_page_section(m: dict) -> list[str]:
    """The language model in the page (bench/bench_lm_page.py)."""
    rows = m["settings"]
    desk = rows.get("desktop 1280 px") or next(iter(rows.values()))
    worst_task = max(r["path"]["longest"] for r in rows.values())
    first = desk["bytes_model"] + desk["bytes_runtime"]
    return [f"The language model in the page (`bench/bench_lm_page.py`, {m['date']}, {m['machine']['cpus']} CPU cores, "
            f"Chromium {m['chromium']} headless, load average {m['load_average_before'][0]:.1f} before and "
            f"{m['load_average_after'][0]:.1f} after; `bench/results/lm_page.md`): first use downloads "
            f"{first / 1e6:.1f} MB ({desk['bytes_model'] / 1e6:.1f} MB of model files and the {desk['bytes_runtime'] / 1e6:.1f} MB "
            f"runtime; the goal was {m['goals']['bytes'] / 1e6:.0f} MB: the 4-bit weights carry a float32 scale and zero point "
            f"per 32 weights, and the embedding is 8-bit); it loads in {desk['load_ms'] / 1000:.1f} s from a local server; a "
            f"20-token run takes {desk['run_20']['median_ms']:.0f} ms (median; goal {m['goals']['run_ms']:.0f} ms); the full "
            f"patching sweep of the chapter's pair ({desk['sweep']['runs']} patched runs, every head and the stream at every "
            f"layer and position, both directions) {desk['sweep']['ms'] / 1000:.1f} s (goal {m['goals']['sweep_ms'] / 1000:.0f} s); "
            f"the longest main-thread task over a reader's path, in {len(rows)} settings (a phone with the CPU 4x slower "
            f"among them), {worst_task:.0f} ms (the model runs in a worker; goal under {m['goals']['task_ms']:.0f} ms)."]


def render() -> str:
    parts = []
    for name, section in (("ci.json", ci_section), ("model_cache.json", model_cache_section), ("book.json", book_section), ("attention_cpu.json", attention_section),
                          ("explorables.json", explorables_section), ("binder.json", binder_section),
                          ("browser_model.json", browser_model_section), ("circuit_lab.json", circuit_lab_section),
                          ("exercises.json", exercises_section), ("language_model.json", language_model_section),
                          ("lm_page.json", lm_page_section),
                          ("figures.json", figures_section)):
        data = _load(name)
        if data is not None and section(data):
            parts.append("\n".join(section(data)))
        if name == "attention_cpu.json":
            parts.append("\n".join(gpu_section(_load("attention_cuda.json"), _load("triton_cuda.json"))))
    return "\n\n".join([BEGIN, *parts, END])


def replace_block(readme: str, block: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + block + tail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is out of date")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    wanted = replace_block(current, render())
    if args.check:
        if wanted != current:
            print("README.md's measured figures differ from bench/results: run python bench/readme_figures.py",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    print("README.md: measured figures rewritten from bench/results")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
