/* Chapter 9: the model lab.  The course's pretrained encoder on the reader's own sentences:
 * any layer and head as a heatmap, the baselines beside it, a minimal pair side by side, and
 * a head switched off against the 72-head reference scale.
 *
 * Before the reader loads the model, the view shows the runs PyTorch computed when the page
 * was built (attnlib.encoder.run); in a notebook that is all it shows (change the sentence in
 * the cell and run it again).  In the published book, "Load the model" starts
 * _static/model/worker.js (onnxruntime-web in a Web Worker, nothing from another host) and
 * defines window.attnlibModel (documented below), which tests and instructors may call.
 *
 * data: {n_layers, n_heads, layer, head, mode ("one" | "minimal" | "pair"), textA, textB,
 *        runs: [{tokens, typeIds, sentenceBStart, attentions: flat L*H*T*T}] (1 or 2),
 *        ablation: {text, change: flat L*H sentence-vector cosine distances} or null,
 *        offset_share: {offsets, values: flat L*H*len(offsets) (offsetShare over the reference
 *        sentences, each at its own length), n_texts}, close_call} */

/* ---- window.attnlibModel: one worker per page, shared by every lab on it ----------------
 *   attnlibModel.available()          -> "" when the model can run here, else why not
 *   await attnlibModel.load(onProgress) -> model.json's description ({n_layers, n_heads, files, check...})
 *   await attnlibModel.run(textA, textB?, {edits} or {batch}?) ->
 *       edits: attnlib.edits's spec for one run ([{layer, head, mode: "zero"}], whole heads);
 *       batch: several runs of the same text in one call, a list of such lists
 *       {tokens, typeIds, sentenceBStart, shape: [L, H, T, T], attentions: Float32Array
 *        (row-major: layer, head, query, key; the first input of the batch), batch,
 *        all: Float32Array (every input of the batch), hidden: Float32Array (B, L+1, T, d_model),
 *        dModel, ms}
 */
function modelApi() {
  if (window.attnlibModel) return window.attnlibModel;
  var client = workerClient("model/worker.js", "the model",
                            "the in-page model runs in the published book, not in a notebook: edit the sentences in the cell and run it again");
  var available = client.available, send = client.send, load = client.load;
  function run(textA, textB, options) {
    if (typeof textA !== "string") return Promise.reject(new Error("run(textA, textB?): textA must be a string"));
    if (textB !== undefined && textB !== null && typeof textB !== "string") {
      return Promise.reject(new Error("run(textA, textB?): textB must be a string or null"));
    }
    var batch = options && options.batch ? options.batch : options && options.edits ? [options.edits] : null;
    return load().then(function () {
      return send({cmd: "run", textA: textA, textB: textB === undefined ? null : textB, batch: batch});
    }).then(function (msg) {
      var r = msg.result, per = r.shape[0] * r.shape[1] * r.shape[2] * r.shape[3];
      r.all = r.attentions;
      r.attentions = r.attentions.subarray(0, per);
      return r;
    });
  }
  window.attnlibModel = {available: available, load: load, run: run, info: client.info};
  return window.attnlibModel;
}

/* Helpers on flat (L, H, T, T) weights (a Float32Array: the worker's, or the build's converted
 * once).  A head's rows are views into it, never copies: at 509 tokens a copy is 259,081 numbers. */
function headRows(flat, L, H, T, layer, head) {
  var rows = [], base = (layer * H + head) * T * T;
  for (var i = 0; i < T; i++) rows.push(flat.subarray(base + i * T, base + (i + 1) * T));
  return rows;
}
var SPECIAL = {"[CLS]": 1, "[SEP]": 1, "[PAD]": 1};
/* The offset preference of one head at one offset: the mean, over every query i whose key
 * j = i + offset is in the text (both ordinary tokens, not [CLS], [SEP] or [PAD]), of
 *     (A[i, j] - 1/T) / (1 - 1/T),
 * where T counts every token of the text.  0 is the uniform weight 1/T (a head that ignores its
 * input), 1 is all of the query's weight on that key, and the least is -1/(T - 1) (no weight
 * there).  Unlike T * A[i, j] (the lift, which grows with T), its two reference points do not
 * depend on the sentence's length, so a 13-token sentence compares with the reference sentences.
 * Python: attnlib.explorables._offset_share_sums.  null when no pair exists. */
function offsetShare(rows, tokens, offset) {
  var T = tokens.length, sum = 0, n = 0, u = 1 / T;
  for (var i = 0; i < T; i++) {
    var j = i + offset;
    if (j < 0 || j >= T || SPECIAL[tokens[i]] || SPECIAL[tokens[j]]) continue;
    sum += (rows[i][j] - u) / (1 - u); n++;
  }
  return n ? sum / n : null;
}
function argmax(row) { var k = 0; for (var j = 1; j < row.length; j++) if (row[j] > row[k]) k = j; return k; }
/* The strongest key of a row, its weight and its lead over the runner-up (attnlib.exercises.core.strongest). */
function strongestKey(row) {
  var k = argmax(row), second = null;
  for (var j = 0; j < row.length; j++) if (j !== k && (second === null || row[j] > second)) second = row[j];
  return {k: k, w: row[k], margin: row[k] - (second === null ? 0 : second)};
}
/* The n keys with the largest weights, leaving out weights under 0.005 (they round to 0.00)
 * except the first. */
function topKeys(row, tokens, n) {
  var idx = [];
  for (var j = 0; j < row.length; j++) idx.push(j);
  idx.sort(function (a, b) { return row[b] - row[a]; });
  return idx.slice(0, n).filter(function (j, k) { return k === 0 || row[j] >= 0.005; })
            .map(function (j) { return {j: j, token: tokens[j], w: row[j]}; });
}
/* Longest common subsequence of two token lists: the aligned positions [[i, i2], ...], the same
 * pairs as attnlib.exercises.core.align_tokens (the grader's rule).  Its walk from the front
 * matches a common prefix position by position, so the prefix is matched first and the table
 * (one flat array) covers only the rest: for a minimal pair of 509 tokens that differ near the
 * end, a few cells instead of 260,000. */
function alignTokens(a, b) {
  var n = a.length, m = b.length, p = 0, out = [], i, j;
  while (p < n && p < m && a[p] === b[p]) { out.push([p, p]); p++; }
  var w = m - p + 1, L = new Int32Array((n - p + 1) * w);    /* L[(i - p) * w + (j - p)]: LCS of a[i:], b[j:] */
  for (i = n - 1; i >= p; i--) for (j = m - 1; j >= p; j--) {
    var at = (i - p) * w + (j - p);
    L[at] = a[i] === b[j] ? L[at + w + 1] + 1 : Math.max(L[at + w], L[at + 1]);
  }
  i = p; j = p;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([i, j]); i++; j++; }
    else if (L[(i + 1 - p) * w + (j - p)] >= L[(i - p) * w + (j + 1 - p)]) i++; else j++;
  }
  return out;
}
/* The query the readout opens on after a run: in a minimal pair (two runs), the first token of
 * A that the alignment leaves unmatched (the word that differs); else the first content word,
 * that is the first token that starts a word, is not [CLS]/[SEP]/[PAD] nor punctuation, and is
 * not one of a few function words (the, a, of, ...); else the first ordinary token; else 0.
 * Position 1 (usually "the") read "looks most at [CLS] 1.000" and taught nothing (issue 45). */
var FUNCTION_WORDS = {"the": 1, "a": 1, "an": 1, "and": 1, "or": 1, "but": 1, "of": 1, "to": 1, "in": 1,
                      "on": 1, "at": 1, "for": 1, "with": 1, "by": 1, "from": 1, "as": 1, "is": 1,
                      "are": 1, "was": 1, "were": 1, "be": 1, "been": 1, "this": 1, "that": 1};
function ordinaryToken(t) { return !SPECIAL[t] && /[\p{L}\p{N}]/u.test(t); }   /* a letter or digit: not punctuation */
function openingQuery(runs) {
  var A = runs[0].tokens, i;
  if (runs.length > 1) {
    var matched = {}, al = alignTokens(A, runs[1].tokens);
    for (i = 0; i < al.length; i++) matched[al[i][0]] = 1;
    for (i = 0; i < A.length; i++) if (!matched[i] && ordinaryToken(A[i])) return A[i].slice(0, 2) === "##" ? wordStart(A, i) : i;
  }
  for (i = 0; i < A.length; i++) {
    if (ordinaryToken(A[i]) && A[i].slice(0, 2) !== "##" && !FUNCTION_WORDS[A[i].toLowerCase()]) return i;
  }
  for (i = 0; i < A.length; i++) if (ordinaryToken(A[i])) return i;
  return 0;
}
function wordStart(tokens, i) { while (i > 0 && tokens[i].slice(0, 2) === "##") i--; return i; }
/* A token's counterpart across a minimal pair: its aligned partner, or, for a word swapped for
 * another (an unmatched stretch of A between two aligned anchors facing an unmatched stretch of B
 * of the same length), the token in its place: "cat" in A faces "idea" in B.  null otherwise
 * (a word only one sentence has).  from = 0: i is in A, from = 1: i is in B. */
function counterpart(al, i, from, nA, nB) {
  var to = 1 - from, n = [nA, nB], prev = [-1, -1], next = [n[0], n[1]];
  for (var k = 0; k < al.length; k++) {
    if (al[k][from] === i) return al[k][to];
    if (al[k][from] < i) prev = al[k]; else { next = al[k]; break; }
  }
  return next[from] - prev[from] === next[to] - prev[to] ? prev[to] + (i - prev[from]) : null;
}
function cosineDistance(x, y) {
  var dot = 0, nx = 0, ny = 0;
  for (var i = 0; i < x.length; i++) { dot += x[i] * y[i]; nx += x[i] * x[i]; ny += y[i] * y[i]; }
  return 1 - dot / Math.sqrt(nx * ny);
}
/* The sentence vector (mean of the output over tokens) of batch item b. */
function sentenceVector(hidden, b, L, T, d) {
  var v = new Float64Array(d), base = (b * (L + 1) + L) * T * d;
  for (var t = 0; t < T; t++) for (var k = 0; k < d; k++) v[k] += hidden[base + t * d + k] / T;
  return v;
}
/* How many runs the sweep sends the worker at once: 12 for short texts, fewer as T grows
 * (the outputs grow as T^2), one from about 200 tokens: the progress moves and Cancel is heard
 * after at most one batch. */
function sweepBatch(T) { return Math.max(1, Math.min(12, Math.floor(12 * 4096 / (T * T)))); }

/* A heatmap of one head that paints only what its box shows.  `box` is the heatmap's region
 * (it scrolls both ways); inside it a sizer as large as the whole heatmap (room + T cells + 8 px
 * a side: square cells of 12 to 26 px) gives the scroll extent, and the canvas, sticky at the
 * box's top-left corner, is the size of the box's visible window.  Each paint (a run, a pick, a
 * scroll: once per frame) fills the cells in view and draws the row labels of the rows in view
 * down the left edge and the column labels of the columns in view along the top, over the
 * page's colour, so the labels stay beside their cells wherever the box is scrolled.  At 509
 * tokens a paint fills about 3,000 cells on a desktop, not 259,081, and the canvas holds the
 * box's pixels, not 6,000 px a side.  Labels take the figure's text colour and the query's the
 * lab's --xp-query colour (read from the CSS at each paint, so a change of theme repaints them
 * legibly); the query's label is also bold, its row outlined.
 * Returns {canvas, draw(rows, tokens, query, width), paint(), reveal(row), describe(text), onPick(f)}. */
function heatmap(box, label) {
  var sizer = el("div", {"class": "xp-heat"});
  var canvas = el("canvas", {"class": "xp-heat-canvas", role: "img", "aria-label": label});
  sizer.appendChild(canvas);
  box.appendChild(sizer);
  var state = {rows: null, tokens: null, query: -1, geom: null, pick: null, frame: 0};
  function draw(rows, tokens, query, width) {
    state.rows = rows; state.tokens = tokens; state.query = query;
    var T = tokens.length, room = Math.min(110, labelRoom(tokens, 12));
    var cell = Math.max(12, Math.min(26, Math.floor((width - room - 8) / T)));
    var full = room + T * cell + 8;
    sizer.style.width = full + "px"; sizer.style.height = full + "px";
    state.geom = {room: room, cell: cell, T: T, full: full};
    paint();
  }
  function paint() {
    var g = state.geom;
    if (!g) return;
    var rows = state.rows, tokens = state.tokens, query = state.query, T = g.T, room = g.room, cell = g.cell;
    var ratio = window.devicePixelRatio || 1;
    var w = Math.max(0, Math.min(g.full, box.clientWidth)), h = Math.max(0, Math.min(g.full, box.clientHeight));
    var sx = Math.max(0, Math.min(box.scrollLeft, g.full - w)), sy = Math.max(0, Math.min(box.scrollTop, g.full - h));
    var pw = Math.round(w * ratio), ph = Math.round(h * ratio);
    if (canvas.width !== pw) canvas.width = pw;
    if (canvas.height !== ph) canvas.height = ph;
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    var font = cell >= 14 ? 12 : 10;
    var cs = window.getComputedStyle(box);
    var ink = cs.color || "#222";
    var accent = (cs.getPropertyValue("--xp-query") || "").trim() || "#c0282d";
    var bg = opaqueBackground(box), paper = "rgb(" + bg.slice(0, 3).map(Math.round).join(",") + ")";
    var c0 = Math.max(0, Math.floor(sx / cell)), c1 = Math.min(T - 1, Math.floor((sx + w - room) / cell));
    var r0 = Math.max(0, Math.floor(sy / cell)), r1 = Math.min(T - 1, Math.floor((sy + h - room) / cell));
    var i, j;
    ctx.save();                                   /* the cells in view, under the label strips */
    ctx.beginPath(); ctx.rect(room, room, Math.max(0, w - room), Math.max(0, h - room)); ctx.clip();
    for (i = r0; i <= r1; i++) {
      var row = rows[i], y = room + i * cell - sy;
      for (j = c0; j <= c1; j++) {
        ctx.fillStyle = viridis(row[j]);
        ctx.fillRect(room + j * cell - sx, y, cell, cell);
      }
    }
    if (query >= r0 && query <= r1) {            /* the query's row: the accent, edged with the page's colour */
      ctx.lineWidth = 4; ctx.strokeStyle = paper;
      ctx.strokeRect(room + 1 - sx, room + query * cell - sy + 1, T * cell - 2, cell - 2);
      ctx.lineWidth = 2; ctx.strokeStyle = accent;
      ctx.strokeRect(room + 1 - sx, room + query * cell - sy + 1, T * cell - 2, cell - 2);
    }
    ctx.restore();
    ctx.fillStyle = paper;                        /* the label strips: opaque, so labels stay readable */
    ctx.fillRect(0, 0, w, Math.min(room, h));
    ctx.fillRect(0, 0, Math.min(room, w), h);
    ctx.save();                                   /* row labels, beside their rows */
    ctx.beginPath(); ctx.rect(0, room, room, Math.max(0, h - room)); ctx.clip();
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (i = r0; i <= r1; i++) {                  /* a row whose middle is out of view gets none */
      var ly = room + i * cell + cell / 2 - sy;
      if (ly < room + font / 2 || ly > h - font / 2) continue;
      ctx.font = (i === query ? "bold " : "") + font + "px sans-serif";
      ctx.fillStyle = i === query ? accent : ink;
      ctx.fillText(shortLabel(tokens[i]), room - 4, ly);
    }
    ctx.restore();
    ctx.save();                                   /* column labels, above their columns, rising */
    ctx.beginPath(); ctx.rect(room, 0, Math.max(0, w - room), room); ctx.clip();
    ctx.textAlign = "left"; ctx.textBaseline = "middle"; ctx.fillStyle = ink; ctx.font = font + "px sans-serif";
    for (j = c0; j <= c1; j++) {
      var lx = room + j * cell + cell / 2 - sx;
      if (lx < room + font / 2 || lx > w - font / 2) continue;
      ctx.save();
      ctx.translate(lx, room - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(shortLabel(tokens[j]), 0, 0);
      ctx.restore();
    }
    ctx.restore();
    canvas._geom = {room: room, cell: cell, T: T, full: g.full, left: sx, top: sy,   /* tests read where the rows are */
                    rows: [r0, r1], columns: [c0, c1]};
  }
  function schedule() {
    if (state.frame) return;
    state.frame = window.requestAnimationFrame(function () { state.frame = 0; paint(); });
  }
  function pickAt(event) {
    var g = state.geom;
    if (!g || !state.pick) return;
    var rect = canvas.getBoundingClientRect();
    var y = event.clientY - rect.top;
    if (y < g.room) return;                       /* on the column labels */
    var i = Math.floor((y - g.room + box.scrollTop) / g.cell);
    if (i >= 0 && i < g.T && i !== state.query) state.pick(i, event.type === "click");
  }
  /* scroll the box (not the page) so that row i is in view below the column labels */
  function reveal(i) {
    var g = state.geom;
    if (!g || i < 0 || i >= g.T) return;
    var top = i * g.cell, view = box.clientHeight - g.room;
    if (view <= g.cell) return;
    if (top < box.scrollTop) box.scrollTop = top;
    else if (top + g.cell > box.scrollTop + view) box.scrollTop = top + g.cell - view;
  }
  box.addEventListener("scroll", schedule, {passive: true});
  if (typeof ResizeObserver === "function") new ResizeObserver(schedule).observe(box);
  canvas.addEventListener("mousemove", pickAt);
  canvas.addEventListener("click", pickAt);
  return {canvas: canvas, draw: draw, paint: paint, reveal: reveal, onPick: function (f) { state.pick = f; },
          describe: function (text) { canvas.setAttribute("aria-label", text); }};
}

function view(root, data, uid) {
  var api = modelApi();
  var L = data.n_layers, H = data.n_heads, N = L * H;
  var why = api.available();
  /* The views open on the build's runs (data.mode: the chapter's minimal pair, say); the form
   * opens on one sentence wherever the page can run the model, because what a reader types
   * first is a sentence of their own, to be read alone: with the pair's mode kept, it ran
   * beside the build's sentence B, which the reader had not chosen.  "a minimal pair" brings
   * B back, with the build's sentence in it.  Where nothing can run (a notebook), the form
   * shows what the cell ran. */
  var s = {layer: data.layer, head: data.head, query: 0, mode: why ? data.mode : "one",
           runs: data.runs.map(function (r) {
             return {tokens: r.tokens, typeIds: r.typeIds, sentenceBStart: r.sentenceBStart,
                     attentions: r.attentions instanceof Float32Array ? r.attentions : new Float32Array(r.attentions)};
           }),
           shown: {mode: data.mode, a: data.textA, b: data.mode === "one" ? null : data.textB},
           ablation: null, busy: false, sweep: null};
  s.query = openingQuery(s.runs);
  s.shown.key = s.shown.mode + "\u0000" + s.shown.a + "\u0000" + (s.shown.b === null ? "" : s.shown.b);
  if (data.ablation) {
    s.ablation = {text: s.shown.key, change: data.ablation.change, measured: data.ablation.change.length,
                  intact: null, source: "PyTorch, when this page was built"};
  }

  /* status line and loading */
  /* the lab's one live region: loading, running, errors, the sweep's progress (at most every
   * 10 s) and a short summary when the reader picks another layer, head or query (the
   * readouts below are plain text, read on demand) */
  var status = el("p", {"class": "xp-hint", role: "status", "aria-live": "polite", "aria-atomic": "true",
                        "data-role": "status"});
  var loadRow = el("div", {"class": "xp-controls"});
  var meta = document.querySelector('meta[name="attnlib-model-bytes"]');
  var mb = meta ? (Number(meta.getAttribute("content")) / 1e6).toFixed(1) : null;
  var loadButton = el("button", {type: "button", "data-role": "load"},
                      "Load the model in this page" + (mb ? " (" + mb + " MB, once)" : ""));
  var progressWrap = el("div", {"class": "xp-control xp-progress", hidden: "hidden"});
  progressWrap.appendChild(el("label", {"for": uid + "-progress"}, "Downloading the model"));
  var progress = el("progress", {id: uid + "-progress", max: "1", value: "0", "data-role": "progress", hidden: "hidden"});
  progressWrap.appendChild(progress);
  loadRow.appendChild(loadButton);
  loadRow.appendChild(progressWrap);
  root.appendChild(loadRow);
  root.appendChild(status);
  var built = data.mode === "minimal" ? "a minimal pair, A \u201c" + data.textA + "\u201d and B \u201c" + data.textB + "\u201d"
            : data.mode === "pair" ? "a sentence pair, \u201c" + data.textA + "\u201d then \u201c" + data.textB + "\u201d"
            : "\u201c" + data.textA + "\u201d";
  if (why) {
    loadButton.hidden = true;
    status.textContent = "Showing runs computed by PyTorch (" + built + "). To try another sentence: " + why + ".";
  } else {
    status.textContent = "Showing runs computed by PyTorch when this page was built (" + built +
                         "). Load the model to run your own sentences here.";
  }

  /* the input form */
  var form = el("form", {"class": "xp-lab-form", "data-role": "form"});
  var modes = el("fieldset", {"class": "xp-modes"});
  modes.appendChild(el("legend", null, "What to run"));
  [["one", "one sentence"], ["minimal", "a minimal pair (two runs, side by side)"],
   ["pair", "a sentence pair (one input: [CLS] A [SEP] B [SEP])"]].forEach(function (m) {
    var id = uid + "-mode-" + m[0];
    var label = el("label", {"for": id, "class": "xp-choice"});
    var radio = el("input", {type: "radio", name: uid + "-mode", id: id, value: m[0], "data-role": "mode-" + m[0]});
    radio.checked = m[0] === s.mode;
    radio.addEventListener("change", function () { if (radio.checked) { s.mode = m[0]; showB(); } });
    label.appendChild(radio);
    label.appendChild(document.createTextNode(" " + m[1]));
    modes.appendChild(label);
  });
  form.appendChild(modes);
  function textField(name, label, value) {
    var wrap = el("div", {"class": "xp-control xp-text"});
    var id = uid + "-" + name;
    wrap.appendChild(el("label", {"for": id}, label));
    /* a textarea that grows with its sentence: a one-line field showed a phone reader the same
     * first words in A and B and hid the word that differs (issue 45); Enter still runs */
    var input = el("textarea", {id: id, "data-role": name, rows: "1", maxlength: "20000", autocomplete: "off",
                                spellcheck: "false"});
    input.value = value || "";
    input.addEventListener("input", function () { grow(input); });
    input.addEventListener("keydown", function (event) {
      if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
      event.preventDefault();
      if (form.requestSubmit) form.requestSubmit(runButton); else runButton.click();
    });
    wrap.appendChild(input);
    form.appendChild(wrap);
    return {wrap: wrap, input: input};
  }
  function grow(input) {        /* the field's height: all of its text, up to the CSS max-height (about six lines; then it scrolls) */
    if (!input.offsetParent) return;
    input.style.height = "auto";
    input.style.height = (input.scrollHeight + input.offsetHeight - input.clientHeight) + "px";
  }
  function growAll() { grow(fieldA.input); grow(fieldB.input); }
  var fieldA = textField("text-a", "Sentence A", data.textA);
  var fieldB = textField("text-b", "Sentence B", data.textB);
  var runButton = el("button", {type: "submit", "data-role": "run"}, "Run");
  if (why) runButton.hidden = true;
  form.appendChild(runButton);
  root.appendChild(form);
  function showB() { fieldB.wrap.hidden = s.mode === "one"; growAll(); }
  if (window.ResizeObserver) {     /* a new column width (a phone turned, a window resized) rewraps the text */
    var formWidth = 0;
    new ResizeObserver(function () { if (form.clientWidth !== formWidth) { formWidth = form.clientWidth; growAll(); } }).observe(form);
  }
  showB();

  /* layer, head and query pickers */
  var pickers = el("div", {"class": "xp-controls"});
  function picker(name, label, n, value, onChange) { return indexPicker(pickers, uid, name, label, n, value, onChange); }
  picker("layer", "layer ", L, s.layer, function (v) { s.layer = v; update(); announce(); });
  picker("head", "head ", H, s.head, function (v) { s.head = v; update(); announce(); });
  var queryWrap = el("div", {"class": "xp-control"});
  queryWrap.appendChild(el("label", {"for": uid + "-query"}, "query token "));
  var querySelect = el("select", {id: uid + "-query", "data-role": "query"});
  queryWrap.appendChild(querySelect);
  querySelect.addEventListener("change", function () { s.query = parseInt(querySelect.value, 10); update(true); announce(); });
  pickers.appendChild(queryWrap);
  root.appendChild(pickers);

  /* heatmaps (A, and B for a minimal pair) with their readouts */
  var maps = el("div", {"class": "xp-row xp-lab-maps"});
  var panels = [0, 1].map(function (k) {
    var panel = el("div", {"class": "xp-panel"});
    var title = el("p", {"class": "xp-head", "data-role": "map-title-" + k});
    /* its own region: scrolls both ways when the sentence is long; up and down arrows move the query */
    var scroller = el("div", {"class": "xp-scroll xp-heatbox", tabindex: "0", role: "region",
                              "aria-label": "heatmap of sentence " + (k ? "B" : "A") + ": up and down arrow keys pick the query token",
                              "data-role": "map-" + k});
    var hm = heatmap(scroller, "attention weights of the selected head, sentence " + (k ? "B" : "A"));
    hm.onPick(function (i, clicked) {
      var q = k ? mapQuery(i) : i;
      if (q === null) return;
      s.query = q; update();
      if (clicked) announce();
    });
    scroller.addEventListener("keydown", function (event) {
      var step = event.key === "ArrowDown" ? 1 : event.key === "ArrowUp" ? -1 : 0;
      if (!step || event.altKey || event.ctrlKey || event.metaKey) return;
      event.preventDefault();
      var r = s.runs[Math.min(k, s.runs.length - 1)], here = panels[k].q;
      if (here === null || here === undefined) here = k ? -1 : s.query;
      for (var i = here + step; i >= 0 && i < r.tokens.length; i += step) {
        var q = k ? mapQuery(i) : i;
        if (q !== null) { s.query = q; update(true); announce(); return; }
      }
    });
    var readout = el("p", {"class": "xp-readout", "data-role": "readout-" + k});
    panel.appendChild(title); panel.appendChild(scroller); panel.appendChild(readout);
    maps.appendChild(panel);
    return {panel: panel, title: title, hm: hm, readout: readout, scroller: scroller, q: null, summary: ""};
  });
  root.appendChild(maps);
  var baselines = el("div", {"class": "xp-readout", "data-role": "baselines"});
  root.appendChild(baselines);
  var pairTable = el("div", {"data-role": "pair-table"});
  root.appendChild(pairTable);

  /* ablation: the 72-head sweep, its progress and its Cancel button (one Tab after it) */
  var ablRow = el("div", {"class": "xp-controls"});
  var ablButton = el("button", {type: "button", "data-role": "ablate"}, "Switch this head off and measure");
  if (why) ablButton.hidden = true;           /* nothing here can run the model: no button that can only fail */
  var cancelButton = el("button", {type: "button", "data-role": "cancel", hidden: "hidden"},
                        "Cancel (keep the heads measured so far)");
  var sweepWrap = el("div", {"class": "xp-control xp-progress", hidden: "hidden"});
  var sweepLabel = el("label", {"for": uid + "-sweep", "data-role": "sweep-progress"}, "");
  var sweepBar = el("progress", {id: uid + "-sweep", max: String(N), value: "0", "data-role": "sweep-bar"});
  sweepWrap.appendChild(sweepLabel);
  sweepWrap.appendChild(sweepBar);
  ablRow.appendChild(ablButton);
  ablRow.appendChild(cancelButton);
  ablRow.appendChild(sweepWrap);
  root.appendChild(ablRow);
  var ablOut = el("div", {"class": "xp-readout", "data-role": "ablation"});
  root.appendChild(ablOut);

  /* what update() keeps between calls: the alignment of the runs shown, the query menu's
   * tokens, the pair table's (runs, layer, head) */
  var kept = {alignedFor: null, aligned: null, menuFor: null, tableFor: null};
  function aligned() {
    if (kept.alignedFor !== s.runs) {
      kept.alignedFor = s.runs;
      kept.aligned = s.runs.length > 1 ? alignTokens(s.runs[0].tokens, s.runs[1].tokens) : null;
    }
    return kept.aligned;
  }
  function mapQuery(iB) {  /* a query picked in B -> the aligned query of A (null: none) */
    if (s.runs.length < 2) return iB;
    return counterpart(aligned(), iB, 1, s.runs[0].tokens.length, s.runs[1].tokens.length);
  }
  /* Say the selected head's strongest key(s) in the status line (the one live region). */
  function announce() {
    var said = panels.filter(function (p) { return !p.panel.hidden && p.summary; })
                     .map(function (p) { return p.summary; });
    status.textContent = "Layer " + s.layer + ", head " + s.head + ": " + said.join("; ") + ".";
  }
  function rowsOf(r) { return headRows(r.attentions, L, H, r.tokens.length, s.layer, s.head); }

  /* Redraw the views for the selected layer, head and query; reveal: scroll the query's row
   * into view (a query picked with the keys or the menu, not one under the pointer). */
  function update(reveal) {
    var width = columnWidth(root);
    var two = s.runs.length > 1;
    var A = s.runs[0];
    if (s.query >= A.tokens.length) s.query = openingQuery(s.runs);
    if (kept.menuFor !== A) {                    /* the query menu: rebuilt for new tokens only */
      kept.menuFor = A;
      while (querySelect.firstChild) querySelect.removeChild(querySelect.firstChild);
      A.tokens.forEach(function (t, i) { querySelect.appendChild(el("option", {value: String(i)}, i + ": " + t)); });
    }
    querySelect.value = String(s.query);
    var al = aligned();
    var queryB = null;
    if (two) queryB = counterpart(al, s.query, 0, A.tokens.length, s.runs[1].tokens.length);
    panels.forEach(function (p, k) { p.panel.hidden = k === 1 && !two; });  /* lay out both before measuring */
    var rowsA = null;
    panels.forEach(function (p, k) {
      if (p.panel.hidden) return;
      var r = s.runs[k], rows = rowsOf(r), q = k === 0 ? s.query : queryB;
      if (k === 0) rowsA = rows;
      var T = r.tokens.length, name = "sentence " + (k ? "B" : "A");
      p.q = q;
      p.title.textContent = (two ? (k ? "B: " : "A: ") : "") + "layer " + s.layer + ", head " + s.head + " (" + T + " tokens)";
      var fit = p.scroller.clientWidth > 0 ? p.scroller.clientWidth - 4 : (two && width > 620 ? width / 2 - 12 : width);
      p.hm.draw(rows, r.tokens, q === null ? -1 : q, fit);
      if (reveal && q !== null) p.hm.reveal(q);
      var heading = "Heatmap of the attention weights of layer " + s.layer + ", head " + s.head + " on " + name +
                    " (" + T + " tokens, queries as rows, keys as columns)";
      if (q === null) {
        p.readout.textContent = "The query \u201c" + A.tokens[s.query] + "\u201d has no counterpart in B.";
        p.summary = "query \u201c" + A.tokens[s.query] + "\u201d has no counterpart in B";
        p.hm.describe(heading + ": the query \u201c" + A.tokens[s.query] + "\u201d of sentence A has no counterpart here.");
        return;
      }
      var row = rows[q], total = 0, best = argmax(row);
      for (var j = 0; j < row.length; j++) total += row[j];
      p.summary = (two ? (k ? "in B, " : "in A, ") : "") + "query \u201c" + r.tokens[q] + "\u201d looks most at \u201c" +
                  r.tokens[best] + "\u201d (position " + best + ", " + fmt(row[best], 2) + ")";
      p.hm.describe(heading + ": query \u201c" + r.tokens[q] + "\u201d (position " + q + ") looks most at \u201c" +
                    r.tokens[best] + "\u201d (position " + best + "), weight " + fmt(row[best], 2) + ".");
      var top = topKeys(row, r.tokens, 3).map(function (t) {
        return "\u201c" + t.token + "\u201d (position " + t.j + ") " + fmt(t.w, 3);
      });
      var swapped = k === 1 && r.tokens[q] !== A.tokens[s.query] ? ", in place of A\u2019s \u201c" + A.tokens[s.query] + "\u201d" : "";
      p.readout.textContent = "Query \u201c" + r.tokens[q] + "\u201d (position " + q + swapped + ") looks most at " +
        top.join(", ") + ". Its row sums to " + fmt(total, 3) + "; uniform would give each key " +
        fmt(1 / T, 3) + ", so the strongest key gets " + fmt(row[best] * T, 1) + " times uniform.";
    });
    /* baselines: each offset's preference on this sentence against the reference sentences,
     * both on a scale whose ends do not depend on the length (offsetShare); a table, each number
     * under a header that says whose it is */
    var share = data.offset_share, TA = A.tokens.length;
    while (baselines.firstChild) baselines.removeChild(baselines.firstChild);
    var table = el("table", {"class": "xp-pair xp-baselines"});
    table.appendChild(el("caption", null, "Offset preference of layer " + s.layer + ", head " + s.head +
      ": 0 is the uniform weight 1/T, 1 is all of a query\u2019s weight on that key, " +
      fmt(-1 / (TA - 1), 2) + " is none at all on this sentence (\u22121/(T \u2212 1)); special tokens left out."));
    var headRow = el("tr", null);
    headRow.appendChild(el("th", {scope: "col"}, "key"));
    headRow.appendChild(el("th", {scope: "col"}, "this sentence (T = " + TA + ")"));
    headRow.appendChild(el("th", {scope: "col"}, share.n_texts + " reference sentences"));
    var thead = el("thead", null); thead.appendChild(headRow); table.appendChild(thead);
    var tbody = el("tbody", null);
    share.offsets.forEach(function (o, k) {
      var mine = offsetShare(rowsA, A.tokens, o);
      var ref = share.values[(s.layer * H + s.head) * share.offsets.length + k];
      var name = o === -1 ? "previous token" : o === 1 ? "next token" : o === 0 ? "itself" : "offset " + o;
      var tr = el("tr", {"data-offset": String(o)});
      tr.appendChild(el("th", {scope: "row"}, name));
      tr.appendChild(el("td", null, mine === null ? "n/a" : fmt(mine, 2)));
      tr.appendChild(el("td", null, fmt(ref, 2)));
      tbody.appendChild(tr);
    });
    table.appendChild(tbody);
    baselines.appendChild(table);
    pairTableFor(rowsA);
    showAblation();
  }

  /* minimal pair: per aligned query, strongest key in A and in B (rebuilt when the runs, the
   * layer or the head change, not for another query).  The count is computed at once; the
   * table's rows are added TABLE_CHUNK at a time, one task each, so that a 509-row table never
   * holds the main thread (a newer table stops an older one's additions). */
  var TABLE_CHUNK = 100, tableJob = 0;
  function pairTableFor(rowsA) {
    var two = s.runs.length > 1, A = s.runs[0];
    var key = two ? [s.runs, s.layer, s.head] : null;
    if (kept.tableFor && key && kept.tableFor[0] === key[0] && kept.tableFor[1] === key[1] && kept.tableFor[2] === key[2]) return;
    kept.tableFor = key;
    var job = ++tableJob;
    while (pairTable.firstChild) pairTable.removeChild(pairTable.firstChild);
    if (!two) return;
    var al = aligned();
    /* one rule with the flip_pair exercise's grader (attnlib.exercises.ch09.check_flip_pair): a
     * shared query changes when its strongest key is not the partner of A's, and a change by less
     * than close_call in either run is too close to call (shown, not counted) */
    var B = s.runs[1], rowsB = rowsOf(B), flips = 0, close = 0, cc = data.close_call, partner = {};
    al.forEach(function (p) { partner[p[0]] = p[1]; });
    var lines = al.map(function (p) {
      var sa = strongestKey(rowsA[p[0]]), sb = strongestKey(rowsB[p[1]]);
      var moved = partner[sa.k] !== sb.k, tooClose = moved && Math.min(sa.margin, sb.margin) < cc;
      if (moved && !tooClose) flips++;
      if (tooClose) close++;
      return {p: p, ka: sa.k, kb: sb.k, changed: moved && !tooClose, tooClose: tooClose};
    });
    var table = el("table", {"class": "xp-pair"});
    table.appendChild(el("caption", null, "Minimal pair, layer " + s.layer + " head " + s.head +
                                           ": strongest key of each query the two sentences share"));
    var head = el("tr");
    ["query", "strongest key in A", "strongest key in B"].forEach(function (h) { head.appendChild(el("th", {scope: "col"}, h)); });
    table.appendChild(head);
    var note = el("p", {"class": "xp-hint", "data-role": "pair-summary"},
                  flips + " of " + al.length + " shared queries change their strongest key" +
                  (close ? "; " + close + " more " + (close === 1 ? "changes" : "change") + " by less than " + cc +
                           " between the two strongest keys, too close to call (the exercise counts them the same way)" : "") + ".");
    pairTable.appendChild(note);
    var scroll = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-label": "minimal pair table"});
    scroll.appendChild(table);
    pairTable.appendChild(scroll);
    function add(start) {
      if (job !== tableJob) return;
      var rows = document.createDocumentFragment(), end = Math.min(lines.length, start + TABLE_CHUNK);
      for (var k = start; k < end; k++) {
        var line = lines[k], tr = el("tr", line.changed ? {"class": "xp-changed"} : null);
        tr.appendChild(el("th", {scope: "row"}, A.tokens[line.p[0]]));
        tr.appendChild(el("td", null, A.tokens[line.ka] + " " + fmt(rowsA[line.p[0]][line.ka], 2)));
        tr.appendChild(el("td", null, B.tokens[line.kb] + " " + fmt(rowsB[line.p[1]][line.kb], 2) +
                                      (line.changed ? " (changed)" : line.tooClose ? " (too close to call)" : "")));
        rows.appendChild(tr);
      }
      table.appendChild(rows);
      if (end < lines.length) setTimeout(function () { add(end); }, 0);
      else table.setAttribute("data-complete", "");
    }
    add(0);
  }

  /* the ablation readout: every head measured, or the heads measured so far (a sweep under way
   * or stopped), by the same measure */
  function showAblation() {
    var a = s.ablation && s.ablation.text === s.shown.key ? s.ablation : null;
    var left = a ? N - a.measured : N;
    ablButton.textContent = a && left > 0 && a.measured > 0 && !s.sweep
      ? "Switch off the other " + left + " heads and measure"
      : "Switch off layer " + s.layer + " head " + s.head + " and measure";
    if (!a || !a.measured) {
      ablOut.textContent = ""; ablOut.removeAttribute("data-change"); ablOut.removeAttribute("data-measured"); return;
    }
    ablOut.setAttribute("data-measured", String(a.measured));
    var idx = s.layer * H + s.head, mine = a.change[idx];
    var done = a.change.filter(function (x) { return x !== null; });
    var sorted = done.slice().sort(function (x, y) { return x - y; });
    var median = sorted[Math.floor(sorted.length / 2)], largest = sorted[sorted.length - 1];
    var maxIdx = a.change.indexOf(largest);
    var whose = s.shown.mode === "pair" ? "the pair's sentence vector ([CLS] A [SEP] B [SEP], one input)" : "sentence A's sentence vector";
    var where = " (layer " + Math.floor(maxIdx / H) + " head " + (maxIdx % H) + ")";
    if (mine === null || mine === undefined) {
      ablOut.removeAttribute("data-change");
      ablOut.textContent = "Layer " + s.layer + " head " + s.head + " is not measured yet: " + a.measured + " of the " + N +
        " heads are" + (s.sweep ? " (the sweep is under way)" : " (the sweep was stopped)") + ", the largest change so far " +
        fmt(largest, 4) + where + ". The button measures the rest.";
      return;
    }
    ablOut.setAttribute("data-change", String(mine));
    var rank = sorted.length - sorted.lastIndexOf(mine);
    var head = "Switching off layer " + s.layer + " head " + s.head + " (its output set to zero) moves " + whose +
      " by a cosine distance of " + fmt(mine, 4) + ". ";
    if (a.measured === N) {
      ablOut.textContent = head + "Reference scale, the same for each of the " + N + " heads: median " + fmt(median, 4) +
        ", largest " + fmt(largest, 4) + where + ". This head ranks " + rank + " of " + N + " (" + a.source + ").";
    } else {
      ablOut.textContent = head + "So far " + a.measured + " of the " + N + " heads are measured" +
        (s.sweep ? "" : " (the sweep was stopped)") + ": median " + fmt(median, 4) + ", largest " + fmt(largest, 4) + where +
        "; this head is number " + rank + " of those " + a.measured + ", counting from the largest (" + a.source + ").";
    }
  }

  /* While the model works, the buttons say they are unavailable (aria-disabled) but keep the
   * keyboard focus where the reader left it (a disabled button would drop it to the page). */
  function setBusy(on, text) {
    s.busy = on;
    [runButton, ablButton, loadButton].forEach(function (b) {
      if (on) b.setAttribute("aria-disabled", "true"); else b.removeAttribute("aria-disabled");
    });
    if (text) status.textContent = text;
  }
  /* What to do, said for this page: the tokenizer refuses a text over the model's 512 tokens;
   * the kernel's own message would say "pass truncate=True", which no page reader can do. */
  var TOO_LONG = /(\d+) tokens long with .*at most (\d+)/;
  function explain(err, which) {
    var message = err && err.message ? err.message : String(err), m = TOO_LONG.exec(message);
    if (!m) return message;
    var n = parseInt(m[1], 10), most = parseInt(m[2], 10), two = which === "the two sentences";
    return which + (two ? " have " : " has ") + n + " tokens, [CLS] and [SEP] included; the model reads at most " + most +
      ". Shorten " + (two ? "them" : "it") + " to " + most + " tokens or fewer (" + (n - most) + " fewer) and press Run again";
  }
  function tagged(promise, which) {
    return promise.catch(function (err) { throw new Error(explain(err, which)); });
  }
  function fail(err) {
    var message = (err && err.message ? err.message : String(err)).replace(/[.\s]+$/, "");
    setBusy(false, "Could not run: " + message + ". The views below still show the last result.");
  }
  function loadModel() {
    if (why) return Promise.reject(new Error(why));
    progress.hidden = false; progressWrap.hidden = false;
    setBusy(true, "Loading the model (it stays in your browser for later visits)\u2026");
    return api.load(function (loaded, total) {
      progress.value = total ? loaded / total : 0;
      progress.setAttribute("aria-valuetext", Math.round(loaded / 1e6) + " of " + Math.round(total / 1e6) + " MB");
    }).then(function (info) {
      progress.hidden = true; progressWrap.hidden = true;
      var hadFocus = document.activeElement === loadButton;
      loadButton.hidden = true;
      if (hadFocus) fieldA.input.focus();  /* the button is gone: go on to the sentence */
      setBusy(false, "The model is loaded (" + info.n_layers + " layers \u00d7 " + info.n_heads +
                     " heads). Type a sentence and press Run.");
    });
  }
  loadButton.addEventListener("click", function () { if (!s.busy) loadModel().catch(fail); });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (s.busy) return;
    var mode = s.mode, a = fieldA.input.value, b = mode === "one" ? null : fieldB.input.value;
    var ready = api.info() ? Promise.resolve() : loadModel();
    ready.then(function () {
      setBusy(true, "Running\u2026");
      if (mode === "pair") return Promise.all([tagged(api.run(a, b), "the two sentences")]);
      if (mode === "minimal") return Promise.all([tagged(api.run(a), "sentence A"), tagged(api.run(b), "sentence B")]);
      return Promise.all([tagged(api.run(a), "the text")]);
    }).then(function (results) {
      s.shown = {mode: mode, a: a, b: b, key: mode + "\u0000" + a + "\u0000" + (b === null ? "" : b)};
      s.runs = results.map(function (r) {
        return {tokens: r.tokens, typeIds: r.typeIds, sentenceBStart: r.sentenceBStart, attentions: r.attentions};
      });
      s.ablation = null;
      s.query = openingQuery(s.runs);
      panels.forEach(function (p) { p.scroller.scrollTop = 0; p.scroller.scrollLeft = 0; });
      setBusy(false, "Ran in the browser: " + results.map(function (r) { return r.tokens.length + " tokens, " +
                     Math.round(r.ms) + " ms"; }).join("; ") + ".");
      update();
    }).catch(fail);
  });

  /* The sweep: the intact run, then each of the N heads switched off (zero ablation), in
   * batches (sweepBatch); after each batch the progress, the readout and, at most every 10 s,
   * the status line say how far it is.  Cancel (or Escape in the lab) stops it at once and
   * keeps the heads measured; the batch in flight is dropped when it comes back.  Pressed again
   * on the same text, the button measures only the heads not yet measured. */
  function endSweep() {
    var hadFocus = document.activeElement === cancelButton;
    s.sweep = null;
    cancelButton.hidden = true; sweepWrap.hidden = true;
    if (hadFocus) ablButton.focus();
  }
  function cancelSweep() {
    if (!s.sweep) return;
    s.sweep.cancelled = true;
    endSweep();
    var m = s.ablation && s.ablation.text === s.shown.key ? s.ablation.measured : 0;
    setBusy(false, "Stopped after " + m + " of the " + N + " heads; the " + m + " measured are kept below. " +
                   "The button measures the other " + (N - m) + ".");
    showAblation();
  }
  cancelButton.addEventListener("click", cancelSweep);
  root.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && s.sweep) { event.preventDefault(); cancelSweep(); }
  });
  function sweepSays(measured) {
    var text = "head " + Math.min(measured + 1, N) + " of " + N;
    sweepLabel.textContent = "Switching off " + text;
    sweepBar.value = measured;
    sweepBar.setAttribute("aria-valuetext", text);
    return text;
  }
  ablButton.addEventListener("click", function () {
    if (s.busy) return;
    if (!api.info() && why) { fail(new Error(why)); return; }
    var shown = s.shown, texts = shown.mode === "pair" ? [shown.a, shown.b] : [shown.a, null];
    var ready = api.info() ? Promise.resolve() : loadModel();
    ready.then(function () {
      var prior = s.ablation && s.ablation.text === shown.key && s.ablation.intact && s.ablation.measured < N ? s.ablation : null;
      var a = prior || {text: shown.key, change: [], measured: 0, intact: null, source: "computed in your browser"};
      if (!prior) { for (var k = 0; k < N; k++) a.change.push(null); }
      s.ablation = a;
      var sweep = {cancelled: false, said: Date.now()};
      s.sweep = sweep;
      setBusy(true, "Switching off the heads one by one: " + sweepSays(a.measured) +
                    ". Cancel (or Escape) stops and keeps the heads measured so far.");
      cancelButton.hidden = false; sweepWrap.hidden = false;
      showAblation();
      var size = sweepBatch(s.runs[0].tokens.length);
      function step() {
        if (sweep.cancelled) return null;
        if (a.measured >= N) return finish();
        var runs = a.intact ? [] : [[]];
        for (var k = a.measured; k < N && runs.length < size; k++) runs.push([{layer: Math.floor(k / H), head: k % H, mode: "zero"}]);
        return api.run(texts[0], texts[1], {batch: runs}).then(function (r) {
          if (sweep.cancelled) return null;                      /* stopped while it ran: dropped */
          var T = r.tokens.length, d = r.dModel, b = 0;
          if (!a.intact) { a.intact = sentenceVector(r.hidden, 0, L, T, d); b = 1; }
          for (; b < r.batch; b++) a.change[a.measured++] = cosineDistance(a.intact, sentenceVector(r.hidden, b, L, T, d));
          var text = sweepSays(a.measured);
          if (a.measured < N && Date.now() - sweep.said >= 10000) {
            sweep.said = Date.now();
            status.textContent = "Switching off the heads one by one: " + text + ".";
          }
          showAblation();
          return step();
        });
      }
      function finish() {
        endSweep();
        showAblation();
        var idx = s.layer * H + s.head, rank = a.change.slice().sort(function (x, y) { return y - x; }).indexOf(a.change[idx]) + 1;
        setBusy(false, "Measured the " + N + " single-head ablations: layer " + s.layer + " head " + s.head +
                       " ranks " + rank + " of " + N + " (details below the button).");
        return null;
      }
      return step();
    }).catch(function (err) {
      if (s.sweep) endSweep();
      fail(err);
      showAblation();
    });
  });

  update();
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { update(); }, 150);
  });
  /* the canvas paints its labels in the theme's colours: repaint when the reader switches theme */
  if (typeof MutationObserver === "function") {
    new MutationObserver(function () { panels.forEach(function (p) { if (!p.panel.hidden) p.hm.paint(); }); })
      .observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme", "data-mode"]});
  }
}
