/* Chapter 12: rotary position embedding.  A query vector q and a key vector k (one real
 * head) are rotated for positions i and j = i - offset (attnlib.apply_rope, rotate-half
 * layout); the scaled score q_i . k_j / sqrt(d_k) is drawn against the offset for the
 * current i.  Moving i leaves the curve and the score unchanged: they depend on i - j only.
 * data: {q, k (d_k numbers), query, key (token strings), base, max_offset, max_position, position} */
function view(root, data, uid) {
  var d = data.q.length, half = d / 2, pos = data.position, off = 1, R = data.max_offset;
  var W = Math.min(640, columnWidth(root)), left = 52, right = 12, top = 14, plotH = 170, H = top + plotH + 44;

  function rotate(x, p) {  /* apply_rope for one vector at position p */
    var out = new Float64Array(d);
    for (var m = 0; m < half; m++) {
      var a = p * Math.pow(data.base, -2 * m / d), c = Math.cos(a), s = Math.sin(a);
      out[m] = x[m] * c - x[m + half] * s;
      out[m + half] = x[m + half] * c + x[m] * s;
    }
    return out;
  }
  function score(i, j) {
    var qi = rotate(data.q, i), kj = rotate(data.k, j), t = 0;
    for (var m = 0; m < d; m++) t += qi[m] * kj[m];
    return t / Math.sqrt(d);
  }

  var controls = el("div", {"class": "xp-controls"});
  var posCtl = slider(uid, "position", "query position i ", R, data.max_position, 1, pos,
                      function (v) { pos = v; update(); });
  var offCtl = slider(uid, "offset", "offset i \u2212 j ", -R, R, 1, off, function (v) { off = v; update(); });
  controls.appendChild(posCtl.wrap);
  controls.appendChild(offCtl.wrap);
  root.appendChild(controls);

  var svg = fluidSvg(W, H, {role: "img", "aria-label": "score of the rotated query and key against the offset i minus j"});
  var x = function (o) { return left + (W - left - right) * (o + R) / (2 * R); };
  var curve = sv("polyline", {fill: "none", stroke: viridis(0.3), "stroke-width": 2, "data-role": "curve"});
  var dot = sv("circle", {r: 6, fill: viridis(0.85), stroke: "currentColor", "stroke-width": 1, "data-role": "marker"});
  var grid = sv("g"), ticks = sv("g");
  svg.appendChild(grid);
  svg.appendChild(curve);
  svg.appendChild(dot);
  svg.appendChild(ticks);
  [-R, -R / 2, 0, R / 2, R].forEach(function (o) {
    ticks.appendChild(sv("text", {x: x(o), y: top + plotH + 16, "text-anchor": "middle", "class": "ax-small"}, String(o)));
  });
  svg.appendChild(sv("text", {x: left + (W - left - right) / 2, y: top + plotH + 36, "text-anchor": "middle", "class": "ax-small"},
                     "offset i \u2212 j (key " + data.key + " before query " + data.query + ")"));
  svg.appendChild(sv("text", {x: 12, y: top + plotH / 2, transform: "rotate(-90 12 " + (top + plotH / 2) + ")",
                              "text-anchor": "middle", "class": "ax-small"}, "score"));
  root.appendChild(svg);
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);

  /* the vertical scale is fixed once (from i = the first position), so a change would show */
  var lo = Infinity, hi = -Infinity, o;
  for (o = -R; o <= R; o++) { var s0 = score(R, R - o); lo = Math.min(lo, s0); hi = Math.max(hi, s0); }
  var pad = 0.1 * (hi - lo || 1); lo -= pad; hi += pad;
  var y = function (s) { return top + plotH * (hi - s) / (hi - lo); };
  [lo + pad, (lo + hi) / 2, hi - pad].forEach(function (s) {
    grid.appendChild(sv("line", {x1: left - 4, x2: W - right, y1: y(s), y2: y(s), "class": "xp-grid"}));
    grid.appendChild(sv("text", {x: left - 6, y: y(s), "text-anchor": "end", "dominant-baseline": "middle", "class": "ax-small"}, fmt(s, 2)));
  });

  function update() {
    var pts = [];
    for (var o = -R; o <= R; o++) pts.push(x(o).toFixed(1) + "," + y(score(pos, pos - o)).toFixed(1));
    curve.setAttribute("points", pts.join(" "));
    var s = score(pos, pos - off);
    setAttrs(dot, {cx: x(off), cy: y(s)});
    posCtl.out.textContent = "i = " + pos;
    offCtl.out.textContent = String(off);
    root.setAttribute("data-score", String(s));
    readout.textContent = "query \u201c" + data.query + "\u201d at i = " + pos + ", key \u201c" + data.key +
      "\u201d at j = " + (pos - off) + ":  score = " + fmt(s, 4) + " (depends on i \u2212 j = " + off + " only)";
  }
  update();
}
