/* Chapter 7: the weight matrix as a directed graph, thresholded with a slider.
 * data: {tokens (T), weights: T rows of T numbers, threshold, title}.  Nodes sit in
 * reading order on a line; edge i -> j (query i attends to key j) is an arc whose width,
 * opacity and colour grow with weights[i][j]: above the line when j < i (an earlier
 * token), below when j > i (a later token), a small loop for i = j; the colour is viridis
 * on 0..1, the convention of the static figures (attnlib.plotting.draw_attention_graph), so
 * the same head looks the same in both.  The T^2 arcs are stroked on a
 * <canvas>, batched by direction and weight bin, so an update costs a few dozen strokes
 * rather than a style pass over T^2 SVG paths; nodes and labels are SVG on top. */
function view(root, data, uid) {
  var T = data.tokens.length, gap = Math.max(12, Math.min(60, Math.floor(700 / T)));
  var W = 40 + (T - 1) * gap + 40, arcH = Math.min(150, (T - 1) * gap / 2 + 20);
  var base = arcH + 14, H = base + arcH + 22 + Math.round(0.82 * labelRoom(data.tokens, gap < 13 ? 10 : 12));
  var xs = function (i) { return 40 + i * gap; };
  var threshold = data.threshold, i, j;

  var controls = el("div", {"class": "xp-controls"});
  var thr = slider(uid, "threshold", "keep edges with weight \u2265 ", 0, 1, 0.001, threshold,
                   function (v) { threshold = v; update(); });
  controls.appendChild(thr.wrap);
  root.appendChild(controls);
  root.appendChild(el("p", {"class": "xp-hint"}, "Edge i \u2192 j: query i attends to key j. Arcs above the line " +
    "point to an earlier token, arcs below to a later one, small loops are self-loops; heavier edges are " +
    "wider and brighter (dark purple \u2192 yellow, as in the figures of this chapter)."));

  var stage = el("div", {"class": "xp-stage", style: "width:" + W + "px;height:" + H + "px"});
  var dpr = window.devicePixelRatio || 1;
  var canvas = el("canvas", {width: Math.round(W * dpr), height: Math.round(H * dpr), "data-role": "edges",
                             role: "img", "aria-label": "attention graph: tokens in reading order, arcs for the edges kept",
                             style: "width:" + W + "px;height:" + H + "px"});
  stage.appendChild(canvas);
  var svg = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "aria-hidden": "true"});
  svg.appendChild(sv("line", {x1: 20, x2: W - 20, y1: base, y2: base, "class": "xp-grid"}));
  for (i = 0; i < T; i++) svg.appendChild(sv("circle", {cx: xs(i), cy: base, r: 3.5, "class": "xp-point"}));
  tokenLabels(svg, data.tokens, xs, base + arcH + 16, "bottom", gap < 13 ? "ax-small" : "ax");
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
  /* viridis at 0, 1/8, ..., 1 (matplotlib), interpolated per weight bin: the static figures' colours */
  var VIRIDIS = [[68, 1, 84], [71, 45, 123], [59, 82, 139], [44, 114, 142], [33, 145, 140], [40, 174, 128],
                 [94, 201, 98], [173, 220, 48], [253, 231, 37]];
  function viridis(w) {
    var x = Math.max(0, Math.min(1, w)) * (VIRIDIS.length - 1), k = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - k;
    return [0, 1, 2].map(function (c) { return Math.round(VIRIDIS[k][c] + f * (VIRIDIS[k + 1][c] - VIRIDIS[k][c])); }).join(",");
  }
  function trace(path, e) {
    var a = xs(e.i), b = xs(e.j);
    if (e.i === e.j) {
      path.moveTo(a - 3, base);
      path.bezierCurveTo(a - 12, base - 22, a + 12, base - 22, a + 3, base);
    } else {
      var h = arcH * Math.abs(e.j - e.i) / Math.max(1, T - 1) + 8, sign = e.j < e.i ? -1 : 1;  /* earlier key: up */
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
      var e = edges[k], dir = e.i === e.j ? 2 : (e.j > e.i ? 0 : 1), bin = Math.min(BINS, Math.round(e.w * BINS));
      var key = bin * 3 + dir;
      if (!paths[key]) paths[key] = new Path2D();
      trace(paths[key], e);
      if (dir === 2) loops++;
      mass += e.w;
    }
    ctx.clearRect(0, 0, W, H);
    Object.keys(paths).map(Number).sort(function (a, b) { return a - b; }).forEach(function (key) {
      var bin = Math.floor(key / 3), w = bin / BINS;  /* light edges first, heavy ones on top */
      ctx.strokeStyle = "rgba(" + viridis(w) + "," + (0.25 + 0.75 * w).toFixed(3) + ")";
      ctx.lineWidth = 0.4 + 7 * w;
      ctx.stroke(paths[key]);
    });
    state.kept = keep;
    thr.out.textContent = fmt(threshold, 3);
    root.setAttribute("data-edges", String(keep));
    readout.textContent = "edges kept: " + keep + " of " + T * T + " (" + loops + " self-loops); on average a token keeps " +
      fmt(mass / T, 3) + " of its outgoing weight (1 before thresholding)";
  }
  update();
}
