"""Page weight of the built book: bytes and requests a reader's browser loads, per page.

Serves ``_build/html`` on 127.0.0.1, opens every page in headless Debian Chromium (Playwright,
``executable_path``) with every request to another host blocked, waits for the page to settle
(network idle, MathJax typeset), scrolls it to the bottom and back so that lazy images and
fonts are fetched too, waits again, and records every request the page made: its URL, type
and the length of its *uncompressed* body (``response.body()``).  The local server sends
bodies uncompressed, so this is also what goes over the wire here; a CDN that gzips would send
less.  A request that failed or was blocked counts as a request with 0 bytes.

The budget of issue 12: every chapter page at most 4,000,000 bytes and at most 40 requests.

Usage:  .venv/bin/python bench/bench_pages.py [--html _build/html] [--name pages] [--build "..."]
Writes: bench/results/<name>.json and <name>.md (the table, then each page's 8 biggest
resources).  ``--build`` is a note on which build was measured (commit, date).

:func:`measure` is imported by ``tests/test_page_weight.py``, so the test and this script
measure the same way.
"""
from __future__ import annotations

import argparse
import datetime as dt
import functools
import http.server
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MAX_BYTES = 4_000_000   # issue 12: every chapter page at most 4 MB ...
MAX_REQUESTS = 40       # ... and 40 requests, all resources, uncompressed bodies
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@dataclass
class Resource:
    url: str      # path relative to the served folder (or the full address when external)
    kind: str     # Playwright's resource type: document, script, stylesheet, font, image, ...
    bytes: int    # length of the uncompressed body; 0 for a failed or blocked request
    status: int   # HTTP status; 0 when blocked or failed


@dataclass
class PageWeight:
    page: str
    bytes: int = 0
    requests: int = 0
    resources: list[Resource] = field(default_factory=list)

    def biggest(self, n: int = 8) -> list[Resource]:
        return sorted(self.resources, key=lambda r: -r.bytes)[:n]

    def by_kind(self) -> dict[str, list[int]]:
        """kind -> [requests, bytes]."""
        out: dict[str, list[int]] = {}
        for r in self.resources:
            c = out.setdefault(r.kind, [0, 0])
            c[0] += 1
            c[1] += r.bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))

    def breakdown(self, n: int = 8) -> str:
        """A readable account: totals, per kind, then the ``n`` biggest resources."""
        lines = [f"{self.page}: {self.bytes:,} bytes in {self.requests} requests"]
        lines += [f"  {kind:>10}: {c[0]:3d} requests {c[1]:>11,} bytes" for kind, c in self.by_kind().items()]
        lines += ["  biggest:"] + [f"    {r.bytes:>11,}  {r.kind:<10} {r.url}" for r in self.biggest(n)]
        return "\n".join(lines)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@functools.lru_cache(maxsize=None)
def serve(folder: str) -> str:
    """Serve ``folder`` on 127.0.0.1 from a daemon thread; returns the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def find_chromium() -> str | None:
    candidates = [os.environ.get("CHROMIUM"), "/usr/bin/chromium"]
    candidates += [shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def pages_of(html: Path) -> list[str]:
    """Every page of the book (relative paths), not the search page or the genindex."""
    skip = {"search.html", "genindex.html"}
    return sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html")
                  if not {"_static", "_sources", "_images"} & set(p.relative_to(html).parts) and p.name not in skip
                  and "This chapter has moved" not in p.read_text(encoding="utf-8", errors="replace")[:600])  # redirects


_SCROLL = """async () => {
  const step = Math.max(300, Math.floor(window.innerHeight * 0.8));
  for (let y = 0; y < document.documentElement.scrollHeight; y += step) {
    window.scrollTo(0, y); await new Promise(r => setTimeout(r, 30));
  }
  window.scrollTo(0, 0);
}"""
_MATHJAX = ("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? "
            "MathJax.startup.promise.then(() => true) : true")


def measure(browser, base: str, page: str, width: int = 1280, checker: bool = False) -> PageWeight:
    """Load ``base + page`` in a fresh context (no cache, non-local requests blocked), read it
    to the bottom, and return every request it made with its body size.

    ``checker=False`` (the default) measures the page a reader reads: the exercises' checker
    (Pyodide and the graders, which a page with exercises starts in a background worker once it
    is idle, attnlib/static/exercises.js) is held to its former start, the first interaction
    (``window.attnlibCheckerStart = "interaction"``); its own download and start are measured by
    ``bench/bench_first_check.py``.  ``checker=True`` counts it too.

    ``browser`` is a Playwright ``Browser``; ``base`` ends with ``/``.  Raises Playwright's
    ``TimeoutError`` if the page never loads (30 s); after the scroll, a network that stays
    busy for 60 s is tolerated (every request made so far is counted)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    host = urlparse(base).hostname
    seen: list = []
    context = browser.new_context(viewport={"width": width, "height": 900})

    def route(r):
        u = urlparse(r.request.url)
        if u.scheme in ("data", "blob", "about") or u.hostname == host:
            r.continue_()
        else:
            r.abort()

    context.route("**/*", route)
    if not checker:
        context.add_init_script("window.attnlibCheckerStart = 'interaction';")
    p = context.new_page()
    p.on("request", lambda req: seen.append(req))
    p.goto(base + page, wait_until="load")
    for attempt in range(3):  # settle (a page may redirect: index.html -> intro.html)
        p.wait_for_load_state("networkidle")
        try:
            p.evaluate(_MATHJAX)
            break
        except Exception as err:  # the context went away in a navigation
            if "context was destroyed" not in str(err) or attempt == 2:
                raise
    p.evaluate(_SCROLL)
    for _ in range(2):  # fonts are requested when text first needs them: let them all start
        p.evaluate("() => document.fonts.ready.then(() => true)")
        p.wait_for_timeout(300)
        try:
            p.wait_for_load_state("networkidle", timeout=60000)
        except PlaywrightTimeout:  # a busy machine: what was requested is recorded anyway
            pass
    out = PageWeight(page)
    for req in seen:
        u = urlparse(req.url)
        if u.scheme in ("data", "blob", "about"):
            continue
        name = u.path[len(urlparse(base).path):] if u.hostname == host else req.url
        resp, size, status = req.response(), 0, 0
        if resp is not None:
            status = resp.status
            try:
                size = len(resp.body())
            except Exception:  # a redirect or a body the browser no longer holds
                size = int(resp.headers.get("content-length", 0) or 0)
        out.resources.append(Resource(name, req.resource_type, size, status))
    out.requests = len(out.resources)
    out.bytes = sum(r.bytes for r in out.resources)
    context.close()
    return out


def is_chapter(page: str) -> bool:
    return page.startswith("chapters/") and page != "chapters/references.html"


def table(results: list[PageWeight]) -> list[str]:
    rows = ["| page | bytes | MB | requests | within budget |", "|---|---:|---:|---:|---|"]
    for w in results:
        ok = w.bytes <= MAX_BYTES and w.requests <= MAX_REQUESTS
        rows.append(f"| {w.page} | {w.bytes:,} | {w.bytes / 1e6:.2f} | {w.requests} | "
                    f"{'yes' if ok else '**no**'}{'' if is_chapter(w.page) else ' (not a chapter)'} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--name", default="pages", help="results file stem under bench/results/")
    ap.add_argument("--build", default="", help="which build was measured (commit, date)")
    args = ap.parse_args(argv)
    html = Path(args.html)
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        sys.exit("Chromium not found ($CHROMIUM, /usr/bin/chromium, chromium, ...)")
    base = serve(str(html))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
        version = browser.version
        results = [measure(browser, base, page) for page in pages_of(html)]
        browser.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "browser": f"Chromium {version}",
            "machine": f"{platform.machine()} {platform.system()}", "build": args.build or f"_build/html of {commit}",
            "budget": {"bytes": MAX_BYTES, "requests": MAX_REQUESTS}, "viewport": "1280 x 900"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(
        {"meta": meta, "pages": [{**asdict(w), "resources": sorted((asdict(r) for r in w.resources), key=lambda r: -r["bytes"])}
                                 for w in results]}, indent=1) + "\n")
    chapters = [w for w in results if is_chapter(w.page)]
    over = [w.page for w in chapters if w.bytes > MAX_BYTES or w.requests > MAX_REQUESTS]
    md = [f"# Page weight of the built book ({args.name})", "",
          f"Written by `bench/bench_pages.py` on {meta['date']}: {meta['build']}; headless {meta['browser']}, "
          f"viewport {meta['viewport']}, every non-local request blocked, each page read to the bottom "
          "(lazy images and fonts included), fresh context per page (no cache). Bytes are uncompressed bodies "
          f"of every resource. Budget (issue 12): every chapter page at most {MAX_BYTES:,} bytes and "
          f"{MAX_REQUESTS} requests.", ""]
    md += table(results)
    md += ["", f"Chapters: {min(w.bytes for w in chapters) / 1e6:.2f}-{max(w.bytes for w in chapters) / 1e6:.2f} MB, "
               f"{min(w.requests for w in chapters)}-{max(w.requests for w in chapters)} requests; "
               + (f"over budget: {', '.join(over)}." if over else "all within budget."), "",
           "## Biggest resources per page", ""]
    for w in results:
        md += ["```", w.breakdown(), "```", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(md))
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
