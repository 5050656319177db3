/* Exercises on the static page, graded in the browser by the course's own Python checkers.
 *
 * Each exercise is an element [data-exercise="<chapter>:<name>"] written by
 * attnlib/exercises/page.py: its answer control, a "Check" button, a feedback element
 * (role="status") and the exercise's data as JSON.  Checking runs
 * attnlib.exercises.check_json(chapter, name, answer, data) in Pyodide (vendored under
 * _static/vendor/pyodide/), on the very files the notebook uses (graders.json, written by
 * _ext/exercise_pages.py), and shows Feedback.text: "Correct. ..." or "Not yet. ... Hint: ...".
 *
 * Pyodide starts loading when a reader first focuses, types in or clicks any exercise, so
 * that the first Check is quick; nothing is fetched from another host.
 */
(function () {
  "use strict";
  var script = document.currentScript;
  var BASE = new URL(".", script ? script.src : window.location.href);
  var PYODIDE_URL = new URL("../vendor/pyodide/", BASE).href;
  var GRADERS_URL = new URL("graders.json", BASE).href;
  var LOADING = "Loading the checker (first time only)\u2026";
  var checker = null; // Promise of the Python function check_json

  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }

  function startChecker() {
    if (checker) return checker;
    var t0 = performance.now();
    checker = Promise.all([
      window.loadPyodide ? Promise.resolve() : loadScript(PYODIDE_URL + "pyodide.js"),
      fetch(GRADERS_URL).then(function (r) {
        if (!r.ok) throw new Error("could not load the graders (" + r.status + ")");
        return r.json();
      }),
    ]).then(function (results) {
      var sources = results[1];
      return window.loadPyodide({indexURL: PYODIDE_URL, packages: []}).then(function (py) {
        var root = "/home/pyodide/attnlib";
        py.FS.mkdirTree(root + "/exercises");
        py.FS.writeFile(root + "/__init__.py", "");  // the graders need nothing else of attnlib
        Object.keys(sources).forEach(function (path) { py.FS.writeFile(root + "/" + path, sources[path]); });
        py.runPython("import sys\nif '/home/pyodide' not in sys.path: sys.path.insert(0, '/home/pyodide')");
        var fn = py.pyimport("attnlib.exercises").check_json;
        window.attnExercises.loadMs = performance.now() - t0;
        return fn;
      });
    });
    checker.catch(function () { checker = null; });  // a later Check may try again
    return checker;
  }

  function readAnswer(root) {
    var kind = root.getAttribute("data-kind");
    if (kind === "number") return root.querySelector("input.attn-ex-input").value;
    if (kind === "choice") {
      var picked = root.querySelector("input[type=radio]:checked");
      return picked ? picked.value : null;
    }
    if (kind === "token") {
      var on = root.querySelector(".attn-ex-token[aria-pressed=true]");
      return on ? parseInt(on.getAttribute("data-value"), 10) : null;
    }
    if (kind === "sentence") {
      return Array.prototype.map.call(root.querySelectorAll("textarea.attn-ex-sentence"), function (t) { return t.value; });
    }
    var rows = [];
    root.querySelectorAll(".attn-ex-cell").forEach(function (cell) {
      var i = +cell.getAttribute("data-row"), j = +cell.getAttribute("data-col");
      (rows[i] = rows[i] || [])[j] = cell.getAttribute("aria-pressed") === "true";
    });
    return rows;
  }

  function show(root, result) {
    var box = root.querySelector(".attn-ex-feedback");
    box.textContent = "";
    box.classList.remove("attn-ex-correct", "attn-ex-wrong", "attn-ex-busy");
    if (typeof result === "string") {  // a status line, not a verdict
      box.classList.add("attn-ex-busy");
      box.textContent = result;
      return;
    }
    box.classList.add(result.correct ? "attn-ex-correct" : "attn-ex-wrong");
    var verdict = document.createElement("strong");
    verdict.textContent = result.correct ? "Correct." : "Not yet.";
    box.appendChild(verdict);
    box.appendChild(document.createTextNode(" " + result.message));
    if (result.hint && !result.correct) {
      var hint = document.createElement("em");
      hint.textContent = "Hint:";
      box.appendChild(document.createTextNode(" "));
      box.appendChild(hint);
      box.appendChild(document.createTextNode(" " + result.hint));
    }
  }

  function clear(root) {
    var box = root.querySelector(".attn-ex-feedback");
    if (box.classList.contains("attn-ex-busy")) return;
    box.textContent = "";
    box.classList.remove("attn-ex-correct", "attn-ex-wrong");
  }

  /* A sentence exercise is graded on the model's reading of the reader's text: the in-page
   * model (window.attnlibModel, defined by the model lab on the page) runs each text, and the
   * checker receives {texts, runs: [{tokens, heads: {"L:H": T rows of T weights}}]}, the same
   * dict attnlib.exercises.widgets.model_answer builds with PyTorch in the kernel. */
  function modelAnswer(root, texts) {
    if (texts.some(function (t) { return !String(t).trim(); })) return Promise.resolve({texts: texts});
    var api = window.attnlibModel;
    if (!api) return Promise.reject(new Error("this page has no in-page model (the model lab) to read your text"));
    var why = api.available();
    if (why) return Promise.reject(new Error(why));
    var reads = root.querySelector("[data-reads]").getAttribute("data-reads").split(" ").map(function (p) {
      return p.split(":").map(Number);
    });
    var runs = [];
    return texts.reduce(function (p, text) {
      return p.then(function () {
        return api.run(text).then(function (r) {
          var L = r.shape[0], H = r.shape[1], T = r.shape[2], heads = {};
          reads.forEach(function (lh) {
            var base = (lh[0] * H + lh[1]) * T * T, rows = [];
            for (var i = 0; i < T; i++) rows.push(Array.prototype.slice.call(r.attentions, base + i * T, base + (i + 1) * T));
            heads[lh[0] + ":" + lh[1]] = rows;
          });
          runs.push({tokens: r.tokens, heads: heads});
        });
      });
    }, Promise.resolve()).then(function () { return {texts: texts, runs: runs}; }, function (err) {
      if (api.info()) return {texts: texts, error: err.message};  // the model refused the text
      throw err;
    });
  }

  // Grade the answer shown in root's control (or `answer`, when given: tests and tools; for a
  // sentence exercise, the list of texts).
  function check(root, answer) {
    var key = root.getAttribute("data-exercise").split(":");
    var dataEl = root.querySelector("script.attn-ex-data");
    var raw = arguments.length > 1 ? answer : readAnswer(root);
    var texts = Array.isArray(raw) && raw.every(function (t) { return typeof t === "string"; });
    var answered = root.getAttribute("data-kind") === "sentence" && texts ? modelAnswer(root, raw) : Promise.resolve(raw);
    var ready = false;
    var pending = Promise.all([startChecker(), answered]).then(function (both) {
      var fn = both[0];
      answer = JSON.stringify(both[1]);
      ready = true;
      var out = fn(parseInt(key[0], 10), key[1], answer, dataEl ? dataEl.textContent : "null");
      var result = JSON.parse(out);
      show(root, result);
      return result;
    }, function (err) {
      var msg = "The checker could not be loaded (" + err.message + ").";
      if (root.getAttribute("data-kind") === "sentence") msg = "Your text could not be read by the model (" + err.message + ").";
      if (window.location.protocol === "file:") {
        msg += " Pages opened from disk cannot start it: serve the book, e.g. run " +
               "`python -m http.server` in _build/html and open http://localhost:8000.";
      }
      show(root, msg);
      throw err;
    });
    var waiting = root.getAttribute("data-kind") === "sentence"
      ? "Reading your text with the model (the first time, the model and the checker load)\u2026" : LOADING;
    setTimeout(function () { if (!ready) show(root, waiting); }, 0);
    return pending;
  }

  function setPressed(btn, on) { btn.setAttribute("aria-pressed", on ? "true" : "false"); }

  function wire(root) {
    if (root.getAttribute("data-ready")) return;
    root.setAttribute("data-ready", "1");
    var kind = root.getAttribute("data-kind");
    var warm = function () { startChecker().catch(function () {}); };
    root.addEventListener("focusin", warm);
    root.addEventListener("pointerdown", warm);
    root.querySelector(".attn-ex-check").addEventListener("click", function () {
      check(root).catch(function () {});
    });
    if (kind === "number") {
      var input = root.querySelector("input.attn-ex-input");
      input.addEventListener("input", function () { clear(root); });
      input.addEventListener("keydown", function (e) {
        if (e.key === "Enter") { e.preventDefault(); check(root).catch(function () {}); }
      });
    } else if (kind === "choice") {
      root.querySelectorAll("input[type=radio]").forEach(function (r) {
        r.addEventListener("change", function () { clear(root); });
        r.addEventListener("keydown", function (e) {
          if (e.key === "Enter") { e.preventDefault(); check(root).catch(function () {}); }
        });
      });
    } else if (kind === "sentence") {
      root.querySelectorAll("textarea.attn-ex-sentence").forEach(function (box) {
        box.addEventListener("input", function () { clear(root); });
      });
    } else if (kind === "token") {
      var tokens = root.querySelectorAll(".attn-ex-token");
      tokens.forEach(function (btn) {
        btn.addEventListener("click", function () {
          tokens.forEach(function (other) { setPressed(other, other === btn); });
          clear(root);
        });
      });
    } else {
      root.querySelectorAll(".attn-ex-cell").forEach(function (cell) {
        cell.addEventListener("click", function () {
          setPressed(cell, cell.getAttribute("aria-pressed") !== "true");
          clear(root);
        });
      });
    }
  }

  function wireAll() { document.querySelectorAll("[data-exercise]").forEach(wire); }

  window.attnExercises = {check: check, start: startChecker, readAnswer: readAnswer, wireAll: wireAll, loadMs: null};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wireAll);
  else wireAll();
})();
