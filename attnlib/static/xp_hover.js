/* Hover (or focus) a token to see its row of a real head; with several heads, a menu picks the head.
 * One view for explorables.head_hover (one head, chapter 9) and explorables.induction_heads
 * (every head of a small model, chapter 7).
 * data: {tokens (T), query: initial row, vmax: top of the heatmap's colour scale, and either
 *        weights: T rows of T numbers (one head) or heads: [{label, weights}] with head: initial head} */
function view(root, data, uid) {
  var T = data.tokens.length, i, j, k;
  var heads = data.heads || [{label: "", weights: data.weights}];
  var head = data.heads ? data.head : 0, current = data.query;
  var picker = null;
  if (heads.length > 1) {
    var controls = el("div", {"class": "xp-controls"}), wrap = el("div", {"class": "xp-control"});
    wrap.appendChild(el("label", {"for": uid + "-head"}, "head "));
    picker = el("select", {id: uid + "-head", "data-role": "head"});
    heads.forEach(function (h, n) {
      var opt = el("option", {value: String(n)}, h.label);
      if (n === head) opt.selected = true;
      picker.appendChild(opt);
    });
    wrap.appendChild(picker);
    controls.appendChild(wrap);
    root.appendChild(controls);
  }

  var sentence = el("div", {"class": "xp-tokens", "data-role": "tokens"});
  var chips = [], names = tokenNames(data.tokens);
  for (j = 0; j < T; j++) {
    /* named by its content, so the name begins with what the chip shows (the word, then the
     * weight) and goes on in text only a screen reader reads: "the 0.12 (position 5): weight
     * from “it”; show where “the” looks" (an aria-label would hide the visible words) */
    var chip = el("span", {"class": "xp-chip", tabindex: "0", "data-j": String(j), role: "button",
                           "aria-pressed": "false"});
    chip.appendChild(el("span", {"class": "xp-chip-tok"}, data.tokens[j]));
    var num = el("span", {"class": "xp-chip-num"});
    chip.appendChild(num);
    var spoken = el("span", {"class": "xp-sr"}, names[j].slice(data.tokens[j].length) + ": show where it looks");
    chip.appendChild(spoken);
    chips.push({node: chip, num: num, spoken: spoken, name: names[j]});
    sentence.appendChild(chip);
  }
  root.appendChild(el("p", {"class": "xp-hint"}, (picker ? "Pick a head, then hover" : "Hover") +
    " over a token (or focus it with Tab) to colour every token by the weight it receives from it."));
  root.appendChild(sentence);

  var room = labelRoom(data.tokens, 10), left = Math.max(50, room), top = Math.round(0.82 * room) + 10;
  var cell = Math.max(5, Math.min(22, Math.floor((Math.min(460, columnWidth(root)) - left - 20) / T)));
  var W = left + T * cell + 20, H = top + T * cell + 40;
  var svg = fluidSvg(W, H, {role: "img", "aria-label": "the " + (picker ? "picked " : "") +
                            "head's full weight matrix; the hovered query's row is outlined"});
  var rects = [];
  for (i = 0; i < T; i++) {
    rects.push([]);
    for (j = 0; j < T; j++) {
      var r = sv("rect", {x: left + j * cell, y: top + i * cell, width: cell, height: cell, "data-role": "cell"});
      rects[i].push(r);
      svg.appendChild(r);
    }
  }
  var every = Math.max(1, Math.ceil(12 / cell));   /* labels never closer than a 12 px line */
  tokenLabels(svg, data.tokens, function (n) { return left + n * cell + cell / 2; }, top - 6, "top", "ax-small", every);
  tokenLabels(svg, data.tokens, function (n) { return top + n * cell + cell / 2; }, left - 6, "left", "ax-small", every);
  var outline = sv("rect", {x: left - 2, width: T * cell + 4, height: cell, "class": "xp-outline", "data-role": "row"});
  svg.appendChild(outline);
  colourBar(svg, uid, left, top + T * cell + 10, Math.min(180, T * cell), data.vmax, "weight");
  root.appendChild(svg);
  var readout = el("p", {"class": "xp-readout", "data-role": "readout", "aria-live": "polite"});
  root.appendChild(readout);

  var DARK = [17, 17, 17, 1];
  function paint() {  /* one colour scale, 0..vmax, whichever head is shown */
    var w = heads[head].weights;
    for (i = 0; i < T; i++) for (j = 0; j < T; j++) rects[i][j].setAttribute("fill", viridis(w[i][j] / (data.vmax || 1)));
    root.setAttribute("data-head", String(head));
  }
  function select(q) {
    var w = heads[head].weights[q], best = [];
    var behind = opaqueBackground(root), ink = parseRGB(window.getComputedStyle(root).color) || [0, 0, 0, 1];
    current = q;
    var rowMax = Math.max.apply(null, w) || 1;
    for (k = 0; k < T; k++) {
      var c = chips[k];
      var alpha = 0.9 * w[k] / rowMax, fill = blend([255, 140, 0, alpha], behind);
      /* where neither ink reaches 4.5:1 (mid orange on a dark page), deepen the orange a little
         until near-black text does: the number under the token carries the exact weight */
      while (Math.max(contrast(ink, fill), contrast(DARK, fill)) < 4.5 && alpha < 1) {
        alpha = Math.min(1, alpha + 0.05);
        fill = blend([255, 140, 0, alpha], behind);
      }
      c.node.style.backgroundColor = "rgba(255, 140, 0, " + alpha.toFixed(3) + ")";
      /* the page's ink, or near-black where that reads better on the orange (both themes) */
      c.node.style.color = contrast(ink, fill) >= contrast(DARK, fill) ? "" : "rgb(17,17,17)";
      c.node.setAttribute("data-weight", String(w[k]));
      c.node.classList.toggle("xp-query", k === q);
      c.node.setAttribute("aria-pressed", k === q ? "true" : "false");
      c.num.textContent = fmt(w[k], 2);
      /* the word (with its position when it repeats) and the number shown under it */
      c.spoken.textContent = c.name.slice(data.tokens[k].length) + ": weight from \u201c" + data.tokens[q] +
                             "\u201d; show where \u201c" + data.tokens[k] + "\u201d looks";
      best.push(k);
    }
    best.sort(function (a, b) { return w[b] - w[a]; });
    outline.setAttribute("y", top + q * cell);
    root.setAttribute("data-query", String(q));
    readout.textContent = (heads[head].label ? heads[head].label + ": " : "") + "query \u201c" + data.tokens[q] +
      "\u201d (" + q + ") looks most at: " +
      best.slice(0, 3).map(function (n) { return "\u201c" + data.tokens[n] + "\u201d (" + n + ") " + fmt(w[n], 3); }).join(", ");
  }
  if (picker) picker.addEventListener("change", function () { head = parseInt(picker.value, 10); paint(); select(current); });
  sentence.addEventListener("mouseover", pick);
  sentence.addEventListener("focusin", pick);
  function pick(ev) {
    var t = ev.target.closest ? ev.target.closest(".xp-chip") : null;
    if (t && sentence.contains(t)) select(+t.getAttribute("data-j"));
  }
  paint();
  select(data.query);
  /* the reader may switch the page between light and dark: re-pick the ink of the chips */
  if (window.MutationObserver) {
    new MutationObserver(function () { select(current); })
      .observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme", "class"]});
  }
}
