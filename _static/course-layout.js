/* Page behaviour of the course book (loaded on every page from _static/; no network).
 *
 * 1. Solution dropdowns (sphinx-exercise + sphinx-togglebutton): the title of a solution is a
 *    link back to its exercise, so a click on the title text used to jump up to the exercise
 *    instead of opening the solution.  A click on a link inside a collapsible admonition's
 *    title now opens or closes it, as a click anywhere else on the title does.
 * 2. Wide blocks (display maths, code, cell outputs, tables) scroll sideways inside their own
 *    box; `data-overflow` ("left", "right" or "both") marks the sides with hidden content, and
 *    course-layout.css fades those edges so the reader sees there is more to scroll to.  A box
 *    that scrolls and holds nothing focusable takes keyboard focus (tabindex 0, a named
 *    region), so a keyboard reader can scroll it with the arrow keys; it gives focus back up
 *    when a wider window lets it fit.
 * 3. Display maths wider than the column is reflowed before it is left to scroll (below).
 * 4. On a phone the navigation drawer and the "Contents" panel are modal dialogs: a tap on a
 *    link to a section of the same page used to scroll the page behind the panel and leave the
 *    panel open over it.  The panel now closes, and the page shows the section.
 * 5. Sections that moved to another page when the chapters were renumbered (issue 44): a link
 *    to one of them at its old address (MOVED_SECTIONS) is forwarded to where it is now.  Whole
 *    pages that moved are forwarded by sphinx-reredirects (_config.yml: redirects). */
(function () {
  "use strict";
  var MOVED_SECTIONS = {
    "06_multihead.html": {
      to: "07_circuits.html",
      same: ["where-do-the-query-key-and-value-weights-come-from", "the-data-the-words-of-a-real-speech-with-repeats",
             "the-model", "three-jobs-to-look-for-and-their-baselines", "training", "reading-the-trained-heads",
             "patterns-before-and-after", "ablation-remove-one-head-measure-the-loss", "the-control-one-layer",
             "the-circuit-tested-and-drawn", "activation-patching-the-copying-path-found-by-intervention",
             "going-further-the-circuit-in-the-weights", "explore-the-trained-heads",
             "the-circuit-lab-break-it-watch-it-form-find-it-by-patching", "fig-06-ablation", "fig-06-before-after",
             "fig-06-circuit", "fig-06-control", "fig-06-scores", "fig-06-training", "fig-06-weights"],
      renamed: {"ch6-weights": "ch7-weights", "induction-on-real-text": "going-further-induction-on-real-text",
                "why-several-heads": "going-further-why-several-heads", "ex-06-induction_head": "ex-07-induction_head",
                "ex-06-circuit_loss": "ex-07-circuit_loss", "ex-06-one_layer_halves": "ex-07-one_layer_halves",
                "ex-06-patching_table": "ex-07-patching_table", "ex-06-predict_patch": "ex-07-predict_patch",
                "ex-06-copy_wrong": "ex-07-copy_wrong", "ex-06-feeder_matters": "ex-07-feeder_matters"}
    }
  };
  var page = location.pathname.split("/").pop();
  var moved = MOVED_SECTIONS[page], hash = decodeURIComponent(location.hash.slice(1));
  if (moved && hash) {
    var id = moved.same.indexOf(hash) >= 0 ? hash : moved.renamed[hash];
    if (id) location.replace(moved.to + "#" + encodeURIComponent(id));
  }
})();

(function () {
  "use strict";

  document.addEventListener("click", function (ev) {
    var link = ev.target.closest ? ev.target.closest("a") : null;
    if (!link) return;
    var title = link.closest(".toggle > .admonition-title");
    if (!title) return;
    var button = title.querySelector(".toggle-button");
    if (!button) return;
    ev.preventDefault();
    ev.stopPropagation();
    button.click();  /* bubbles to the title, whose handler toggles the admonition */
  }, true);

  document.addEventListener("click", function (ev) {
    var link = ev.target.closest ? ev.target.closest("a[href]") : null;
    var dialog = link ? link.closest("dialog[open]") : null;
    if (!dialog || typeof dialog.close !== "function") return;
    var url = new URL(link.href, location.href);
    if (url.origin + url.pathname === location.origin + location.pathname) dialog.close();
  });

  var WIDE = [
    "mjx-container[display=true]", "mjx-container[data-wide-inline]", "div.math", "div.highlight pre", ".cell_output pre",
    ".cell_output .output.text_html", ".pst-scrollable-table-container", ".cell_output .output > table",
    ".table-wrapper", ".cell_output div[id^=bertviz-]", ".attn-exercise .attn-ex-question table"
  ].join(",");
  var SELECTOR = ".bd-article " + WIDE.split(",").join(", .bd-article ") + ", main " + WIDE.split(",").slice(-1)[0];
  var FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";
  /* pydata-sphinx-theme gives these a tabindex of 0 or -1 by whether they scroll (on load, on
   * resize and when #main-content changes); their tabindex is the theme's, not an author's. */
  var THEME_STOPS = "pre, .nboutput > .output_area, .cell_output > .output, .jp-RenderedHTMLCommon, .pst-scrollable-table-container";
  var counts = {};

  function focusable(node, scrolls) {
    var ours = node.hasAttribute("data-scroll-focus");
    var free = !node.hasAttribute("tabindex") || node.matches(THEME_STOPS);
    if (scrolls && !ours && free && !node.querySelector(FOCUSABLE)) {
      node.setAttribute("data-scroll-focus", "");
      node.setAttribute("tabindex", "0");
      if (!node.hasAttribute("role")) { node.setAttribute("role", "region"); node.setAttribute("data-scroll-role", ""); }
      if (!node.hasAttribute("aria-label") && !node.hasAttribute("aria-labelledby")) {
        var what = node.matches("table, .pst-scrollable-table-container, .table-wrapper") ? "table"
          : (node.matches("mjx-container, div.math") ? "equation" : (node.matches("pre, div.highlight pre") ? "code" : "output"));
        counts[what] = (counts[what] || 0) + 1;   /* landmarks need distinct names */
        node.setAttribute("aria-label", "Wide " + what + " " + counts[what] + ": scroll sideways to read it all");
        node.setAttribute("data-scroll-label", "");
      }
    } else if (!scrolls && ours) {
      node.removeAttribute("data-scroll-focus");
      node.removeAttribute("tabindex");
      if (node.hasAttribute("data-scroll-role")) { node.removeAttribute("role"); node.removeAttribute("data-scroll-role"); }
      if (node.hasAttribute("data-scroll-label")) { node.removeAttribute("aria-label"); node.removeAttribute("data-scroll-label"); }
    }
  }

  /* Reading a box's widths needs the page laid out; writing its attributes changes its style.
   * So a batch of boxes is read first, then written: one layout per batch, not one per box. */
  function measure(node) {
    var max = node.scrollWidth - node.clientWidth, state = "";
    if (max > 1) {
      var left = node.scrollLeft > 1, right = node.scrollLeft < max - 1;
      state = left && right ? "both" : (left ? "left" : (right ? "right" : ""));
    }
    return {state: state, scrolls: max > 1};
  }
  function apply(node, m) {
    if (m.state) { if (node.getAttribute("data-overflow") !== m.state) node.setAttribute("data-overflow", m.state); }
    else if (node.hasAttribute("data-overflow")) node.removeAttribute("data-overflow");
    focusable(node, m.scrolls);
  }
  function markAll(nodes) {
    var found = nodes.map(measure);
    nodes.forEach(function (node, i) { apply(node, found[i]); });
  }
  function mark(node) { markAll([node]); }

  /* Page load leaves the main thread free (issue 38): finding the boxes needs no layout; a box
   * is measured when it comes near the viewport (an IntersectionObserver, which reports after
   * the browser's own layout), and the boxes further down are measured in idle time, a slice at
   * a time, so that every box that scrolls is a Tab stop soon after load wherever it is. */
  var watched = [], stale = new Set();
  var near = typeof IntersectionObserver === "function" ? new IntersectionObserver(function (entries) {
    var todo = [];
    entries.forEach(function (e) { if (e.isIntersecting && stale.has(e.target)) { stale.delete(e.target); todo.push(e.target); } });
    if (todo.length) markAll(todo);
  }, {rootMargin: "400px 0px"}) : null;

  var idleQueued = false;
  function whenIdle(fn) {
    if (window.requestIdleCallback) window.requestIdleCallback(fn, {timeout: 500});
    else window.setTimeout(function () { fn({timeRemaining: function () { return 8; }, didTimeout: true}); }, 30);
  }
  function idleSlice(deadline) {
    idleQueued = false;
    var t0 = performance.now();
    while (stale.size && (deadline.timeRemaining() > 4 || (deadline.didTimeout && performance.now() - t0 < 12))) {
      var batch = [];
      stale.forEach(function (node) { if (batch.length < 24) batch.push(node); });
      batch.forEach(function (node) { stale.delete(node); });
      markAll(batch.filter(function (node) { return node.isConnected; }));
    }
    if (stale.size) later();
  }
  function later() {
    if (idleQueued || !stale.size) return;
    idleQueued = true;
    whenIdle(idleSlice);
  }

  function collect() {  /* new boxes (maths typeset, outputs drawn since the last look): no layout */
    var nodes = document.querySelectorAll(SELECTOR);
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      if (!node.hasAttribute("data-scroll-watch")) {
        node.setAttribute("data-scroll-watch", "");
        node.addEventListener("scroll", function () { mark(this); }, {passive: true});
        watched.push(node);
        stale.add(node);
        if (near) near.observe(node);
      }
    }
    later();
  }
  function invalidate() {  /* the column or the boxes changed size: measure again, near ones first */
    watched = watched.filter(function (node) { return node.isConnected; });
    watched.forEach(function (node) { stale.add(node); });
    if (near) { near.disconnect(); watched.forEach(function (node) { near.observe(node); }); }
    later();
  }

  function soon(fn) {  /* fn, 150 ms after the last call */
    var pending = null;
    return function () {
      if (pending) window.clearTimeout(pending);
      pending = window.setTimeout(function () { pending = null; fn(); }, 150);
    };
  }
  var collectSoon = soon(function () { collect(); });
  var invalidateSoon = soon(function () { collect(); invalidate(); });
  function start() {
    collect();
    window.addEventListener("resize", invalidateSoon);
    window.addEventListener("load", collectSoon);
    window.addEventListener("course-math-typeset", collectSoon);
    window.addEventListener("course-math-reflowed", invalidateSoon);
    /* cell outputs (bertviz, widgets) draw after load: look again for a while (no layout here;
     * the boxes are measured near the viewport and in idle time) */
    var timer = 0, count = 0;
    timer = window.setInterval(function () { collect(); invalidate(); if (++count >= 10) window.clearInterval(timer); }, 500);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

/* Display maths that is wider than the column is reflowed instead of scrolled (no network,
 * no kernel; loaded on every page from _static/).
 *
 * MathJax 3 does not break display maths.  The book's wide equations are of two kinds:
 * lists of equations joined by \qquad / \quad ("Q = X W_Q, \qquad K = X W_K, ...") and chains
 * of relations ("a = b = c").  When a displayed equation is wider than its box (a phone, or a
 * long list on a desktop), this script re-typesets its own TeX source:
 *   1. the list is split at its top-level \qquad / \quad and packed greedily into the fewest
 *      lines that fit (a `gathered` block: one centred line per group);
 *   2. a part that alone is still too wide is broken before its top-level relations
 *      (=, \ne, \approx, \le, \ge) into an `aligned` chain;
 *   3. what still does not fit is scaled down to at most 20 % smaller; past that the box
 *      scrolls sideways with the fade of course-layout.js.
 * Nothing changes for an equation that fits.  The original TeX is kept in `data-tex` and is
 * restored when the column gets wider again (rotation, resize).  Equations split inside
 * braces, \left...\right, environments or brackets are never split.
 *
 * Maths is typeset lazily (issue 38: typesetting a whole chapter at load was one main-thread
 * task of 0.3-0.7 s, several seconds on a slow phone).  _config.yml loads MathJax's `ui/lazy`
 * extension, so MathJax's first pass only finds the maths and leaves a placeholder for each
 * formula; this script then typesets the formulas a few at a time, one task each (sized from
 * the time the last few took, to stay near TASK_MS): first those near the viewport (an
 * IntersectionObserver in place of MathJax's own, which typeset everything it saw in one
 * task), then the rest of the page in idle time, top to bottom, so that search in the page,
 * printing and screen readers find every formula soon after load.  MathJax.startup.promise
 * settles when every formula is typeset; window.courseMathReflowed when every one is also
 * reflowed.  Each reflow is a task of its own. */
(function () {
  "use strict";
  var TASK_MS = 20;
  var config = window.MathJax;
  if (config && typeof config === "object" && !config.version) {  /* the configuration, MathJax not loaded yet */
    config.startup = config.startup || {};
    if (!config.startup.pageReady) config.startup.pageReady = pageReady;
  }
  var SEPARATORS = {"\\qquad": 1, "\\quad": 1};
  var RELATIONS = {"=": 1, "\\ne": 1, "\\neq": 1, "\\approx": 1, "\\le": 1, "\\leq": 1, "\\ge": 1, "\\geq": 1};
  var OPEN = {"{": 1, "(": 1, "[": 1, "\\{": 1, "\\left": 1, "\\begin": 1, "\\lbrace": 1, "\\langle": 1};
  var CLOSE = {"}": 1, ")": 1, "]": 1, "\\}": 1, "\\right": 1, "\\end": 1, "\\rbrace": 1, "\\rangle": 1};
  var MIN_SCALE = 0.8;

  /* TeX tokens: a control word (\name), a control symbol (\{), or one character. */
  function tokens(tex) {
    var out = [], i = 0;
    while (i < tex.length) {
      var c = tex[i];
      if (c === "\\") {
        var m = /^\\([A-Za-z]+|.)/.exec(tex.slice(i));
        out.push(m ? m[0] : "\\"); i += m ? m[0].length : 1;
      } else { out.push(c); i += 1; }
    }
    return out;
  }

  /* Split `tex` at top-level tokens that `isCut` accepts.  With keep=true the cut token starts
   * the next piece (relations), otherwise it is dropped (spaces).  Null when the brackets do
   * not balance (then nothing is split). */
  function splitTop(tex, isCut, keep) {
    var toks = tokens(tex), depth = 0, pieces = [[]], skipDelim = false;
    for (var i = 0; i < toks.length; i++) {
      var t = toks[i];
      if (skipDelim) { skipDelim = false; pieces[pieces.length - 1].push(t); continue; }
      if (t === "\\left" || t === "\\right") {
        depth += t === "\\left" ? 1 : -1; skipDelim = true;  /* its delimiter is not a bracket */
      } else if (OPEN[t]) depth += 1;
      else if (CLOSE[t]) depth -= 1;
      if (depth < 0) return null;
      if (depth === 0 && isCut(t)) {
        if (pieces[pieces.length - 1].join("").trim()) pieces.push([]);
        if (keep) pieces[pieces.length - 1].push(t);
        continue;
      }
      pieces[pieces.length - 1].push(t);
    }
    if (depth !== 0) return null;
    return pieces.map(function (p) { return p.join("").trim(); }).filter(Boolean);
  }

  function render(div, tex) {  /* each rendering in a task of its own (a reflow may take three) */
    return yieldToMain().then(function () {
      window.MathJax.typesetClear([div]);
      var old = div.querySelector("mjx-container");
      div.textContent = "\\[" + tex + "\\]";
      if (old) old.remove();
      return window.MathJax.typesetPromise([div]);
    }).then(function () { return typesetWithin(div); });
  }

  function widths(div) {  /* the width of each line of a gathered block, in CSS px */
    return Array.prototype.map.call(div.querySelectorAll("mjx-mtd"), function (td) {
      var r = document.createRange(); r.selectNodeContents(td); return r.getBoundingClientRect().width;
    });
  }

  function container(div) { return div.querySelector("mjx-container"); }
  function overflows(div) { var c = container(div); return !!c && c.scrollWidth > div.clientWidth + 1; }
  function emPx(div) { return parseFloat(getComputedStyle(container(div) || div).fontSize) || 16; }

  function gathered(lines) { return "\\begin{gathered}" + lines.join(" \\\\ ") + "\\end{gathered}"; }

  /* Reflow one display (a div.math); returns a promise. */
  function reflow(div) {
    var tex = div.getAttribute("data-tex"), avail = div.clientWidth;
    if (!tex || !avail) return Promise.resolve();
    /* Sphinx wraps maths that holds a line break (e.g. in `cases`) in a split environment */
    var m = /^\s*\\begin\{split\}([\s\S]*)\\end\{split\}\s*$/.exec(tex);
    if (m) {
      var rows = splitTop(m[1], function (t) { return t === "\\\\"; }, false);
      if (rows && rows.length === 1) tex = m[1];
    }
    var parts = splitTop(tex, function (t) { return SEPARATORS[t]; }, false);
    if (!parts) return Promise.resolve();
    var step = parts.length > 1 ? render(div, gathered(parts)) : Promise.resolve();
    return step.then(function () {
      var lines = [];
      if (parts.length > 1) {
        var w = widths(div), gap = 2 * emPx(div), cur = [], curW = 0;
        if (w.length !== parts.length) return;
        for (var i = 0; i < parts.length; i++) {
          if (cur.length && curW + gap + w[i] > avail - 2) { lines.push({tex: cur.join(" \\qquad "), w: curW}); cur = []; curW = 0; }
          curW += (cur.length ? gap : 0) + w[i]; cur.push(parts[i]);
        }
        lines.push({tex: cur.join(" \\qquad "), w: curW});
      } else lines.push({tex: parts[0], w: Infinity});
      var i = lines.findIndex(function (l) { return l.w > avail - 2; });
      var pieces = i < 0 ? null : splitTop(lines[i].tex, function (t) { return RELATIONS[t]; }, true);
      var done = lines.map(function (l) { return l.tex; });
      if (!pieces || pieces.length < 2) {
        if (lines.length === 1) return render(div, tex);
        return render(div, gathered(done));
      }
      /* break the widest line before its relations: measure the pieces, then pack them */
      return render(div, gathered(pieces)).then(function () {
        var w = widths(div);
        if (w.length !== pieces.length) return render(div, tex);
        var lhs = w[0], rest = w.slice(1), widest = Math.max.apply(null, rest);
        /* continuation lines line up under the first relation when that fits, else they start
         * one \qquad in from the left, under a first line that holds the left side alone */
        var aligned = lhs + widest <= avail - 2 && lhs + rest[0] <= avail - 2;
        var rows = aligned ? [[pieces[0], pieces[1]]] : [[pieces[0]], [pieces[1]]];
        var indent = aligned ? lhs : 2 * emPx(div), cur = indent + rest[0];
        for (var k = 2; k < pieces.length; k++) {
          if (cur + rest[k - 1] > avail - 2) { rows.push([pieces[k]]); cur = indent + rest[k - 1]; }
          else { rows[rows.length - 1].push(pieces[k]); cur += rest[k - 1]; }
        }
        var body = aligned
          ? rows.map(function (r, n) { return n === 0 ? r[0] + " &" + r.slice(1).join(" ") : "&" + r.join(" "); }).join(" \\\\ ")
          : rows.map(function (r, n) { return n === 0 ? "&" + r.join(" ") : "&\\qquad " + r.join(" "); }).join(" \\\\ ");
        done[i] = "\\begin{aligned}" + body + "\\end{aligned}";
        return render(div, done.length > 1 ? gathered(done) : done[0]);
      });
    }).then(function () { div.setAttribute("data-reflowed", ""); });
  }

  /* MathJax scales each container to the text's x-height with an inline font-size (e.g.
   * "127.3%"); a shrink multiplies that scale and remembers the original in data-scale. */
  function restoreScale(c) {
    if (c && c.hasAttribute("data-scale")) { c.style.fontSize = c.getAttribute("data-scale"); c.removeAttribute("data-scale"); }
  }
  function shrink(div) {
    var c = container(div);
    if (!c || !overflows(div)) return;
    var s = (div.clientWidth - 2) / c.scrollWidth;
    if (s < MIN_SCALE) return;
    var base = c.style.fontSize || "100%";
    var pct = parseFloat(base) || 100;
    c.setAttribute("data-scale", base);
    c.style.fontSize = (pct * Math.floor(s * 1000) / 1000).toFixed(1) + "%";
  }

  var busy = Promise.resolve(), lastWidth = 0;
  function yieldToMain() {  /* let the browser paint and answer input between two formulas */
    if (window.scheduler && typeof window.scheduler.yield === "function") return window.scheduler.yield();
    return new Promise(function (resolve) { window.setTimeout(resolve, 0); });
  }
  function whenIdle(fn) {
    if (window.requestIdleCallback) window.requestIdleCallback(function () { fn(); }, {timeout: 300});
    else window.setTimeout(fn, 20);
  }

  /* One equation, in a task of its own: from its source when it was reflowed for another width. */
  function reflowOne(div, full) {
    busy = busy.then(yieldToMain).then(function () {
      if (!div.isConnected || !div.clientWidth) return null;
      restoreScale(container(div));
      if (full && div.hasAttribute("data-reflowed")) {  /* wider column: start again from the source */
        div.removeAttribute("data-reflowed");
        return render(div, div.getAttribute("data-tex")).then(function () { return overflows(div) ? reflow(div) : null; });
      }
      return overflows(div) ? reflow(div) : null;
    }).then(function () { if (div.isConnected) shrink(div); }).catch(function (err) {
      if (window.console) console.warn("math reflow:", err);
    });
    return busy;
  }
  function finishPass() {
    busy = busy.then(yieldToMain).then(function () { wideInline(); window.dispatchEvent(new Event("course-math-reflowed")); });
    window.courseMathReflowed = busy;  /* settles when this pass is done (the browser tests wait on it) */
    return busy;
  }

  function typeset(div) { var c = container(div); return !!c && !c.querySelector("mjx-lazy"); }
  /* The TeX source of the display maths a div.math holds, kept in data-tex. */
  function sourceOf(div) {
    if (!div.hasAttribute("data-tex")) {
      var item = null;
      for (var m of window.MathJax.startup.document.math) if (m.display && m.typesetRoot && div.contains(m.typesetRoot)) { item = m; break; }
      if (!item) return null;
      div.setAttribute("data-tex", item.math);
    }
    return div.getAttribute("data-tex");
  }

  /* full: every equation from its source (the column changed); else only those not yet seen
   * laid out, e.g. in a solution dropdown that was closed at load and has just opened. */
  function pass(full) {
    var divs = document.querySelectorAll(".bd-article div.math");
    Array.prototype.forEach.call(divs, function (div) {
      if (!typeset(div) || !sourceOf(div)) return;
      if (full || (!div.hasAttribute("data-reflowed") && div.clientWidth)) reflowOne(div, full);
    });
    return finishPass();
  }

  /* Formulas MathJax has just typeset: each display one is reflowed if it is too wide. */
  function typesetDone(items) {
    items.forEach(function (item) {
      var root = item.typesetRoot, div = root && root.parentNode && root.parentNode.closest ? root.parentNode.closest("div.math") : null;
      if (!item.display || !div || !div.closest(".bd-article")) return;
      if (!div.hasAttribute("data-tex")) div.setAttribute("data-tex", item.math);
      if (!div.hasAttribute("data-reflowed")) reflowOne(div, false);
    });
    window.dispatchEvent(new Event("course-math-typeset"));
  }

  /* --- lazy typesetting: MathJax's ui/lazy, driven from here --------------------------------- */
  var LAZY = "data-mjx-lazy";
  function lazyDoc() {
    var doc = window.MathJax && window.MathJax.startup && window.MathJax.startup.document;
    return doc && doc.lazyList && typeof doc.lazyHandleSet === "function" ? doc : null;
  }
  /* Typeset these placeholders (MathItems) now: a promise of the items, once typeset. */
  function typesetNow(doc, items) {
    if (!items.length) return Promise.resolve(items);
    items.forEach(function (item) { doc.lazySet.add(item.lazyMarker.getAttribute(LAZY)); });
    doc.lazyHandleSet();
    return doc.lazyPromise.then(function () { return items; });
  }
  function lazyItems(doc, within) {
    var out = [];
    for (var item of doc.math) {
      if (item.lazyTypeset && item.lazyMarker && (!within || within.contains(item.lazyMarker))) out.push(item);
    }
    return out;
  }
  function typesetWithin(node) {  /* a formula this script has just written: typeset at once */
    var doc = lazyDoc();
    return doc ? typesetNow(doc, lazyItems(doc, node)) : Promise.resolve([]);
  }

  /* Formulas near the viewport far down the page (a link to a section, a reload): MathJax
   * compiles every TeX formula before them first (macros, numbering), all in one task; here
   * they are compiled a batch at a time beforehand.  The TeX formulas before the first one near
   * the viewport that are not compiled yet: */
  function uncompiledBefore(doc) {  /* (doc.math is in document order: see pageReady) */
    var out = [];
    for (var item of doc.math) {
      if (seen.has(item)) return out;
      if (item.lazyCompile && item.lazyTex) out.push(item);
    }
    return [];
  }
  function compileNow(doc, items) {
    var MJ = window.MathJax, STATE = MJ._.core.MathItem.STATE;
    doc.lazyPromise = doc.lazyPromise.then(function () {
      items.forEach(function (item) { item.lazyCompile = false; item.state(STATE.COMPILED - 1); });
      doc.state(STATE.COMPILED - 1, null);
      return MJ._.util.Retries.handleRetriesFor(function () { doc.render(); });
    });
    return doc.lazyPromise.then(function () { return items; });
  }

  var seen = new Set(), perItem = 0, perCompile = 0, fillDone = null, running = false, soonQueued = false, idleQueued = false;
  function onSeen(entries) {  /* placeholders near the viewport */
    var doc = lazyDoc();
    if (!doc) return;
    entries.forEach(function (e) {
      var item = doc.lazyList.get(e.target.getAttribute(LAZY));
      if (!item) return;
      if (e.isIntersecting) seen.add(item); else seen.delete(item);
    });
    if (seen.size) schedule(true);
  }
  function schedule(soon) {  /* near the viewport: the next task; the rest: when the page is idle */
    if (soon) {
      if (soonQueued) return;
      soonQueued = true;
      window.setTimeout(function () { soonQueued = false; step(); }, 0);
    } else {
      if (idleQueued) return;
      idleQueued = true;
      whenIdle(function () { idleQueued = false; step(); });
    }
  }
  function step() {  /* one batch of formulas, as many as fit in about TASK_MS */
    var doc = lazyDoc();
    if (!doc || running) return;  /* a batch in flight schedules the next when it is done */
    var n = perItem > 0 ? Math.max(1, Math.min(24, Math.floor(TASK_MS / perItem))) : 2;
    var batch = [], before = [];
    seen.forEach(function (item) { if (!item.lazyTypeset) seen.delete(item); });
    if (seen.size) before = uncompiledBefore(doc);
    if (before.length) {  /* compile what comes before them first, a batch at a time */
      var m = perCompile > 0 ? Math.max(1, Math.min(200, Math.floor(TASK_MS / perCompile))) : 10;
      var some = before.slice(0, m), c0 = performance.now();
      running = true;
      compileNow(doc, some).then(function () {
        var each = (performance.now() - c0) / some.length;
        perCompile = perCompile > 0 ? 0.5 * perCompile + 0.5 * each : each;
        running = false;
        schedule(true);
      }, function (err) {
        if (window.console) console.warn("lazy maths:", err);
        some.forEach(function (item) { item.lazyCompile = false; });
        running = false;
        schedule(true);
      });
      return;
    }
    seen.forEach(function (item) {
      if (batch.length < n) { batch.push(item); seen.delete(item); }
    });
    if (!batch.length) {  /* nothing near the viewport: the next formulas down the page */
      for (var item of doc.math) {
        if (item.lazyTypeset && item.lazyMarker) { batch.push(item); if (batch.length >= n) break; }
      }
    }
    if (!batch.length) { if (fillDone) { fillDone(); fillDone = null; } return; }
    var t0 = performance.now();
    running = true;
    typesetNow(doc, batch).then(function (items) {
      var each = (performance.now() - t0) / items.length;
      perItem = perItem > 0 ? 0.5 * perItem + 0.5 * each : each;
      running = false;
      typesetDone(items);
      schedule(seen.size > 0);
    }, function (err) {
      if (window.console) console.warn("lazy maths:", err);
      batch.forEach(function (item) { item.lazyTypeset = false; });  /* never retried in a loop */
      running = false;
      schedule(false);
    });
  }

  /* The elements MathJax looks for maths in (its processHtmlClass: Sphinx's span.math and
   * div.math, notebook outputs), outermost ones only, in document order. */
  function mathHolders(doc) {
    var names = String(doc.options.processHtmlClass || "").split("|").filter(function (n) { return /^[\w-]+$/.test(n); });
    if (!names.length) return [];
    var sel = names.map(function (n) { return "." + n; }).join(", ");
    return Array.prototype.filter.call(document.querySelectorAll(sel), function (el) {
      return !(el.parentElement && el.parentElement.closest(sel));
    });
  }

  /* MathJax's startup.pageReady (set above, before MathJax loads).  MathJax's first pass (find
   * the maths, leave placeholders) is itself split: the maths holders a batch at a time, then one
   * pass over the whole page for anything outside them.  The formulas are then typeset by step()
   * and startup.promise waits for them all. */
  function pageReady() {
    var MJ = window.MathJax, doc = MJ.startup.document;
    var lazy = !!(doc && doc.lazyList && doc.lazyObserver && typeof IntersectionObserver === "function");
    if (!lazy) {  /* without ui/lazy everything is typeset at once, as MathJax does by default */
      return MJ.startup.defaultPageReady().then(function () {
        var all = [];
        for (var item of doc.math) all.push(item);
        typesetDone(all);
      });
    }
    doc.lazyObserver.disconnect();
    doc.lazyObserver = new IntersectionObserver(onSeen, {rootMargin: doc.options.lazyMargin || "200px"});
    var holders = mathHolders(doc), next = 0, perHolder = 0;
    function findSome() {
      if (next >= holders.length) return MJ.typesetPromise();   /* the rest of the page */
      var n = perHolder > 0 ? Math.max(1, Math.min(200, Math.floor(TASK_MS / perHolder))) : 4;
      var batch = holders.slice(next, next + n), t0 = performance.now();
      next += batch.length;
      return MJ.typesetPromise(batch).then(function () {
        var each = (performance.now() - t0) / batch.length;
        perHolder = perHolder > 0 ? 0.5 * perHolder + 0.5 * each : each;
        return yieldToMain().then(findSome);
      });
    }
    return yieldToMain().then(findSome).then(function () {  /* not in MathJax's own start-up task */
      /* MathJax merges each pass's formulas into doc.math by their place in that pass, so the
       * list is put back in document order (the order the fill, and MathJax's own compiling of
       * earlier formulas, rely on); each formula's start is now its placeholder */
      doc.math.sort(function (a, b) {
        var x = a.start.node, y = b.start.node;
        if (x === y) return a.start.n < b.start.n;
        return !!(x && y && (x.compareDocumentPosition(y) & Node.DOCUMENT_POSITION_FOLLOWING));
      });
      var filled = new Promise(function (resolve) { fillDone = resolve; });
      schedule(seen.size > 0);
      return filled;
    });
  }

  /* Inline maths cannot break either; one wider than the column (a long chain in a sentence)
   * would be clipped by its line: it becomes a block of its own that scrolls, with the fade. */
  function wideInline() {
    var col = document.querySelector(".bd-article");
    if (!col) return;
    var right = col.getBoundingClientRect().right;
    document.querySelectorAll(".bd-article mjx-container:not([display=true])").forEach(function (c) {
      var r = c.getBoundingClientRect();
      if (c.hasAttribute("data-wide-inline")) {
        c.removeAttribute("data-wide-inline");
        r = c.getBoundingClientRect();
      }
      if (r.width && r.right > right + 1 && !c.closest("table, .cell_output")) c.setAttribute("data-wide-inline", "");
    });
  }

  function start() {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.promise) return;
    /* settles when every formula is typeset and reflowed (MathJax.startup.promise waits for the
     * typesetting, see pageReady) */
    window.courseMathReflowed = mj.startup.promise.then(function () {
      lastWidth = document.documentElement.clientWidth;
      return finishPass();
    });
    var again = 0;  /* a dropdown (sphinx-togglebutton, <details>) opened: lay out what it shows */
    function opened() { window.clearTimeout(again); again = window.setTimeout(function () { pass(false); }, 350); }
    document.addEventListener("click", function (ev) {
      if (ev.target.closest && ev.target.closest(".admonition-title, .toggle-button, summary")) opened();
    });
    document.addEventListener("toggle", opened, true);
    var timer = 0;
    window.addEventListener("resize", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () {
        var w = document.documentElement.clientWidth;
        if (w !== lastWidth) { lastWidth = w; pass(true); }
      }, 200);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

/* 5. Names for a screen reader (the markup fixes are in _ext/accessible_page.py):
 *    - the book's side panel (logo, search, chapter list) is a landmark named "Book";
 *    - the search button is named by the words it shows ("Search Ctrl+K"), not "Search" alone;
 *    - sphinx-togglebutton names every solution toggle "Toggle hidden content": each is named
 *      after the title it opens ("Show or hide: Solution to Exercise 4.1 (...)"). */
(function () {
  "use strict";
  function name() {
    /* the search button shows "Search Ctrl+K" but was named "Search": its name is now its text */
    document.querySelectorAll("button.search-button-field[aria-label]").forEach(function (b) {
      if (b.textContent.trim()) b.removeAttribute("aria-label");
    });
    var side = document.querySelector(".bd-sidebar-primary");
    if (side && !side.hasAttribute("role")) { side.setAttribute("role", "navigation"); side.setAttribute("aria-label", "Book"); }
    document.querySelectorAll(".toggle > .admonition-title > button.toggle-button").forEach(function (b) {
      var title = b.parentElement.textContent.replace(/\s+/g, " ").trim();
      if (title) b.setAttribute("aria-label", "Show or hide: " + title);
    });
  }
  if (document.readyState === "complete") name();
  else window.addEventListener("load", name);
})();

/* 6. The theme's "Back to top" pill (course-layout.css puts it in the bottom-right corner): hidden
 *    while something the reader is reading or using is under it (a figure caption, an explorable
 *    or lab with its readouts, a bertviz view, an exercise, a live status line) or while it would
 *    cover the focused element.  The theme shows it (style.display) while the reader scrolls up;
 *    this checks after the theme's handler, once a frame, with elementsFromPoint at its corners
 *    and centre.  Focused itself (a keyboard reader), it always shows. */
(function () {
  "use strict";
  var KEEP = "figcaption, .attnlib-xp, .attnlib-bertviz, .attn-exercise, [role=status], [aria-live]";
  var frame = 0;
  function overlaps(a, b) { return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom; }
  function under(btn, r) {
    var inset = 3, xs = [r.left + inset, (r.left + r.right) / 2, r.right - inset], ys = [r.top + inset, r.bottom - inset];
    for (var i = 0; i < xs.length; i++) for (var j = 0; j < ys.length; j++) {
      var stack = document.elementsFromPoint(xs[i], ys[j]);
      for (var k = 0; k < stack.length; k++) {
        var e = stack[k];
        if (e === btn || btn.contains(e)) continue;
        if (e.closest && e.closest(KEEP)) return true;
      }
    }
    return false;
  }
  function check() {
    frame = 0;
    var btn = document.getElementById("pst-back-to-top");
    if (!btn) return;
    var away = false;
    if (btn.style.display !== "none" && btn.getClientRects().length && document.activeElement !== btn) {
      var r = btn.getBoundingClientRect(), focused = document.activeElement;
      away = (focused && focused !== document.body && focused !== document.documentElement &&
              overlaps(focused.getBoundingClientRect(), r)) || under(btn, r);
    }
    btn.classList.toggle("course-btt-away", away);
  }
  function soon() { if (!frame) frame = requestAnimationFrame(check); }
  window.addEventListener("scroll", soon, {passive: true});
  window.addEventListener("resize", soon);
  document.addEventListener("focusin", soon);
  document.addEventListener("focusout", soon);
})();
