/* Chapter 7: the circuit lab.  The chapter's trained language model on the reader's own word
 * sequence, at any of 16 moments of its training or as the one-layer control: the loss on every
 * word, any head's pattern, heads switched off, and activation patching scored on the copy
 * target (attnlib.circuit_lab.pair_metric: below).
 *
 * Before the reader loads the models, the view shows the run PyTorch computed when the page was
 * built (attnlib.circuit_lab.lab_data); in a notebook that is all it shows (change the cell's
 * arguments and run it again).  In the published book, "Load the models" starts
 * _static/tiny/worker.js (onnxruntime-web in a Web Worker, nothing from another host) and
 * defines window.attnlibTiny (documented below and in the README).
 *
 * data: {vocabulary, max_len, n_heads, models: [{name, step, n_layers, control, induction,
 *        previous}], model, layer, head, words, pair: {corrupt, position, target_position,
 *        copy_problem, clean, corrupted} or null, loss: T-1 nats, attentions: flat L*H*T*T,
 *        uniform_induction, uniform_previous, min_gap, normalised_range} */

/* ---- window.attnlibTiny ---------------------------------------------------------------------
 *   attnlibTiny.available()             -> "" when the models can run here, else why not
 *   await attnlibTiny.load(onProgress)  -> tiny.json's description ({models, vocabulary, ...})
 *   attnlibTiny.checkpoints()           -> [{name, step}] (the 16 checkpoints, then "one-layer")
 *   attnlibTiny.vocabulary()            -> [word] (a word's id is its index)
 *   attnlibTiny.words(text)             -> [word], or throws an Error that names the problem
 *   await attnlibTiny.run(words, {checkpoint, edits}) ->
 *       {tokens: words, ids, shape: [L, H, T, T], logits: Float32Array (T*V),
 *        attentions: Float32Array (L*H*T*T), loss: Float32Array (T-1, nats), edits, ms}
 *     edits: attnlib.edits's spec, [{layer, head (null: the residual stream), mode: "zero" |
 *     "mean" | "patch", source (patch only: the words of the run to patch from, or a result of
 *     run(): then that run's heads switched off apply to the source too), position?}]
 *   await attnlibTiny.patch(clean, corrupted, {checkpoint, edits}) -> (attnlib.circuit_lab.pair_tables)
 *       {position (p, where the two differ), cleanWord, corruptWord, targetPosition, target, match,
 *        copyProblem, off: ["l.h"], clean, corrupted (the metric, nats), denoise: {heads: L x H,
 *        resid: (L+1) x T}, noise: {...} (the metric of each patched run), normalised: {denoise,
 *        noise} ((patched - corrupted) / (clean - corrupted)), problem, rangeProblem, runs, ms}
 *     the metric (attnlib.circuit_lab.pair_metric): the copy target T* is the word that followed
 *     the most recent earlier occurrence of the last word in the CLEAN sequence (an occurrence
 *     just before the last word does not count); the metric is logit[T*] minus the mean logit
 *     over the vocabulary at the last position, in every run of the pair.  So any one-word
 *     corruption gives a table: the copy target's earlier copy (the token corruption) or the last
 *     word's earlier occurrence (the match corruption: the previous-token head).
 *     copyProblem: when the clean sequence has nothing to copy, why in words; then nothing is
 *       run and the metrics, tables and normalised scores are null.
 *     edits: heads switched off ([{layer, head, mode: "zero" | "mean", position?}]), applied in
 *       every run, the patch sources included; a switched-off head's own cells are NaN.
 *     problem: gapProblem (then every normalised score is NaN); rangeProblem: a warning when a
 *       normalised score leaves NORMALISED_RANGE, [-0.5, 1.5] (attnlib.circuit_lab.range_problem).
 *   attnlibTiny.copyTarget(words) -> the copy target's position, or null; copyProblem(words) ->
 *     the sentence, or null; rangeProblem(normalised) -> the warning, or null; unknownWord(word,
 *     vocabulary) -> the refusal of a word outside it, with difflib's suggestions (the kernel's words).
 */
var TINY_WORD = /[a-z]+(?:-[a-z]+)*|--|[^\sa-z]/g;  /* attnlib.corpus.words_of */

/* attnlib.circuit_lab.QUOTE_CHARS: a message quotes a word whole up to 40 characters, else its
 * start, "\u2026" and its length (attnlib.circuit_lab._shortened) */
var QUOTE_CHARS = 40;
function shortened(word) {
  if (word.length <= QUOTE_CHARS) return "\u201c" + word + "\u201d";
  return "\u201c" + word.slice(0, QUOTE_CHARS) + "\u2026\u201d (" + word.length.toLocaleString("en-US") + " characters)";
}

/* attnlib.circuit_lab.NORMALISED_RANGE: normalised scores read as shares of the gap */
var NORMALISED_RANGE = [-0.5, 1.5];

/* attnlib.circuit_lab.copy_target: the position of the word that followed the most recent earlier
 * occurrence of the last word (one just before the last word does not count), or null. */
function copyTarget(w) {
  var last = w.length - 1;
  for (var j = last - 2; j >= 0; j--) if (w[j] === w[last]) return j + 1;
  return null;
}

/* attnlib.circuit_lab.copy_problem: why a clean sequence has nothing to copy, or null (the kernel's words). */
function copyProblem(w) {
  if (copyTarget(w) !== null) return null;
  var last = w[w.length - 1];
  if (w.length >= 2 && w[w.length - 2] === last) {
    return "nothing to copy: \u201c" + last + "\u201d, the last word, occurs earlier only just before itself, so no " +
           "earlier occurrence is followed by a word to copy and no score here measures copying";
  }
  return "nothing to copy: \u201c" + last + "\u201d, the last word, does not occur earlier in the clean sequence, so " +
         "there is no copy target and no score here measures copying";
}

/* attnlib.circuit_lab.pair_metric on one position's logits (logits[base .. base + V)): the copy
 * target's logit minus the mean logit over the vocabulary (nats). */
function copyMetric(logits, base, V, target) {
  var sum = 0;
  for (var v = 0; v < V; v++) sum += logits[base + v];
  return logits[base + target] - sum / V;
}

/* attnlib.circuit_lab.range_problem: a warning when a finite normalised score (nested arrays or
 * objects of them) leaves [low, high], or null (the kernel's words). */
function rangeProblem(normalised, low, high) {
  low = low === undefined ? NORMALISED_RANGE[0] : low; high = high === undefined ? NORMALISED_RANGE[1] : high;
  var lo = Infinity, hi = -Infinity, any = false;
  (function collect(x) {
    if (x === null || x === undefined) return;
    if (typeof x === "number") { if (isFinite(x)) { any = true; lo = Math.min(lo, x); hi = Math.max(hi, x); } return; }
    if (Array.isArray(x) || ArrayBuffer.isView(x)) { Array.prototype.forEach.call(x, collect); return; }
    if (typeof x === "object") Object.keys(x).forEach(function (k) { collect(x[k]); });
  })(normalised);
  if (!any || (lo >= low && hi <= high)) return null;
  return "some normalised scores leave [" + low + ", " + high + "] (lowest " + lo.toFixed(2) + ", highest " + hi.toFixed(2) +
         "): a patch moved the metric more than half the gap beyond the clean or the corrupted run, so these " +
         "scores are not shares of the gap: read them as how far each patch moves the metric, in units of the gap";
}

/* difflib.SequenceMatcher(None, a, b).ratio() for short strings (b under 200 characters, so no
 * autojunk): 2 M / (len a + len b), M the characters of the matching blocks found as difflib
 * finds them (the longest match, then the same on each side of it). */
function matchRatio(a, b) {
  var b2j = {}, j;
  for (j = 0; j < b.length; j++) (b2j[b[j]] = b2j[b[j]] || []).push(j);
  var queue = [[0, a.length, 0, b.length]], matched = 0;
  while (queue.length) {
    var q = queue.pop(), alo = q[0], ahi = q[1], blo = q[2], bhi = q[3];
    var besti = alo, bestj = blo, best = 0, j2len = {};
    for (var i = alo; i < ahi; i++) {                /* difflib's find_longest_match */
      var next = {}, js = b2j[a[i]] || [];
      for (var t = 0; t < js.length; t++) {
        j = js[t];
        if (j < blo) continue;
        if (j >= bhi) break;
        var k = next[j] = (j2len[j - 1] || 0) + 1;
        if (k > best) { besti = i - k + 1; bestj = j - k + 1; best = k; }
      }
      j2len = next;
    }
    if (!best) continue;
    matched += best;
    if (alo < besti && blo < bestj) queue.push([alo, besti, blo, bestj]);
    if (besti + best < ahi && bestj + best < bhi) queue.push([besti + best, ahi, bestj + best, bhi]);
  }
  var n = a.length + b.length;
  return n ? 2 * matched / n : 1;
}

/* difflib.get_close_matches(word, possibilities, n, cutoff): the best n by ratio, ties in
 * reverse order of the word (Python's heapq.nlargest on (score, word)). */
function closeMatches(word, possibilities, n, cutoff) {
  return possibilities.map(function (x) { return [matchRatio(x, word), x]; })
    .filter(function (p) { return p[0] >= cutoff; })
    .sort(function (p, q) { return q[0] - p[0] || (q[1] < p[1] ? -1 : q[1] > p[1] ? 1 : 0); })
    .slice(0, n).map(function (p) { return p[1]; });
}

/* attnlib.exercises.core.unknown_word: the refusal of a word outside the vocabulary, with
 * difflib's suggestions (the kernel's words; the lab's exercises pass it on). */
var WORD_SHOWN = 40;
function unknownWord(word, vocab) {
  var shown = String(word).slice(0, WORD_SHOWN);
  var near = closeMatches(shown, vocab, 3, 0.6).map(function (x) { return "\u201c" + x + "\u201d"; });
  var offer = near.length <= 1 ? near.join("") : near.slice(0, -1).join(", ") + " or " + near[near.length - 1];
  return shortened(String(word)) + " is not in the model's vocabulary (the " + vocab.length +
         " words and marks of the Gettysburg Address)" + (offer ? "; did you mean " + offer + "?" : "");
}

function tinyApi(known) {
  if (window.attnlibTiny) return window.attnlibTiny;
  var client = workerClient("tiny/worker.js", "the lab",
                            "the lab's models run in the published book; in a notebook, edit the cell's words and run it again");
  var available = client.available, send = client.send, load = client.load;
  function described() { return client.info() || known; }
  function vocabulary() { return described().vocabulary.slice(); }
  function checkpoints() { return described().models.map(function (m) { return {name: m.name, step: m.step}; }); }
  function modelOf(name) {
    var models = described().models, found = models.filter(function (m) { return m.name === name; })[0];
    if (name === undefined || name === null) found = models.filter(function (m) { return !m.control; }).slice(-1)[0];
    if (!found) throw new Error("no checkpoint called " + JSON.stringify(name) + "; there are " + models.map(function (m) { return m.name; }).join(", "));
    return found;
  }
  /* typed text (or a list of words) -> words of the vocabulary; throws with the reason */
  function words(text) {
    var d = described(), vocab = d.vocabulary, found;
    if (Array.isArray(text)) found = text.map(String);
    else if (typeof text === "string") found = String(text).toLowerCase().match(TINY_WORD) || [];
    else throw new Error("expected words as text or a list, got " + typeof text);
    if (!found.length) throw new Error("no words: type words of the Gettysburg Address, e.g. \u201cwe are met on a great battle-field\u201d");
    if (found.length > d.max_len) throw new Error(found.length + " words: the model reads at most " + d.max_len);
    for (var i = 0; i < found.length; i++) {
      if (vocab.indexOf(found[i]) >= 0) continue;
      throw new Error(unknownWord(found[i], vocab));
    }
    return found;
  }
  function ids(list) { var vocab = described().vocabulary; return list.map(function (w) { return vocab.indexOf(w); }); }
  function wire(editsIn) {
    return (editsIn || []).map(function (e) {
      var out = {};
      Object.keys(e).forEach(function (k) { out[k] = e[k]; });
      if (e && e.source !== undefined && e.source !== null) {    /* words, text, or a run's result */
        var given = Array.isArray(e.source) || typeof e.source === "string";
        var src = given ? e.source : e.source.tokens;
        if (src === undefined) throw new Error("a patch's source is the run to patch from: its words (a list or text) or a result of run()");
        out.source = {tokens: ids(words(src))};
        if (!given && e.source.edits && e.source.edits.length) out.source.edits = e.source.edits;   /* a result of run() with heads off: patch from that run, as the kernel does */
      }
      return out;
    });
  }
  function batch(name, items, last) {
    return load().then(function () {
      modelOf(name);
      return send({cmd: "run", model: name, items: items, last: !!last});
    }).then(function (msg) { return msg.result; });
  }
  function run(list, options) {
    var opts = options || {}, w;
    try { w = words(list); } catch (err) { return Promise.reject(err); }
    var name = opts.checkpoint === undefined ? modelOf().name : opts.checkpoint, edits;
    try { modelOf(name); edits = wire(opts.edits); } catch (err) { return Promise.reject(err); }
    return batch(name, [{tokens: ids(w), edits: edits}]).then(function (r) {
      return {tokens: w, ids: ids(w), shape: [r.L, r.H, r.T, r.T], logits: r.logits, attentions: r.pattern,
              loss: r.loss, edits: edits, ms: r.ms};
    });
  }
  /* heads switched off for patch(): whole-head zero or mean edits, each head once (normalised
   * as attnlib.edits does; the worker checks the rest) -> {edits, keys: {"l.h": 1}, names: ["l.h"]} */
  function offHeads(list, L, H) {
    var keys = {};
    if (list !== undefined && list !== null && !Array.isArray(list)) throw new Error("edits must be a list of heads switched off");
    (list || []).forEach(function (e, i) {
      if (!e || e.head === undefined || e.head === null || (e.mode !== "zero" && e.mode !== "mean") ||
          (e.source !== undefined && e.source !== null)) {
        throw new Error("edit " + i + ": patch() takes heads switched off, {layer, head, mode: \"zero\" | \"mean\"}; the patches are its own");
      }
      var l = e.layer, h = e.head;
      if (Number.isInteger(l) && l < 0) l += L;
      if (Number.isInteger(h) && h < 0) h += H;
      keys[l + "." + h] = 1;
    });
    return {edits: (list || []).slice(), keys: keys, names: Object.keys(keys).sort()};
  }
  function patch(clean, corrupted, options) {
    var opts = options || {}, a, b, name, off;
    try {
      a = words(clean); b = words(corrupted);
      name = opts.checkpoint === undefined ? modelOf().name : opts.checkpoint;
      off = offHeads(opts.edits, modelOf(name).n_layers, described().n_heads);
    } catch (err) { return Promise.reject(err); }
    if (a.length !== b.length) return Promise.reject(new Error("the corrupted sequence must have as many words as the clean one (" + a.length + "), it has " + b.length));
    var diff = [];
    a.forEach(function (w, i) { if (w !== b[i]) diff.push(i); });
    if (diff.length !== 1) return Promise.reject(new Error("the two sequences must differ in exactly one word; they differ in " + diff.length));
    var p = diff[0], T = a.length, ia = ids(a), ib = ids(b), m = modelOf(name), L = m.n_layers, H = described().n_heads;
    var tp = copyTarget(a), started = performance.now();
    var out = {position: p, cleanWord: a[p], corruptWord: b[p], targetPosition: tp, target: tp === null ? null : a[tp],
               match: tp === null ? null : tp - 1, copyProblem: copyProblem(a), off: off.names, clean: null, corrupted: null,
               denoise: null, noise: null, normalised: null, problem: null, rangeProblem: null, runs: 0, ms: 0};
    if (tp === null) return Promise.resolve(out);           /* nothing to copy: no metric, nothing to run */
    var items = [{tokens: ia, edits: off.edits}, {tokens: ib, edits: off.edits}], skipped = [];
    [[ib, ia], [ia, ib]].forEach(function (pair) {          /* denoising: clean into corrupted; noising: the reverse */
      var l, h, t, source = {tokens: pair[1], edits: off.edits};   /* the source runs with the same heads off */
      for (l = 0; l < L; l++) for (h = 0; h < H; h++) {
        if (off.keys[l + "." + h]) { skipped.push(items.length); continue; }   /* off: nothing to patch (one place, one edit) */
        items.push({tokens: pair[0], edits: off.edits.concat([{layer: l, head: h, mode: "patch", source: source}])});
      }
      for (l = 0; l <= L; l++) for (t = 0; t < T; t++) items.push({tokens: pair[0], edits: off.edits.concat([{layer: l, head: null, mode: "patch", source: source, position: t}])});
    });
    return batch(name, items, true).then(function (r) {       /* only the last position's logits come back */
      var V = r.V, target = ia[tp];
      function metric(k) { return copyMetric(r.logits, k * V, V, target); }
      var clean0 = metric(0), corrupt0 = metric(1), k = 2;
      function table(rows, cols, heads) {
        var res = [];
        for (var i = 0; i < rows; i++) {
          var row = [];
          for (var j = 0; j < cols; j++) row.push(heads && off.keys[i + "." + j] ? NaN : metric(k++));
          res.push(row);
        }
        return res;
      }
      var den = {heads: table(L, H, true), resid: table(L + 1, T)}, noi = {heads: table(L, H, true), resid: table(L + 1, T)};
      var problem = gapProblem(clean0, corrupt0, described().min_gap);
      function norm(t) {             /* NaN where the gap is too small to divide by (problem says why) */
        function one(x) { return problem ? NaN : (x - corrupt0) / (clean0 - corrupt0); }
        return {heads: t.heads.map(function (row) { return row.map(one); }),
                resid: t.resid.map(function (row) { return row.map(one); })};
      }
      var normalised = {denoise: norm(den), noise: norm(noi)};
      out.clean = clean0; out.corrupted = corrupt0; out.denoise = den; out.noise = noi; out.normalised = normalised;
      out.problem = problem; out.rangeProblem = problem ? null : rangeProblem(normalised);
      out.runs = items.length; out.ms = performance.now() - started;
      return out;
    });
  }
  window.attnlibTiny = {available: available, load: load, info: client.info, checkpoints: checkpoints,
                        vocabulary: vocabulary, words: words, run: run, patch: patch, gapProblem: gapProblem,
                        copyTarget: copyTarget, copyProblem: copyProblem, copyMetric: copyMetric,
                        rangeProblem: rangeProblem, unknownWord: unknownWord, NORMALISED_RANGE: NORMALISED_RANGE.slice()};
  return window.attnlibTiny;
}

/* mulberry32: a small seeded generator, so "Random words" with a seed is the same everywhere */
function seeded(seed) {
  var a = seed >>> 0;
  return function () {
    a = (a + 0x6D2B79F5) >>> 0;
    var t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/* attnlib.induction.natural_repeats for one sequence: what position i (predicting word i + 1)
 * can copy: "same" (an earlier occurrence of word i was followed by word i + 1), "other", "first". */
function copyKinds(w) {
  var out = [];
  for (var i = 0; i + 1 < w.length; i++) {
    var seen = false, same = false;
    for (var j = 0; j < i; j++) if (w[j] === w[i]) { seen = true; if (w[j + 1] === w[i + 1]) same = true; }
    out.push(same ? "same" : seen ? "other" : "first");
  }
  return out;
}

function view(root, data, uid) {
  var api = tinyApi(data);
  var H = data.n_heads;
  var models = data.models, twoLayer = models.filter(function (m) { return !m.control; });
  var control = models.filter(function (m) { return m.control; })[0];
  var s = {model: data.model, layer: data.layer, head: data.head, query: data.words.length - 1, words: data.words,
           loss: data.loss, attentions: data.attentions, off: {}, offMode: "zero", intactLoss: data.loss,
           corrupt: data.pair ? data.pair.corrupt : null, table: null, seed: 1, loaded: false,
           pair: data.pair ? {position: data.pair.position, targetPosition: data.pair.target_position,
                              copyProblem: data.pair.copy_problem, clean: data.pair.clean, corrupted: data.pair.corrupted, off: []} : null};
  function modelNamed(name) { return models.filter(function (m) { return m.name === name; })[0]; }
  function L() { return modelNamed(s.model).n_layers; }

  var status = el("p", {"class": "xp-hint", role: "status", "aria-live": "polite", "aria-atomic": "true", "data-role": "status",
                        id: uid + "-status", tabindex: "-1"});   /* focus lands here after Load (the button goes away) */
  var loadRow = el("div", {"class": "xp-controls"});
  var why = api.available();
  var meta = document.querySelector('meta[name="attnlib-tiny-bytes"]');
  var mb = meta ? (Number(meta.getAttribute("content")) / 1e6).toFixed(1) : null;
  var loadButton = el("button", {type: "button", "data-role": "load"},
                      "Load the lab's " + models.length + " models in this page" + (mb ? " (" + mb + " MB, once)" : ""));
  var progress = el("progress", {max: "1", value: "0", "data-role": "progress", hidden: "hidden", "aria-label": "downloading the models"});
  loadRow.appendChild(loadButton);
  loadRow.appendChild(progress);
  root.appendChild(loadRow);
  root.appendChild(status);

  /* the sequence */
  var form = el("form", {"class": "xp-lab-form", "data-role": "form"});
  var textWrap = el("div", {"class": "xp-control xp-text"});
  textWrap.appendChild(el("label", {"for": uid + "-words"}, "Words"));
  var input = el("input", {type: "text", id: uid + "-words", "data-role": "words", maxlength: "2000", autocomplete: "off",
                           spellcheck: "false", "aria-describedby": uid + "-words-hint"});
  input.value = data.words.join(" ");
  textWrap.appendChild(input);
  form.appendChild(textWrap);
  form.appendChild(el("p", {"class": "xp-hint", id: uid + "-words-hint"},
                      "Up to " + data.max_len + " words and marks of the Gettysburg Address (the model's whole vocabulary: " +
                      data.vocabulary.length + " entries, listed under the buttons).  Words that copying can predict are underlined."));
  var buttons = el("div", {"class": "xp-controls"});
  var runButton = el("button", {type: "submit", "data-role": "run"}, "Run");
  var repeatButton = el("button", {type: "button", "data-role": "repeat"}, "Repeat it");
  var randomButton = el("button", {type: "button", "data-role": "random"}, "Random words");
  [runButton, repeatButton, randomButton].forEach(function (b) { buttons.appendChild(b); });
  form.appendChild(buttons);
  var vocab = vocabularyList();
  form.appendChild(vocab.box);
  root.appendChild(form);

  /* the model: a training step, or the control */
  var modelRow = el("div", {"class": "xp-controls"});
  var stepIndex = Math.max(0, twoLayer.map(function (m) { return m.name; }).indexOf(s.model));
  var stepSlider = slider(uid, "step", "Training step ", 0, twoLayer.length - 1, 1, stepIndex, function (v) {
    s.model = twoLayer[v].name; controlBox.input.checked = false; modelChanged();
  });
  var controlBox = checkbox(uid, "control", "the one-layer control instead", false, function (on) {
    s.model = on ? control.name : twoLayer[parseInt(stepSlider.input.value, 10)].name; modelChanged();
  });
  modelRow.appendChild(stepSlider.wrap);
  modelRow.appendChild(controlBox.wrap);
  root.appendChild(modelRow);
  var curve = el("div", {"data-role": "curve"});
  root.appendChild(curve);

  /* loss per word */
  var lossBox = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-label": "loss on each word", "data-role": "loss"});
  root.appendChild(lossBox);
  var lossReadout = el("p", {"class": "xp-readout", "data-role": "loss-readout"});
  root.appendChild(lossReadout);

  /* a head's pattern */
  var pickers = el("div", {"class": "xp-controls"});
  function picker(name, label, n, value, onChange) { return indexPicker(pickers, uid, name, label, n, value, onChange); }
  var layerSelect = picker("layer", "layer ", L(), Math.min(s.layer, L() - 1), function (v) { s.layer = v; drawHead(); });
  picker("head", "head ", H, s.head, function (v) { s.head = v; drawHead(); });
  root.appendChild(pickers);
  var headReadout = el("p", {"class": "xp-readout", "data-role": "head-readout"});
  root.appendChild(headReadout);
  var mapBox = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "data-role": "map",
                          "aria-label": "attention weights of the selected head: up and down arrow keys pick the query word"});
  var canvas = el("canvas", {role: "img", "aria-label": "attention weights"});
  mapBox.appendChild(canvas);
  root.appendChild(mapBox);
  mapBox.addEventListener("keydown", function (event) {
    var step = event.key === "ArrowDown" ? 1 : event.key === "ArrowUp" ? -1 : 0;
    if (!step || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    s.query = Math.max(0, Math.min(s.words.length - 1, s.query + step));
    drawHead();
  });
  canvas.addEventListener("click", function (event) {
    var g = canvas._geom; if (!g) return;
    var rect = canvas.getBoundingClientRect();
    var i = Math.floor(((event.clientY - rect.top) * g.W / rect.width - g.room) / g.cell);   /* square cells: one scale */
    if (i >= 0 && i < s.words.length) { s.query = i; drawHead(); }
  });

  /* heads switched off */
  var offBox = el("fieldset", {"class": "xp-modes", "data-role": "off"});
  offBox.appendChild(el("legend", null, "Switch heads off (head l.h is layer l, head h)"));
  var offModes = el("div", {"class": "xp-controls"});
  [["zero", "zero ablation"], ["mean", "mean ablation (the head's mean output)"]].forEach(function (m) {
    var id = uid + "-off-" + m[0], label = el("label", {"for": id, "class": "xp-choice"});
    var radio = el("input", {type: "radio", name: uid + "-offmode", id: id, value: m[0], "data-role": "off-" + m[0]});
    radio.checked = m[0] === s.offMode;
    radio.addEventListener("change", function () { if (radio.checked) { s.offMode = m[0]; if (Object.keys(s.off).length) { s.table = null; rerun(); } } });
    label.appendChild(radio);
    label.appendChild(document.createTextNode(" " + m[1]));
    offModes.appendChild(label);
  });
  offBox.appendChild(offModes);
  var offGrid = el("div", {"class": "xp-controls", "data-role": "off-heads"});
  offBox.appendChild(offGrid);
  root.appendChild(offBox);

  /* patching */
  var patchBox = el("fieldset", {"class": "xp-modes", "data-role": "patch"});
  patchBox.appendChild(el("legend", null, "Patch: a corrupted copy with one word changed"));
  var patchRow = el("div", {"class": "xp-controls"});
  var posWrap = el("div", {"class": "xp-control"});
  posWrap.appendChild(el("label", {"for": uid + "-ppos"}, "change word "));
  var posSelect = el("select", {id: uid + "-ppos", "data-role": "patch-position"});
  posWrap.appendChild(posSelect);
  var wordWrap = el("div", {"class": "xp-control"});
  wordWrap.appendChild(el("label", {"for": uid + "-pword"}, "to "));
  var wordSelect = el("select", {id: uid + "-pword", "data-role": "patch-word"});
  data.vocabulary.forEach(function (w) { wordSelect.appendChild(el("option", {value: w}, w)); });
  wordWrap.appendChild(wordSelect);
  patchRow.appendChild(posWrap);
  patchRow.appendChild(wordWrap);
  var tableButton = el("button", {type: "button", "data-role": "patch-run"}, "Patch every head and every position");
  patchRow.appendChild(tableButton);
  patchBox.appendChild(patchRow);
  var pairReadout = el("p", {"class": "xp-readout", "data-role": "pair-readout"});
  patchBox.appendChild(pairReadout);
  var tables = el("div", {"data-role": "patch-tables"});
  patchBox.appendChild(tables);
  root.appendChild(patchBox);

  /* say(text): the lab's status line; say(text, "error"): an error ("Error:" and the error style, not
   * colour alone); fieldError(text): the words field was refused: aria-invalid, described by the message,
   * both cleared as soon as the field reads again (fieldFixed). */
  function say(text, kind) {
    var error = kind === "error";
    status.classList.toggle("xp-error", error);
    status.classList.toggle("xp-hint", !error);
    status.textContent = "";
    if (error) status.appendChild(el("strong", null, "Error: "));
    status.appendChild(document.createTextNode(text));
    if (!error && input.getAttribute("aria-invalid") === "true") fieldFixed();
  }
  function fieldError(text) {
    say(text, "error");
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", uid + "-words-hint " + status.id);
  }
  function fieldFixed() {
    input.removeAttribute("aria-invalid");
    input.setAttribute("aria-describedby", uid + "-words-hint");
  }
  input.addEventListener("input", function () {
    if (input.getAttribute("aria-invalid") !== "true") return;
    try { api.words(input.value); } catch (err) { return; }        /* still refused: the message stays */
    fieldFixed();
    say("These words can be read" + (s.loaded ? ": press Run." : "."));
  });

  /* the vocabulary, browsable and searchable: a word pressed (click, Enter or Space) goes in at the caret */
  function vocabularyList() {
    var box = el("details", {"class": "xp-vocab", "data-role": "vocab"});
    box.appendChild(el("summary", null, "All " + data.vocabulary.length + " words and marks the model knows"));
    var find = el("div", {"class": "xp-control xp-text"});
    find.appendChild(el("label", {"for": uid + "-vfind"}, "Find"));
    var filter = el("input", {type: "search", id: uid + "-vfind", "data-role": "vocab-filter", autocomplete: "off",
                              spellcheck: "false", "aria-describedby": uid + "-vcount"});
    find.appendChild(filter);
    box.appendChild(find);
    var count = el("p", {"class": "xp-hint", id: uid + "-vcount", "aria-live": "polite", "data-role": "vocab-count"});
    box.appendChild(count);
    var list = el("ul", {"class": "xp-vocab-list", "data-role": "vocab-list", "aria-describedby": uid + "-vcount"});
    var items = data.vocabulary.map(function (w) {
      var li = el("li"), b = el("button", {type: "button", "data-word": w}, w);
      b.addEventListener("click", function () { insertWord(w); });
      li.appendChild(b);
      list.appendChild(li);
      return {word: w, li: li};
    });
    box.appendChild(list);
    function shown() { return items.filter(function (it) { return !it.li.hidden; }); }
    function update() {
      var q = filter.value.trim().toLowerCase();
      items.forEach(function (it) { it.li.hidden = q !== "" && it.word.indexOf(q) < 0; });
      var n = shown().length;
      count.textContent = (q ? n + " of " + data.vocabulary.length + " match \u201c" + q + "\u201d. " : "") +
        (n ? "Press a word to insert it at the caret in Words" + (q ? "; Enter in Find inserts the first." : ".")
           : "No word of the vocabulary contains that.");
    }
    filter.addEventListener("input", update);
    filter.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();                      /* Enter here inserts a word, it does not run the form */
      var first = shown()[0];
      if (first && filter.value.trim()) insertWord(first.word);
    });
    update();
    return {box: box, filter: filter, list: list};
  }
  function insertWord(w) {
    var v = input.value, a = input.selectionStart, b = input.selectionEnd;
    if (typeof a !== "number" || typeof b !== "number") { a = b = v.length; }
    var before = v.slice(0, a), after = v.slice(b);
    var pre = before && !/\s$/.test(before) ? " " : "", post = /^\S/.test(after) ? " " : "";
    input.value = before + pre + w + post + after;
    var caret = (before + pre + w).length;
    input.setSelectionRange(caret, caret);
    input.dispatchEvent(new Event("input", {bubbles: true}));
    var n = (input.value.toLowerCase().match(TINY_WORD) || []).length;
    if (input.getAttribute("aria-invalid") !== "true") {
      say("Inserted \u201c" + w + "\u201d: " + n + " word" + (n === 1 ? "" : "s") + " in Words" +
          (s.loaded ? "; press Run to run them." : "."));
    }
  }
  function needModels(what) {
    if (s.loaded || api.info()) { s.loaded = true; return false; }   /* loaded here, or by another lab or script */
    say(why ? "This view shows the run PyTorch computed. To " + what + ": " + why + "."
            : "To " + what + ", load the models first (the button above).");
    return true;
  }

  function drawCurve() {
    var W = Math.min(columnWidth(root), 520), Hh = 120, padL = 34, padB = 26, m = modelNamed(s.model);
    var svg = fluidSvg(W, Hh, {role: "img", "data-role": "curve-svg"});
    var maxStep = twoLayer[twoLayer.length - 1].step, top = 0.8;
    function x(step) { return padL + (W - padL - 8) * step / maxStep; }
    function y(v) { return 6 + (Hh - padB - 6) * (1 - Math.min(v, top) / top); }
    function best(mm) { return Math.max.apply(null, mm.induction[mm.n_layers - 1]); }
    var pts = twoLayer.map(function (mm) { return x(mm.step) + "," + y(best(mm)); }).join(" ");
    svg.appendChild(sv("line", {x1: padL, x2: W - 8, y1: y(data.uniform_induction), y2: y(data.uniform_induction), "class": "xp-grid", "stroke-dasharray": "4 3"}));
    svg.appendChild(sv("polyline", {points: pts, fill: "none", stroke: "rgb(33,145,140)", "stroke-width": 2}));
    twoLayer.forEach(function (mm) { svg.appendChild(sv("circle", {cx: x(mm.step), cy: y(best(mm)), r: mm.name === s.model ? 5 : 2.5, "class": "xp-point"})); });
    [0, 0.4, 0.8].forEach(function (v) { svg.appendChild(sv("text", {x: padL - 4, y: y(v) + 4, "text-anchor": "end", "class": "ax-small"}, fmt(v, 1))); });
    svg.appendChild(sv("text", {x: W - 8, y: Hh - 6, "text-anchor": "end", "class": "ax-small"}, "training step (" + maxStep + ")"));
    svg.appendChild(sv("text", {x: padL + 4, y: 14, "class": "ax-small"}, "best induction score of the last layer; dashed: uniform"));
    var here = m.control ? "the one-layer control: best induction score " + fmt(best(m), 2)
                         : "step " + m.step + ": best induction score of layer 1 " + fmt(best(m), 2);
    svg.setAttribute("aria-label", "Induction score over training, " + twoLayer.length + " checkpoints; now " + here + " (uniform " + fmt(data.uniform_induction, 3) + ")");
    curve.textContent = "";
    curve.appendChild(svg);
    stepSlider.out.textContent = m.control ? "(control)" : m.step + " of " + maxStep;
  }

  function drawLoss() {
    var T = s.words.length, kinds = copyKinds(s.words), row = el("div", {"class": "xp-tokens"});
    var intact = s.intactLoss, off = Object.keys(s.off).length > 0;
    s.words.forEach(function (w, i) {
      var chip = el("span", {"class": "xp-chip xp-lossword" + (i > 0 && kinds[i - 1] === "same" ? " xp-copyable" : "")});
      chip.appendChild(el("span", null, w));
      var text = i === 0 ? "\u2013" : fmt(s.loss[i - 1], 2);
      chip.appendChild(el("span", {"class": "xp-chip-num"}, text));
      var bar = el("span", {"class": "xp-lossbar"});
      bar.style.width = (i === 0 ? 0 : Math.min(100, 100 * s.loss[i - 1] / 8)) + "%";
      chip.appendChild(bar);
      row.appendChild(chip);
    });
    lossBox.textContent = "";
    lossBox.appendChild(row);
    function mean(list, which) {
      var sum = 0, n = 0;
      kinds.forEach(function (k, i) { if (which(k)) { sum += list[i]; n++; } });
      return n ? {v: sum / n, n: n} : null;
    }
    var copy = mean(s.loss, function (k) { return k === "same"; }), rest = mean(s.loss, function (k) { return k !== "same"; });
    var text = "Loss in nats (ln V = " + fmt(Math.log(data.vocabulary.length), 2) + " for a uniform guess). ";
    text += copy ? "Words copying predicts (" + copy.n + "): mean " + fmt(copy.v, 2) + "; " : "No word here can be predicted by copying (nothing repeats with the same next word); ";
    text += rest ? "the others (" + rest.n + "): mean " + fmt(rest.v, 2) + "." : "";
    if (off && copy) {
      var before = mean(intact, function (k) { return k === "same"; });
      text += " With " + Object.keys(s.off).join(", ") + " switched off (" + s.offMode + "), the copyable words' loss moved by " +
              (copy.v - before.v >= 0 ? "+" : "") + fmt(copy.v - before.v, 2) + " nats.";
    }
    lossReadout.textContent = text;
  }

  function drawHead() {
    var T = s.words.length, m = modelNamed(s.model);
    if (s.layer >= m.n_layers) { s.layer = m.n_layers - 1; layerSelect.value = String(s.layer); }
    var base = (s.layer * H + s.head) * T * T, ratio = window.devicePixelRatio || 1;
    var room = Math.min(110, labelRoom(s.words, 12)), cell = T > 24 ? 14 : 18, W = room + T * cell + 6;
    canvas.width = Math.round(W * ratio); canvas.height = Math.round(W * ratio);
    canvas.style.width = W + "px"; canvas.style.height = W + "px";   /* square cells: never squeezed, the region scrolls */
    canvas._geom = {room: room, cell: cell, W: W};
    var ctx = canvas.getContext("2d"), cs = window.getComputedStyle(mapBox), ink = cs.color || "#222";
    var accent = (window.getComputedStyle(root).getPropertyValue("--xp-query") || "").trim() || "#c0282d";
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, W, W);
    for (var i = 0; i < T; i++) {
      ctx.textAlign = "right"; ctx.textBaseline = "middle"; ctx.font = (i === s.query ? "bold " : "") + "11px sans-serif";
      ctx.fillStyle = i === s.query ? accent : ink;
      ctx.fillText(shortLabel(s.words[i]), room - 4, room + i * cell + cell / 2);
      ctx.save(); ctx.translate(room + i * cell + cell / 2, room - 4); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillStyle = ink; ctx.font = "11px sans-serif"; ctx.fillText(shortLabel(s.words[i]), 0, 0); ctx.restore();
      for (var j = 0; j < T; j++) { ctx.fillStyle = viridis(s.attentions[base + i * T + j]); ctx.fillRect(room + j * cell, room + i * cell, cell, cell); }
    }
    ctx.lineWidth = 2; ctx.strokeStyle = accent; ctx.strokeRect(room + 1, room + s.query * cell + 1, T * cell - 2, cell - 2);
    var row = [], best = 0;
    for (var k = 0; k < T; k++) { row.push(s.attentions[base + s.query * T + k]); if (row[k] > row[best]) best = k; }
    headReadout.textContent = "Head " + s.layer + "." + s.head + " (layer " + s.layer + ", head " + s.head + "; " +
      (m.control ? "the one-layer control" : "step " + m.step) + "): induction score " +
      fmt(m.induction[s.layer][s.head], 2) + " (uniform " + fmt(data.uniform_induction, 3) + "), previous-token score " +
      fmt(m.previous[s.layer][s.head], 2) + " (uniform " + fmt(data.uniform_previous, 3) + "). From \u201c" + s.words[s.query] +
      "\u201d (word " + s.query + ") its largest weight, " + fmt(row[best], 2) + ", is on \u201c" + s.words[best] + "\u201d (word " + best + ").";
    canvas.setAttribute("aria-label", "attention weights of head " + s.layer + "." + s.head + " over " + T + " words; " + headReadout.textContent);
  }

  function drawOffGrid() {
    offGrid.textContent = "";
    for (var l = 0; l < L(); l++) for (var h = 0; h < H; h++) {
      (function (key) {
        var b = el("button", {type: "button", "aria-pressed": s.off[key] ? "true" : "false", "data-role": "off-" + key}, "head " + key);
        b.addEventListener("click", function () {
          if (needModels("switch a head off")) return;
          if (s.off[key]) delete s.off[key]; else s.off[key] = true;
          b.setAttribute("aria-pressed", s.off[key] ? "true" : "false");
          s.table = null;                              /* a table patched with other heads off would be mislabelled */
          rerun();
        });
        offGrid.appendChild(b);
      })(l + "." + h);
    }
  }

  function drawPairControls() {
    posSelect.textContent = "";
    s.words.forEach(function (w, i) { posSelect.appendChild(el("option", {value: String(i)}, i + ": " + w)); });
    var p = s.pair && s.corrupt && s.corrupt.length === s.words.length ? s.pair.position : defaultPosition();
    posSelect.value = String(p);
    wordSelect.value = s.corrupt && s.corrupt.length === s.words.length ? s.corrupt[p] : defaultWord(p);
  }
  /* by default, corrupt the copy target's earlier copy (the token corruption): the word induction would copy */
  function defaultPosition() {
    var tp = api.copyTarget(s.words);
    return tp === null ? Math.max(0, s.words.length - 2) : tp;
  }
  function defaultWord(p) {
    var used = {}; s.words.forEach(function (w) { used[w] = 1; });
    var free = data.vocabulary.filter(function (w) { return !used[w] && /^[a-z]/.test(w); });
    return free.length ? free[Math.floor(seeded(p + 17)() * free.length)] : data.vocabulary[0];
  }
  function corrupted() {
    var c = s.words.slice(), p = parseInt(posSelect.value, 10);
    c[p] = wordSelect.value;
    return c;
  }
  function offNames() { return Object.keys(s.off).sort(); }
  function offEdits() {
    return offNames().map(function (k) { var lh = k.split(".").map(Number); return {layer: lh[0], head: lh[1], mode: s.offMode}; });
  }
  /* what the corruption changed, relative to the copy target at tp */
  function corruptionKind(p, tp) {
    var T = s.words.length;
    if (p === tp) return "You changed the copy target's earlier copy (word " + p + "): the token corruption, after which the model would copy \u201c" +
                         s.corrupt[p] + "\u201d instead.";
    if (p === tp - 1) return "You changed the last word's earlier occurrence (word " + p + "): the match corruption, after which the corrupted " +
                             "sequence has nothing to copy; it asks which heads let the last word find its earlier occurrence.";
    if (p === T - 1) return "You changed the last word itself.";
    return "You changed word " + p + ", neither the match (word " + (tp - 1) + ") nor the copy target (word " + tp + ").";
  }
  function drawPairReadout() {
    pairReadout.removeAttribute("data-copy-problem");
    if (!s.pair) { pairReadout.textContent = "Change one word to build a corrupted copy."; return; }
    var p = s.pair.position, T = s.words.length, last = s.words[T - 1], tp = s.pair.targetPosition;
    if (s.pair.copyProblem) {
      pairReadout.setAttribute("data-copy-problem", "1");
      pairReadout.textContent = "No metric: " + s.pair.copyProblem + ". The lab scores a pair on the word the clean sequence would copy: " +
        "give the last word an earlier occurrence followed by another word (for instance, press \u201cRepeat it\u201d).";
      return;
    }
    var off = s.pair.off || [];
    pairReadout.textContent = "Metric: at the last word, \u201c" + last + "\u201d, the logit of the copy target \u201c" + s.words[tp] +
      "\u201d minus the mean logit over the " + data.vocabulary.length + " words (nats). The copy target is the word that followed \u201c" +
      last + "\u201d where it occurred before (word " + (tp - 1) + ") in the clean sequence; every run of the pair is scored on it. " +
      corruptionKind(p, tp) + " Clean run: " + fmt(s.pair.clean, 2) + " nats; corrupted run: " + fmt(s.pair.corrupted, 2) + " nats." +
      (off.length ? " Heads switched off in both runs (" + s.offMode + "): " + off.join(", ") + "." : "") +
      (api.gapProblem(s.pair.clean, s.pair.corrupted, data.min_gap) ? " The corruption barely moves the metric: there is nothing to patch back." : "");
  }
  function cellColour(v) {
    var t = Math.max(-1, Math.min(1, v)), a = Math.abs(t);
    return t >= 0 ? "rgba(33,145,140," + (0.1 + 0.45 * a).toFixed(2) + ")" : "rgba(200,80,40," + (0.1 + 0.45 * a).toFixed(2) + ")";
  }
  function drawTables() {
    tables.textContent = "";
    if (!s.table) return;
    var t = s.table, T = s.words.length;
    var lead = el("p", {"class": "xp-readout", "data-role": "patch-summary"});
    if (t.copyProblem) {                           /* nothing to copy: no metric, no table */
      lead.textContent = "No patching table: " + t.copyProblem + ".";
      lead.setAttribute("data-copy-problem", "1");
      tables.appendChild(lead);
      return;
    }
    var Lm = t.denoise.heads.length;
    var offText = t.off.length ? "  Heads switched off in every run, the patch sources included (" + s.offMode + "): " + t.off.join(", ") +
      "; their own cells read \u201coff\u201d (a head that is off has nothing to patch)." : "  No head is switched off.";
    function best(tab) {
      var b = {v: -Infinity};
      tab.forEach(function (row, l) { row.forEach(function (v, h) { if (v > b.v) b = {v: v, l: l, h: h}; }); });
      return b;
    }
    var bd = best(t.normalised.denoise.heads), bn = t.normalised.noise.heads;
    if (t.problem) {
      lead.textContent = t.runs + " runs in " + fmt(t.ms, 0) + " ms.  No normalised score: " + t.problem +
        ".  The tables show the metric itself (nats), clean " + fmt(t.clean, 2) + ", corrupted " + fmt(t.corrupted, 2) + "." + offText;
      lead.setAttribute("data-problem", "1");
    } else lead.textContent = t.runs + " runs in " + fmt(t.ms, 0) + " ms.  Normalised scores: 1 = the clean behaviour, 0 = the corrupted one (the share of the gap between them). " +
      (bd.l === undefined ? "Every head is switched off." :
       "Denoising (clean into corrupted: is it sufficient?): head " + bd.l + "." + bd.h + " (layer " + bd.l + ", head " + bd.h +
       ") alone closes the largest share of the gap, " + fmt(bd.v, 2) + "; noising that head (corrupted into clean: is it necessary?) keeps " +
       fmt(bn[bd.l][bd.h], 2) + " of it.") + offText;
    tables.appendChild(lead);
    if (t.rangeProblem) {
      tables.appendChild(el("p", {"class": "xp-readout xp-lab-warning", role: "note", "data-role": "patch-warning"},
                            "Careful: " + t.rangeProblem + "."));
    }
    /* a table in its own sideways-scrolling region; its title sits above the region, so it wraps to the
     * column (a <caption> is as wide as its table and was cut on a phone).  changed: the column of the
     * word the corruption changed, marked with \u25c6 and a frame (not colour alone) and scrolled into view. */
    function table(title, rows, rowLabel, colLabels, role, changed) {
      var titleId = uid + "-" + role + "-title", hasMark = changed !== undefined;
      var titleEl = el("p", {"class": "xp-table-title", id: titleId, "data-role": role + "-title"}, title);
      if (hasMark) {
        titleEl.appendChild(el("span", {"class": "xp-table-note"}, "\u25c6 marks word " + changed + ", \u201c" + s.words[changed] +
          "\u201d, the word the corruption changed" + (colLabels.length > 6 ? "; the table scrolls sideways to the other words." : ".")));
      }
      tables.appendChild(titleEl);
      var wrap = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-labelledby": titleId, "data-role": role});
      var tab = el("table", {"class": "xp-patch", "aria-labelledby": titleId});
      var head = el("tr");
      head.appendChild(el("td", null, ""));                  /* the corner: no header */
      colLabels.forEach(function (c, j) {
        var th = el("th", {scope: "col"}, c);
        if (j === changed) {
          th.className = "xp-changed"; th.setAttribute("data-changed", "1");
          th.insertBefore(el("span", {"aria-hidden": "true"}, "\u25c6 "), th.firstChild);
          th.appendChild(el("span", {"class": "xp-sr"}, " (the changed word)"));
        }
        head.appendChild(th);
      });
      tab.appendChild(head);
      rows.forEach(function (row, i) {
        var tr = el("tr");
        tr.appendChild(el("th", {scope: "row"}, rowLabel(i)));
        row.forEach(function (v, j) {
          var td = el("td", j === changed ? {"class": "xp-changed"} : null, isNaN(v) ? "off" : fmt(v, 2));   /* NaN: a head switched off (its cell is not run) */
          if (!isNaN(v)) td.style.background = cellColour(v);
          tr.appendChild(td);
        });
        tab.appendChild(tr);
      });
      wrap.appendChild(tab);
      tables.appendChild(wrap);
      if (hasMark) {                                 /* centre the changed column in its region (never scrolls the page) */
        var cell = head.cells[changed + 1], box = wrap.getBoundingClientRect(), c = cell.getBoundingClientRect();
        wrap.scrollLeft = Math.max(0, c.left - box.left + wrap.scrollLeft - (wrap.clientWidth - c.width) / 2);
      }
    }
    var heads = []; for (var h = 0; h < H; h++) heads.push("head " + h);
    var pos = s.words.map(function (w, i) { return i + " " + w; });
    /* normalised scores, or the metric itself (nats) when the gap is too small to divide by */
    var shown = t.problem ? {denoise: t.denoise, noise: t.noise} : t.normalised, unit = t.problem ? " (metric, nats)" : " (normalised)";
    table("Heads, denoising" + unit, shown.denoise.heads, function (l) { return "layer " + l; }, heads, "table-den-heads");
    table("Heads, noising" + unit, shown.noise.heads, function (l) { return "layer " + l; }, heads, "table-noi-heads");
    function stream(l) { return l < Lm ? "into layer " + l : "after layer " + (Lm - 1); }
    table("Residual stream entering each layer, one position at a time, denoising" + unit, shown.denoise.resid,
          stream, pos, "table-den-resid", t.position);
    table("Residual stream, one position at a time, noising" + unit, shown.noise.resid, stream, pos, "table-noi-resid", t.position);
  }

  /* the layer menu lists the chosen model's layers only (the one-layer control has layer 0) */
  function fillLayers() {
    var n = L();
    if (layerSelect.options.length !== n) {
      layerSelect.textContent = "";
      for (var l = 0; l < n; l++) layerSelect.appendChild(el("option", {value: String(l)}, String(l)));
    }
    s.layer = Math.min(s.layer, n - 1);
    layerSelect.value = String(s.layer);
  }
  function modelChanged() {
    if (!s.loaded) {                               /* the view shows only the run PyTorch computed */
      s.model = data.model;
      stepSlider.input.value = String(Math.max(0, twoLayer.map(function (m) { return m.name; }).indexOf(data.model)));
      controlBox.input.checked = false;
      fillLayers();
      needModels("run another checkpoint");
      return;
    }
    fillLayers();
    drawCurve();
    drawOffGrid();
    Object.keys(s.off).forEach(function (k) { if (parseInt(k, 10) >= L()) delete s.off[k]; });
    s.table = null;
    rerun();
  }

  var busy = false, again = false;
  function rerun() {
    if (busy) { again = true; return; }
    var words;
    try { words = api.words(input.value); } catch (err) { fieldError(err.message + " (the view keeps the last run)."); return; }
    busy = true;
    var edits = Object.keys(s.off).map(function (k) {
      var lh = k.split(".").map(Number); return {layer: lh[0], head: lh[1], mode: s.offMode};
    });
    var changedWords = words.join(" ") !== s.words.join(" ");
    var jobs = [api.run(words, {checkpoint: s.model}), edits.length ? api.run(words, {checkpoint: s.model, edits: edits}) : null];
    say("Running\u2026");
    Promise.all(jobs).then(function (out) {
      var r = out[1] || out[0];
      s.words = words; s.intactLoss = Array.prototype.slice.call(out[0].loss);
      s.loss = Array.prototype.slice.call(r.loss); s.attentions = r.attentions;
      if (changedWords) { s.query = words.length - 1; s.corrupt = null; s.pair = null; s.table = null; drawPairControls(); drawPairReadout(); }
      s.query = Math.min(s.query, words.length - 1);
      drawLoss(); drawHead(); drawTables();
      say("Ran " + words.length + " words at " + (modelNamed(s.model).control ? "the one-layer control" : "step " + modelNamed(s.model).step) +
          " in " + fmt(r.ms, 1) + " ms." + (edits.length ? " Heads off: " + Object.keys(s.off).join(", ") + " (" + s.offMode + ")." : ""));
      return s.corrupt ? pairMetric() : null;
    }).catch(function (err) { say(err.message + " (the view keeps the last run).", "error"); })
      .then(function () { busy = false; if (again) { again = false; rerun(); } });
  }

  /* the pair's two reference metrics (attnlib.circuit_lab.pair_metric), with the heads switched off */
  function pairMetric() {
    var bad = corrupted(), p = parseInt(posSelect.value, 10), tp = api.copyTarget(s.words), edits = offEdits(), off = offNames();
    if (tp === null) {
      s.corrupt = bad; s.pair = {position: p, targetPosition: null, copyProblem: api.copyProblem(s.words), clean: null, corrupted: null, off: off};
      drawPairReadout();
      return Promise.resolve(null);
    }
    return Promise.all([api.run(s.words, {checkpoint: s.model, edits: edits}), api.run(bad, {checkpoint: s.model, edits: edits})]).then(function (out) {
      var V = data.vocabulary.length, T = s.words.length, target = data.vocabulary.indexOf(s.words[tp]);
      function metric(r) { return api.copyMetric(r.logits, (T - 1) * V, V, target); }
      s.corrupt = bad; s.pair = {position: p, targetPosition: tp, copyProblem: null, clean: metric(out[0]), corrupted: metric(out[1]), off: off};
      drawPairReadout();
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (needModels("run your own words")) return;
    rerun();
  });
  repeatButton.addEventListener("click", function () {
    var w;
    try { w = api.words(input.value); } catch (err) { fieldError(err.message); return; }
    var out = w.concat(w).slice(0, data.max_len);
    input.value = out.join(" ");
    say("Repeated: " + out.length + " words" + (w.length * 2 > data.max_len ? " (cut at the model's " + data.max_len + ")" : "") +
        (s.loaded ? "." : ". Load the models to run it."));
    if (s.loaded) rerun();
  });
  randomButton.addEventListener("click", function () {
    var rand = seeded(s.seed), pool = data.vocabulary.filter(function (w) { return /^[a-z]/.test(w); }), out = [];
    while (out.length < 12) { var w = pool[Math.floor(rand() * pool.length)]; if (out.indexOf(w) < 0) out.push(w); }
    input.value = out.join(" ");
    say("12 distinct random words (seed " + s.seed + "): press \u201cRepeat it\u201d to give the model something to copy.");
    s.seed++;
    if (s.loaded) rerun();
  });
  [posSelect, wordSelect].forEach(function (sel) {
    sel.addEventListener("change", function () {
      if (needModels("measure a corrupted copy")) return;
      if (wordSelect.value === s.words[parseInt(posSelect.value, 10)]) { say("That is the same word: pick another to corrupt the sequence."); return; }
      s.table = null; drawTables();
      pairMetric().catch(function (err) { say(err.message, "error"); });
    });
  });
  tableButton.addEventListener("click", function () {
    if (needModels("patch")) return;
    var bad = corrupted();
    if (bad.join(" ") === s.words.join(" ")) { say("Pick a different word for the corrupted copy first."); return; }
    var off = offNames();
    say("Patching every head and every position" + (off.length ? " with heads " + off.join(", ") + " off" : "") + "\u2026");
    api.patch(s.words, bad, {checkpoint: s.model, edits: offEdits()}).then(function (t) {
      s.table = t; s.corrupt = bad;
      s.pair = {position: t.position, targetPosition: t.targetPosition, copyProblem: t.copyProblem, clean: t.clean, corrupted: t.corrupted, off: t.off};
      drawPairReadout(); drawTables();
      say(t.copyProblem ? "Not patched: " + t.copyProblem + "." :
          "Patched: " + t.runs + " runs in " + fmt(t.ms, 0) + " ms" + (t.off.length ? ", heads " + t.off.join(", ") + " off in every run." : "."));
    }).catch(function (err) { say(err.message + " (the view keeps the last result).", "error"); });
  });
  loadButton.addEventListener("click", function () {
    if (loadButton.getAttribute("aria-disabled") === "true") return;
    loadButton.setAttribute("aria-disabled", "true");
    progress.hidden = false;
    say("Loading the models\u2026");
    var t0 = performance.now();
    api.load(function (loaded, total) { progress.value = total ? loaded / total : 0; }).then(function () {
      s.loaded = true;
      var hadFocus = document.activeElement === loadButton || document.activeElement === document.body || !document.activeElement;
      loadButton.hidden = true; progress.hidden = true;
      say("Loaded in " + fmt((performance.now() - t0) / 1000, 1) + " s. Type words, pick a step, switch heads off, patch.");
      if (hadFocus) status.focus();                /* the button is gone: the next Tab goes on to Words, not to the page's top */
      root.setAttribute("data-loaded", "1");
      rerun();
    }, function (err) {
      loadButton.removeAttribute("aria-disabled");
      progress.hidden = true;
      say("Could not load the models: " + err.message + ".", "error");
    });
  });

  if (why) {
    loadButton.hidden = true;
    say("Showing the run PyTorch computed (" + s.model + "). To try other words here: " + why + ".");
    [runButton, repeatButton, randomButton, tableButton].forEach(function (b) { b.hidden = true; });
  } else {
    say("Showing the run PyTorch computed when this page was built. Load the models to run your own words.");
  }
  drawCurve(); drawLoss(); drawHead(); drawOffGrid(); drawPairControls(); drawPairReadout();
}
