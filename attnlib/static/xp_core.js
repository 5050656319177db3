/* attnlib explorables: shared runtime (vanilla JS, no libraries, no network).
 * Python wraps this file, one view file and the view's data into a single IIFE per
 * instance, so nothing leaks into the page's global scope and two instances never
 * share state.  Every token or label reaches the DOM through textContent, never
 * innerHTML. */
var SVGNS = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  var node = document.createElement(tag);
  setAttrs(node, attrs);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function sv(tag, attrs, text) {
  var node = document.createElementNS(SVGNS, tag);
  setAttrs(node, attrs);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function setAttrs(node, attrs) {
  if (!attrs) return;
  for (var key in attrs) {
    if (Object.prototype.hasOwnProperty.call(attrs, key)) node.setAttribute(key, attrs[key]);
  }
}

/* Numerically stable softmax of scores / temperature, the same recipe as
 * attnlib.softmax: subtract the (finite) maximum, exponentiate, normalise.
 * null or -Infinity scores get weight exactly 0; a row whose every score is
 * masked gets all-zero weights (not NaN). */
function softmax(scores, temperature) {
  var n = scores.length, x = new Float64Array(n), m = -Infinity, i;
  var t = temperature === undefined ? 1 : temperature;
  for (i = 0; i < n; i++) {
    x[i] = scores[i] === null ? -Infinity : scores[i] / t;
    if (x[i] > m) m = x[i];
  }
  if (!isFinite(m)) m = 0;
  var total = 0, w = new Float64Array(n);
  for (i = 0; i < n; i++) { w[i] = Math.exp(x[i] - m); total += w[i]; }
  var norm = total > 0 ? total : 1;
  for (i = 0; i < n; i++) w[i] /= norm;
  return w;
}

/* Shannon entropy in nats, with 0 log 0 = 0 (attnlib.entropy). */
function entropy(w) {
  var h = 0;
  for (var i = 0; i < w.length; i++) if (w[i] > 0) h -= w[i] * Math.log(w[i]);
  return h;
}

/* matplotlib's viridis sampled at 9 stops, linearly interpolated; t in [0, 1]. */
var VIRIDIS = [[68, 1, 84], [71, 45, 123], [59, 82, 139], [44, 114, 142], [33, 145, 140],
               [40, 174, 128], [94, 201, 98], [173, 220, 48], [253, 231, 37]];
function viridisRGB(t) {
  if (!(t > 0)) t = 0;
  if (t > 1) t = 1;
  var s = t * (VIRIDIS.length - 1), k = Math.min(Math.floor(s), VIRIDIS.length - 2), f = s - k;
  var a = VIRIDIS[k], b = VIRIDIS[k + 1];
  return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])), Math.round(a[2] + f * (b[2] - a[2]))];
}
function viridis(t) { var c = viridisRGB(t); return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; }

/* A horizontal viridis colour bar from 0 to vmax, drawn into an <svg> group. */
function colourBar(parent, uid, x, y, width, vmax, label) {
  var defs = sv("defs");
  var grad = sv("linearGradient", {id: uid + "-cbar", x1: "0", x2: "1", y1: "0", y2: "0"});
  for (var k = 0; k <= 8; k++) grad.appendChild(sv("stop", {offset: (k / 8).toFixed(3), "stop-color": viridis(k / 8)}));
  defs.appendChild(grad);
  parent.appendChild(defs);
  parent.appendChild(sv("rect", {x: x, y: y, width: width, height: 8, fill: "url(#" + uid + "-cbar)"}));
  parent.appendChild(sv("text", {x: x, y: y + 20, "class": "ax-small"}, "0"));
  parent.appendChild(sv("text", {x: x + width, y: y + 20, "text-anchor": "end", "class": "ax-small"}, fmt(vmax, 2)));
  parent.appendChild(sv("text", {x: x + width / 2, y: y + 20, "text-anchor": "middle", "class": "ax-small"}, label));
}

function fmt(x, digits) {
  if (x === null || x === -Infinity) return "-inf";
  return Number(x).toFixed(digits === undefined ? 3 : digits);
}

/* A labelled <input type=range>; onInput receives the numeric value. */
function slider(uid, name, label, min, max, step, value, onInput) {
  var id = uid + "-" + name;
  var wrap = el("div", {"class": "xp-control"});
  wrap.appendChild(el("label", {"for": id}, label));
  var input = el("input", {type: "range", id: id, min: min, max: max, step: step, value: value,
                           "data-role": name});
  var out = el("output", {"for": id, "data-role": name + "-value"});
  wrap.appendChild(input);
  wrap.appendChild(out);
  input.addEventListener("input", function () { onInput(parseFloat(input.value)); });
  return {wrap: wrap, input: input, out: out};
}

function checkbox(uid, name, label, checked, onChange) {
  var id = uid + "-" + name;
  var wrap = el("div", {"class": "xp-control"});
  var input = el("input", {type: "checkbox", id: id, "data-role": name});
  input.checked = !!checked;
  wrap.appendChild(input);
  wrap.appendChild(el("label", {"for": id}, label));
  input.addEventListener("change", function () { onChange(input.checked); });
  return {wrap: wrap, input: input};
}

/* Token labels along an axis.  side: "left" (row labels, right-aligned), "top" (column
 * labels rising to the right) or "bottom" (column labels falling to the left).  Long
 * tokens are shortened for the axis; the full text stays in a <title> tooltip.  Text is
 * always set with textContent. */
function shortLabel(tok) { return tok.length > 14 ? tok.slice(0, 13) + "\u2026" : tok; }
function tokenLabels(parent, tokens, pos, fixed, side, cls) {
  for (var i = 0; i < tokens.length; i++) {
    var p = pos(i), attrs;
    if (side === "left") attrs = {x: fixed, y: p, "text-anchor": "end", "dominant-baseline": "middle"};
    else if (side === "top") attrs = {x: p, y: fixed, "text-anchor": "start", transform: "rotate(-55 " + p + " " + fixed + ")"};
    else attrs = {x: p, y: fixed, "text-anchor": "end", "dominant-baseline": "middle",
                  transform: "rotate(-55 " + p + " " + fixed + ")"};
    attrs["class"] = cls || "ax";
    var text = sv("text", attrs, shortLabel(tokens[i]));
    if (tokens[i].length > 14) text.appendChild(sv("title", null, tokens[i]));
    parent.appendChild(text);
  }
}

/* Room needed by the longest (shortened) label, in pixels, for a font of `size` px. */
function labelRoom(tokens, size) {
  var n = 1;
  for (var i = 0; i < tokens.length; i++) n = Math.max(n, shortLabel(tokens[i]).length);
  return Math.ceil(0.62 * size * n) + 10;
}
