/* Chapter 8: the model lab.  The course's pretrained encoder on the reader's own sentences:
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
 *        lift: {offsets, values: flat L*H*len(offsets), n_texts}, title} */

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

/* Helpers on flat (L, H, T, T) weights. */
function headRows(flat, L, H, T, layer, head) {
  var rows = [], base = (layer * H + head) * T * T;
  for (var i = 0; i < T; i++) rows.push(Array.prototype.slice.call(flat, base + i * T, base + (i + 1) * T));
  return rows;
}
var SPECIAL = {"[CLS]": 1, "[SEP]": 1, "[PAD]": 1};
/* Mean of T * A[i, i + o] over ordinary (non-special) query/key pairs: attnlib.evidence.positional_lift. */
function lift(rows, tokens, offset) {
  var T = tokens.length, sum = 0, n = 0;
  for (var i = 0; i < T; i++) {
    var j = i + offset;
    if (j < 0 || j >= T || SPECIAL[tokens[i]] || SPECIAL[tokens[j]]) continue;
    sum += T * rows[i][j]; n++;
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
  var idx = row.map(function (w, j) { return j; }).sort(function (a, b) { return row[b] - row[a]; });
  return idx.slice(0, n).filter(function (j, k) { return k === 0 || row[j] >= 0.005; })
            .map(function (j) { return {j: j, token: tokens[j], w: row[j]}; });
}
/* Longest common subsequence of two token lists: the aligned positions [[i, i2], ...]. */
function alignTokens(a, b) {
  var n = a.length, m = b.length, L = [], i, j;
  for (i = 0; i <= n; i++) { L.push(new Int32Array(m + 1)); }
  for (i = n - 1; i >= 0; i--) for (j = m - 1; j >= 0; j--) {
    L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  }
  var out = [];
  i = 0; j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([i, j]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) i++; else j++;
  }
  return out;
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

/* A heatmap of one head on a canvas; returns {node, canvas, draw(rows, tokens, query, width), describe(text), onPick}.
 * Cells are 12 to 26 px: a sentence of about 12 tokens fits a phone's column, a longer one
 * scrolls sideways inside the heatmap's own region.  Labels take the figure's text colour and
 * the query's the lab's --xp-query colour (both read from the CSS at each draw, so a change
 * of theme redraws them legibly); the query's label is also bold, its row outlined. */
function heatmap(uid, label) {
  var wrap = el("div", {"class": "xp-heat"});
  var canvas = el("canvas", {"class": "xp-heat-canvas", role: "img", "aria-label": label});
  wrap.appendChild(canvas);
  var state = {rows: null, tokens: null, query: 0, geom: null, pick: null};
  function draw(rows, tokens, query, width) {
    state.rows = rows; state.tokens = tokens; state.query = query;
    var T = tokens.length, ratio = window.devicePixelRatio || 1;
    var room = Math.min(110, labelRoom(tokens, 12));
    var cell = Math.max(12, Math.min(26, Math.floor((width - room - 8) / T)));
    var font = cell >= 14 ? 12 : 10;
    var W = room + T * cell + 8, Hh = room + T * cell + 8;
    canvas.width = Math.round(W * ratio); canvas.height = Math.round(Hh * ratio);
    canvas.style.width = W + "px"; canvas.style.height = Hh + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, W, Hh);
    var cs = window.getComputedStyle(wrap);
    var ink = cs.color || "#222";
    var accent = (cs.getPropertyValue("--xp-query") || "").trim() || "#c0282d";
    var bg = opaqueBackground(wrap), paper = "rgb(" + bg.slice(0, 3).map(Math.round).join(",") + ")";
    for (var i = 0; i < T; i++) {
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.font = (i === query ? "bold " : "") + font + "px sans-serif";
      ctx.fillStyle = i === query ? accent : ink;
      ctx.fillText(shortLabel(tokens[i]), room - 4, room + i * cell + cell / 2);
      ctx.save();
      ctx.translate(room + i * cell + cell / 2, room - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillStyle = ink; ctx.font = font + "px sans-serif";
      ctx.fillText(shortLabel(tokens[i]), 0, 0);
      ctx.restore();
      for (var j = 0; j < T; j++) {
        ctx.fillStyle = viridis(rows[i][j]);
        ctx.fillRect(room + j * cell, room + i * cell, cell, cell);
      }
    }
    if (query >= 0 && query < T) {  /* the query's row: the accent, edged with the page's colour */
      ctx.lineWidth = 4; ctx.strokeStyle = paper;
      ctx.strokeRect(room + 1, room + query * cell + 1, T * cell - 2, cell - 2);
      ctx.lineWidth = 2; ctx.strokeStyle = accent;
      ctx.strokeRect(room + 1, room + query * cell + 1, T * cell - 2, cell - 2);
    }
    state.geom = {room: room, cell: cell, T: T};
    canvas._geom = state.geom;                                  /* tests read where the rows are */
  }
  function pickAt(event) {
    if (!state.geom || !state.pick) return;
    var rect = canvas.getBoundingClientRect(), g = state.geom;
    var scale = rect.height / (g.room + g.T * g.cell + 8);      /* rows: the vertical scale, whatever the width */
    var y = (event.clientY - rect.top) / scale - g.room;
    var i = Math.floor(y / g.cell);
    if (i >= 0 && i < g.T && i !== state.query) state.pick(i, event.type === "click");
  }
  canvas.addEventListener("mousemove", pickAt);
  canvas.addEventListener("click", pickAt);
  return {node: wrap, canvas: canvas, draw: draw, onPick: function (f) { state.pick = f; },
          describe: function (text) { canvas.setAttribute("aria-label", text); }};
}

function view(root, data, uid) {
  var api = modelApi();
  var L = data.n_layers, H = data.n_heads;
  var s = {layer: data.layer, head: data.head, query: 1, mode: data.mode, runs: data.runs,
           ablation: data.ablation, source: "PyTorch, when this page was built", busy: false};

  /* status line and loading */
  /* the lab's one live region: loading, running, errors, and a short summary when the reader
   * picks another layer, head or query (the readouts below are plain text, read on demand) */
  var status = el("p", {"class": "xp-hint", role: "status", "aria-live": "polite", "aria-atomic": "true",
                        "data-role": "status"});
  var loadRow = el("div", {"class": "xp-controls"});
  var why = api.available();
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
  if (why) {
    loadButton.hidden = true;
    status.textContent = "Showing runs computed by PyTorch. To try another sentence: " + why + ".";
  } else {
    status.textContent = "Showing runs computed by PyTorch when this page was built. Load the model to run your own sentences here.";
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
    var input = el("input", {type: "text", id: id, "data-role": name, maxlength: "20000", autocomplete: "off",
                             spellcheck: "false"});
    input.value = value || "";
    wrap.appendChild(input);
    form.appendChild(wrap);
    return {wrap: wrap, input: input};
  }
  var fieldA = textField("text-a", "Sentence A", data.textA);
  var fieldB = textField("text-b", "Sentence B", data.textB);
  var runButton = el("button", {type: "submit", "data-role": "run"}, "Run");
  if (why) runButton.hidden = true;
  form.appendChild(runButton);
  root.appendChild(form);
  function showB() { fieldB.wrap.hidden = s.mode === "one"; }
  showB();

  /* layer, head and query pickers */
  var pickers = el("div", {"class": "xp-controls"});
  function picker(name, label, n, value, onChange) { return indexPicker(pickers, uid, name, label, n, value, onChange); }
  picker("layer", "layer ", L, s.layer, function (v) { s.layer = v; s.ablationHead = null; update(); announce(); });
  picker("head", "head ", H, s.head, function (v) { s.head = v; update(); announce(); });
  var queryWrap = el("div", {"class": "xp-control"});
  queryWrap.appendChild(el("label", {"for": uid + "-query"}, "query token "));
  var querySelect = el("select", {id: uid + "-query", "data-role": "query"});
  queryWrap.appendChild(querySelect);
  querySelect.addEventListener("change", function () { s.query = parseInt(querySelect.value, 10); update(); announce(); });
  pickers.appendChild(queryWrap);
  root.appendChild(pickers);

  /* heatmaps (A, and B for a minimal pair) with their readouts */
  var maps = el("div", {"class": "xp-row xp-lab-maps"});
  var panels = [0, 1].map(function (k) {
    var panel = el("div", {"class": "xp-panel"});
    var title = el("p", {"class": "xp-head", "data-role": "map-title-" + k});
    var hm = heatmap(uid + "-map" + k, "attention weights of the selected head, sentence " + (k ? "B" : "A"));
    hm.onPick(function (i, clicked) {
      var q = k ? mapQuery(i) : i;
      if (q === null) return;
      s.query = q; update();
      if (clicked) announce();
    });
    /* its own region: scrolls sideways when the sentence is long; up and down arrows move the query */
    var scroller = el("div", {"class": "xp-scroll", tabindex: "0", role: "region",
                              "aria-label": "heatmap of sentence " + (k ? "B" : "A") + ": up and down arrow keys pick the query token",
                              "data-role": "map-" + k});
    scroller.appendChild(hm.node);
    scroller.addEventListener("keydown", function (event) {
      var step = event.key === "ArrowDown" ? 1 : event.key === "ArrowUp" ? -1 : 0;
      if (!step || event.altKey || event.ctrlKey || event.metaKey) return;
      event.preventDefault();
      var r = s.runs[Math.min(k, s.runs.length - 1)], here = panels[k].q;
      if (here === null || here === undefined) here = k ? -1 : s.query;
      for (var i = here + step; i >= 0 && i < r.tokens.length; i += step) {
        var q = k ? mapQuery(i) : i;
        if (q !== null) { s.query = q; update(); announce(); return; }
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

  /* ablation */
  var ablRow = el("div", {"class": "xp-controls"});
  var ablButton = el("button", {type: "button", "data-role": "ablate"}, "Switch this head off and measure");
  if (why) ablButton.hidden = true;           /* nothing here can run the model: no button that can only fail */
  ablRow.appendChild(ablButton);
  root.appendChild(ablRow);
  var ablOut = el("div", {"class": "xp-readout", "data-role": "ablation"});
  root.appendChild(ablOut);

  function mapQuery(iB) {  /* a query picked in B -> the aligned query of A (null: none) */
    if (s.runs.length < 2) return iB;
    var al = alignTokens(s.runs[0].tokens, s.runs[1].tokens);
    for (var k = 0; k < al.length; k++) if (al[k][1] === iB) return al[k][0];
    return null;
  }
  /* Say the selected head's strongest key(s) in the status line (the one live region). */
  function announce() {
    var said = panels.filter(function (p) { return !p.panel.hidden && p.summary; })
                     .map(function (p) { return p.summary; });
    status.textContent = "Layer " + s.layer + ", head " + s.head + ": " + said.join("; ") + ".";
  }
  function rowsOf(r) { return headRows(r.attentions, L, H, r.tokens.length, s.layer, s.head); }

  function update() {
    var width = columnWidth(root);
    var two = s.runs.length > 1;
    var A = s.runs[0];
    if (s.query >= A.tokens.length) s.query = Math.min(1, A.tokens.length - 1);
    while (querySelect.firstChild) querySelect.removeChild(querySelect.firstChild);
    A.tokens.forEach(function (t, i) { querySelect.appendChild(el("option", {value: String(i)}, i + ": " + t)); });
    querySelect.value = String(s.query);
    var al = two ? alignTokens(A.tokens, s.runs[1].tokens) : null;
    var queryB = null;
    if (two) al.forEach(function (p) { if (p[0] === s.query) queryB = p[1]; });
    panels.forEach(function (p, k) { p.panel.hidden = k === 1 && !two; });  /* lay out both before measuring */
    panels.forEach(function (p, k) {
      if (p.panel.hidden) return;
      var r = s.runs[k], rows = rowsOf(r), q = k === 0 ? s.query : queryB;
      var T = r.tokens.length, name = "sentence " + (k ? "B" : "A");
      p.q = q;
      p.title.textContent = (two ? (k ? "B: " : "A: ") : "") + "layer " + s.layer + ", head " + s.head + " (" + T + " tokens)";
      var fit = p.scroller.clientWidth > 0 ? p.scroller.clientWidth - 4 : (two && width > 620 ? width / 2 - 12 : width);
      p.hm.draw(rows, r.tokens, q === null ? -1 : q, fit);
      var heading = "Heatmap of the attention weights of layer " + s.layer + ", head " + s.head + " on " + name +
                    " (" + T + " tokens, queries as rows, keys as columns)";
      if (q === null) {
        p.readout.textContent = "The query \u201c" + A.tokens[s.query] + "\u201d has no counterpart in B.";
        p.summary = "query \u201c" + A.tokens[s.query] + "\u201d has no counterpart in B";
        p.hm.describe(heading + ": the query \u201c" + A.tokens[s.query] + "\u201d of sentence A has no counterpart here.");
        return;
      }
      var row = rows[q], total = row.reduce(function (a, b) { return a + b; }, 0), best = argmax(row);
      p.summary = (two ? (k ? "in B, " : "in A, ") : "") + "query \u201c" + r.tokens[q] + "\u201d looks most at \u201c" +
                  r.tokens[best] + "\u201d (position " + best + ", " + fmt(row[best], 2) + ")";
      p.hm.describe(heading + ": query \u201c" + r.tokens[q] + "\u201d (position " + q + ") looks most at \u201c" +
                    r.tokens[best] + "\u201d (position " + best + "), weight " + fmt(row[best], 2) + ".");
      var top = topKeys(row, r.tokens, 3).map(function (t) {
        return "\u201c" + t.token + "\u201d (position " + t.j + ") " + fmt(t.w, 3);
      });
      p.readout.textContent = "Query \u201c" + r.tokens[q] + "\u201d (position " + q + ") looks most at " +
        top.join(", ") + ". Its row sums to " + fmt(total, 3) + "; uniform would give each key " +
        fmt(1 / T, 3) + ", so the strongest key gets " + fmt(row[argmax(row)] * T, 1) + " times uniform.";
    });
    /* baselines: the offsets' lift on this sentence against the reference sentences */
    var rowsA = rowsOf(A), parts = [];
    data.lift.offsets.forEach(function (o, k) {
      var mine = lift(rowsA, A.tokens, o);
      var ref = data.lift.values[(s.layer * H + s.head) * data.lift.offsets.length + k];
      var name = o === -1 ? "previous token" : o === 1 ? "next token" : o === 0 ? "itself" : "offset " + o;
      parts.push(name + ": " + (mine === null ? "n/a" : fmt(mine, 2) + "\u00d7") + " here, " + fmt(ref, 2) +
                 "\u00d7 on the " + data.lift.n_texts + " reference sentences");
    });
    baselines.textContent = "Weight on each offset, in multiples of uniform (1 = no preference; special tokens left out) \u2014 " +
      parts.join("; ") + ".";
    /* minimal pair: per aligned query, strongest key in A and in B */
    while (pairTable.firstChild) pairTable.removeChild(pairTable.firstChild);
    if (two) {
      /* one rule with the flip_pair exercise's grader (attnlib.exercises.ch08.check_flip_pair): a
       * shared query changes when its strongest key is not the partner of A's, and a change by less
       * than close_call in either run is too close to call (shown, not counted) */
      var B = s.runs[1], rowsB = rowsOf(B), flips = 0, close = 0, cc = data.close_call, partner = {};
      al.forEach(function (p) { partner[p[0]] = p[1]; });
      var table = el("table", {"class": "xp-pair"});
      table.appendChild(el("caption", null, "Minimal pair, layer " + s.layer + " head " + s.head +
                                             ": strongest key of each query the two sentences share"));
      var head = el("tr");
      ["query", "strongest key in A", "strongest key in B"].forEach(function (h) { head.appendChild(el("th", {scope: "col"}, h)); });
      table.appendChild(head);
      al.forEach(function (p) {
        var sa = strongestKey(rowsA[p[0]]), sb = strongestKey(rowsB[p[1]]), ka = sa.k, kb = sb.k;
        var moved = partner[ka] !== kb, tooClose = moved && Math.min(sa.margin, sb.margin) < cc;
        var changed = moved && !tooClose;
        if (changed) flips++;
        if (tooClose) close++;
        var tr = el("tr", changed ? {"class": "xp-changed"} : null);
        tr.appendChild(el("th", {scope: "row"}, A.tokens[p[0]]));
        tr.appendChild(el("td", null, A.tokens[ka] + " " + fmt(rowsA[p[0]][ka], 2)));
        tr.appendChild(el("td", null, B.tokens[kb] + " " + fmt(rowsB[p[1]][kb], 2) +
                                      (changed ? " (changed)" : tooClose ? " (too close to call)" : "")));
        table.appendChild(tr);
      });
      var note = el("p", {"class": "xp-hint", "data-role": "pair-summary"},
                    flips + " of " + al.length + " shared queries change their strongest key" +
                    (close ? "; " + close + " more " + (close === 1 ? "changes" : "change") + " by less than " + cc +
                             " between the two strongest keys, too close to call (the exercise counts them the same way)" : "") + ".");
      pairTable.appendChild(note);
      var scroll = el("div", {"class": "xp-scroll", tabindex: "0", role: "region", "aria-label": "minimal pair table"});
      scroll.appendChild(table);
      pairTable.appendChild(scroll);
    }
    showAblation();
  }

  function showAblation() {
    var a = s.ablation;
    ablButton.textContent = "Switch off layer " + s.layer + " head " + s.head + " and measure";
    if (!a || a.text !== s.runs[0].textKey) { ablOut.textContent = ""; ablOut.removeAttribute("data-change"); return; }
    var idx = s.layer * H + s.head, mine = a.change[idx];
    ablOut.setAttribute("data-change", String(mine));
    var sorted = a.change.slice().sort(function (x, y) { return x - y; });
    var rank = sorted.length - sorted.lastIndexOf(mine);
    var median = sorted[Math.floor(sorted.length / 2)];
    var maxIdx = a.change.indexOf(sorted[sorted.length - 1]);
    var whose = s.mode === "pair" ? "the pair's sentence vector ([CLS] A [SEP] B [SEP], one input)" : "sentence A's sentence vector";
    ablOut.textContent = "Switching off layer " + s.layer + " head " + s.head + " (its output set to zero) moves " + whose +
      " by a cosine distance of " + fmt(mine, 4) + ". Reference scale, the same for each of the " +
      sorted.length + " heads: median " + fmt(median, 4) + ", largest " + fmt(sorted[sorted.length - 1], 4) +
      " (layer " + Math.floor(maxIdx / H) + " head " + (maxIdx % H) + "). This head ranks " + rank + " of " +
      sorted.length + " (" + a.source + ").";
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
  function fail(err) {
    setBusy(false, "Could not run: " + (err && err.message ? err.message : String(err)) +
                   ". The views below still show the last result.");
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
    var a = fieldA.input.value, b = fieldB.input.value;
    var ready = api.info() ? Promise.resolve() : loadModel();
    ready.then(function () {
      setBusy(true, "Running\u2026");
      var jobs;
      if (s.mode === "pair") jobs = [api.run(a, b)];
      else if (s.mode === "minimal") jobs = [api.run(a), api.run(b)];
      else jobs = [api.run(a)];
      return Promise.all(jobs);
    }).then(function (results) {
      var key = s.mode + "\u0000" + a + "\u0000" + (s.mode === "one" ? "" : b);
      s.runs = results.map(function (r) {
        return {tokens: r.tokens, typeIds: r.typeIds, sentenceBStart: r.sentenceBStart,
                attentions: r.attentions, textKey: key};
      });
      s.ablation = null;
      s.query = Math.min(1, s.runs[0].tokens.length - 1);
      setBusy(false, "Ran in the browser: " + results.map(function (r) { return r.tokens.length + " tokens, " +
                     Math.round(r.ms) + " ms"; }).join("; ") + ".");
      update();
    }).catch(fail);
  });

  ablButton.addEventListener("click", function () {
    if (s.busy) return;
    if (!api.info() && why) { fail(new Error(why)); return; }
    var a = s.mode === "pair" ? [fieldA.input.value, fieldB.input.value] : [fieldA.input.value, null];
    var ready = api.info() ? Promise.resolve() : loadModel();
    var key = s.runs[0].textKey;
    ready.then(function () {
      setBusy(true, "Switching off each of the " + L * H + " heads in turn (the reference scale)\u2026");
      var runs = [], chunks = [], size = 12;       /* the intact run, then each head switched off */
      for (var k = 0; k <= L * H; k++) runs.push(k ? [{layer: Math.floor((k - 1) / H), head: (k - 1) % H, mode: "zero"}] : []);
      for (var c = 0; c < runs.length; c += size) chunks.push(runs.slice(c, c + size));
      var vectors = [], T = null, d = null;
      return chunks.reduce(function (p, chunk) {
        return p.then(function () {
          return api.run(a[0], a[1], {batch: chunk}).then(function (r) {
            T = r.tokens.length; d = r.dModel;
            for (var b = 0; b < r.batch; b++) vectors.push(sentenceVector(r.hidden, b, L, T, d));
          });
        });
      }, Promise.resolve()).then(function () {
        var change = [];
        for (var k = 1; k < vectors.length; k++) change.push(cosineDistance(vectors[0], vectors[k]));
        s.ablation = {text: key, change: change, source: "computed in your browser"};
        showAblation();
        var idx = s.layer * H + s.head, rank = change.slice().sort(function (x, y) { return y - x; }).indexOf(change[idx]) + 1;
        setBusy(false, "Measured the " + L * H + " single-head ablations: layer " + s.layer + " head " + s.head +
                       " ranks " + rank + " of " + L * H + " (details below the button).");
      });
    }).catch(fail);
  });

  if (s.runs[0].textKey === undefined) {
    var key0 = s.mode + "\u0000" + data.textA + "\u0000" + (s.mode === "one" ? "" : data.textB);
    s.runs.forEach(function (r) { r.textKey = key0; });
    if (s.ablation) s.ablation = {text: key0, change: s.ablation.change, source: "PyTorch, when this page was built"};
  }
  update();
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(update, 150);
  });
  /* the canvas paints its labels in the theme's colours: repaint when the reader switches theme */
  if (typeof MutationObserver === "function") {
    new MutationObserver(function () { update(); }).observe(document.documentElement,
      {attributes: true, attributeFilter: ["data-theme", "data-mode"]});
  }
}
