"""What the in-page model benches share (bench_browser_model.py for chapter 9's encoder lab,
bench_circuit_lab.py for chapter 7's circuit lab): Chromium's flags, the three settings, a
quiet local server, a fresh page with every other host blocked and the CPU throttled as asked,
and the Long Tasks observer."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from urllib.parse import urlparse

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
#: name -> ((width, height) in CSS px, CPU throttling rate): a desktop, a phone, a mid-range phone.
SETTINGS = {"desktop 1280 px": ((1280, 900), 1), "phone 390 px": ((390, 844), 1),
            "phone 390 px, CPU 4x slower": ((390, 844), 4)}
#: Records every main-thread task of 50 ms or more (the Long Tasks API) into window.__long as
#: [start, duration] pairs (ms), so that a bench can say which step of a path each one fell in.
LONG_TASKS = """() => { window.__long = []; new PerformanceObserver(l => l.getEntries().forEach(
  e => window.__long.push([e.startTime, e.duration]))).observe({type: 'longtask'}); }"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder) -> str:
    """Serve ``folder`` on 127.0.0.1 (a daemon thread); returns the base URL, ending in /."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def settle(page) -> None:
    """Wait until the page's own start (MathJax typesetting) is over: it is not the model's work."""
    page.wait_for_load_state("networkidle")
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise ? "
                  "MathJax.startup.promise.then(() => true) : true")


def _route(route):
    url = urlparse(route.request.url)
    if url.scheme in ("data", "blob", "about") or url.hostname == "127.0.0.1":
        route.continue_()
    else:
        route.abort()


def open_page(browser, url: str, viewport: tuple, rate: float):
    """A fresh browser context (empty cache, every other host blocked) at ``viewport`` with the
    CPU throttled ``rate`` times, on ``url``, its own start over: (context, page, errors)."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    context.route("**/*", _route)
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(url, wait_until="load")
    if rate != 1:
        context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": rate})
    settle(page)
    return context, page, errors


def chromium_path() -> str:
    """The Chromium the benches drive: $CHROMIUM, else the one on the PATH, else Debian's."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def measured_bytes(requests: list) -> dict:
    """Bytes of the response bodies received for ``requests`` (finished), by the file's path
    under the site: {path: bytes}."""
    out = {}
    for q in requests:
        path = urlparse(q.url).path.lstrip("/")
        body = q.sizes()["responseBodySize"]
        if body <= 0:                               # not reported: read the body
            body = len(q.response().body())
        out[path] = out.get(path, 0) + body
    return out
