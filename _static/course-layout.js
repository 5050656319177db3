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
 *    panel open over it.  The panel now closes, and the page shows the section. */
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
  var FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";
  var counts = {};

  function focusable(node, scrolls) {
    var ours = node.hasAttribute("data-scroll-focus");
    if (scrolls && !ours && !node.hasAttribute("tabindex") && !node.querySelector(FOCUSABLE)) {
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

  function mark(node) {
    var max = node.scrollWidth - node.clientWidth;
    var state = "";
    if (max > 1) {
      var left = node.scrollLeft > 1, right = node.scrollLeft < max - 1;
      state = left && right ? "both" : (left ? "left" : (right ? "right" : ""));
    }
    if (state) node.setAttribute("data-overflow", state);
    else node.removeAttribute("data-overflow");
    focusable(node, max > 1);
  }

  var watched = [];
  function scan() {
    var nodes = document.querySelectorAll(".bd-article " + WIDE.split(",").join(", .bd-article ") + ", main " + WIDE.split(",").slice(-1)[0]);
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      if (!node.hasAttribute("data-scroll-watch")) {
        node.setAttribute("data-scroll-watch", "");
        node.addEventListener("scroll", function () { mark(this); }, {passive: true});
        watched.push(node);
      }
    }
    watched.forEach(mark);
  }

  var pending = null;
  function later() {
    if (pending) return;
    pending = window.setTimeout(function () { pending = null; scan(); }, 150);
  }
  function start() {
    scan();
    window.addEventListener("resize", later);
    window.addEventListener("load", later);
    window.addEventListener("course-math-reflowed", later);
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(later);
    /* MathJax and cell outputs (bertviz, widgets) render after load */
    var timer = 0, count = 0;
    timer = window.setInterval(function () { scan(); if (++count >= 10) window.clearInterval(timer); }, 500);
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
 * braces, \left...\right, environments or brackets are never split. */
(function () {
  "use strict";
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

  function render(div, tex) {
    window.MathJax.typesetClear([div]);
    var old = div.querySelector("mjx-container");
    div.textContent = "\\[" + tex + "\\]";
    if (old) old.remove();
    return window.MathJax.typesetPromise([div]);
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
  /* full: every equation from its source (the column changed); else only those not yet seen
   * laid out, e.g. in a solution dropdown that was closed at load and has just opened. */
  function pass(full) {
    var divs = document.querySelectorAll(".bd-article div.math");
    var todo = [];
    Array.prototype.forEach.call(divs, function (div) {
      if (!div.hasAttribute("data-tex")) {
        var item = null;
        for (var m of window.MathJax.startup.document.math) if (m.display && div.contains(m.typesetRoot)) { item = m; break; }
        if (!item) return;
        div.setAttribute("data-tex", item.math);
      }
      if (full || (!div.hasAttribute("data-reflowed") && div.clientWidth)) todo.push(div);
    });
    todo.forEach(function (div) {
      busy = busy.then(function () {
        restoreScale(container(div));
        if (div.hasAttribute("data-reflowed")) {  /* wider column: start again from the source */
          div.removeAttribute("data-reflowed");
          return render(div, div.getAttribute("data-tex")).then(function () { return overflows(div) ? reflow(div) : null; });
        }
        return overflows(div) ? reflow(div) : null;
      }).then(function () { shrink(div); }).catch(function (err) {
        if (window.console) console.warn("math reflow:", err);
      });
    });
    busy = busy.then(function () { wideInline(); window.dispatchEvent(new Event("course-math-reflowed")); });
    window.courseMathReflowed = busy;  /* settles when this pass is done (the browser tests wait on it) */
    return busy;
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
    mj.startup.promise.then(function () { lastWidth = document.documentElement.clientWidth; return pass(true); });
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
