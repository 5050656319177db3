/* Exercises on the static page, graded in the browser by the course's own Python checkers.
 *
 * Each exercise is an element [data-exercise="<chapter>:<name>"] written by
 * attnlib/exercises/page.py: its answer control, a "Check" button, a feedback element
 * (role="status") and the exercise's data as JSON.  Checking runs
 * attnlib.exercises.check_json(chapter, name, answer, data) in Pyodide (vendored under
 * _static/vendor/pyodide/), on the very files the notebook uses (graders.json, written by
 * _ext/exercise_pages.py), and shows Feedback.text: "Correct. ..." or "Not yet. ... Hint: ...".
 *
 * Pyodide runs in a Web Worker (grader_worker.js), shared by all the exercises of the page, so
 * the page never freezes while it loads; a Check pressed meanwhile is graded as soon as it is
 * ready.  It starts before the reader's first Check (see preload() for when), or at the latest
 * on the first focus, keystroke or tap in an exercise.  Nothing is fetched from another host.
 *
 * Progress is kept in the browser (localStorage, one entry per exercise, see STORE): the last
 * answer checked, its verdict and the number of tries, restored on the next visit; a "Clear"
 * button forgets it.  After TRIES_FOR_SOLUTION answers that are not yet right, a button opens
 * the chapter's worked answer (the solution that follows the exercise).
 */
(function () {
  "use strict";
  var script = document.currentScript;
  var BASE = new URL(".", script ? script.src : window.location.href);
  var PYODIDE_URL = new URL("../vendor/pyodide/", BASE).href;
  var GRADERS_URL = new URL("graders.json", BASE).href;
  var WORKER_URL = new URL("grader_worker.js", BASE).href;
  var LOADING = "Loading the checker (first time only)\u2026";
  var WARMING = "Loading the checker in the background: you can write your answer meanwhile.";
  var CHECK_LIMIT_MS = 20000;   // a check (pure Python on a few numbers) that takes longer is stopped
  var TRIES_FOR_SOLUTION = 3;
  var STORE = "attnlib-course:v2:";
  /* Before the chapters were renumbered (issue 44) progress was kept under v1 and the exercise's
   * former key (data-former, attnlib.exercises.registry.FORMER_KEYS).  It is read when v2 holds
   * nothing, never written, and removed only by the learner's own Clear. */
  var FORMER_STORE = "attnlib-course:v1:";
  var checker = null;           // Promise of {worker}, resolved when Pyodide and the graders are loaded
  var worker = null, pending = {}, nextId = 1;

  function failAll(message) {
    Object.keys(pending).forEach(function (id) { pending[id].reject(new Error(message)); });
    pending = {};
  }

  function startChecker() {
    if (checker) return checker;
    var t0 = performance.now();
    var api = window.attnExercises;
    if (api.startedAt === null) {   // the page's first start (a restart after a failure keeps these)
      api.startedAt = t0;
      api.startedBy = api.startedBy || "interaction";
    }
    checker = new Promise(function (resolve, reject) {
      try {
        worker = new Worker(WORKER_URL, {type: "module"});
      } catch (err) {
        reject(new Error("this browser could not start the checker (" + err.message + ")"));
        return;
      }
      worker.onmessage = function (event) {
        var msg = event.data || {};
        if (msg.type === "ready") {
          window.attnExercises.loadMs = performance.now() - t0;
          if (window.attnExercises.readyAt === null) window.attnExercises.readyAt = performance.now();
          resolve(worker);
        } else if (msg.type === "failed") {
          reject(new Error(msg.error));
          failAll(msg.error);
        } else if (msg.type === "result" && pending[msg.id]) {
          var p = pending[msg.id];
          delete pending[msg.id];
          if (msg.error) p.reject(new Error("the checker failed: " + msg.error));
          else p.resolve(msg.out);
        }
      };
      worker.onerror = function (event) {
        var why = (event && event.message) || "the checker's worker could not run";
        event.preventDefault && event.preventDefault();
        reject(new Error(why));
        failAll(why);
      };
      worker.postMessage({type: "init", pyodide: PYODIDE_URL, graders: GRADERS_URL});
    });
    checker.catch(function () { stopChecker(); });  // a later Check may try again
    document.querySelectorAll("[data-exercise]").forEach(function (root) {
      root.setAttribute("data-checker", "loading");
    });
    checker.then(function () {
      document.querySelectorAll("[data-exercise]").forEach(function (root) {
        root.setAttribute("data-checker", "ready");
        var box = root.querySelector(".attn-ex-feedback");
        if (box.textContent === WARMING) clear(root, true);
      });
    }, function () {});
    return checker;
  }

  function stopChecker() {
    if (worker) worker.terminate();
    worker = null;
    checker = null;
  }

  // Ask the worker to grade; rejects after CHECK_LIMIT_MS (the worker is then restarted).
  function grade(chapter, name, answer, data) {
    return startChecker().then(function (w) {
      return new Promise(function (resolve, reject) {
        var id = nextId++;
        var timer = setTimeout(function () {
          if (!pending[id]) return;
          delete pending[id];
          stopChecker();
          reject(new Error("the check took over " + CHECK_LIMIT_MS / 1000 + " s and was stopped; press Check again"));
        }, CHECK_LIMIT_MS);
        pending[id] = {
          resolve: function (out) { clearTimeout(timer); resolve(out); },
          reject: function (err) { clearTimeout(timer); reject(err); },
        };
        w.postMessage({type: "check", id: id, chapter: chapter, name: name, answer: answer, data: data});
      });
    });
  }

  // ------------------------------------------------------------------ progress in the browser
  function storage() {
    try { return window.localStorage; } catch (err) { return null; }  // blocked (privacy settings)
  }

  function load(root) {
    var s = storage();
    if (!s) return null;
    try {
      var saved = s.getItem(STORE + root.getAttribute("data-exercise"));
      var former = root.getAttribute("data-former");
      if (saved === null && former) saved = s.getItem(FORMER_STORE + former);
      return JSON.parse(saved || "null");
    }
    catch (err) { return null; }
  }

  function save(root, state) {
    var s = storage();
    if (!s) return;
    try { s.setItem(STORE + root.getAttribute("data-exercise"), JSON.stringify(state)); }
    catch (err) { /* full or blocked: progress is simply not kept */ }
  }

  function forget(root) {
    var s = storage();
    if (!s) return;
    try {
      s.removeItem(STORE + root.getAttribute("data-exercise"));
      var former = root.getAttribute("data-former");
      if (former) s.removeItem(FORMER_STORE + former);    /* else Clear would bring the old answer back */
    } catch (err) { /* ignore */ }
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

  // Put a saved answer back into root's control (the inverse of readAnswer).
  function setAnswer(root, answer) {
    var kind = root.getAttribute("data-kind");
    if (answer === null || answer === undefined) return;
    if (kind === "number" && typeof answer === "string") root.querySelector("input.attn-ex-input").value = answer;
    else if (kind === "choice") {
      root.querySelectorAll("input[type=radio]").forEach(function (r) { r.checked = r.value === answer; });
    } else if (kind === "token") {
      root.querySelectorAll(".attn-ex-token").forEach(function (b) {
        setPressed(b, +b.getAttribute("data-value") === answer);
      });
    } else if (kind === "sentence" && Array.isArray(answer)) {
      root.querySelectorAll("textarea.attn-ex-sentence").forEach(function (t, k) {
        if (typeof answer[k] === "string") t.value = answer[k];
      });
    } else if (kind === "matrix" && Array.isArray(answer)) {
      root.querySelectorAll(".attn-ex-cell").forEach(function (cell) {
        var row = answer[+cell.getAttribute("data-row")];
        setPressed(cell, !!(row && row[+cell.getAttribute("data-col")]));
      });
    }
  }

  function show(root, result, note) {
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
    if (note) {
      var small = document.createElement("span");
      small.className = "attn-ex-note";
      small.textContent = " " + note;
      box.appendChild(small);
    }
  }

  // Empty the feedback (its answer changed); a status line stays unless `force`.
  function clear(root, force) {
    var box = root.querySelector(".attn-ex-feedback");
    if (box.classList.contains("attn-ex-busy") && !force) return;
    box.textContent = "";
    box.classList.remove("attn-ex-correct", "attn-ex-wrong", "attn-ex-busy");
  }

  // The worked answer of this exercise: the chapter's solution whose title links to the
  // exercise's label, ex-<chapter, 2 digits>-<name> (docutils writes "_" in an id as "-").
  function solutionOf(root) {
    var key = root.getAttribute("data-exercise").split(":");
    var want = ("ex-" + (key[0].length < 2 ? "0" : "") + key[0] + "-" + key[1]).replace(/_/g, "-").toLowerCase();
    var links = document.querySelectorAll('.solution .admonition-title a[href^="#"]');
    for (var i = 0; i < links.length; i++) {
      if (links[i].getAttribute("href").slice(1).replace(/_/g, "-").toLowerCase() === want) return links[i].closest(".solution");
    }
    return null;
  }

  function openSolution(sol) {
    var toggle = sol.querySelector("button.toggle-button");
    if (toggle && sol.classList.contains("toggle-hidden")) toggle.click();
    if (sol.tagName === "DETAILS") sol.open = true;
    var title = sol.querySelector(".admonition-title") || sol;
    if (!title.hasAttribute("tabindex")) title.setAttribute("tabindex", "-1");
    title.scrollIntoView({block: "start"});
    title.focus({preventScroll: true});
  }

  // The extra buttons of an exercise: "Show the worked answer" (after TRIES_FOR_SOLUTION
  // tries that were not right) and "Clear" (when something is saved).
  function refreshActions(root) {
    var state = root._attnState || {};
    var actions = root.querySelector(".attn-ex-actions");
    var title = (root.querySelector(".attn-ex-title") || {}).textContent || root.getAttribute("data-exercise");
    var sol = solutionOf(root);
    var worked = actions.querySelector(".attn-ex-worked");
    if (sol && (state.tries || 0) >= TRIES_FOR_SOLUTION && !state.solved && !worked) {
      worked = document.createElement("button");
      worked.type = "button";
      worked.className = "attn-ex-worked";
      worked.textContent = "Show the worked answer";
      worked.setAttribute("aria-label", "Show the worked answer to: " + title);
      worked.addEventListener("click", function () { openSolution(solutionOf(root)); });
      actions.appendChild(worked);
    } else if (worked && !(sol && (state.tries || 0) >= TRIES_FOR_SOLUTION && !state.solved)) {
      worked.remove();
    }
    var reset = actions.querySelector(".attn-ex-clear");
    if (state.answer !== undefined && !reset) {
      reset = document.createElement("button");
      reset.type = "button";
      reset.className = "attn-ex-clear";
      reset.textContent = "Clear";
      reset.setAttribute("aria-label", "Clear my saved answer to: " + title);
      reset.addEventListener("click", function () {
        forget(root);
        root._attnState = {};
        resetControl(root);
        clear(root, true);
        refreshActions(root);
        var first = root.querySelector("input, textarea, .attn-ex-token, .attn-ex-cell");
        root._attnQuiet = true;   // the feedback stays empty after Clear (no status line on this focus)
        if (first) first.focus();
        root._attnQuiet = false;
      });
      actions.appendChild(reset);
    } else if (reset && state.answer === undefined) {
      reset.remove();
    }
  }

  function resetControl(root) {
    root.querySelectorAll("input.attn-ex-input, textarea.attn-ex-sentence").forEach(function (t) { t.value = ""; });
    root.querySelectorAll("input[type=radio]").forEach(function (r) { r.checked = false; });
    root.querySelectorAll(".attn-ex-token, .attn-ex-cell").forEach(function (b) { setPressed(b, false); });
  }

  // A verdict on the reader's own answer (not one passed in by a test or tool): counted and saved.
  function record(root, raw, result) {
    var state = root._attnState || {};
    state.answer = raw;
    state.result = {correct: result.correct, message: result.message, hint: result.hint};
    /* an empty answer (nothing typed, picked or chosen) is not a try: tapping Check on nothing
     * must not count toward revealing the worked answer */
    var empty = raw === null || raw === undefined || (typeof raw === "string" && !raw.trim()) ||
                (Array.isArray(raw) && raw.length > 0 && raw.every(function (t) { return typeof t === "string" && !t.trim(); }));
    state.tries = (state.tries || 0) + (result.correct || empty ? 0 : 1);
    state.solved = !!(state.solved || result.correct);
    root._attnState = state;
    save(root, state);
    refreshActions(root);
  }

  function restore(root) {
    var state = load(root);
    if (!state || typeof state !== "object") return;
    root._attnState = state;
    setAnswer(root, state.answer);
    if (state.result && typeof state.result.message === "string") {
      show(root, state.result, "(Your answer from an earlier visit.)");
    }
    refreshActions(root);
  }

  /* A sentence exercise is graded on the model's reading of the reader's text: the in-page
   * model (window.attnlibModel, defined by the model lab on the page) runs each text, and the
   * checker receives {texts, runs: [{tokens, heads: {"L:H": T rows of T weights}}]}, the same
   * dict attnlib.exercises.widgets.model_answer builds with PyTorch in the kernel. */
  /* On chapter 7's model (the circuit lab's window.attnlibTiny): for each text its words and,
   * for each of the exercise data's variants, the loss on every word with the variant's edits:
   * the dict attnlib.circuit_lab.read builds with PyTorch in the kernel. */
  function tinyAnswer(root, texts) {
    var api = window.attnlibTiny;
    if (!api) return Promise.reject(new Error("this page has no circuit lab to read your words"));
    var why = api.available();
    if (why) return Promise.reject(new Error(why));
    var dataEl = root.querySelector("script.attn-ex-data"), data = JSON.parse(dataEl.textContent);
    var runs = [], named = {};
    /* the kernel checked the data's variants (attnlib.circuit_lab.check_variants, in lab_data); the
     * losses are keyed by name, so a repeated name is refused here too rather than overwritten */
    for (var v = 0; v < data.variants.length; v++) {
      var name = data.variants[v].name;
      if (Object.prototype.hasOwnProperty.call(named, name)) {
        return Promise.reject(new Error("variants " + named[name] + " and " + v + " are both named \u201c" + name +
                                        "\u201d: give each variant its own name (its losses are keyed by it)"));
      }
      named[name] = v;
    }
    return api.load().then(function () {
      for (var k = 0; k < texts.length; k++) {
        try { api.words(texts[k]); } catch (err) { return {texts: texts, error: err.message}; }
      }
      return texts.reduce(function (p, text) {
        return p.then(function () {
          var words = api.words(text), loss = {};
          return data.variants.reduce(function (q, variant) {
            return q.then(function () {
              return api.run(words, {checkpoint: data.checkpoint, edits: variant.edits}).then(function (r) {
                loss[variant.name] = Array.prototype.map.call(r.loss, function (x) { return Math.round(x * 1e6) / 1e6; });
              });
            });
          }, Promise.resolve()).then(function () { runs.push({words: words, loss: loss}); });
        });
      }, Promise.resolve()).then(function () { return {texts: texts, runs: runs}; });
    });
  }

  /* On chapter 10's language model (the lab's window.attnlibLM): the reader's clean and corrupted
   * prompts, every head denoised, with the answers read from the one token where they differ:
   * the dict attnlib.language_model.pair_reading builds with PyTorch in the kernel. */
  function lmAnswer(root, texts) {
    var api = window.attnlibLM;
    if (!api) return Promise.reject(new Error("this page has no language-model lab to read your prompts"));
    var why = api.available();
    if (why) return Promise.reject(new Error(why));
    function round(x) { return Math.round(x * 1e6) / 1e6; }
    return api.load().then(function () {
      return Promise.all([api.tokenize(texts[0], "the clean prompt"), api.tokenize(texts[1], "the corrupted prompt")]);
    }).then(function (t) {
      var a = t[0], b = t[1], where = [];
      if (a.ids.length === b.ids.length) a.ids.forEach(function (x, i) { if (x !== b.ids[i]) where.push(i); });
      var answers = where.length === 1 ? [b.tokens[where[0]], a.tokens[where[0]]] : [" Mary", " John"];
      return api.patch(texts[0], texts[1], {answers: answers, sites: ["heads"], directions: ["denoise"]}).then(function (r) {
        return {texts: texts, sweep: {tokens: a.tokens, position: r.position, answers: answers, clean: round(r.clean),
                corrupted: round(r.corrupted), problem: r.problem,
                denoise: r.problem ? null : r.normalised.denoise.heads.map(function (row) { return row.map(round); })}};
      });
    }).catch(function (err) {
      if (api.info()) return {texts: texts, error: err.message};  // the model refused the pair
      throw err;
    });
  }

  function modelAnswer(root, texts) {
    if (texts.some(function (t) { return !String(t).trim(); })) return Promise.resolve({texts: texts});
    if (root.querySelector("[data-model=tiny]")) return tinyAnswer(root, texts);
    if (root.querySelector("[data-model=lm]")) return lmAnswer(root, texts);
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
  // sentence exercise, the list of texts).  Only answers read from the control are saved.
  function check(root, answer) {
    var key = root.getAttribute("data-exercise").split(":");
    var dataEl = root.querySelector("script.attn-ex-data");
    var own = arguments.length < 2;
    var raw = own ? readAnswer(root) : answer;
    var texts = Array.isArray(raw) && raw.every(function (t) { return typeof t === "string"; });
    var answered = root.getAttribute("data-kind") === "sentence" && texts ? modelAnswer(root, raw) : Promise.resolve(raw);
    var ready = false;
    var done = answered.then(function (value) {
      return grade(parseInt(key[0], 10), key[1], JSON.stringify(value), dataEl ? dataEl.textContent : "null");
    }).then(function (out) {
      ready = true;
      var result = JSON.parse(out);
      show(root, result);
      if (own) record(root, raw, result);
      return result;
    }, function (err) {
      ready = true;
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
    return done;
  }

  function setPressed(btn, on) { btn.setAttribute("aria-pressed", on ? "true" : "false"); }

  function wire(root) {
    if (root.getAttribute("data-ready")) return;
    root.setAttribute("data-ready", "1");
    var kind = root.getAttribute("data-kind");
    var warm = function () {
      /* The reader is here: say the checker is loading unless it is ready (it may have been
       * started by preload() without a word, or not at all yet). */
      if (root.getAttribute("data-checker") !== "ready" && !root._attnQuiet) {
        var box = root.querySelector(".attn-ex-feedback");
        if (!box.textContent) show(root, WARMING);
      }
      startChecker().catch(function () {});
    };
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
    restore(root);
  }

  function wireAll() { document.querySelectorAll("[data-exercise]").forEach(wire); }

  /* Start the checker before the reader's first Check (issue 45: started on the first
   * interaction, the first Check waited 9-21 s for Pyodide).  The main thread only creates the
   * worker and posts one message (a few ms); fetching and compiling Pyodide happen in the worker.
   * bench/bench_first_check.py measures the choices below (bench/results/first_check.md).
   *  - Only on a page with an exercise (the script is only added to those pages; checked again).
   *  - Once the page is quiet after its load event: QUIET_MS without a main-thread task of 50 ms
   *    or more (the Long Tasks API), at most MAX_WAIT_MS after it, then in an idle period
   *    (requestIdleCallback); without the Long Tasks API, the first idle period (at most
   *    IDLE_WAIT_MS).  The page's own start (MathJax, the layout pass in idle time) goes first:
   *    measured on 2 busy cores, a worker started at the first idle period compiled Pyodide while
   *    that work ran and stretched it into frames of 100-650 ms for 4 s.  And at once if an
   *    exercise comes within a viewport of the screen after load (IntersectionObserver).
   *  - On a narrow screen (a phone, PHONE_QUERY) only when an exercise comes within a viewport of
   *    the screen: there 13 MB of Pyodide are a real cost on a metered connection.
   *  - Not with Save-Data or prefers-reduced-data (one property and one media query: cheap to
   *    honour): then it starts on the first interaction, as before.
   *  - Not from a page opened from disk (file:), where a module worker cannot start.
   * window.attnlibCheckerStart, set before this script runs, overrides the choice for benches and
   * tests: "idle", "near" (only when an exercise comes near) or "interaction" (the former way). */
  var IDLE_WAIT_MS = 2000, QUIET_MS = 1000, MAX_WAIT_MS = 5000;
  var PHONE_QUERY = "(max-width: 600px)";
  var NEAR_MARGIN = "100% 0px";   // an exercise within one viewport's height above or below the screen

  function media(query) { return !!(window.matchMedia && window.matchMedia(query).matches); }

  function startMode() {
    if (typeof window.attnlibCheckerStart === "string") return window.attnlibCheckerStart;
    if (window.location.protocol === "file:") return "interaction";
    if ((navigator.connection && navigator.connection.saveData) || media("(prefers-reduced-data: reduce)")) return "interaction";
    return media(PHONE_QUERY) ? "near" : "idle";
  }

  function whenIdle(fn, wait) {
    if (window.requestIdleCallback) window.requestIdleCallback(fn, {timeout: wait});
    else setTimeout(fn, 200);
  }

  // fn() once the main thread has had no long task for QUIET_MS (at most MAX_WAIT_MS from now).
  function whenQuiet(fn) {
    var t0 = performance.now(), last = t0, observer = null;
    try {
      observer = new PerformanceObserver(function (list) {
        list.getEntries().forEach(function (e) { last = Math.max(last, e.startTime + e.duration); });
      });
      observer.observe({type: "longtask", buffered: true});
    } catch (err) {
      observer = null;
    }
    if (!observer) { whenIdle(fn, IDLE_WAIT_MS); return; }
    (function poll() {
      var now = performance.now();
      if (now - last >= QUIET_MS || now - t0 >= MAX_WAIT_MS) {
        observer.disconnect();
        whenIdle(fn, 500);
      } else {
        setTimeout(poll, Math.max(50, Math.min(QUIET_MS - (now - last), MAX_WAIT_MS - (now - t0))));
      }
    })();
  }

  function preload() {
    var roots = document.querySelectorAll("[data-exercise]");
    var mode = startMode();
    window.attnExercises.startMode = roots.length ? mode : "none";
    if (!roots.length || mode === "interaction") return;
    var started = false, observer = null;
    function go(why) {
      if (started) return;
      started = true;
      if (observer) observer.disconnect();
      if (!checker) window.attnExercises.startedBy = why;
      startChecker().catch(function () {});   // quietly: a Check says what went wrong
    }
    function afterLoad() {   // the page's own resources first, even with an exercise on screen
      if ("IntersectionObserver" in window) {
        observer = new IntersectionObserver(function (entries) {
          if (entries.some(function (e) { return e.isIntersecting; })) go("near");
        }, {rootMargin: NEAR_MARGIN});
        roots.forEach(function (root) { observer.observe(root); });
      } else {
        mode = "idle";   // no way to tell where the reader is: start when idle
      }
      if (mode === "idle") whenQuiet(function () { go("idle"); });
    }
    if (document.readyState === "complete") afterLoad();
    else window.addEventListener("load", afterLoad, {once: true});
  }

  window.attnExercises = {check: check, start: startChecker, readAnswer: readAnswer, wireAll: wireAll, loadMs: null,
                          startMode: null, startedBy: null, startedAt: null, readyAt: null,
                          solutionOf: solutionOf, storeKey: STORE, triesForSolution: TRIES_FOR_SOLUTION, checkLimitMs: CHECK_LIMIT_MS};
  function begin() { wireAll(); preload(); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", begin);
  else begin();
})();
