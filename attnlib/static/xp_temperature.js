/* Chapter 4: temperature and 1/sqrt(d_k) scaling of one row of scores.
 * data: {tokens (T_k), d_k or null, query: initial row, title, and either
 *        scores: T_q rows of T_k numbers (null = -inf), one head, or
 *        heads: [{label, scores}] with head: the initial head (a layer-and-head menu, the
 *        pattern of xp_hover.js)} */
function view(root, data, uid) {
  var heads = data.heads || [{label: "", scores: data.scores}], head = data.heads ? data.head : 0;
  var T = data.tokens.length, row = data.query, pos = 1.5 * Math.log10(data.temperature), scaled = data.d_k !== null;
  /* bar width chosen for the column (about 700 px on a desktop, 330 px on a phone) */
  var bw = Math.max(8, Math.min(40, Math.floor((columnWidth(root) - 70) / T))), W = 70 + T * bw, top = 16, plotH = 150;
  var H = top + plotH + Math.round(0.82 * labelRoom(data.tokens, bw < 13 ? 10 : 12)) + 16;

  var controls = el("div", {"class": "xp-controls"});
  if (heads.length > 1) {
    var hwrap = el("div", {"class": "xp-control"});
    hwrap.appendChild(el("label", {"for": uid + "-head"}, "head "));
    var picker = el("select", {id: uid + "-head", "data-role": "head"});
    heads.forEach(function (h, n) {
      var opt = el("option", {value: String(n)}, h.label);
      if (n === head) opt.selected = true;
      picker.appendChild(opt);
    });
    picker.addEventListener("change", function () { head = parseInt(picker.value, 10); update(); });
    hwrap.appendChild(picker);
    controls.appendChild(hwrap);
  }
  if (heads[head].scores.length > 1) {
    var wrap = el("div", {"class": "xp-control"});
    wrap.appendChild(el("label", {"for": uid + "-query"}, "query token "));
    var select = el("select", {id: uid + "-query", "data-role": "query"});
    data.tokens.forEach(function (tok, i) {
      var opt = el("option", {value: String(i)}, i + ": " + tok);
      if (i === row) opt.selected = true;
      select.appendChild(opt);
    });
    select.addEventListener("change", function () { row = parseInt(select.value, 10); update(); });
    wrap.appendChild(select);
    controls.appendChild(wrap);
  }
  var temp = slider(uid, "temperature", "temperature \u03c4 (log scale) ", -3, 3, 0.01, pos,
                    function (v) { pos = v; update(); });
  controls.appendChild(temp.wrap);
  if (data.d_k !== null) {
    controls.appendChild(checkbox(uid, "scale", "divide the scores by \u221ad_k = \u221a" + data.d_k, true,
                                  function (on) { scaled = on; update(); }).wrap);
  }
  root.appendChild(controls);

  var svg = fluidSvg(W, H, {role: "img", "aria-label": "softmax weights of one query over its keys"});
  var x = function (j) { return 50 + j * bw; };
  var y = function (w) { return top + plotH * (1 - w); };
  [0, 0.5, 1].forEach(function (t) {
    svg.appendChild(sv("line", {x1: 46, x2: W - 10, y1: y(t), y2: y(t), "class": "xp-grid"}));
    svg.appendChild(sv("text", {x: 42, y: y(t), "text-anchor": "end", "dominant-baseline": "middle", "class": "ax-small"}, t.toFixed(1)));
  });
  svg.appendChild(sv("text", {x: 12, y: top + plotH / 2, transform: "rotate(-90 12 " + (top + plotH / 2) + ")",
                              "text-anchor": "middle", "class": "ax-small"}, "weight"));
  var bars = [];
  for (var j = 0; j < T; j++) {
    var bar = sv("rect", {x: x(j) + 1, width: Math.max(1, bw - 2), "data-role": "weight"});
    bars.push(bar);
    svg.appendChild(bar);
  }
  tokenLabels(svg, data.tokens, function (j) { return x(j) + bw / 2; }, top + plotH + 8, "bottom", bw < 13 ? "ax-small" : "ax");
  root.appendChild(svg);
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);
  var entropyBar = el("div", {"class": "xp-meter"});
  var entropyFill = el("span", {"data-role": "entropy-bar"});
  entropyBar.appendChild(entropyFill);
  root.appendChild(entropyBar);

  function update() {
    var tau = Math.pow(10, pos / 1.5);  /* slider -3..3 -> tau from 0.01 to 100 */
    var divisor = tau * (scaled ? Math.sqrt(data.d_k) : 1);
    var scores = heads[head].scores[row], w = softmax(scores, divisor), h = entropy(w), best = 0, k;
    var n = 0;
    for (k = 0; k < T; k++) { if (scores[k] !== null) n++; if (w[k] > w[best]) best = k; }
    for (k = 0; k < T; k++) {
      setAttrs(bars[k], {y: y(w[k]), height: Math.max(0, plotH * w[k]), fill: viridis(w[k]),
                         "data-weight": String(w[k])});
    }
    temp.out.textContent = "\u03c4 = " + (tau < 0.1 ? tau.toFixed(3) : tau.toFixed(2));
    root.setAttribute("data-divisor", String(divisor));
    root.setAttribute("data-head", String(head));
    root.setAttribute("data-entropy", String(h));
    entropyFill.style.width = (n > 1 ? 100 * h / Math.log(n) : 0).toFixed(1) + "%";
    readout.textContent = (heads[head].label ? heads[head].label + ", query \u201c" + data.tokens[row] + "\u201d: " : "") +
      "scores divided by " + fmt(divisor, 3) + ";  entropy = " + fmt(h, 3) +
      " nats (uniform over " + n + " keys: " + fmt(Math.log(n), 3) + ");  largest weight " +
      fmt(w[best], 3) + " on \u201c" + data.tokens[best] + "\u201d";
  }
  update();
}
