/* Chapter 5: causal and padding masks on a T x T score matrix.
 * data: {tokens (T), scores: T rows of T numbers (null = -inf), pad: T 0/1 flags or null,
 *        title}.  Masked scores become -inf before the row softmax, so their weights are
 *        exactly 0 and each row is renormalised over the keys it may still see; a row
 *        with no key left gets all-zero weights.  The T x T cells are the pixels of a
 *        T x T <canvas> scaled up by CSS (4096 SVG rectangles would need a style pass per
 *        update); labels, row sums and the colour bar are SVG. */
function view(root, data, uid) {
  var T = data.tokens.length, causal = false, padding = data.pad !== null;
  /* cell size chosen for the column: labels (left), T cells and the row sums (70 px) fit */
  var avail = columnWidth(root), room12 = labelRoom(data.tokens, 12);
  var cell = Math.max(4, Math.min(28, Math.floor((avail - Math.max(60, room12) - 70) / T)));
  if (cell < 13) cell = Math.max(4, Math.min(28, Math.floor((avail - Math.max(60, labelRoom(data.tokens, 10)) - 70) / T)));
  var cls = cell < 13 ? "ax-small" : "ax";
  var room = labelRoom(data.tokens, cell < 13 ? 10 : 12), left = Math.max(60, room), top = Math.round(0.82 * room) + 24;
  var W = left + T * cell + 70, H = top + T * cell + 44, i, j;

  var controls = el("div", {"class": "xp-controls"});
  controls.appendChild(checkbox(uid, "causal", "causal mask (query i sees keys 0..i)", causal,
                                function (on) { causal = on; update(); }).wrap);
  var padBox = checkbox(uid, "padding", "padding mask (hide [PAD] keys)", padding,
                        function (on) { padding = on; update(); });
  if (data.pad === null) { padBox.input.disabled = true; padBox.input.checked = false; padding = false; }
  controls.appendChild(padBox.wrap);
  root.appendChild(controls);

  var stage = el("div", {"class": "xp-stage", style: "width:" + W + "px;height:" + H + "px"});
  var svg = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "aria-hidden": "true"});
  tokenLabels(svg, data.tokens, function (k) { return left + k * cell + cell / 2; }, top - 6, "top", cls);
  tokenLabels(svg, data.tokens, function (k) { return top + k * cell + cell / 2; }, left - 6, "left", cls);
  svg.appendChild(sv("text", {x: left + T * cell / 2, y: 12, "text-anchor": "middle", "class": "ax-small"}, "key j \u2192"));
  svg.appendChild(sv("text", {x: 4, y: top - 6, "class": "ax-small"}, "query i \u2193"));
  svg.appendChild(sv("text", {x: left + T * cell + 6, y: top - 6, "class": "ax-small"}, "row sum"));
  var sums = [];
  for (i = 0; i < T; i++) {
    sums.push(sv("text", {x: left + T * cell + 6, y: top + i * cell + cell / 2, "dominant-baseline": "middle",
                          "class": "ax-small", "data-role": "rowsum"}));
    svg.appendChild(sums[i]);
  }
  colourBar(svg, uid, left, top + T * cell + 10, Math.min(200, T * cell), 1, "weight (grey: masked)");
  stage.appendChild(svg);
  /* One canvas pixel per cell, scaled up by CSS with crisp edges. */
  var canvas = el("canvas", {width: T, height: T, "data-role": "heatmap", "class": "xp-pixels",
                             role: "img", "aria-label": "attention weights after masking; rows are queries, columns keys",
                             style: "left:" + left + "px;top:" + top + "px;width:" + T * cell + "px;height:" + T * cell + "px"});
  stage.appendChild(canvas);
  root.appendChild(stage);
  var ctx = canvas.getContext("2d"), image = ctx.createImageData(T, T), LUT = [];
  for (i = 0; i <= 255; i++) LUT.push(viridisRGB(i / 255));
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  var hover = el("p", {"class": "xp-readout", "data-role": "hover"}, "Hover over a cell to read its weight.");
  root.appendChild(readout);
  root.appendChild(hover);

  var state = {weights: [], masked: 0};
  root.xpState = state;
  function masked(qi, kj) {
    return data.scores[qi][kj] === null || (causal && kj > qi) || (padding && data.pad[kj] === 0);
  }
  function update() {
    var nMasked = 0, empty = 0, row = new Array(T);
    state.weights = [];
    for (i = 0; i < T; i++) {
      for (j = 0; j < T; j++) row[j] = masked(i, j) ? null : data.scores[i][j];
      var w = softmax(row, 1), total = 0;
      state.weights.push(Array.prototype.slice.call(w));
      for (j = 0; j < T; j++) {
        var off = row[j] === null;
        if (off) nMasked++;
        total += w[j];
        var px = 4 * (i * T + j), c = LUT[Math.round(255 * w[j])];
        if (off) { image.data[px] = image.data[px + 1] = image.data[px + 2] = 128; image.data[px + 3] = 72; }
        else { image.data[px] = c[0]; image.data[px + 1] = c[1]; image.data[px + 2] = c[2]; image.data[px + 3] = 255; }
      }
      if (total === 0) empty++;
      sums[i].textContent = fmt(total, 3);
    }
    ctx.putImageData(image, 0, 0);
    state.masked = nMasked;
    root.setAttribute("data-masked", String(nMasked));
    readout.textContent = "masked (grey) cells: " + nMasked + " of " + T * T + "; rows with every key masked: " +
      empty + (empty ? " (their weights are all 0)" : "") + "; every other row sums to 1";
  }
  canvas.addEventListener("mousemove", function (ev) {
    var rect = canvas.getBoundingClientRect();
    var qi = Math.floor((ev.clientY - rect.top) / cell), kj = Math.floor((ev.clientX - rect.left) / cell);
    if (qi < 0 || kj < 0 || qi >= T || kj >= T) return;
    hover.textContent = "query \u201c" + data.tokens[qi] + "\u201d (" + qi + ") \u2192 key \u201c" + data.tokens[kj] +
      "\u201d (" + kj + "): score " + fmt(data.scores[qi][kj], 3) + (masked(qi, kj) ? ", masked to -inf" : "") +
      ", weight " + fmt(state.weights[qi][kj], 4);
  });
  update();
}
