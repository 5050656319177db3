/* The circuit lab's models (chapter 7): the trained two-layer language model at 16 moments of
 * its training and the one-layer control, run by onnxruntime-web in a Web Worker.
 *
 * Served from _static/tiny/worker.js next to tiny.json and one <name>.onnx per model (written
 * at build by attnlib.circuit_export.write_site_files, each checked against PyTorch there),
 * worker_common.js and edits.js (attnlib.edits's rules and translation, mirrored).  onnxruntime-web is the vendored copy in _static/vendor/onnxruntime-web/.
 * Nothing is fetched from another host.  Float32 throughout, as in PyTorch.
 *
 * Messages in:  {id, cmd: "load"}
 *               {id, cmd: "run", model: <name>, items: [{tokens: [ids], edits: [edit, ...]}],
 *                last (optional: true returns only the last position's logits, no pattern or loss)}
 *                 every item has the same length T; an edit is attnlib.edits's spec
 *                 {layer, head (null: the residual stream entering that layer), mode, position?}
 *                 with mode "zero", "mean" (no source: the head's mean output over the chapter's
 *                 held-out repeated sequences, attnlib.transformer.reference_means, in tiny.json)
 *                 or "patch" with source {tokens: [ids], edits?} (the run whose activation is
 *                 patched in; same T; its own edits, heads switched off with "zero" or "mean",
 *                 apply in that run), checked by edits.js as the kernel checks them
 * Messages out: {id, progress: {loaded, total}}   while the models download
 *               {id, ok: true, info}               after "load" (tiny.json)
 *               {id, ok: true, result}             after "run":
 *                 {B, T, V, L, H, logits: Float32Array (B*T*V), pattern: Float32Array
 *                  (B*L*H*T*T, row-major: item, layer, head, query, key), loss: Float32Array
 *                  (B*(T-1), nats; entry i is the loss of token i + 1), ms}
 *               {id, ok: false, error}             a message for the reader
 */
"use strict";
var HERE = new URL("./", self.location.href);
var VENDOR = new URL("../vendor/onnxruntime-web/", HERE);
importScripts(new URL("ort.wasm.min.js", VENDOR).href, new URL("worker_common.js", HERE).href,
              new URL("edits.js", HERE).href);

var state = {info: null, sessions: {}, loading: null};

function load(id) {
  if (state.loading) return state.loading;
  state.loading = startModel(VENDOR, "tiny.json", "the circuit lab").then(function (info) {
    state.info = info;
    var total = info.models.reduce(function (s, m) { return s + m.bytes; }, 0), done = {};
    var name = "attnlib-tiny-" + info.digest.slice(0, 16);        /* every model's SHA-256 in one (tiny.json) */
    forgetOldCaches("attnlib-tiny-", name);
    return Promise.all(info.models.map(function (m) {
      return fetchBytes(new URL(m.name + ".onnx", HERE).href, name, function (loaded) {
        done[m.name] = loaded;
        var sum = 0;
        Object.keys(done).forEach(function (k) { sum += done[k]; });
        self.postMessage({id: id, progress: {loaded: sum, total: total}});
      }, m.sha256).then(function (bytes) {
        return ort.InferenceSession.create(new Uint8Array(bytes), {executionProviders: ["wasm"],
                                                                   graphOptimizationLevel: "all"});
      }).then(function (session) { state.sessions[m.name] = session; });
    }));
  }).then(function () { return state.info; }).catch(function (err) {
    state.loading = null;
    throw err;
  });
  return state.loading;
}

function modelInfo(name) {
  var found = state.info.models.filter(function (m) { return m.name === name; })[0];
  if (!found) throw new Error("no model called " + JSON.stringify(name) + "; the lab has " +
                              state.info.models.map(function (m) { return m.name; }).join(", "));
  return found;
}

function checkTokens(tokens, V, maxLen, what) {
  if (!Array.isArray(tokens) || !tokens.length) throw new Error(what + " must be a non-empty list of word ids");
  if (tokens.length > maxLen) throw new Error(what + " has " + tokens.length + " words; the model reads at most " + maxLen);
  tokens.forEach(function (t) {
    if (!(Number.isInteger(t) && t >= 0 && t < V)) throw new Error(what + " holds " + JSON.stringify(t) + ", not a word id 0.." + (V - 1));
  });
}

/* The edits of one item: attnlib.edits's rules (edits.js, the kernel's as_edits word for word),
 * then what this page's graph takes: a patch's source is {tokens: [ids]} of the same length, and
 * a mean is the model's reference means (tiny.json; a mean over other inputs runs in the kernel). */
function checkEdits(edits, L, H, T, V) {
  var checked = attnlibEdits.check(edits, {L: L, H: H, T: T});
  checked.forEach(function (e, i) {
    if (e.mode === "patch") {
      if (typeof e.source !== "object" || !Array.isArray(e.source.tokens)) throw new Error("edit " + i + ": a patch's source must be {tokens: [word ids]}, the run whose activations are patched in");
      checkTokens(e.source.tokens, V, T, "edit " + i + "'s source");
      if (e.source.tokens.length !== T) throw new Error("edit " + i + ": the source has " + e.source.tokens.length + " words, the run " + T);
      var own = e.source.edits === undefined || e.source.edits === null ? [] : e.source.edits;
      e.source = {tokens: e.source.tokens, edits: attnlibEdits.check(own, {L: L, H: H, T: T})};
      e.source.edits.forEach(function (s) {
        if (s.mode === "patch") throw new Error("edit " + i + ": the source run may switch heads off (zero or mean), not patch; patch from a run without patches");
        if (s.mode === "mean" && s.source !== null) throw new Error("edit " + i + ": on the page a mean in the source run is the model's reference means (leave out source)");
      });
      e.source.key = e.source.tokens.join(",") + "|" + e.source.edits.map(function (s) {
        return [s.layer, s.head, s.mode, s.position].join(":");
      }).join(";");
    } else if (e.mode === "mean" && e.source !== null) {
      throw new Error("edit " + i + ": on the page a mean is the model's reference means (leave out source); a mean over other inputs runs in the kernel");
    }
  });
  return checked;
}

function runBatch(session, items, L, H, T, dh, d) {
  var B = items.length;
  var tokens = new BigInt64Array(B * T);
  var headMask = new Float32Array(B * L * H * T), headValue = new Float32Array(B * L * H * T * dh);
  var residMask = new Float32Array(B * (L + 1) * T), residValue = new Float32Array(B * (L + 1) * T * d);
  items.forEach(function (item, b) {
    for (var t = 0; t < T; t++) tokens[b * T + t] = BigInt(item.tokens[t]);
    item.fill(b, headMask, headValue, residMask, residValue);
  });
  return session.run({
    tokens: new ort.Tensor("int64", tokens, [B, T]),
    head_mask: new ort.Tensor("float32", headMask, [B, L, H, T]),
    head_value: new ort.Tensor("float32", headValue, [B, L, H, T, dh]),
    resid_mask: new ort.Tensor("float32", residMask, [B, L + 1, T]),
    resid_value: new ort.Tensor("float32", residValue, [B, L + 1, T, d])
  });
}

function run(msg) {
  var info = state.info, m = modelInfo(msg.model), session = state.sessions[m.name];
  var L = m.n_layers, H = info.n_heads, dh = info.d_head, d = info.d_model, V = info.vocabulary.length;
  if (!Array.isArray(msg.items) || !msg.items.length) throw new Error("run needs a non-empty list of items");
  var T = msg.items[0].tokens ? msg.items[0].tokens.length : 0;
  var items = msg.items.map(function (item, b) {
    checkTokens(item.tokens, V, info.max_len, "item " + b);
    if (item.tokens.length !== T) throw new Error("every item of a batch must have the same length");
    return {tokens: item.tokens, edits: checkEdits(item.edits, L, H, T, V)};
  });
  /* the sources of the patches: each distinct one (its words and its own heads switched off) run once */
  var sources = {}, order = [];
  items.forEach(function (item) {
    item.edits.forEach(function (e) {
      if (e.mode !== "patch") return;
      if (!(e.source.key in sources)) { sources[e.source.key] = order.length; order.push(e.source); }
    });
  });
  var started = performance.now(), dims = {L: L, H: H, T: T, dh: dh, d: d};
  var first = order.length ? runBatch(session, order.map(function (source) {
    return {tokens: source.tokens, fill: function (b, hm, hv, rm, rv) {
      attnlibEdits.fill(source.edits, b, {headMask: hm, headValue: hv, residMask: rm, residValue: rv}, dims, {means: m.means});
    }};
  }), L, H, T, dh, d) : Promise.resolve(null);
  return first.then(function (ran) {
    var z = ran && ran.z.data, resid = ran && ran.resid.data;
    var src = {means: m.means, z: z, resid: resid,
               index: function (e) { return sources[e.source.key]; }};
    items.forEach(function (item) {
      item.fill = function (b, hm, hv, rm, rv) {
        attnlibEdits.fill(item.edits, b, {headMask: hm, headValue: hv, residMask: rm, residValue: rv},
                          {L: L, H: H, T: T, dh: dh, d: d}, src);
      };
    });
    return runBatch(session, items, L, H, T, dh, d);
  }).then(function (out) {
    var B = items.length, logits = out.logits.data;
    if (msg.last) {                          /* a patching table reads one position: send only that */
      var last = new Float32Array(B * V);
      for (var i = 0; i < B; i++) last.set(logits.subarray(((i + 1) * T - 1) * V, (i + 1) * T * V), i * V);
      return {B: B, T: T, V: V, L: L, H: H, logits: last, pattern: new Float32Array(0), loss: new Float32Array(0),
              last: true, ms: performance.now() - started};
    }
    var loss = new Float32Array(B * Math.max(T - 1, 0));
    for (var b = 0; b < B; b++) {
      for (var t = 0; t + 1 < T; t++) {       /* cross-entropy of token t + 1 from the logits at t */
        var base = (b * T + t) * V, mx = -Infinity, sum = 0, v;
        for (v = 0; v < V; v++) if (logits[base + v] > mx) mx = logits[base + v];
        for (v = 0; v < V; v++) sum += Math.exp(logits[base + v] - mx);
        loss[b * (T - 1) + t] = mx + Math.log(sum) - logits[base + items[b].tokens[t + 1]];
      }
    }
    return {B: B, T: T, V: V, L: L, H: H, logits: logits, pattern: out.pattern.data, loss: loss,
            ms: performance.now() - started};
  });
}

answerMessages(load, run, function (result) { return [result.logits.buffer, result.pattern.buffer, result.loss.buffer]; });
