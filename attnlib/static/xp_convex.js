/* Chapter 1: scores -> softmax weights -> weighted average of 2-D value points.
 * data: {tokens, points: [[x, y]] (T_k), scores (T_k), hull: vertex indices, title} */
function view(root, data, uid) {
  var T = data.tokens.length, scores = data.scores.slice();
  var W = 380, H = 320, pad = 34;
  var xs = data.points.map(function (p) { return p[0]; }), ys = data.points.map(function (p) { return p[1]; });
  var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
  var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
  var span = Math.max(x1 - x0, y1 - y0, 1e-9);
  var sx = function (x) { return pad + (x - (x0 + x1) / 2 + span / 2) / span * (W - 2 * pad); };
  var sy = function (y) { return H - pad - (y - (y0 + y1) / 2 + span / 2) / span * (H - 2 * pad); };

  var body = el("div", {"class": "xp-row"});
  var svg = fluidSvg(W, H, {role: "img", "aria-label": "value points, their convex hull and the weighted average"});
  var hullPts = data.hull.map(function (j) { return sx(data.points[j][0]) + "," + sy(data.points[j][1]); }).join(" ");
  svg.appendChild(sv("polygon", {points: hullPts, "class": "xp-hull"}));
  var spokes = [], j;
  for (j = 0; j < T; j++) {
    var spoke = sv("line", {"class": "xp-spoke"});
    spokes.push(spoke);
    svg.appendChild(spoke);
  }
  for (j = 0; j < T; j++) {
    svg.appendChild(sv("circle", {cx: sx(data.points[j][0]), cy: sy(data.points[j][1]), r: 4, "class": "xp-point"}));
    svg.appendChild(sv("text", {x: sx(data.points[j][0]) + 6, y: sy(data.points[j][1]) - 6, "class": "ax"}, data.tokens[j]));
  }
  var star = sv("path", {d: "M0,-9 L2.6,-3 L8.6,-2.8 L4,1.6 L5.4,8 L0,4.6 L-5.4,8 L-4,1.6 L-8.6,-2.8 L-2.6,-3 Z",
                         "class": "xp-out", "data-role": "out"});
  svg.appendChild(star);
  body.appendChild(svg);

  var panel = el("div", {"class": "xp-panel"});
  var lo = Math.floor(Math.min.apply(null, scores)) - 4, hi = Math.ceil(Math.max.apply(null, scores)) + 4;
  var bars = [], wtexts = [], inputs = [], stexts = [];
  var grid = el("div", {"class": "xp-grid3"});
  grid.appendChild(el("span", {"class": "xp-head"}, "token"));
  grid.appendChild(el("span", {"class": "xp-head"}, "score (drag)"));
  grid.appendChild(el("span", {"class": "xp-head"}, ""));
  grid.appendChild(el("span", {"class": "xp-head"}, "softmax weight"));
  scores.forEach(function (s, k) {
    var id = uid + "-score-" + k;
    grid.appendChild(el("label", {"for": id, "class": "xp-tok"}, data.tokens[k]));
    var input = el("input", {type: "range", id: id, min: lo, max: hi, step: 0.01, value: s, "data-role": "score"});
    input.addEventListener("input", function () { scores[k] = parseFloat(input.value); update(); });
    inputs.push(input);
    grid.appendChild(input);
    var stext = el("output", {"for": id, "class": "xp-num-plain"});
    stexts.push(stext);
    grid.appendChild(stext);
    var cell = el("span", {"class": "xp-barcell"});
    var bar = el("span", {"class": "xp-bar", "data-role": "weight"});
    var wt = el("span", {"class": "xp-num"});
    cell.appendChild(bar); cell.appendChild(wt);
    bars.push(bar); wtexts.push(wt);
    grid.appendChild(cell);
  });
  panel.appendChild(grid);
  var reset = el("button", {type: "button", "data-role": "reset"}, "reset scores");
  reset.addEventListener("click", function () {
    scores = data.scores.slice();
    inputs.forEach(function (input, k) { input.value = scores[k]; });
    update();
  });
  panel.appendChild(reset);
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  panel.appendChild(readout);
  body.appendChild(panel);
  root.appendChild(body);

  var hullXY = data.hull.map(function (k) { return data.points[k]; });
  function inside(p) {  /* counter-clockwise hull: p is inside when it is left of every edge */
    if (hullXY.length < 3) return true;
    var tol = 1e-9 * span * span;
    for (var e = 0; e < hullXY.length; e++) {
      var a = hullXY[e], b = hullXY[(e + 1) % hullXY.length];
      if ((b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0]) < -tol) return false;
    }
    return true;
  }

  function update() {
    var w = softmax(scores, 1), ox = 0, oy = 0, total = 0, k;
    for (k = 0; k < T; k++) { ox += w[k] * data.points[k][0]; oy += w[k] * data.points[k][1]; total += w[k]; }
    var px = sx(ox), py = sy(oy);
    for (k = 0; k < T; k++) {
      bars[k].style.transform = "scaleX(" + w[k].toFixed(5) + ")";  /* no layout: composited */
      bars[k].setAttribute("data-weight", String(w[k]));
      wtexts[k].textContent = fmt(w[k], 3);
      stexts[k].textContent = fmt(scores[k], 2);
      setAttrs(spokes[k], {x1: px, y1: py, x2: sx(data.points[k][0]), y2: sy(data.points[k][1]),
                           "stroke-opacity": (0.1 + 0.9 * w[k]).toFixed(3), "stroke-width": (0.5 + 5 * w[k]).toFixed(2)});
    }
    star.setAttribute("transform", "translate(" + px.toFixed(2) + "," + py.toFixed(2) + ")");
    root.setAttribute("data-out", ox + "," + oy);
    readout.textContent = "weighted average = (" + fmt(ox, 3) + ", " + fmt(oy, 3) + "); weights sum to " +
      fmt(total, 4) + "; inside the hull: " + (inside([ox, oy]) ? "yes" : "no");
  }
  update();
}
