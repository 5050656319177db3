/* Chapter 10's language-model lab: SmolLM2-135M (the course's 4-bit file) in the reader's page.
 * The figure opens on a run PyTorch computed when the book was built; "Load" downloads the model
 * into a Web Worker (_static/lm/worker.js: onnxruntime-web, nothing from another host), and then
 * the reader types any prompt, reads any head, switches heads off and patches every head and the
 * residual stream for a clean/corrupted pair of their own, with progress and Cancel.
 *
 * ---- window.attnlibLM ------------------------------------------------------------------------
 *   attnlibLM.available()               -> "" when the model can run here, else why not
 *   await attnlibLM.load(onProgress)    -> lm.json's description (sizes, files, check figures)
 *   await attnlibLM.tokenize(text, what?) -> {ids, tokens}: the kernel's token ids (no BOS: the
 *                                          model reads text as is), each token's text
 *   await attnlibLM.run(text, {edits})  -> {tokens, ids, shape: [L, H, T, T], logits: Float32Array
 *                                          (T*V), attentions: Float32Array (L*H*T*T), ms}
 *       edits: attnlib.edits's spec [{layer, head (null: the residual stream entering that layer),
 *       mode: "zero" | "mean" | "patch", source?, position?}], read as the kernel reads them
 *       (edits.js); a patch's source is the text (or a run() result) of the same token length; a
 *       mean takes no source (the kernel's language_model.reference_means)
 *   await attnlibLM.patch(clean, corrupted, {answers: [" Mary", " John"], layers, sites, directions,
 *                         onProgress}) ->
 *       {position, clean, corrupted (the metric logit(answers[0]) - logit(answers[1]) at the last
 *        position, nats), layers, denoise: {heads: layers x H, resid: layers x T}, noise,
 *        normalised: {denoise, noise} (NaN where problem says why), problem, runs, ms}
 *       the kernel's language_model.patch_sweep (equal within 1e-3; the build checks the graphs);
 *       sites ["heads", "resid"] and directions ["denoise", "noise"] choose what is computed
 *   await attnlibLM.decode(ids)         -> [text]: each token id's text
 *   attnlibLM.cancel()                  -> stops a running patch (it rejects with "cancelled")
 */

function lmApi(known) {
  if (window.attnlibLM) return window.attnlibLM;
  var client = workerClient("lm/worker.js", "the language model",
                            "the model runs in the published book; in a notebook, change the cell's prompt and run it again");
  var send = client.send, load = client.load;
  function described() { return client.info() || known; }
  function text(value, what) {
    if (typeof value !== "string") throw new Error(what + " must be text, got " + (value === null ? "null" : typeof value));
    if (!value.trim()) throw new Error(what + " is empty: type a prompt, e.g. \u201c" + known.clean + "\u201d");
    return value;
  }
  function tokenize(value, what) {
    var t;
    try { t = text(value, what || "the prompt"); } catch (err) { return Promise.reject(err); }
    return load().then(function () { return send({cmd: "tokenize", text: t}); }).then(function (msg) {
      var r = msg.result, max = described().max_tokens;
      if (r.ids.length > max) throw new Error((what || "the prompt") + " is " + r.ids.length + " tokens; the page's model reads at most " + max);
      return r;
    });
  }
  function wire(editsIn) {
    if (editsIn === undefined || editsIn === null) return Promise.resolve([]);
    if (!Array.isArray(editsIn)) return Promise.reject(new Error("edits must be a list, e.g. [{layer: 23, head: 3, mode: \"zero\"}]"));
    return Promise.all(editsIn.map(function (e) {
      if (!e || typeof e !== "object" || e.source === undefined || e.source === null) return Promise.resolve(e);
      var src = typeof e.source === "string" ? tokenize(e.source, "a patch's source")
              : Array.isArray(e.source.ids) ? Promise.resolve({ids: e.source.ids}) : null;
      if (!src) return Promise.reject(new Error("a patch's source is the run to patch from: its text or a result of run()"));
      return src.then(function (r) {
        var out = {};
        Object.keys(e).forEach(function (k) { out[k] = e[k]; });
        out.source = {tokens: r.ids};
        return out;
      });
    }));
  }
  function run(value, options) {
    var opts = options || {}, tok;
    return tokenize(value).then(function (r) { tok = r; return wire(opts.edits); }).then(function (edits) {
      return send({cmd: "run", tokens: tok.ids, edits: edits});
    }).then(function (msg) {
      var r = msg.result;
      return {tokens: tok.tokens, ids: tok.ids, shape: [r.L, r.H, r.T, r.T], logits: r.logits, attentions: r.pattern, ms: r.ms};
    });
  }
  /* a text or a list of texts as Python's repr writes it (the kernel's messages quote that way) */
  function pyRepr(x) {
    if (Array.isArray(x)) return "[" + x.map(pyRepr).join(", ") + "]";
    var q = x.indexOf("'") >= 0 && x.indexOf('"') < 0 ? '"' : "'";
    return q + x.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\t/g, "\\t").split(q).join("\\" + q) + q;
  }
  /* language_model.answer_token: one token, with the kernel's message when it is not */
  function answer(value, tokens) {
    if (tokens.ids.length !== 1) {
      throw new Error(pyRepr(value) + " is " + tokens.ids.length + " tokens (" + pyRepr(tokens.tokens) +
                      "); an answer must be one token: try it with a leading space, or another word");
    }
    return tokens.ids[0];
  }
  function patch(clean, corrupted, options) {
    var opts = options || {}, answers = opts.answers, a, b, good, bad;
    if (!Array.isArray(answers) || answers.length !== 2) {
      return Promise.reject(new Error("answers must be two texts, e.g. [\" Mary\", \" John\"]"));
    }
    return Promise.all([tokenize(clean, "the clean prompt"), tokenize(corrupted, "the corrupted prompt"),
                        tokenize(answers[0], "the first answer"), tokenize(answers[1], "the second answer")]).then(function (r) {
      a = r[0]; b = r[1];
      good = answer(answers[0], r[2]); bad = answer(answers[1], r[3]);
      if (a.ids.length !== b.ids.length) {
        throw new Error("the clean and corrupted prompts must have the same number of tokens: " + a.ids.length + " and " +
                        b.ids.length + " (" + pyRepr(a.tokens) + " / " + pyRepr(b.tokens) + ")");
      }
      var L = described().n_layers;
      var layers = opts.layers === undefined ? null : opts.layers;
      if (layers !== null && !(Array.isArray(layers) && layers.every(function (l) { return Number.isInteger(l) && l >= 0 && l <= L; }))) {
        throw new Error("layers must be a list of layer numbers 0.." + L);
      }
      var sites = opts.sites || ["heads", "resid"], directions = opts.directions || ["denoise", "noise"];
      if (!sites.every(function (x) { return x === "heads" || x === "resid"; }) || !sites.length) throw new Error("sites must be \"heads\", \"resid\" or both");
      if (!directions.every(function (x) { return x === "denoise" || x === "noise"; }) || !directions.length) throw new Error("directions must be \"denoise\", \"noise\" or both");
      return send({cmd: "patch", clean: a.ids, corrupted: b.ids, good: good, bad: bad, layers: layers || undefined,
                   sites: sites, directions: directions}, opts.onProgress);
    }).then(function (msg) {
      var r = msg.result, problem = gapProblem(r.clean, r.corrupted, described().min_gap);
      function one(x) { return problem ? NaN : (x - r.corrupted) / (r.clean - r.corrupted); }
      function norm(t) {
        var out = {};
        Object.keys(t).forEach(function (k) { out[k] = t[k].map(function (row) { return row.map(one); }); });
        return out;
      }
      r.normalised = {};
      ["denoise", "noise"].forEach(function (d) { if (r[d]) r.normalised[d] = norm(r[d]); });
      r.problem = problem;
      r.tokens = a.tokens;
      return r;
    });
  }
  function cancel() { return client.info() ? send({cmd: "cancel"}) : Promise.resolve(null); }
  /* token ids -> each token's text */
  function decode(ids) {
    return load().then(function () { return send({cmd: "decode", ids: ids}); }).then(function (msg) { return msg.result.texts; });
  }
  window.attnlibLM = {available: client.available, load: load, info: client.info, tokenize: function (t, what) { return tokenize(t, what); },
                      decode: decode, run: run, patch: patch, cancel: cancel};
  return window.attnlibLM;
}

/* A matrix as coloured cells on a canvas (viridis, or a blue-red scale for [-1, 1] scores), with
 * row and column labels; `rows` x `cols` values in `get(i, j)`. */
function drawCells(canvas, rows, cols, rowLabels, colLabels, get, diverging, ink) {
  rowLabels = rowLabels.map(String); colLabels = colLabels.map(String);      /* layer and head numbers too */
  var ratio = window.devicePixelRatio || 1, room = Math.min(110, labelRoom(rowLabels.concat(colLabels), 12));
  var cell = Math.max(8, Math.min(18, Math.floor(560 / Math.max(rows, cols))));
  var W = room + cols * cell + 6, Hh = room + rows * cell + 6;
  canvas.width = Math.round(W * ratio); canvas.height = Math.round(Hh * ratio);
  canvas.style.width = W + "px"; canvas.style.height = Hh + "px";
  var ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, W, Hh);
  ctx.font = "11px sans-serif";
  ctx.fillStyle = ink;
  for (var i = 0; i < rows; i++) {
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText(shortLabel(String(rowLabels[i])), room - 4, room + i * cell + cell / 2);
  }
  for (var j = 0; j < cols; j++) {
    ctx.save(); ctx.translate(room + j * cell + cell / 2, room - 4); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left"; ctx.textBaseline = "middle"; ctx.fillText(shortLabel(String(colLabels[j])), 0, 0); ctx.restore();
  }
  for (i = 0; i < rows; i++) {
    for (j = 0; j < cols; j++) {
      var v = get(i, j);
      if (!isFinite(v)) ctx.fillStyle = "#bdbdbd";
      else if (diverging) {
        var c = Math.max(-1, Math.min(1, v)), k = Math.round(255 * (1 - Math.abs(c)));
        ctx.fillStyle = c >= 0 ? "rgb(" + k + "," + k + ",255)" : "rgb(255," + k + "," + k + ")";
      } else ctx.fillStyle = viridis(v);
      ctx.fillRect(room + j * cell, room + i * cell, cell, cell);
    }
  }
}

function view(root, data, uid) {
  var api = lmApi(data);
  var L = data.n_layers, H = data.n_heads;
  var s = {tokens: data.tokens, attentions: data.pattern_all || null, pattern: data.pattern, layer: data.layer, head: data.head,
           top: data.top, off: {}, loaded: false, busy: false};
  var why = api.available();
  var status = el("p", {"class": "xp-hint", role: "status", "aria-live": "polite", "aria-atomic": "true", "data-role": "status"});
  var meta = document.querySelector('meta[name="attnlib-lm-bytes"]');
  var mb = meta ? (Number(meta.getAttribute("content")) / 1e6).toFixed(0) : null;
  var loadRow = el("div", {"class": "xp-controls"});
  var loadButton = el("button", {type: "button", "data-role": "load"},
                      "Load the language model in this page" + (mb ? " (" + mb + " MB, once)" : ""));
  var progress = el("progress", {max: "1", value: "0", "data-role": "progress", hidden: "hidden", "aria-label": "progress"});
  loadRow.appendChild(loadButton);
  loadRow.appendChild(progress);
  root.appendChild(loadRow);
  root.appendChild(status);
  function say(text) { status.textContent = text; }

  /* the prompt */
  var form = el("form", {"class": "xp-lab-form", "data-role": "form"});
  var wrap = el("div", {"class": "xp-control xp-text"});
  wrap.appendChild(el("label", {"for": uid + "-prompt"}, "Prompt"));
  var input = el("input", {type: "text", id: uid + "-prompt", "data-role": "prompt", maxlength: "2000", autocomplete: "off",
                           spellcheck: "false"});
  input.value = data.clean;
  wrap.appendChild(input);
  form.appendChild(wrap);
  var buttons = el("div", {"class": "xp-controls"});
  var runButton = el("button", {type: "submit", "data-role": "run"}, "Run");
  buttons.appendChild(runButton);
  form.appendChild(buttons);
  root.appendChild(form);
  var topReadout = el("p", {"class": "xp-readout", "data-role": "top"});
  root.appendChild(topReadout);

  /* a head's pattern, and switching it off */
  var pickers = el("div", {"class": "xp-controls"});
  indexPicker(pickers, uid, "layer", "layer ", L, s.layer, function (v) { s.layer = v; drawHead(); });
  indexPicker(pickers, uid, "head", "head ", H, s.head, function (v) { s.head = v; drawHead(); });
  var offBox = checkbox(uid, "off", "switch this head off (zero ablation)", false, function (on) {
    if (needModel("switch a head off")) { offBox.input.checked = false; return; }
    var key = s.layer + "." + s.head;
    if (on) s.off[key] = true; else delete s.off[key];
    rerun();
  });
  pickers.appendChild(offBox.wrap);
  root.appendChild(pickers);
  var headReadout = el("p", {"class": "xp-readout", "data-role": "head-readout"});
  root.appendChild(headReadout);
  var mapBox = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-label": "attention weights of the selected head", "data-role": "map"});
  var canvas = el("canvas", {role: "img", "aria-label": "attention weights"});
  mapBox.appendChild(canvas);
  root.appendChild(mapBox);

  /* patching */
  var patchBox = el("fieldset", {"class": "xp-modes", "data-role": "patch"});
  patchBox.appendChild(el("legend", null, "Patch every head: a clean prompt and a corrupted one, one token changed"));
  function field(name, label, value) {
    var w = el("div", {"class": "xp-control xp-text"});
    w.appendChild(el("label", {"for": uid + "-" + name}, label));
    var i = el("input", {type: "text", id: uid + "-" + name, "data-role": name, maxlength: "2000", autocomplete: "off", spellcheck: "false"});
    i.value = value;
    w.appendChild(i);
    patchBox.appendChild(w);
    return i;
  }
  var cleanIn = field("clean", "Clean prompt", data.clean);
  var corruptIn = field("corrupted", "Corrupted prompt", data.corrupted);
  var goodIn = field("good", "Answer of the clean prompt (one token, with its leading space)", data.answers[0]);
  var badIn = field("bad", "Answer of the corrupted prompt", data.answers[1]);
  var patchRow = el("div", {"class": "xp-controls"});
  var patchButton = el("button", {type: "button", "data-role": "patch-run"}, "Patch every head and the stream");
  var cancelButton = el("button", {type: "button", "data-role": "patch-cancel", disabled: "disabled"}, "Cancel");
  var patchProgress = el("progress", {max: "1", value: "0", "data-role": "patch-progress", hidden: "hidden", "aria-label": "patching progress"});
  [patchButton, cancelButton, patchProgress].forEach(function (b) { patchRow.appendChild(b); });
  patchBox.appendChild(patchRow);
  var patchReadout = el("p", {"class": "xp-readout", "data-role": "patch-readout"});
  patchBox.appendChild(patchReadout);
  var tables = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-label": "patching scores", "data-role": "patch-tables"});
  patchBox.appendChild(tables);
  root.appendChild(patchBox);

  function needModel(what) {
    if (s.loaded || api.info()) { s.loaded = true; return false; }
    say(why ? "This view shows the run PyTorch computed. To " + what + ": " + why + "."
            : "To " + what + ", load the model first (the button above).");
    return true;
  }
  function ink() { return window.getComputedStyle(mapBox).color || "#222"; }

  function drawTop() {
    topReadout.textContent = "Next token: " + s.top.map(function (p) { return "\u201c" + p[0] + "\u201d " + fmt(p[1], 3); }).join(", ") +
      (Object.keys(s.off).length ? " (heads off: " + Object.keys(s.off).join(", ") + ")" : "");
  }
  function drawHead() {
    var T = s.tokens.length, get;
    if (s.attentions) { var base = (s.layer * H + s.head) * T * T; get = function (i, j) { return s.attentions[base + i * T + j]; }; }
    else if (s.layer === data.layer && s.head === data.head) get = function (i, j) { return s.pattern[i][j]; };
    else {
      headReadout.textContent = "This view holds head " + data.layer + "." + data.head + " of the run PyTorch computed; load the model to read any other head.";
      canvas.setAttribute("aria-label", headReadout.textContent);
      return;
    }
    drawCells(canvas, T, T, s.tokens, s.tokens, function (i, j) { return j > i ? NaN : get(i, j); }, false, ink());
    var best = 0;
    for (var k = 0; k < T; k++) if (get(T - 1, k) > get(T - 1, best)) best = k;
    headReadout.textContent = "Head " + s.layer + "." + s.head + ": from the last token, \u201c" + s.tokens[T - 1] + "\u201d, its largest weight, " +
      fmt(get(T - 1, best), 2) + ", is on \u201c" + s.tokens[best] + "\u201d (token " + best + "); on the first token " + fmt(get(T - 1, 0), 2) + ".";
    canvas.setAttribute("aria-label", "attention weights of head " + s.layer + "." + s.head + " over " + T + " tokens; " + headReadout.textContent);
    offBox.input.checked = !!s.off[s.layer + "." + s.head];
  }
  function topOf(logits, T, V) {
    var base = (T - 1) * V, mx = -Infinity, sum = 0, v;
    for (v = 0; v < V; v++) if (logits[base + v] > mx) mx = logits[base + v];
    for (v = 0; v < V; v++) sum += Math.exp(logits[base + v] - mx);
    var best = [];
    for (v = 0; v < V; v++) {
      var p = Math.exp(logits[base + v] - mx) / sum;
      if (best.length < 5 || p > best[4][1]) { best.push([v, p]); best.sort(function (a, b) { return b[1] - a[1]; }); best = best.slice(0, 5); }
    }
    return best;
  }
  function rerun() {
    if (needModel("run a prompt") || s.busy) return;
    var prompt = input.value, edits = Object.keys(s.off).map(function (k) {
      var p = k.split(".");
      return {layer: +p[0], head: +p[1], mode: "zero"};
    });
    s.busy = true;
    say("Running\u2026");
    api.run(prompt, {edits: edits}).then(function (r) {
      var best = topOf(r.logits, r.tokens.length, r.logits.length / r.tokens.length);
      s.tokens = r.tokens; s.attentions = r.attentions;
      return api.decode(best.map(function (p) { return p[0]; })).then(function (texts) {
        s.top = best.map(function (p, i) { return [texts[i], p[1]]; });
        drawTop(); drawHead();
        say("Ran " + r.tokens.length + " tokens in " + fmt(r.ms / 1000, 2) + " s.");
      });
    }).catch(function (err) { say(err.message + " The last result is kept."); })
      .then(function () { s.busy = false; });
  }

  function showPatch(r) {
    var n = r.normalised, T = r.tokens.length, hl = r.layers.filter(function (l) { return l < L; });
    tables.textContent = "";
    [["denoise", "denoising each head (sufficiency)"], ["noise", "noising each head (necessity)"]].forEach(function (d) {
      tables.appendChild(el("p", {"class": "xp-hint"}, d[1] + ": rows are layers, columns heads; blue 1 = the clean behaviour"));
      var c = el("canvas", {role: "img", "data-role": "patch-" + d[0]});
      drawCells(c, hl.length, H, hl, Array.from({length: H}, function (_, h) { return h; }),
                function (i, j) { return n[d[0]].heads[i][j]; }, true, ink());
      c.setAttribute("aria-label", d[1] + ", " + hl.length + " layers by " + H + " heads");
      tables.appendChild(c);
    });
    tables.appendChild(el("p", {"class": "xp-hint"}, "denoising the residual stream: rows are the stream entering each layer, columns the tokens"));
    var c2 = el("canvas", {role: "img", "data-role": "patch-resid"});
    drawCells(c2, r.layers.length, T, r.layers, r.tokens, function (i, j) { return n.denoise.resid[i][j]; }, true, ink());
    c2.setAttribute("aria-label", "denoising the residual stream, " + r.layers.length + " layers by " + T + " tokens");
    tables.appendChild(c2);
    function best(t) {
      var all = [];
      t.forEach(function (row, i) { row.forEach(function (v, h) { all.push([hl[i] + "." + h, v]); }); });
      return all.sort(function (a, b) { return b[1] - a[1]; }).slice(0, 3).map(function (p) { return p[0] + " (" + fmt(p[1], 2) + ")"; }).join(", ");
    }
    patchReadout.textContent = "Metric (logit difference at the last token): clean " + fmt(r.clean, 2) + ", corrupted " + fmt(r.corrupted, 2) +
      " nats; " + r.runs + " runs in " + fmt(r.ms / 1000, 1) + " s. " +
      (r.problem ? "No normalised score: " + r.problem + "." : "Largest denoising scores: " + best(n.denoise.heads) + ".");
  }
  function patchNow() {
    if (needModel("patch") || s.busy) return;
    s.busy = true;
    patchButton.disabled = true; cancelButton.disabled = false;
    patchProgress.hidden = false; patchProgress.value = 0;
    say("Patching\u2026");
    api.patch(cleanIn.value, corruptIn.value, {answers: [goodIn.value, badIn.value], onProgress: function (done, total) {
      patchProgress.max = total; patchProgress.value = done;
    }}).then(function (r) { showPatch(r); say("Patched " + r.runs + " variants."); })
      .catch(function (err) { say(err.message === "cancelled" ? "Cancelled; the last result is kept." : err.message + " The last result is kept."); })
      .then(function () { s.busy = false; patchButton.disabled = false; cancelButton.disabled = true; patchProgress.hidden = true; });
  }

  loadButton.addEventListener("click", function () {
    if (why) { say(why + "."); return; }
    loadButton.disabled = true; progress.hidden = false;
    say("Downloading the model\u2026");
    api.load(function (loaded, total) { progress.max = total || 1; progress.value = loaded; }).then(function (info) {
      s.loaded = true; progress.hidden = true;
      root.setAttribute("data-loaded", "1");
      say("The model is loaded (" + (info.bytes / 1e6).toFixed(0) + " MB, kept by your browser for later visits).");
      rerun();
    }).catch(function (err) { loadButton.disabled = false; progress.hidden = true; say("The model could not load: " + err.message); });
  });
  form.addEventListener("submit", function (event) { event.preventDefault(); rerun(); });
  patchButton.addEventListener("click", patchNow);
  cancelButton.addEventListener("click", function () { api.cancel(); });
  drawTop();
  drawHead();
  say(why ? "This view shows the run PyTorch computed when the book was built. " + why + "." : "");
}
