/* Chapters 2 and 3: one query-key computation of a real head, step by step.
 * data: {tokens (T), q: T rows of d_k numbers, k: T rows of d_k, v: T rows of d_v,
 *        query, key: the initial pair}
 * Every number is computed here, in float64, from the embedded q, k, v (the recipe of
 * attnlib.softmax: subtract the row maximum, exponentiate, normalise); the browser test
 * compares root.xpState with PyTorch. */
function view(root, data, uid) {
  var T = data.tokens.length, dk = data.q[0].length, dv = data.v[0].length;
  var qi = data.query, kj = data.key, names = tokenNames(data.tokens), c, j;
  var quote = function (n) { return "\u201c" + names[n] + "\u201d"; };
  var signed = function (x) { return (x >= 0 ? "+" : "\u2212") + fmt(Math.abs(x), 3); };
  var vec = function (x) {
    return "(" + Array.prototype.slice.call(x, 0, 4).map(function (a) { return fmt(a, 3); }).join(", ") + (x.length > 4 ? ", \u2026)" : ")");
  };
  var norm = function (x) { var t = 0; for (var n = 0; n < x.length; n++) t += x[n] * x[n]; return Math.sqrt(t); };

  var controls = el("div", {"class": "xp-controls"});
  function menu(name, label, value, onChange) {
    var wrap = el("div", {"class": "xp-control"});
    wrap.appendChild(el("label", {"for": uid + "-" + name}, label));
    var select = el("select", {id: uid + "-" + name, "data-role": name});
    data.tokens.forEach(function (tok, n) {
      var opt = el("option", {value: String(n)}, n + ": " + tok);
      if (n === value) opt.selected = true;
      select.appendChild(opt);
    });
    select.addEventListener("change", function () { onChange(parseInt(select.value, 10)); });
    wrap.appendChild(select);
    controls.appendChild(wrap);
  }
  menu("query", "query token ", qi, function (n) { qi = n; compute(); show(steps.get()); });
  menu("key", "key token ", kj, function (n) { kj = n; compute(); show(steps.get()); });
  root.appendChild(controls);

  var TITLES = ["Dot product", "Scale by 1/\u221ad\u2096", "Subtract the row maximum, exponentiate",
                "Sum over all keys", "The weight", "The output"];
  var steps = stepper(uid, function () { return TITLES.length; }, function (n) { show(n); });
  root.appendChild(steps.wrap);

  /* the d_k terms q_c k_c of the dot product, as bars above (positive) and below (negative) a line */
  var W = Math.max(200, Math.min(460, columnWidth(root))), H = 96, mid = 44, half = 36;
  var bw = (W - 8) / dk;
  var svg = fluidSvg(W, H, {role: "img", "data-role": "terms",
                            "aria-label": "the " + dk + " terms of the dot product as bars: above the line positive, below negative"});
  svg.appendChild(sv("line", {x1: 4, x2: W - 4, y1: mid, y2: mid, "class": "xp-grid"}));
  var termBars = [];
  for (c = 0; c < dk; c++) {
    var bar = sv("rect", {x: (4 + c * bw + 0.5).toFixed(2), width: Math.max(1, bw - 1).toFixed(2), "class": "xp-term"});
    termBars.push(bar);
    svg.appendChild(bar);
  }
  svg.appendChild(sv("text", {x: 4, y: H - 4, "class": "ax-small"}, "dimension 0"));
  svg.appendChild(sv("text", {x: W - 4, y: H - 4, "text-anchor": "end", "class": "ax-small"}, "dimension " + (dk - 1)));
  svg.appendChild(sv("text", {x: W / 2, y: H - 4, "text-anchor": "middle", "class": "ax-small"}, "terms q_c\u00b7k_c"));
  root.appendChild(svg);

  /* the whole row of the query, one bar per key: exp(s_j - max) at steps 3 and 4, the weights
     a_j from step 5 on; the picked key outlined (hidden at steps 1 and 2) */
  var rbw = Math.max(8, Math.min(36, Math.floor((W - 60) / T))), small = rbw < 13, rowTop = 14, rowH = 80;
  var RW = 50 + T * rbw + 10, RH = rowTop + rowH + Math.round(0.82 * labelRoom(data.tokens, small ? 10 : 12)) + 14;
  var rowSvg = fluidSvg(RW, RH, {role: "img", "data-role": "row"});
  var ry = function (t) { return rowTop + rowH * (1 - t); };
  [0, 1].forEach(function (t) {
    rowSvg.appendChild(sv("line", {x1: 46, x2: RW - 6, y1: ry(t), y2: ry(t), "class": "xp-grid"}));
    rowSvg.appendChild(sv("text", {x: 42, y: ry(t), "text-anchor": "end", "dominant-baseline": "middle", "class": "ax-small"}, String(t)));
  });
  var rowName = sv("text", {x: 50, y: 10, "class": "ax-small"});
  rowSvg.appendChild(rowName);
  var rowBars = [];
  for (j = 0; j < T; j++) {
    var rb = sv("rect", {x: 50 + j * rbw + 1, width: Math.max(1, rbw - 2), "data-role": "row-bar"});
    rowBars.push(rb);
    rowSvg.appendChild(rb);
  }
  var keyBox = sv("rect", {y: rowTop - 2, height: rowH + 4, width: rbw, "class": "xp-block-current"});
  rowSvg.appendChild(keyBox);
  tokenLabels(rowSvg, data.tokens, function (n) { return 50 + n * rbw + rbw / 2; }, rowTop + rowH + 8, "bottom", small ? "ax-small" : "ax");
  root.appendChild(rowSvg);

  var list = el("ol", {"class": "xp-steps", "data-role": "steps"}), items = [];
  TITLES.forEach(function (title) {
    var li = el("li");
    li.appendChild(el("strong", null, title + ": "));
    var body = el("span");
    li.appendChild(body);
    items.push({li: li, body: body});
    list.appendChild(li);
  });
  root.appendChild(list);
  /* the current step, announced (the list above shows it; this copy is for screen readers) */
  var readout = el("p", {"class": "xp-readout xp-sr", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);

  var state = {};
  root.xpState = state;
  function compute() {
    var q = data.q[qi], terms = new Float64Array(dk), dot = 0, s = new Float64Array(T), m = -Infinity, arg = 0;
    for (c = 0; c < dk; c++) { terms[c] = q[c] * data.k[kj][c]; dot += terms[c]; }
    for (j = 0; j < T; j++) {
      var d = 0;
      for (c = 0; c < dk; c++) d += q[c] * data.k[j][c];
      s[j] = d / Math.sqrt(dk);
      if (s[j] > m) { m = s[j]; arg = j; }
    }
    var e = new Float64Array(T), total = 0;
    for (j = 0; j < T; j++) { e[j] = Math.exp(s[j] - m); total += e[j]; }
    var out = new Float64Array(dv), share = new Float64Array(dv);
    for (j = 0; j < T; j++) for (c = 0; c < dv; c++) out[c] += e[j] / total * data.v[j][c];
    for (c = 0; c < dv; c++) share[c] = e[kj] / total * data.v[kj][c];
    var order = [], positive = 0;
    for (c = 0; c < dk; c++) { order.push(c); if (terms[c] > 0) positive++; }
    order.sort(function (a, b) { return Math.abs(terms[b]) - Math.abs(terms[a]); });
    state.query = qi; state.key = kj;
    state.terms = Array.prototype.slice.call(terms);
    state.dot = dot; state.scaled = s[kj]; state.rowMax = m; state.argmax = arg;
    state.expo = e[kj]; state.total = total; state.expos = Array.prototype.slice.call(e); state.weight = e[kj] / total;
    state.out = Array.prototype.slice.call(out); state.outNorm = norm(out);
    state.share = Array.prototype.slice.call(share); state.shareNorm = norm(share);
    root.setAttribute("data-query", String(qi));
    root.setAttribute("data-key", String(kj));

    var big = Math.abs(terms[order[0]]) || 1;
    for (c = 0; c < dk; c++) {
      var h = half * Math.abs(terms[c]) / big;
      setAttrs(termBars[c], {y: (terms[c] >= 0 ? mid - h : mid).toFixed(2), height: Math.max(0.5, h).toFixed(2),
                             "data-term": String(terms[c])});
      termBars[c].classList.toggle("xp-neg", terms[c] < 0);
    }
    var pair = quote(qi) + " \u00b7 " + quote(kj);
    var texts = [
      "q\u00b7k for the query " + quote(qi) + " and the key " + quote(kj) + " is the sum of " + dk + " products q_c\u00b7k_c, one per dimension: " +
        fmt(dot, 3) + ". " + positive + " of the " + dk + " terms are positive; the largest in size are " +
        order.slice(0, 3).map(function (n) { return "dimension " + n + " (" + signed(terms[n]) + ")"; }).join(", ") + ".",
      "s = q\u00b7k / \u221ad\u2096 = " + fmt(dot, 3) + " / \u221a" + dk + " = " + fmt(dot, 3) + " / " + fmt(Math.sqrt(dk), 3) +
        " = " + fmt(s[kj], 3) + ".",
      "the largest score in the row of " + quote(qi) + " is " + fmt(m, 3) + " (key " + quote(arg) + "); exp(s \u2212 max) = exp(" +
        fmt(s[kj], 3) + " \u2212 " + fmt(m, 3) + ") = " + fmt(e[kj], 4) + ". Subtracting the maximum keeps every exponential at most 1 and cancels in the ratio.",
      "the same exponential for each of the " + T + " keys of the row, added up: \u03a3\u2c7c exp(s\u2c7c \u2212 max) = " + fmt(total, 4) + ".",
      "a = " + fmt(e[kj], 4) + " / " + fmt(total, 4) + " = " + fmt(e[kj] / total, 4) + ": the share of " + quote(qi) +
        "\u2019s attention that goes to " + quote(kj) + " (the " + T + " weights of the row sum to 1).",
      "out = \u03a3\u2c7c a\u2c7c v\u2c7c over all " + T + " keys. Its first 4 of " + dv + " dimensions: " + vec(out) + "; its norm \u2016out\u2016 = " +
        fmt(norm(out), 3) + ". The key " + quote(kj) + " adds a\u00b7v = " + vec(share) + ", norm " + fmt(norm(share), 3) + "."
    ];
    texts.forEach(function (t, n) { items[n].body.textContent = t; });
    state.pair = pair;
  }
  function show(n) {
    items.forEach(function (it, k) {
      it.li.hidden = k > n;
      it.li.classList.toggle("xp-current", k === n);
      if (k === n) it.li.setAttribute("aria-current", "step"); else it.li.removeAttribute("aria-current");
    });
    state.step = n;
    root.setAttribute("data-step", String(n));
    rowSvg.style.display = n < 2 ? "none" : "";
    var weights = n >= 4, values = [];
    for (j = 0; j < T; j++) {
      var val = weights ? state.expos[j] / state.total : state.expos[j];
      values.push(val);
      setAttrs(rowBars[j], {y: ry(val), height: Math.max(0.5, rowH * val), fill: viridis(val), "data-value": String(val)});
    }
    state.rowValues = values;
    keyBox.setAttribute("x", 50 + kj * rbw);
    rowName.textContent = (weights ? "weights a\u2c7c of the row of " : "exp(s\u2c7c \u2212 max) in the row of ") + names[qi] +
      "; " + names[kj] + " outlined";
    rowSvg.setAttribute("aria-label", (weights ? "the weights" : "the exponentials exp(s minus max)") + " of the row of " + names[qi] +
      ", one bar per key, the key " + names[kj] + " outlined");
    readout.textContent = "Step " + (n + 1) + " of " + TITLES.length + ", " + TITLES[n].toLowerCase() + ": " + items[n].body.textContent;
  }
  compute();
  steps.set(0);
}
