/* Chapter 11: the online softmax of one query row, one block of keys at a time.
 * data: {tokens (T), q: d_k numbers (the query's row), k: T rows of d_k, v: T rows of d_v,
 *        query: its index, block: the initial block size, sizes: the block sizes offered}
 * The update is attnlib.online_softmax_step's, carried to the values as in
 * attnlib.tiled_attention: m_new = max(m, max of the block); factor = exp(m - m_new);
 * l = factor * l + sum exp(s_j - m_new); acc = factor * acc + sum exp(s_j - m_new) v_j;
 * out = acc / l after the last block.  Everything is float64, computed here from q, k, v;
 * the browser test compares root.xpState with attnlib. */
function view(root, data, uid) {
  var T = data.tokens.length, dk = data.q.length, dv = data.v[0].length, B = data.block, j, c;
  var names = tokenNames(data.tokens);
  var quote = function (n) { return "\u201c" + names[n] + "\u201d"; };
  var vec = function (x) {
    return "(" + Array.prototype.slice.call(x, 0, 4).map(function (a) { return fmt(a, 3); }).join(", ") + (x.length > 4 ? ", \u2026)" : ")");
  };
  var norm = function (x) { var t = 0; for (var n = 0; n < x.length; n++) t += x[n] * x[n]; return Math.sqrt(t); };
  var num = function (x, d) { return x === -Infinity ? "\u2212\u221e" : fmt(x, d); };

  /* the row of scores s_j = q . k_j / sqrt(d_k), and the whole-row softmax output to compare with */
  var s = new Float64Array(T), top = -Infinity;
  for (j = 0; j < T; j++) {
    var d = 0;
    for (c = 0; c < dk; c++) d += data.q[c] * data.k[j][c];
    s[j] = d / Math.sqrt(dk);
    if (s[j] > top) top = s[j];
  }
  var w = softmax(Array.prototype.slice.call(s), 1), direct = new Float64Array(dv);
  for (j = 0; j < T; j++) for (c = 0; c < dv; c++) direct[c] += w[j] * data.v[j][c];

  var controls = el("div", {"class": "xp-controls"}), wrap = el("div", {"class": "xp-control"});
  wrap.appendChild(el("label", {"for": uid + "-block"}, "block size (keys) "));
  var sizeMenu = el("select", {id: uid + "-block", "data-role": "block"});
  data.sizes.forEach(function (n) {
    var opt = el("option", {value: String(n)}, String(n));
    if (n === B) opt.selected = true;
    sizeMenu.appendChild(opt);
  });
  wrap.appendChild(sizeMenu);
  controls.appendChild(wrap);
  root.appendChild(controls);
  var steps = stepper(uid, function () { return history.length + 2; }, function (n) { show(n); });
  root.appendChild(steps.wrap);

  /* the scores as bars, the blocks seen so far in colour, the current block outlined, m as a line */
  var avail = columnWidth(root), bw = Math.max(8, Math.min(36, Math.floor((avail - 60) / T)));
  var small = bw < 13, W = 50 + T * bw + 10, plotTop = 12, plotH = 110;
  var H = plotTop + plotH + Math.round(0.82 * labelRoom(data.tokens, small ? 10 : 12)) + 14;
  var lo = Math.min(0, Math.min.apply(null, s)), hi = Math.max(0, top), span = (hi - lo) || 1;
  var y = function (v) { return plotTop + plotH * (hi - v) / span; };
  var x = function (n) { return 50 + n * bw; };
  var svg = fluidSvg(W, H, {role: "img", "data-role": "scores",
                            "aria-label": "the scores of the query " + names[data.query] + " as bars; the blocks folded in so far are coloured"});
  svg.appendChild(sv("line", {x1: 46, x2: W - 6, y1: y(0), y2: y(0), "class": "xp-grid"}));
  [lo, hi].forEach(function (v) {
    svg.appendChild(sv("text", {x: 42, y: y(v), "text-anchor": "end", "dominant-baseline": "middle", "class": "ax-small"}, fmt(v, 1)));
  });
  svg.appendChild(sv("text", {x: 12, y: plotTop + plotH / 2, transform: "rotate(-90 12 " + (plotTop + plotH / 2) + ")",
                              "text-anchor": "middle", "class": "ax-small"}, "score"));
  var bars = [];
  for (j = 0; j < T; j++) {
    var bar = sv("rect", {x: x(j) + 1, width: Math.max(1, bw - 2), y: Math.min(y(s[j]), y(0)),
                          height: Math.max(0.5, Math.abs(y(s[j]) - y(0))), "data-role": "score"});
    bars.push(bar);
    svg.appendChild(bar);
  }
  var frame = sv("rect", {y: plotTop - 2, height: plotH + 4, "class": "xp-block-current", "data-role": "block-frame"});
  var mLine = sv("line", {"class": "xp-outline", "data-role": "running-max"});
  svg.appendChild(frame);
  svg.appendChild(mLine);
  tokenLabels(svg, data.tokens, function (n) { return x(n) + bw / 2; }, plotTop + plotH + 8, "bottom", small ? "ax-small" : "ax");
  root.appendChild(svg);

  var board = el("p", {"class": "xp-readout", "data-role": "state"});
  var detail = el("p", {"class": "xp-readout", "data-role": "detail"});
  root.appendChild(board);
  root.appendChild(detail);
  var readout = el("p", {"class": "xp-readout xp-sr", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);

  var history = [], state = {scores: Array.prototype.slice.call(s), direct: Array.prototype.slice.call(direct)};
  root.xpState = state;
  function run() {  /* every block's update, from m = -inf, l = 0, acc = 0 */
    var m = -Infinity, l = 0, acc = new Float64Array(dv);
    history = [];
    for (var start = 0; start < T; start += B) {
      var end = Math.min(T, start + B), bmax = -Infinity, add = 0, p;
      for (j = start; j < end; j++) if (s[j] > bmax) bmax = s[j];
      var mNew = Math.max(m, bmax), factor = Math.exp(m - mNew), lOld = l, next = new Float64Array(dv);
      for (c = 0; c < dv; c++) next[c] = factor * acc[c];
      for (j = start; j < end; j++) {
        p = Math.exp(s[j] - mNew);
        add += p;
        for (c = 0; c < dv; c++) next[c] += p * data.v[j][c];
      }
      l = factor * l + add;
      history.push({start: start, end: end, blockMax: bmax, mOld: m, m: mNew, factor: factor, lOld: lOld, add: add, l: l,
                    acc: Array.prototype.slice.call(next)});
      m = mNew;
      acc = next;
    }
    var out = Array.prototype.slice.call(acc).map(function (a) { return a / l; }), diff = 0;
    for (c = 0; c < dv; c++) diff = Math.max(diff, Math.abs(out[c] - direct[c]));
    state.block = B; state.history = history; state.out = out; state.diff = diff;
    root.setAttribute("data-block", String(B));
  }
  function show(n) {
    var nb = history.length, last = n === nb + 1, h = n > 0 && !last ? history[n - 1] : (last ? history[nb - 1] : null);
    var seen = n === 0 ? 0 : (last ? T : h.end);
    for (j = 0; j < T; j++) {
      var b = Math.floor(j / B);
      bars[j].setAttribute("fill", j < seen ? (b % 2 ? "rgb(59,82,139)" : "rgb(33,145,140)") : "rgba(128,128,128,.45)");
    }
    if (h && !last) setAttrs(frame, {x: x(h.start), width: (h.end - h.start) * bw, visibility: "visible"});
    else frame.setAttribute("visibility", "hidden");
    if (h) setAttrs(mLine, {x1: 48, x2: x(seen), y1: y(h.m), y2: y(h.m), visibility: "visible"});
    else mLine.setAttribute("visibility", "hidden");
    state.step = n;
    root.setAttribute("data-step", String(n));
    var keys = function (a, e) {
      var list = [];
      for (var k = a; k < Math.min(e, a + 4); k++) list.push(quote(k));
      return list.join(", ") + (e - a > 4 ? ", \u2026" : "");
    };
    var text, info;
    if (n === 0) {
      text = "Start: nothing seen yet, m = \u2212\u221e, l = 0, acc = 0 (" + dv + " zeros). " + T + " keys in " + nb +
        " block" + (nb > 1 ? "s" : "") + " of up to " + B + ".";
      info = "Press Next to fold in the first block; after the last one, Next divides by l.";
    } else if (!last) {
      text = "After block " + n + " of " + nb + ": m = " + fmt(h.m, 3) + ", l = " + fmt(h.l, 4) + ", \u2016acc\u2016 = " + fmt(norm(h.acc), 3) + ".";
      info = "Keys " + h.start + "\u2013" + (h.end - 1) + " (" + keys(h.start, h.end) + "), block maximum " + fmt(h.blockMax, 3) +
        ". Running maximum m: " + num(h.mOld, 3) + " \u2192 " + fmt(h.m, 3) + "; rescaling factor exp(m_old \u2212 m_new) = exp(" +
        num(h.mOld, 3) + " \u2212 " + fmt(h.m, 3) + ") = " + fmt(h.factor, 4) + (h.factor === 1 ? " (no new maximum)" : "") +
        ". l = " + fmt(h.factor, 4) + " \u00d7 " + fmt(h.lOld, 4) + " + " + fmt(h.add, 4) + " = " + fmt(h.l, 4) +
        ". acc = factor \u00d7 acc + \u03a3 exp(s\u2c7c \u2212 m) v\u2c7c; its first 4 of " + dv + " dimensions: " + vec(h.acc) + ".";
    } else {
      text = "Result: out = acc / l, first 4 of " + dv + " dimensions " + vec(state.out) + ", norm " + fmt(norm(state.out), 4) + ".";
      info = "The softmax of the whole row, then the weighted sum of the values, gives " + vec(direct) + ", norm " +
        fmt(norm(direct), 4) + ": the largest difference over the " + dv + " dimensions is " + state.diff.toExponential(1) +
        ". The final m = " + fmt(h.m, 3) + " is the row\u2019s maximum and l = " + fmt(h.l, 4) + " its sum of exp(s\u2c7c \u2212 m).";
    }
    board.textContent = text;
    detail.textContent = info;
    readout.textContent = "Step " + (n + 1) + " of " + (nb + 2) + ". " + text + " " + info;
  }
  sizeMenu.addEventListener("change", function () { B = parseInt(sizeMenu.value, 10); run(); steps.set(0); });
  run();
  steps.set(0);
}
