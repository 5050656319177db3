/* attnlib explorables: shared runtime (vanilla JS, no libraries, no network).
 * Python wraps this file, one view file and the view's data into a single IIFE per
 * instance, so nothing leaks into the page's global scope and two instances share no
 * state (only the queue that schedules their drawing, xpSchedule).  Every token or label reaches the DOM through textContent, never
 * innerHTML. */
var SVGNS = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  var node = document.createElement(tag);
  setAttrs(node, attrs);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function sv(tag, attrs, text) {
  var node = document.createElementNS(SVGNS, tag);
  setAttrs(node, attrs);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function setAttrs(node, attrs) {
  if (!attrs) return;
  for (var key in attrs) {
    if (Object.prototype.hasOwnProperty.call(attrs, key)) node.setAttribute(key, attrs[key]);
  }
}

/* Numerically stable softmax of scores / temperature, the same recipe as
 * attnlib.softmax: subtract the (finite) maximum, exponentiate, normalise.
 * null or -Infinity scores get weight exactly 0; a row whose every score is
 * masked gets all-zero weights (not NaN). */
function softmax(scores, temperature) {
  var n = scores.length, x = new Float64Array(n), m = -Infinity, i;
  var t = temperature === undefined ? 1 : temperature;
  for (i = 0; i < n; i++) {
    x[i] = scores[i] === null ? -Infinity : scores[i] / t;
    if (x[i] > m) m = x[i];
  }
  if (!isFinite(m)) m = 0;
  var total = 0, w = new Float64Array(n);
  for (i = 0; i < n; i++) { w[i] = Math.exp(x[i] - m); total += w[i]; }
  var norm = total > 0 ? total : 1;
  for (i = 0; i < n; i++) w[i] /= norm;
  return w;
}

/* Shannon entropy in nats, with 0 log 0 = 0 (attnlib.entropy). */
function entropy(w) {
  var h = 0;
  for (var i = 0; i < w.length; i++) if (w[i] > 0) h -= w[i] * Math.log(w[i]);
  return h;
}

/* matplotlib's viridis sampled at 9 stops, linearly interpolated; t in [0, 1]. */
var VIRIDIS = [[68, 1, 84], [71, 45, 123], [59, 82, 139], [44, 114, 142], [33, 145, 140],
               [40, 174, 128], [94, 201, 98], [173, 220, 48], [253, 231, 37]];
function viridisRGB(t) {
  if (!(t > 0)) t = 0;
  if (t > 1) t = 1;
  var s = t * (VIRIDIS.length - 1), k = Math.min(Math.floor(s), VIRIDIS.length - 2), f = s - k;
  var a = VIRIDIS[k], b = VIRIDIS[k + 1];
  return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])), Math.round(a[2] + f * (b[2] - a[2]))];
}
function viridis(t) { var c = viridisRGB(t); return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; }

/* A horizontal viridis colour bar from 0 to vmax, drawn into an <svg> group. */
function colourBar(parent, uid, x, y, width, vmax, label) {
  var defs = sv("defs");
  var grad = sv("linearGradient", {id: uid + "-cbar", x1: "0", x2: "1", y1: "0", y2: "0"});
  for (var k = 0; k <= 8; k++) grad.appendChild(sv("stop", {offset: (k / 8).toFixed(3), "stop-color": viridis(k / 8)}));
  defs.appendChild(grad);
  parent.appendChild(defs);
  parent.appendChild(sv("rect", {x: x, y: y, width: width, height: 8, fill: "url(#" + uid + "-cbar)"}));
  parent.appendChild(sv("text", {x: x, y: y + 20, "class": "ax-small"}, "0"));
  parent.appendChild(sv("text", {x: x + width, y: y + 20, "text-anchor": "end", "class": "ax-small"}, fmt(vmax, 2)));
  parent.appendChild(sv("text", {x: x + width / 2, y: y + 20, "text-anchor": "middle", "class": "ax-small"}, label));
}

function fmt(x, digits) {
  if (x === null || x === -Infinity) return "-inf";
  return Number(x).toFixed(digits === undefined ? 3 : digits);
}

/* A labelled <input type=range>; onInput receives the numeric value. */
function slider(uid, name, label, min, max, step, value, onInput) {
  var id = uid + "-" + name;
  var wrap = el("div", {"class": "xp-control"});
  wrap.appendChild(el("label", {"for": id}, label));
  var input = el("input", {type: "range", id: id, min: min, max: max, step: step, value: value,
                           "data-role": name});
  var out = el("output", {"for": id, "data-role": name + "-value"});
  wrap.appendChild(input);
  wrap.appendChild(out);
  input.addEventListener("input", function () { onInput(parseFloat(input.value)); });
  return {wrap: wrap, input: input, out: out};
}

function checkbox(uid, name, label, checked, onChange) {
  var id = uid + "-" + name;
  var wrap = el("div", {"class": "xp-control"});
  var input = el("input", {type: "checkbox", id: id, "data-role": name});
  input.checked = !!checked;
  wrap.appendChild(input);
  wrap.appendChild(el("label", {"for": id}, label));
  input.addEventListener("change", function () { onChange(input.checked); });
  return {wrap: wrap, input: input};
}

/* Token labels along an axis.  side: "left" (row labels, right-aligned), "top" (column
 * labels rising to the right) or "bottom" (column labels falling to the left).  Long
 * tokens are shortened for the axis; the full text stays in a <title> tooltip.  Text is
 * always set with textContent. */
function shortLabel(tok) { return tok.length > 14 ? tok.slice(0, 13) + "\u2026" : tok; }
function tokenLabels(parent, tokens, pos, fixed, side, cls, every) {
  /* every: label one token in `every` (cells narrower than a line of text would make the
   * labels overlap: chapter 7's 31 tokens on a phone); 1 or absent labels all */
  for (var i = 0; i < tokens.length; i += (every || 1)) {
    var p = pos(i), attrs;
    if (side === "left") attrs = {x: fixed, y: p, "text-anchor": "end", "dominant-baseline": "middle"};
    else if (side === "top") attrs = {x: p, y: fixed, "text-anchor": "start", transform: "rotate(-55 " + p + " " + fixed + ")"};
    else attrs = {x: p, y: fixed, "text-anchor": "end", "dominant-baseline": "middle",
                  transform: "rotate(-55 " + p + " " + fixed + ")"};
    attrs["class"] = cls || "ax";
    var text = sv("text", attrs, shortLabel(tokens[i]));
    if (tokens[i].length > 14) text.appendChild(sv("title", null, tokens[i]));
    parent.appendChild(text);
  }
}

/* Room needed by the longest (shortened) label, in pixels, for a font of `size` px. */
function labelRoom(tokens, size) {
  var n = 1;
  for (var i = 0; i < tokens.length; i++) n = Math.max(n, shortLabel(tokens[i]).length);
  return Math.ceil(0.62 * size * n) + 10;
}

/* Width available to a view inside `root` (its content box), in CSS pixels, so that a view
 * lays itself out for the column it sits in: about 700 px on a desktop page, 330 px on a
 * 390 px phone.  Falls back to 700 when the figure is not laid out (e.g. display: none).
 * During a figure's first drawing this is the width xpSchedule measured for it beforehand. */
function columnWidth(root) {
  if (root.__xpWidth) return root.__xpWidth;
  return measureColumn(root);
}

function measureColumn(root) {
  var w = root.clientWidth;
  if (!(w > 0)) return 700;
  var cs = window.getComputedStyle(root);
  w -= (parseFloat(cs.paddingLeft) || 0) + (parseFloat(cs.paddingRight) || 0);
  return Math.max(200, Math.min(900, Math.floor(w)));
}

/* Draw a figure after the page has been parsed, never while it parses.  Each figure's script
 * queues `draw` here; once the document is parsed (DOMContentLoaded, or at once in a task of
 * its own when it already is, as in a notebook's output), every queued figure's column width
 * is read in one go (one layout for all of them, where reading it in each script forced a
 * layout of the page parsed so far, once per figure), then each figure is drawn in a task of
 * its own, in page order.  The queue is the one thing instances share (window.__attnlibXp). */
function xpSchedule(root, draw) {
  var q = window.__attnlibXp || (window.__attnlibXp = {jobs: [], armed: false});
  q.jobs.push([root, draw]);
  if (q.armed) return;
  q.armed = true;
  function drain() {
    var jobs = q.jobs.splice(0, q.jobs.length), i = 0;
    q.armed = false;
    for (var j = 0; j < jobs.length; j++) jobs[j][0].__xpWidth = measureColumn(jobs[j][0]);
    (function next() {
      if (i >= jobs.length) return;
      var job = jobs[i++];
      try { job[1](); } finally { delete job[0].__xpWidth; setTimeout(next, 0); }
    })();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drain);
  else setTimeout(drain, 0);
}

/* An <svg> that keeps its aspect ratio and shrinks with its box (never wider than W). */
function fluidSvg(W, H, attrs) {
  var node = sv("svg", attrs);
  setAttrs(node, {width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "xp-fluid"});
  node.style.maxWidth = "100%";
  node.style.height = "auto";
  return node;
}

/* Colours as [r, g, b, a] from a computed CSS colour ("rgb(...)" / "rgba(...)"); null if unknown. */
function parseRGB(css) {
  var m = /rgba?\(([^)]+)\)/.exec(css || "");
  if (!m) return null;
  var p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
}
function blend(top, bottom) {  /* top (with alpha) over an opaque bottom */
  var a = top[3];
  return [top[0] * a + bottom[0] * (1 - a), top[1] * a + bottom[1] * (1 - a), top[2] * a + bottom[2] * (1 - a), 1];
}
function luminance(c) {  /* WCAG 2 relative luminance */
  var f = function (v) { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
}
function contrast(a, b) {
  var la = luminance(a), lb = luminance(b);
  return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
}
/* The opaque background behind `node` (the first opaque one among it and its ancestors, with
 * translucent ones composited on it); white when none is set. */
function opaqueBackground(node) {
  var layers = [];
  for (var n = node; n && n.nodeType === 1; n = n.parentElement) {
    var c = parseRGB(window.getComputedStyle(n).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  var bg = [255, 255, 255, 1];
  for (var k = layers.length - 1; k >= 0; k--) bg = blend(layers[k], bg);
  return bg;
}

/* How a screen reader should say each token: the word itself, with its position when the
 * same word occurs more than once ("the (position 5)"), never "token 5". */
function tokenNames(tokens) {
  var seen = {}, k;
  for (k = 0; k < tokens.length; k++) seen[tokens[k]] = (seen[tokens[k]] || 0) + 1;
  return tokens.map(function (t, n) { return seen[t] > 1 ? t + " (position " + n + ")" : t; });
}

/* Previous / Next buttons and a "step n of N" counter for the step-through views; onStep
 * receives the new step.  Returns {wrap, set(step), get()}. */
function stepper(uid, count, onStep) {
  var wrap = el("div", {"class": "xp-controls xp-stepper"}), step = 0;
  var prev = el("button", {type: "button", id: uid + "-prev", "data-role": "prev"}, "\u2190 Previous");
  var next = el("button", {type: "button", id: uid + "-next", "data-role": "next"}, "Next \u2192");
  var where = el("span", {"class": "xp-step-count", "data-role": "step-count"});
  wrap.appendChild(prev); wrap.appendChild(next); wrap.appendChild(where);
  function set(n) {
    step = Math.max(0, Math.min(count() - 1, n));
    /* aria-disabled, not disabled: focus stays on the button at either end */
    prev.setAttribute("aria-disabled", step === 0 ? "true" : "false");
    next.setAttribute("aria-disabled", step === count() - 1 ? "true" : "false");
    where.textContent = "step " + (step + 1) + " of " + count();
    onStep(step);
  }
  prev.addEventListener("click", function () { set(step - 1); });
  next.addEventListener("click", function () { set(step + 1); });
  return {wrap: wrap, set: set, get: function () { return step; }};
}

/* One in-page model in a Web Worker (chapter 9's encoder, chapter 7's circuit lab), shared by
 * every figure of the page: file is the worker under _static/ ("model/worker.js"), what names
 * the model in messages, notebook says what to do where no worker can run (a notebook).
 * Returns {available(), send(message, onProgress) -> Promise of the worker's reply,
 * load(onProgress) -> Promise of its description, info()}. */
function workerClient(file, what, notebook) {
  var worker = null, next = 1, pending = {}, info = null, loading = null;
  function staticRoot() {
    var root = document.documentElement.getAttribute("data-content_root");
    return root === null ? null : root + "_static/";
  }
  function available() {
    if (staticRoot() === null) return notebook;
    if (location.protocol === "file:") {
      return "this page was opened from a file, and browsers do not let a page start a worker from a file: " +
             "serve the book (run python -m http.server in _build/html) and open the page through that server";
    }
    if (typeof Worker !== "function") return "this browser cannot run Web Workers";
    if (typeof WebAssembly !== "object") return "this browser has no WebAssembly";
    if (typeof BigInt64Array !== "function") return "this browser is too old (no 64-bit integer arrays)";
    return "";
  }
  function start() {
    if (worker) return worker;
    worker = new Worker(staticRoot() + file);
    worker.onmessage = function (event) {
      var msg = event.data, job = pending[msg.id];
      if (!job) return;
      if (msg.progress) { if (job.progress) job.progress(msg.progress.loaded, msg.progress.total); return; }
      delete pending[msg.id];
      if (msg.ok) job.resolve(msg); else job.reject(new Error(msg.error));
    };
    worker.onerror = function (event) {
      var why = new Error(what + "'s worker failed to start (" + (event.message || "no details") + ")");
      Object.keys(pending).forEach(function (id) { pending[id].reject(why); delete pending[id]; });
      worker = null;
      loading = null;
    };
    return worker;
  }
  function send(message, progress) {
    var why = available();
    if (why) return Promise.reject(new Error(why));
    return new Promise(function (resolve, reject) {
      var id = next++;
      pending[id] = {resolve: resolve, reject: reject, progress: progress};
      message.id = id;
      start().postMessage(message);
    });
  }
  function load(onProgress) {
    if (info) return Promise.resolve(info);
    if (!loading) {
      loading = send({cmd: "load"}, onProgress).then(function (msg) { info = msg.info; return info; },
                                                     function (err) { loading = null; throw err; });
    }
    return loading;
  }
  return {available: available, send: send, load: load, info: function () { return info; }};
}

/* attnlib.patching.gap_problem: why two reference metrics cannot normalise a score, or null. */
function gapProblem(clean, corrupted, minGap) {
  if (!isFinite(clean) || !isFinite(corrupted)) return "the clean (" + clean + ") or corrupted (" + corrupted + ") metric is not a finite number";
  var gap = clean - corrupted;
  if (Math.abs(gap) < minGap) return "the corruption moves the metric by " + (gap >= 0 ? "+" : "-") + Math.abs(gap).toFixed(3) + " nats, less than " + minGap + ": a normalised score would divide by noise";
  return null;
}

/* A labelled <select> of 0..n-1 (a layer or a head) appended to parent; onChange receives the
 * number.  Returns the <select>. */
function indexPicker(parent, uid, name, label, n, value, onChange) {
  var wrap = el("div", {"class": "xp-control"}), id = uid + "-" + name;
  wrap.appendChild(el("label", {"for": id}, label));
  var select = el("select", {id: id, "data-role": name});
  for (var i = 0; i < n; i++) select.appendChild(el("option", {value: String(i)}, String(i)));
  select.value = String(value);
  select.addEventListener("change", function () { onChange(parseInt(select.value, 10)); });
  wrap.appendChild(select);
  parent.appendChild(wrap);
  return select;
}
