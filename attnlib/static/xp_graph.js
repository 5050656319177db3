/* Chapter 8: the weight matrix as a directed graph, thresholded with a slider.
 * data: {tokens (T), weights: T rows of T numbers, threshold, vmax, earlier: "above" or
 * "below"}.  The drawing follows attnlib.plotting.draw_attention_graph, the chapter's
 * static figure: nodes sit in reading order on a line; edge i -> j (query i attends to
 * key j) is an arc on the `earlier` side of the line when j < i (an earlier key), on the
 * other side when j > i, a small loop for i = j; width, opacity and viridis colour grow
 * with weights[i][j] (colour scale 0 .. vmax, 1 for weights, shown in a colour bar).  The T^2 arcs are
 * stroked on a <canvas>, batched by weight bin, so an update costs a few dozen strokes
 * rather than a style pass over T^2 SVG paths; nodes, labels and the colour bar are SVG. */
function view(root, data, uid) {
  var T = data.tokens.length, avail = columnWidth(root);
  var gap = Math.max(10, Math.min(60, Math.floor((avail - 60) / Math.max(1, T - 1))));
  var W = 30 + (T - 1) * gap + 30, arcH = Math.min(150, (T - 1) * gap / 2 + 20);
  var small = gap < 13, up = data.earlier === "above" ? -1 : 1;  /* canvas y grows downwards */
  /* room on each side of the line for the longest arc of weight > 0 (loops: earlier side) */
  var back = 0, fwd = 0, i, j;
  for (i = 0; i < T; i++) for (j = 0; j < T; j++) {
    if (data.weights[i][j] > 0) { if (j < i) back = Math.max(back, i - j); else if (j > i) fwd = Math.max(fwd, j - i); }
  }
  var reach = function (span) { return span > 0 ? arcH * span / Math.max(1, T - 1) + 8 + 8 : 8; };
  var earlierRoom = Math.max(24, reach(back)), laterRoom = reach(fwd);
  var base = (up < 0 ? earlierRoom : laterRoom) + 6, labelsY = base + (up < 0 ? laterRoom : earlierRoom) + 16;
  var barY = labelsY + Math.round(0.82 * labelRoom(data.tokens, small ? 10 : 12)) + 6, H = barY + 28;
  var xs = function (i) { return 30 + i * gap; };
  var threshold = data.threshold, vmax = data.vmax > 0 ? data.vmax : 1;

  var controls = el("div", {"class": "xp-controls"});
  var thr = slider(uid, "threshold", "keep edges with weight \u2265 ", 0, 1, 0.001, threshold,
                   function (v) { threshold = v; update(); });
  controls.appendChild(thr.wrap);
  root.appendChild(controls);
  root.appendChild(el("p", {"class": "xp-hint"}, "Edge i \u2192 j: query i attends to key j. Arcs " + data.earlier +
    " the line point back to an earlier token, arcs " + (up < 0 ? "below" : "above") + " it to a later one, small " +
    "loops are self-loops; colour and width grow with the weight, as in the static figures of this chapter."));

  var stage = el("div", {"class": "xp-stage", style: "width:" + W + "px;height:" + H + "px"});
  var dpr = window.devicePixelRatio || 1;
  var canvas = el("canvas", {width: Math.round(W * dpr), height: Math.round(H * dpr), "data-role": "edges",
                             role: "img", "aria-label": "attention graph: tokens in reading order, arcs for the edges kept",
                             style: "width:" + W + "px;height:" + H + "px"});
  stage.appendChild(canvas);
  var svg = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "aria-hidden": "true"});
  svg.appendChild(sv("line", {x1: 10, x2: W - 10, y1: base, y2: base, "class": "xp-grid", "data-role": "baseline"}));
  for (i = 0; i < T; i++) svg.appendChild(sv("circle", {cx: xs(i), cy: base, r: 3.5, "class": "xp-point"}));
  tokenLabels(svg, data.tokens, xs, labelsY, "bottom", small ? "ax-small" : "ax");
  colourBar(svg, uid, 10, barY, Math.min(200, W - 20), vmax, "weight");
  stage.appendChild(svg);
  root.appendChild(stage);
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);
  var ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);

  /* Edges sorted by weight, descending: those kept are a prefix. */
  var edges = [];
  for (i = 0; i < T; i++) for (j = 0; j < T; j++) edges.push({i: i, j: j, w: data.weights[i][j]});
  edges.sort(function (a, b) { return b.w - a.w; });
  var BINS = 40;
  function trace(path, e) {
    var a = xs(e.i), b = xs(e.j);
    if (e.i === e.j) {
      path.moveTo(a - 3, base);
      path.bezierCurveTo(a - 12, base + up * 22, a + 12, base + up * 22, a + 3, base);
    } else {
      var h = arcH * Math.abs(e.j - e.i) / Math.max(1, T - 1) + 8, sign = e.j < e.i ? up : -up;
      path.moveTo(a, base);
      path.quadraticCurveTo((a + b) / 2, base + sign * 2 * h, b, base);
    }
  }
  var state = {kept: 0};
  root.xpState = state;
  function update() {
    var keep = 0, loops = 0, mass = 0, k, paths = {};
    while (keep < edges.length && edges[keep].w >= threshold) keep++;
    for (k = 0; k < keep; k++) {
      var e = edges[k], bin = Math.min(BINS, Math.round(Math.min(1, e.w / vmax) * BINS));
      if (!paths[bin]) paths[bin] = new Path2D();
      trace(paths[bin], e);
      if (e.i === e.j) loops++;
      mass += e.w;
    }
    ctx.clearRect(0, 0, W, H);
    Object.keys(paths).map(Number).sort(function (a, b) { return a - b; }).forEach(function (bin) {
      var t = bin / BINS, c = viridisRGB(t);  /* light edges first, heavy ones on top */
      ctx.strokeStyle = "rgba(" + c[0] + "," + c[1] + "," + c[2] + "," + (0.25 + 0.75 * t).toFixed(3) + ")";
      ctx.lineWidth = 0.5 + 5 * t;
      ctx.stroke(paths[bin]);
    });
    state.kept = keep;
    thr.out.textContent = fmt(threshold, 3);
    root.setAttribute("data-edges", String(keep));
    readout.textContent = "edges kept: " + keep + " of " + T * T + " (" + loops + " self-loops); on average a token keeps " +
      fmt(mass / T, 3) + " of its outgoing weight (1 before thresholding)";
  }
  update();
}
