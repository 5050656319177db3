"""How large the book's figures are on screen: per figure, its natural width, the width the
page shows it at in a 1280 px and a 390 px window, and the smallest text in it, in image
pixels and as shown; since issue 26 the 390 px columns are those of the rendering the page
shows there (the phone rendering, ``<picture>``'s ``<source>``: its file, pixel width and
density), and the file a tap opens (the zoom rendering, its dpi).

Every figure's smallest text size is read from its PNG (text chunk ``attnlib:min-text-px``,
written by :func:`attnlib.plotting.render_png`); the page's scale is measured in headless
Chromium (Playwright, ``executable_path``) on the built book served from 127.0.0.1, with
every other request blocked, by ``tests/test_page_figures.measure_figures``.

For an older revision, whose figures carry no such chunk, ``--baseline REV`` exports REV to a
scratch folder, appends ``bench/_baseline_probe.py`` to its ``attnlib/__init__.py``
(a PNG formatter that renders each figure exactly as IPython's inline backend does and only
adds the chunk), builds that book with this checkout's .venv (about 10 minutes on 2 cores)
and measures it.

Usage:
    .venv/bin/python bench/bench_figures.py --label after              # this checkout's _build/html
    .venv/bin/python bench/bench_figures.py --label before --baseline 5950f64
    .venv/bin/python bench/bench_figures.py --label before --html /path/to/_build/html
Writes: bench/results/figures.json (one entry per label) and bench/results/figures.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = ROOT / "bench" / "results"


def build_baseline(rev: str, folder: Path) -> Path:
    """Export ``rev`` into ``folder``, add the probe, build its book; returns its _build/html."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    init = folder / "attnlib" / "__init__.py"   # every chapter imports attnlib
    init.write_text(init.read_text() + "\n\n" + (ROOT / "bench" / "_baseline_probe.py").read_text())
    env = dict(os.environ, PYTHONPATH=str(folder), HF_HUB_OFFLINE="1")
    subprocess.run([str(ROOT / ".venv" / "bin" / "jupyter-book"), "build", ".", "--builder", "html"],
                   cwd=folder, env=env, check=True)
    return folder / "_build" / "html"


def measure(html: Path) -> dict:
    from playwright.sync_api import sync_playwright

    from test_browser import FLAGS, find_chromium, serve
    from test_page_figures import local_file, measure_figures, png_info

    base = serve(str(html))
    pages = sorted(p.relative_to(html).as_posix() for p in (html / "chapters").glob("*.html"))
    figures, columns = {}, {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=FLAGS, headless=True)
        version = browser.version
        for width in (1280, 390):
            for rel in pages:
                page = measure_figures(browser, base, rel, html, width)
                columns.setdefault(str(width), []).append(round(page["column_px"], 1))
                for n, img in enumerate(i for i in page["images"] if i["file"].endswith(".png")):
                    key = f"{rel}#{n}"
                    row = figures.setdefault(key, {"page": rel, "figure": img["figure"], "file": img["file"],
                                                   "natural_w": img["natural_w"], "natural_h": img["natural_h"],
                                                   "min_text_px": img["min_text_px"],
                                                   "alt_words": len((img["alt"] or "").split()),
                                                   "alt_is_path": (img["alt"] or "").startswith(("../", "_images/"))})
                    row[f"shown_w_{width}"] = round(img["shown_w"], 1)
                    row[f"scale_{width}"] = round(img["scale"], 3) if img["scale"] else None
                    row[f"min_text_shown_{width}"] = (round(img["min_text_shown_px"], 2)
                                                      if img["min_text_shown_px"] is not None else None)
                    row[f"link_{width}"] = img["link"] is not None
                    row[f"file_{width}"] = img["file"]
                    row[f"variant_{width}"] = img.get("variant")
                    row[f"pixel_w_{width}"] = img.get("pixel_w")
                    row[f"min_text_px_{width}"] = img["min_text_px"]
                    if img["link"]:
                        text, _, dpi = png_info(local_file(img["link"], html))
                        row[f"zoom_{width}"] = {"variant": text.get("attnlib:variant"), "dpi": dpi}
        browser.close()
    rows = list(figures.values())
    shown = [r["min_text_shown_1280"] for r in rows if r["min_text_shown_1280"] is not None]
    phone = [r.get("min_text_shown_390") for r in rows if r.get("min_text_shown_390") is not None]
    scales = [r["scale_1280"] for r in rows if r["scale_1280"]]
    return {
        "chromium": version,
        "column_px": {w: sorted(set(c)) for w, c in columns.items()},
        "n_figures": len(rows),
        "scale_1280": [min(scales), max(scales)],
        "min_text_shown_1280": [min(shown), max(shown)] if shown else None,
        "n_under_10px_1280": sum(s < 10 for s in shown),
        "n_shrunk_1280": sum(s < 0.995 for s in scales),
        "n_linked_390": sum(bool(r.get("link_390")) for r in rows),
        "min_text_shown_390": [min(phone), max(phone)] if phone else None,
        "n_under_9px_390": sum(s < 9 for s in phone),
        "n_phone_rendering_390": sum(r.get("variant_390") == "phone" for r in rows),
        "n_zoom_link_390": sum((r.get("zoom_390") or {}).get("variant") == "zoom" for r in rows),
        "figures": rows,
    }


def markdown(results: dict) -> str:
    out = ["# Figures on the page: size and smallest text", "",
           "Written by `bench/bench_figures.py`. Per figure of the chapter pages: the PNG's natural width, "
           "the width the page shows it at in a 1280 px and a 390 px window (headless Chromium), and the "
           "smallest text: in image px (from the PNG's `attnlib:min-text-px` chunk, i.e. font size in pt x "
           "dpi / 72) and as shown on screen (that times shown / natural width). The issue's floor: 10 px "
           "at 1280 px.", ""]
    for label, r in results.items():
        lo, hi = r["min_text_shown_1280"] or (None, None)
        out += [f"## {label}", "",
                f"{r['meta']}", "",
                f"- {r['n_figures']} figures; content column {r['column_px'].get('1280')} CSS px at 1280, "
                f"{r['column_px'].get('390')} at 390",
                f"- scale at 1280 px: {r['scale_1280'][0]:.2f} to {r['scale_1280'][1]:.2f}; "
                f"{r['n_shrunk_1280']} figures shrunk",
                f"- smallest text on screen at 1280 px: {lo:.1f} to {hi:.1f} px; "
                f"{r['n_under_10px_1280']} figures under 10 px",
                f"- figures that link to their full-size PNG: {r['n_linked_390']} of {r['n_figures']}",
                *([f"- at 390 px: {r['n_phone_rendering_390']} of {r['n_figures']} figures show their phone rendering; "
                   f"smallest text on screen {r['min_text_shown_390'][0]:.1f} to {r['min_text_shown_390'][1]:.1f} px, "
                   f"{r['n_under_9px_390']} under 9 px; {r['n_zoom_link_390']} open a zoom rendering on a tap"]
                  if r.get("n_phone_rendering_390") is not None and r.get("min_text_shown_390") else []), "",
                "| page | figure | natural w | shown 1280 | scale 1280 | shown 390 | smallest text (image px) "
                "| smallest text shown 1280 | shown 390 | file at 390 (px wide) | zoom dpi |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        for f in r["figures"]:
            def num(x, fmt="{:.1f}"):
                return "" if x is None else fmt.format(x)
            out.append(f"| {f['page'].split('/')[-1].removesuffix('.html')} | {f['figure'] or ''} | {f['natural_w']} "
                       f"| {num(f.get('shown_w_1280'), '{:.0f}')} | {num(f.get('scale_1280'), '{:.2f}')} "
                       f"| {num(f.get('shown_w_390'), '{:.0f}')} | {num(f['min_text_px'])} "
                       f"| {num(f.get('min_text_shown_1280'))} | {num(f.get('min_text_shown_390'))} "
                       f"| {f.get('variant_390') or ''} ({f.get('pixel_w_390') or ''}) "
                       f"| {num((f.get('zoom_390') or {}).get('dpi'), '{:.0f}')} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help="key in figures.json, e.g. before / after")
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--baseline", metavar="REV", help="build REV (with the probe) in a scratch folder and measure it")
    ap.add_argument("--note", default="", help="what was measured (revision, build)")
    args = ap.parse_args()
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            result = measure(build_baseline(args.baseline, Path(tmp)))
        note = args.note or f"revision {args.baseline}, built with the measuring probe"
    else:
        result = measure(args.html)
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        note = args.note or f"this checkout (HEAD {rev} plus working tree), {args.html}"
    result["meta"] = (f"Measured {dt.date.today().isoformat()}: {note}; headless Chromium {result['chromium']}, "
                      f"windows 1280 x 900 and 390 x 900.")
    path = RESULTS / "figures.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[args.label] = result
    results = {k: results[k] for k in sorted(results, key=lambda k: (k != "before", k))}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "figures.md").write_text(markdown(results))
    print(markdown({args.label: result}).split("| page |")[0])


if __name__ == "__main__":
    main()
