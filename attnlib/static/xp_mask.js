/* Chapter 5: causal and padding masks, and single cells, on a T x T score matrix.
 * data: {tokens (T), scores: T rows of T numbers (null = -inf), pad: T 0/1 flags or null,
 *        editable: whether a cell can be removed by hand, title}.  Masked scores become
 *        -inf before the row softmax, so their weights are exactly 0 and each row is
 *        renormalised over the keys it may still see; a row with no key left gets all-zero
 *        weights.  The T x T cells are the pixels of a T x T <canvas> scaled up by CSS (4096
 *        SVG rectangles would need a style pass per update); labels, row sums and the colour
 *        bar are SVG.  Over the canvas lies a transparent ARIA grid of T x T cells with a
 *        roving tabindex: the grid is one Tab stop, the arrow keys move its cursor (Home/End
 *        to the row's ends), Space or Enter removes or restores the cell, and a focused or
 *        hovered cell is read out in a polite live region. */
function view(root, data, uid) {
  var T = data.tokens.length, causal = false, padding = data.pad !== null, editable = data.editable !== false;
  var removed = new Uint8Array(T * T), cursor = [0, 0];  /* cells removed by hand; the grid's cursor (query, key) */
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
  if (editable) {
    var resetCells = el("button", {type: "button", "data-role": "reset-cells"}, "restore every cell");
    resetCells.addEventListener("click", function () { removed.fill(0); update(); });
    controls.appendChild(resetCells);
  }
  root.appendChild(controls);
  root.appendChild(el("p", {"class": "xp-hint"}, editable ?
    "Click or tap a cell to remove that key for that query (again to restore it), or Tab to the grid, " +
    "move with the arrow keys and press Space. Hover over or focus a cell to read its weight." :
    "Hover over a cell, or Tab to the grid and move with the arrow keys, to read its weight."));

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
  /* the cells, for the keyboard, the pointer and screen readers: transparent over the canvas */
  var grid = el("div", {"class": "xp-cellgrid", role: "grid", "data-role": "cells",
                        "aria-label": "mask grid: rows are queries, columns are keys" +
                          (editable ? "; arrow keys move, Space removes or restores a cell" : "; arrow keys move"),
                        style: "left:" + left + "px;top:" + top + "px;grid-template-columns:repeat(" + T + "," + cell +
                          "px);grid-template-rows:repeat(" + T + "," + cell + "px)"});
  var cells = [];
  for (i = 0; i < T; i++) {
    var rowEl = el("div", {role: "row", style: "display:contents"});
    for (j = 0; j < T; j++) {
      var c = el("div", {"class": "xp-cell", role: "gridcell", tabindex: i === 0 && j === 0 ? "0" : "-1",
                         "data-i": String(i), "data-j": String(j)});
      cells.push(c);
      rowEl.appendChild(c);
    }
    grid.appendChild(rowEl);
  }
  stage.appendChild(grid);
  root.appendChild(stage);
  var ctx = canvas.getContext("2d"), image = ctx.createImageData(T, T), LUT = [];
  for (i = 0; i <= 255; i++) LUT.push(viridisRGB(i / 255));
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  var hover = el("p", {"class": "xp-readout", "data-role": "hover", "aria-live": "polite"},
                  "Hover over or focus a cell to read its weight.");
  root.appendChild(readout);
  root.appendChild(hover);

  var state = {weights: [], masked: 0};
  root.xpState = state;
  function reasons(qi, kj) {  /* what removes cell (qi, kj), in words; empty when it is kept */
    var why = [];
    if (data.scores[qi][kj] === null) why.push("its score is -inf");
    if (causal && kj > qi) why.push("the causal mask");
    if (padding && data.pad[kj] === 0) why.push("the padding mask");
    if (removed[qi * T + kj]) why.push("removed by hand");
    return why;
  }
  function masked(qi, kj) {
    return data.scores[qi][kj] === null || (causal && kj > qi) || (padding && data.pad[kj] === 0) || removed[qi * T + kj] === 1;
  }
  function describe(qi, kj) {
    var why = reasons(qi, kj);
    return "query \u201c" + data.tokens[qi] + "\u201d (" + qi + ") \u2192 key \u201c" + data.tokens[kj] +
      "\u201d (" + kj + "): score " + fmt(data.scores[qi][kj], 3) + (why.length ? ", masked to -inf (" + why.join(", ") + ")" : ", kept") +
      ", weight " + fmt(state.weights[qi][kj], 4);
  }
  function cellAt(qi, kj) { return cells[qi * T + kj]; }
  function moveCursor(qi, kj, focus) {
    cellAt(cursor[0], cursor[1]).setAttribute("tabindex", "-1");
    cellAt(cursor[0], cursor[1]).classList.remove("xp-cursor");
    cursor = [qi, kj];
    var c = cellAt(qi, kj);
    c.setAttribute("tabindex", "0");
    c.classList.add("xp-cursor");
    c.setAttribute("aria-label", describe(qi, kj));
    root.setAttribute("data-cursor", qi + "," + kj);
    if (focus && document.activeElement !== c) c.focus();
    hover.textContent = describe(qi, kj);
  }
  function toggle(qi, kj) {
    if (!editable) return;
    removed[qi * T + kj] ^= 1;
    update();
    moveCursor(qi, kj, false);
  }
  grid.addEventListener("keydown", function (ev) {
    var qi = cursor[0], kj = cursor[1], moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
    if (moves[ev.key]) { qi += moves[ev.key][0]; kj += moves[ev.key][1]; }
    else if (ev.key === "Home") kj = 0;
    else if (ev.key === "End") kj = T - 1;
    else if (ev.key === " " || ev.key === "Enter") { ev.preventDefault(); toggle(qi, kj); return; }
    else return;
    ev.preventDefault();
    moveCursor(Math.max(0, Math.min(T - 1, qi)), Math.max(0, Math.min(T - 1, kj)), true);
  });
  grid.addEventListener("focusin", function (ev) {
    var t = ev.target;
    if (t && t.getAttribute && t.getAttribute("role") === "gridcell") moveCursor(+t.getAttribute("data-i"), +t.getAttribute("data-j"), false);
  });
  grid.addEventListener("click", function (ev) {
    var t = ev.target && ev.target.closest ? ev.target.closest(".xp-cell") : null;
    if (!t) return;
    var qi = +t.getAttribute("data-i"), kj = +t.getAttribute("data-j");
    moveCursor(qi, kj, true);
    toggle(qi, kj);
  });
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
    root.setAttribute("data-off", String(removed.reduce(function (a, b) { return a + b; }, 0)));
    state.off = Array.prototype.slice.call(removed);
    readout.textContent = "masked (grey) cells: " + nMasked + " of " + T * T + "; rows with every key masked: " +
      empty + (empty ? " (their weights are all 0)" : "") + "; every other row sums to 1";
  }
  grid.addEventListener("mousemove", function (ev) {
    var t = ev.target && ev.target.closest ? ev.target.closest(".xp-cell") : null;
    if (t) hover.textContent = describe(+t.getAttribute("data-i"), +t.getAttribute("data-j"));
  });
  update();
  cellAt(0, 0).setAttribute("aria-label", describe(0, 0));
}
