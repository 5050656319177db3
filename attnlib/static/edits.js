/* attnlib.edits on the page: the one edit vocabulary, checked and translated into an exported
 * graph's inputs exactly as the kernel does it.
 *
 * This file mirrors attnlib/edits.py: check() is as_edits() (same rules, same order of checks,
 * the same messages word for word) and fill() is graph_inputs() for one item of a batch.
 * tests/test_edits_mirror.py runs both on the same generated edit lists, valid and invalid, and
 * requires the same result or the same refusal.  Change one, change the other.
 *
 * The rules: negative layers, heads and positions count from the end and are normalised; two
 * edits of one place (the same head, or the same residual entry, at a common position; a
 * whole-head edit covers every position) are refused whatever their order; "mean" takes an
 * optional source, "patch" needs one, "zero" takes none.
 *
 * Loaded by the workers with importScripts (a global attnlibEdits) and by node (module.exports).
 */
"use strict";
var attnlibEdits = (function () {
  var MODES = ["zero", "mean", "patch"];
  var KEYS = ["layer", "head", "mode", "source", "position"];
  var EXAMPLE = '{"layer": 1, "head": 0, "mode": "zero"}';

  /* A value as the messages quote it (attnlib.edits.show). */
  function show(x) {
    if (x === null || x === undefined) return "null";
    if (typeof x === "string" || typeof x === "boolean") return JSON.stringify(x);
    if (typeof x === "number") return Number.isFinite(x) ? JSON.stringify(x) : String(x);
    if (Array.isArray(x)) return "a list";
    if (typeof x === "object") return "an object";
    return typeof x;
  }

  function isInt(x) { return typeof x === "number" && Number.isInteger(x); }

  function index(value, size, what, i, note) {
    if (!isInt(value)) throw new Error("edit " + i + ": " + what + " must be an int, got " + show(value));
    if (value < -size || value >= size) {
      throw new Error("edit " + i + ": " + what + " " + value + " is outside 0.." + (size - 1) +
                      " (or -" + size + "..-1 from the end)" + (note || ""));
    }
    return ((value % size) + size) % size;
  }

  function place(e) {
    return e.head !== null ? "head (" + e.layer + ", " + e.head + ")"
                           : "the residual stream entering layer " + e.layer;
  }

  /* as_edits(edits, L, H, T=T): checked edits {layer, head (null: the residual stream), mode,
   * position (null: every position), source}, every index normalised.  Throws an Error whose
   * message is the kernel's. */
  function check(edits, dims) {
    var L = dims.L, H = dims.H, T = dims.T;
    if (edits === undefined || edits === null) return [];
    if (!Array.isArray(edits)) throw new Error("edits must be a list of edits such as [" + EXAMPLE + "], got " + show(edits));
    var out = [];
    edits.forEach(function (e, i) {
      if (e === null || typeof e !== "object" || Array.isArray(e)) {
        throw new Error("edit " + i + " must be an object such as " + EXAMPLE + ", got " + show(e));
      }
      var unknown = Object.keys(e).filter(function (k) { return KEYS.indexOf(k) < 0; }).sort();
      if (unknown.length) {
        throw new Error("edit " + i + ": unknown key " + unknown.map(function (k) { return JSON.stringify(k); }).join(", ") +
                        "; an edit has " + KEYS.join(", "));
      }
      if (!("layer" in e) || !("mode" in e)) {
        throw new Error("edit " + i + ' needs "layer" and "mode" (and "head": an int, or None/null for the residual stream)');
      }
      var mode = e.mode;
      if (MODES.indexOf(mode) < 0) throw new Error("edit " + i + ': mode must be "zero", "mean" or "patch", got ' + show(mode));
      var head = (e.head === undefined || e.head === null) ? null : e.head, layer;
      if (head === null) {
        layer = index(e.layer, L + 1, "layer", i, "; the residual stream has " + (L + 1) + " entries, the last after the last block");
        if (mode !== "patch") throw new Error("edit " + i + ': the residual stream (head None/null) can only be patched, got mode "' + mode + '"');
      } else {
        head = index(head, H, "head", i);
        layer = index(e.layer, L, "layer", i);
      }
      var position = (e.position === undefined || e.position === null) ? null : e.position;
      if (position !== null) {
        if (!isInt(position)) throw new Error("edit " + i + ": position must be an int or None/null, got " + show(position));
        if (position < -T || position >= T) {
          throw new Error("edit " + i + ": position " + position + " is outside the " + T + " tokens (0.." + (T - 1) +
                          ", or -" + T + "..-1 from the end)");
        }
        position = ((position % T) + T) % T;
      }
      var source = (e.source === undefined || e.source === null) ? null : e.source;
      if (mode === "patch" && source === null) throw new Error("edit " + i + ': mode "patch" needs a source: the run whose activations are patched in');
      if (mode === "zero" && source !== null) throw new Error("edit " + i + ': mode "zero" takes no source');
      var edit = {layer: layer, head: head, mode: mode, position: position, source: source};
      out.forEach(function (other, j) {
        if (other.layer === layer && other.head === head &&
            (other.position === null || position === null || other.position === position)) {
          var at = position !== null ? position : other.position;
          throw new Error("edits " + j + " and " + i + " both edit " + place(edit) + " " +
                          (at === null ? "at every position" : "at position " + at) +
                          ": the result would depend on their order; give each place one edit");
        }
      });
      out.push(edit);
    });
    return out;
  }

  /* graph_inputs for item b of a batch: writes the checked edits into the graph's inputs.
   *   dims {L, H, T, dh, d}; arrays {headMask (B*L*H*T), headValue (B*L*H*T*dh),
   *   residMask (B*(L+1)*T), residValue (B*(L+1)*T*d)}, Float32Array;
   *   src {means: L*H*dh (the model's reference means), index(edit) -> the row of the patch
   *   source in z (S*L*H*T*dh) and resid (S*(L+1)*T*d), the sources' intact activations}. */
  function fill(checked, b, arrays, dims, src) {
    var L = dims.L, H = dims.H, T = dims.T, dh = dims.dh, d = dims.d;
    checked.forEach(function (e) {
      var s = e.mode === "patch" ? src.index(e) : -1;
      for (var t = 0; t < T; t++) {
        if (e.position !== null && t !== e.position) continue;
        if (e.head === null) {
          arrays.residMask[(b * (L + 1) + e.layer) * T + t] = 1;
          var to = ((b * (L + 1) + e.layer) * T + t) * d, from = ((s * (L + 1) + e.layer) * T + t) * d;
          for (var k = 0; k < d; k++) arrays.residValue[to + k] = src.resid[from + k];
          continue;
        }
        var cell = ((b * L + e.layer) * H + e.head) * T + t;
        arrays.headMask[cell] = 1;
        for (var c = 0; c < dh; c++) {
          arrays.headValue[cell * dh + c] = e.mode === "zero" ? 0
            : e.mode === "mean" ? src.means[(e.layer * H + e.head) * dh + c]
            : src.z[(((s * L + e.layer) * H + e.head) * T + t) * dh + c];
        }
      }
    });
  }

  return {MODES: MODES, KEYS: KEYS, show: show, check: check, fill: fill};
})();
if (typeof module !== "undefined" && module.exports) module.exports = attnlibEdits;
