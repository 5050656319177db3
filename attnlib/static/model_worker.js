/* attnlib's in-page model: the course's encoder (all-MiniLM-L6-v2) run by onnxruntime-web in
 * a Web Worker, so the page never freezes while it loads or runs.
 *
 * Served from _static/model/worker.js next to encoder.onnx, vocab.txt, model.json and
 * wordpiece.js (written at build by attnlib.encoder.browser.write_site_files); onnxruntime-web
 * is the vendored copy in _static/vendor/onnxruntime-web/.  Nothing is fetched from another
 * host.  Single-threaded WebAssembly (no SharedArrayBuffer, no cross-origin isolation needed).
 *
 * Messages in:  {id, cmd: "load"}
 *               {id, cmd: "run", textA, textB (or null), batch (optional: B lists of edits in
 *                attnlib.edits's spec, one run each; the exported encoder takes zero ablation of
 *                whole heads, {layer, head, mode: "zero"}; default one intact run)}
 * Messages out: {id, progress: {loaded, total}}            while the model downloads
 *               {id, ok: true, info}                        after "load" (model.json)
 *               {id, ok: true, result}                      after "run" (below)
 *               {id, ok: false, error}                      a message for the reader
 * result: {tokens, typeIds, sentenceBStart, batch: B, shape: [L, H, T, T], dModel,
 *          attentions: Float32Array (B*L*H*T*T, row-major: batch, layer, head, query, key),
 *          hidden: Float32Array (B*(L+1)*T*dModel), ms: run time in milliseconds}
 */
"use strict";
var HERE = new URL("./", self.location.href);
var VENDOR = new URL("../vendor/onnxruntime-web/", HERE);
importScripts(new URL("ort.wasm.min.js", VENDOR).href, new URL("wordpiece.js", HERE).href,
              new URL("worker_common.js", HERE).href, new URL("edits.js", HERE).href);

var state = {session: null, tokenizer: null, info: null, loading: null};

function cacheName(info) { return "attnlib-model-" + info.files["encoder.onnx"].sha256.slice(0, 16); }

function load(id) {
  if (state.loading) return state.loading;
  state.loading = startModel(VENDOR, "model.json", "the model").then(function (info) {
    state.info = info;
    forgetOldCaches("attnlib-model-", cacheName(info));
    return Promise.all([
      fetchBytes(new URL("vocab.txt", HERE).href, cacheName(info), function () {}, info.files["vocab.txt"].sha256),
      fetchBytes(new URL("encoder.onnx", HERE).href, cacheName(info), function (loaded, total) {
        self.postMessage({id: id, progress: {loaded: loaded, total: total || info.files["encoder.onnx"].bytes}});
      }, info.files["encoder.onnx"].sha256)
    ]);
  }).then(function (files) {
    state.tokenizer = AttnlibWordPiece.fromVocab(new TextDecoder("utf-8").decode(files[0]), state.info.tokenizer);
    return ort.InferenceSession.create(new Uint8Array(files[1]), {executionProviders: ["wasm"],
                                                                 graphOptimizationLevel: "all"});
  }).then(function (session) {
    state.session = session;
    return state.info;
  }).catch(function (err) {
    state.loading = null;
    throw err;
  });
  return state.loading;
}

function run(msg) {
  var info = state.info, L = info.n_layers, H = info.n_heads;
  var enc = state.tokenizer.encode(msg.textA, msg.textB === undefined ? null : msg.textB);
  var T = enc.ids.length;
  var batch = msg.batch && msg.batch.length ? msg.batch : [[]];
  var B = batch.length;
  var ids = new BigInt64Array(B * T), types = new BigInt64Array(B * T), headMask = new Float32Array(B * L * H).fill(1);
  for (var b = 0; b < B; b++) {
    for (var t = 0; t < T; t++) { ids[b * T + t] = BigInt(enc.ids[t]); types[b * T + t] = BigInt(enc.typeIds[t]); }
    /* attnlib.edits's rules (edits.js, the kernel's as_edits word for word), then what this
       graph takes: its head_mask switches whole heads off, which is zero ablation */
    var checked = attnlibEdits.check(batch[b], {L: L, H: H, T: T});
    checked.forEach(function (e, i) {
      if (e.mode !== "zero" || e.head === null) throw new Error("edit " + i + ": the in-page encoder switches whole heads off (mode \"zero\"); mean ablation and patching run in the kernel");
      if (e.position !== null) throw new Error("edit " + i + ": the in-page encoder switches a head off at every position");
      headMask[b * L * H + e.layer * H + e.head] = 0;
    });
  }
  var feeds = {
    input_ids: new ort.Tensor("int64", ids, [B, T]),
    token_type_ids: new ort.Tensor("int64", types, [B, T]),
    head_mask: new ort.Tensor("float32", headMask, [B, L, H])
  };
  var started = performance.now();
  return state.session.run(feeds).then(function (out) {
    var ms = performance.now() - started;
    return {tokens: enc.tokens, typeIds: enc.typeIds, sentenceBStart: enc.sentenceBStart, batch: B,
            shape: [L, H, T, T], dModel: info.d_model, attentions: out.attentions.data,
            hidden: out.hidden_states.data, ms: ms};
  });
}

answerMessages(load, run, function (result) { return [result.attentions.buffer, result.hidden.buffer]; });
