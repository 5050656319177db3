/* Chapter 10's language model (SmolLM2-135M, the course's 4-bit file) run by onnxruntime-web
 * in a Web Worker, one block at a time.
 *
 * Served from _static/lm/worker.js next to lm.json, block_00.onnx .. block_29.onnx,
 * unembed.onnx, embed.bin and tokenizer.json (written and checked at build by
 * attnlib.lm_export.write_site_files; attnlib.lm_export.PageRunner is this file's twin in Python,
 * and the build fails if it differs from the kernel's model), worker_common.js, edits.js
 * (attnlib.edits, mirrored) and bpe.js (the tokenizer).  Nothing is fetched from another host.
 *
 * Messages in:  {id, cmd: "load"}
 *               {id, cmd: "tokenize", text}  -> {ids, tokens}
 *               {id, cmd: "decode", ids}     -> {texts}
 *               {id, cmd: "run", tokens: [ids], edits: [edit, ...], last?}  an edit is
 *                 attnlib.edits's spec; a patch's source is {tokens: [ids]} of the same length; a
 *                 mean takes no source (the kernel's language_model.reference_means, in lm.json)
 *               {id, cmd: "patch", clean: [ids], corrupted: [ids], good, bad, layers?, sites?,
 *                directions?}  every head and the residual stream entering every layer of
 *                 `layers` (default all) patched both ways (or the sites ["heads", "resid"] and
 *                 directions ["denoise", "noise"] asked for); the metric logit(good) -
 *                 logit(bad) at the last position
 *               {id, cmd: "cancel"}  stops a running patch (it answers with an error "cancelled")
 * Messages out: {id, progress: {loaded, total}}  while downloading (bytes) and patching (runs)
 *               {id, ok: true, info | result}     {id, ok: false, error}
 *
 * How a sweep saves work: an edit at layer l cannot change what enters the layers before l, and
 * two prompts that differ first at position p have the same keys, values and stream before p.
 * So each variant starts from the intact stream entering layer l, computes only positions p..T-1
 * and reads the keys and values of positions 0..p-1 from the intact run (a KV cache).  The
 * results are the kernel's full runs' (attnlib.language_model.patch_sweep; checked at build).
 */
"use strict";
var HERE = new URL("./", self.location.href);
var VENDOR = new URL("../vendor/onnxruntime-web/", HERE);
importScripts(new URL("ort.wasm.min.js", VENDOR).href, new URL("worker_common.js", HERE).href,
              new URL("edits.js", HERE).href, new URL("bpe.js", HERE).href);

var state = {info: null, tok: null, blocks: [], unembed: null, table: null, scales: null, means: null,
             loading: null, cancelled: false};

function load(id) {
  if (state.loading) return state.loading;
  state.loading = startModel(VENDOR, "lm.json", "the language model").then(function (info) {
    var total = info.bytes, done = {}, name = "attnlib-lm-" + info.digest.slice(0, 16), bytes = {};
    forgetOldCaches("attnlib-lm-", name);
    /* one file at a time: a phone need not hold every download in flight at once */
    return Object.keys(info.files).reduce(function (chain, file) {
      var f = info.files[file];
      return chain.then(function () {
        return fetchBytes(new URL(file, HERE).href, name, function (loaded) {
          done[file] = loaded;
          var sum = 0;
          Object.keys(done).forEach(function (k) { sum += done[k]; });
          self.postMessage({id: id, progress: {loaded: sum, total: total}});
        }, f.sha256).then(function (buffer) { bytes[file] = buffer; });
      });
    }, Promise.resolve()).then(function () {
      var options = {executionProviders: ["wasm"], graphOptimizationLevel: "all"};
      var embed = new Uint8Array(bytes["embed.bin"]), n = info.vocab_size * info.d_model;
      state.table = embed.subarray(0, n);
      state.scales = new Float32Array(embed.buffer.slice(n));
      state.means = new Float32Array(info.means);
      state.tok = new attnlibBPE.Tokenizer(JSON.parse(new TextDecoder().decode(bytes["tokenizer.json"])));
      var blocks = [];
      for (var l = 0; l < info.n_layers; l++) blocks.push("block_" + (l < 10 ? "0" : "") + l + ".onnx");
      return blocks.reduce(function (chain, file, l) {
        return chain.then(function () {
          return ort.InferenceSession.create(new Uint8Array(bytes[file]), options).then(function (s) {
            state.blocks[l] = s;
            delete bytes[file];
          });
        });
      }, Promise.resolve()).then(function () {
        return ort.InferenceSession.create(new Uint8Array(bytes["unembed.onnx"]),
                                           Object.assign({externalData: [{path: "embed.bin", data: embed}]}, options));
      }).then(function (s) { state.unembed = s; state.info = info; return info; });
    });
  }).catch(function (err) {
    state.loading = null;
    throw err;
  });
  return state.loading;
}

function checkTokens(tokens, what) {
  var info = state.info;
  if (!Array.isArray(tokens) || !tokens.length) throw new Error(what + " must be a non-empty list of token ids");
  if (tokens.length > info.max_tokens) throw new Error(what + " has " + tokens.length + " tokens; the page's model reads at most " + info.max_tokens);
  tokens.forEach(function (t) {
    if (!(Number.isInteger(t) && t >= 0 && t < info.vocab_size)) throw new Error(what + " holds " + JSON.stringify(t) + ", not a token id 0.." + (info.vocab_size - 1));
  });
}

/* The token embedding of ids (t), from embed.bin's Q8_0 blocks: (u - 128) * scale. */
function embed(ids) {
  var d = state.info.d_model, nb = d / 32, out = new Float32Array(ids.length * d);
  ids.forEach(function (id, i) {
    for (var b = 0; b < nb; b++) {
      var scale = state.scales[id * nb + b], base = (id * nb + b) * 32;
      for (var j = 0; j < 32; j++) out[i * d + b * 32 + j] = (state.table[base + j] - 128) * scale;
    }
  });
  return out;
}

/* RoPE's cos and sin (t x d_head) at positions P..T-1: angles in float64, both halves
 * (attnlib.lm_export.rope_tables). */
function ropeTables(P, T) {
  var dh = state.info.d_head, half = dh / 2, t = T - P, cos = new Float32Array(t * dh), sin = new Float32Array(t * dh);
  for (var i = 0; i < t; i++) {
    for (var j = 0; j < half; j++) {
      var a = (P + i) * state.info.inv_freq[j];
      cos[i * dh + j] = cos[i * dh + j + half] = Math.cos(a);
      sin[i * dh + j] = sin[i * dh + j + half] = Math.sin(a);
    }
  }
  return {cos: cos, sin: sin};
}

/* B runs of ids (T) with the graph inputs `feeds` (attnlibEdits.fill's arrays for B items, all
 * T positions), from layer `start`, with x0 (B x t x d, the stream entering `start` at positions
 * P..T-1; default the embedding) and `past` (per layer {k, v}: 1 x H_kv x P x d_head, the
 * earlier positions).  keep: which activations to return (per layer, B first). */
async function forward(ids, B, feeds, opts) {
  var info = state.info, L = info.n_layers, H = info.n_heads, Hkv = info.n_kv_heads, dh = info.d_head, d = info.d_model;
  var T = ids.length, P = opts.past ? opts.past[0].P : 0, t = T - P, start = opts.start || 0, keep = opts.keep || {};
  var x = opts.x0;
  if (!x) {
    var e = embed(ids.slice(P));
    x = new Float32Array(B * t * d);
    for (var b = 0; b < B; b++) x.set(e, b * t * d);
  }
  var rope = ropeTables(P, T), positions = new BigInt64Array(t);
  for (var i = 0; i < t; i++) positions[i] = BigInt(P + i);
  var out = {patterns: [], zs: [], streams: [], kv: []};
  for (var l = start; l <= L; l++) {
    if (state.cancelled && opts.cancellable) throw new Error("cancelled");
    for (var bb = 0; bb < B; bb++) {                     /* the residual edits entering layer l */
      for (var p = P; p < T; p++) {
        var cell = (bb * (L + 1) + l) * T + p;
        if (!feeds.residMask[cell]) continue;
        x.set(feeds.residValue.subarray(cell * d, (cell + 1) * d), (bb * t + p - P) * d);
      }
    }
    if (keep.streams) out.streams[l] = x.slice();
    if (l === L) break;
    var hm = new Float32Array(B * H * t), hv = new Float32Array(B * H * t * dh);
    for (bb = 0; bb < B; bb++) {
      for (var h = 0; h < H; h++) {
        var from = ((bb * L + l) * H + h) * T + P, to = (bb * H + h) * t;
        hm.set(feeds.headMask.subarray(from, from + t), to);
        hv.set(feeds.headValue.subarray(from * dh, (from + t) * dh), to * dh);
      }
    }
    var pk = new Float32Array(B * Hkv * P * dh), pv = new Float32Array(B * Hkv * P * dh);
    if (P) for (bb = 0; bb < B; bb++) { pk.set(opts.past[l].k, bb * Hkv * P * dh); pv.set(opts.past[l].v, bb * Hkv * P * dh); }
    var r = await state.blocks[l].run({
      x: new ort.Tensor("float32", x, [B, t, d]), positions: new ort.Tensor("int64", positions, [t]),
      cos: new ort.Tensor("float32", rope.cos, [t, dh]), sin: new ort.Tensor("float32", rope.sin, [t, dh]),
      past_k: new ort.Tensor("float32", pk, [B, Hkv, P, dh]), past_v: new ort.Tensor("float32", pv, [B, Hkv, P, dh]),
      head_mask: new ort.Tensor("float32", hm, [B, H, t]), head_value: new ort.Tensor("float32", hv, [B, H, t, dh])});
    x = r.x_out.data;
    if (keep.patterns) out.patterns[l] = r.pattern.data;
    if (keep.zs) out.zs[l] = r.z.data;
    if (keep.kv) out.kv[l] = {k: r.k.data, v: r.v.data};          /* B = 1 here: positions P..T-1 */
  }
  out.x = x;
  return out;
}

/* logit(good) - logit(bad) at the last position of each of B items of x (B x t x d): the final
 * RMSNorm, then the two rows of the tied embedding (embed.bin), in float64. */
function metrics(x, B, t, good, bad) {
  var info = state.info, d = info.d_model, g = embed([good]), w = embed([bad]), norm = info.norm_weight;
  var out = [];
  for (var b = 0; b < B; b++) {
    var base = (b * t + t - 1) * d, ss = 0, k;
    for (k = 0; k < d; k++) ss += x[base + k] * x[base + k];
    var inv = 1 / Math.sqrt(ss / d + info.rms_eps), dot = 0;
    for (k = 0; k < d; k++) dot += Math.fround(Math.fround(x[base + k] * inv) * norm[k]) * (g[k] - w[k]);
    out.push(dot);
  }
  return out;
}

function feedArrays(B, T) {
  var info = state.info, L = info.n_layers, H = info.n_heads;
  return {headMask: new Float32Array(B * L * H * T), headValue: new Float32Array(B * L * H * T * info.d_head),
          residMask: new Float32Array(B * (L + 1) * T), residValue: new Float32Array(B * (L + 1) * T * info.d_model)};
}

/* One intact run of ids, keeping what patching needs: z (1 x L x H x T x dh, fill's layout) and
 * the stream entering every layer (1 x (L+1) x T x d), the keys and values and the final x. */
async function intact(ids) {
  var info = state.info, L = info.n_layers, H = info.n_heads, dh = info.d_head, d = info.d_model, T = ids.length;
  var r = await forward(ids, 1, feedArrays(1, T), {keep: {zs: true, streams: true, kv: true, patterns: true}});
  var z = new Float32Array(L * H * T * dh), resid = new Float32Array((L + 1) * T * d);
  for (var l = 0; l < L; l++) z.set(r.zs[l], l * H * T * dh);
  for (l = 0; l <= L; l++) resid.set(r.streams[l], l * T * d);
  return {ids: ids, z: z, resid: resid, kv: r.kv, x: r.x, patterns: r.patterns};
}

/* The edits of a run, as the kernel checks them (edits.js), then what the page's graphs take. */
function checkEdits(edits, T) {
  var info = state.info;
  var checked = attnlibEdits.check(edits, {L: info.n_layers, H: info.n_heads, T: T});
  checked.forEach(function (e, i) {
    if (e.mode === "patch") {
      if (typeof e.source !== "object" || !Array.isArray(e.source.tokens)) throw new Error("edit " + i + ": a patch's source must be {tokens: [token ids]}, the run whose activations are patched in");
      checkTokens(e.source.tokens, "edit " + i + "'s source");
      if (e.source.tokens.length !== T) throw new Error("edit " + i + ": the source has " + e.source.tokens.length + " tokens, the run " + T);
    } else if (e.mode === "mean" && e.source !== null) {
      throw new Error("edit " + i + ": on the page a mean is the model's reference means (leave out source); a mean over other inputs runs in the kernel");
    }
  });
  return checked;
}

async function run(msg) {
  var info = state.info, L = info.n_layers, H = info.n_heads, dh = info.d_head, d = info.d_model, V = info.vocab_size;
  checkTokens(msg.tokens, "the prompt");
  var ids = msg.tokens, T = ids.length, edits = checkEdits(msg.edits || [], T), started = performance.now();
  var sources = {}, order = [];
  edits.forEach(function (e) {
    if (e.mode !== "patch") return;
    var key = e.source.tokens.join(",");
    if (!(key in sources)) { sources[key] = order.length; order.push(e.source.tokens); }
  });
  var ran = [];
  for (var i = 0; i < order.length; i++) ran.push(await intact(order[i]));
  var src = {means: state.means,
             z: concat(ran.map(function (r) { return r.z; })), resid: concat(ran.map(function (r) { return r.resid; })),
             index: function (e) { return sources[e.source.tokens.join(",")]; }};
  var feeds = feedArrays(1, T);
  attnlibEdits.fill(edits, 0, feeds, {L: L, H: H, T: T, dh: dh, d: d}, src);
  var r = await forward(ids, 1, feeds, {keep: {patterns: true}});
  var last = !!msg.last, rows = last ? 1 : T, x = last ? r.x.slice((T - 1) * d) : r.x;
  var logits = (await state.unembed.run({x: new ort.Tensor("float32", x, [1, rows, d])})).logits.data;
  var pattern = new Float32Array(L * H * T * T);
  for (var l = 0; l < L; l++) pattern.set(r.patterns[l], l * H * T * T);
  return {T: T, V: V, L: L, H: H, logits: logits, pattern: pattern, last: last, ms: performance.now() - started};
}

function concat(arrays) {
  var n = arrays.reduce(function (s, a) { return s + a.length; }, 0), out = new Float32Array(n), at = 0;
  arrays.forEach(function (a) { out.set(a, at); at += a.length; });
  return out;
}

async function patch(msg, id) {
  var info = state.info, L = info.n_layers, H = info.n_heads, dh = info.d_head, d = info.d_model, Hkv = info.n_kv_heads;
  checkTokens(msg.clean, "the clean prompt");
  checkTokens(msg.corrupted, "the corrupted prompt");
  var a = msg.clean, b = msg.corrupted, T = a.length;
  if (b.length !== T) throw new Error("the clean and corrupted prompts must have the same number of tokens: " + T + " and " + b.length);
  var diff = [];
  a.forEach(function (x, i) { if (x !== b[i]) diff.push(i); });
  if (diff.length !== 1) throw new Error("the two prompts must differ in exactly one token; they differ in " + diff.length);
  [msg.good, msg.bad].forEach(function (x) { if (!(Number.isInteger(x) && x >= 0 && x < info.vocab_size)) throw new Error("an answer must be a token id"); });
  var layers = msg.layers || Array.from({length: L + 1}, function (_, i) { return i; });
  var sites = msg.sites || ["heads", "resid"], wanted = msg.directions || ["denoise", "noise"];
  var p = diff[0], t = T - p, started = performance.now(), runs = 2;
  var headLayers = sites.indexOf("heads") >= 0 ? layers.filter(function (l) { return l < L; }) : [];
  var residLayers = sites.indexOf("resid") >= 0 ? layers : [];
  var total = 2 + wanted.length * (headLayers.length + residLayers.length), done = 0;
  /* report progress and let a "cancel" message in: onnxruntime's runs resolve without giving the
   * worker's event loop a turn, so a sweep yields one after every batch */
  function step() {
    done++;
    self.postMessage({id: id, progress: {loaded: done, total: total}});
    return new Promise(function (resolve) { setTimeout(resolve, 0); });
  }
  state.cancelled = false;
  var full = {clean: await intact(a)};
  await step();
  full.corrupted = await intact(b);
  await step();
  var metric = {clean: metrics(full.clean.x, 1, T, msg.good, msg.bad)[0],
                corrupted: metrics(full.corrupted.x, 1, T, msg.good, msg.bad)[0]};
  var out = {position: p, clean: metric.clean, corrupted: metric.corrupted, layers: layers};
  var directions = [["denoise", "corrupted", "clean"], ["noise", "clean", "corrupted"]].filter(function (d) {
    return wanted.indexOf(d[0]) >= 0;
  });
  for (var di = 0; di < directions.length; di++) {
    var name = directions[di][0], base = full[directions[di][1]], source = full[directions[di][2]];
    var past = base.kv.map(function (kv) {                   /* positions 0..p-1: the same in both prompts */
      var k = new Float32Array(Hkv * p * dh), v = new Float32Array(Hkv * p * dh);
      for (var h = 0; h < Hkv; h++) {
        k.set(kv.k.subarray(h * T * dh, (h * T + p) * dh), h * p * dh);
        v.set(kv.v.subarray(h * T * dh, (h * T + p) * dh), h * p * dh);
      }
      return {k: k, v: v, P: p};
    });
    var src = {means: state.means, z: source.z, resid: source.resid, index: function () { return 0; }};
    function entering(l, B) {                                  /* the base's stream entering l at p..T-1, B times */
      var x = new Float32Array(B * t * d), one = base.resid.subarray((l * T + p) * d, (l + 1) * T * d);
      for (var i = 0; i < B; i++) x.set(one, i * t * d);
      return x;
    }
    var heads = [], resid = [];
    for (var li = 0; li < headLayers.length; li++) {
      var l = headLayers[li], feeds = feedArrays(H, T);
      for (var h = 0; h < H; h++) {
        attnlibEdits.fill([{layer: l, head: h, mode: "patch", source: {}, position: null}], h, feeds, {L: L, H: H, T: T, dh: dh, d: d}, src);
      }
      var r = await forward(base.ids, H, feeds, {start: l, x0: entering(l, H), past: past, cancellable: true});
      heads.push(metrics(r.x, H, t, msg.good, msg.bad));
      runs += H;
      await step();
    }
    for (li = 0; li < residLayers.length; li++) {
      l = residLayers[li];
      feeds = feedArrays(t, T);
      for (var q = 0; q < t; q++) {
        attnlibEdits.fill([{layer: l, head: null, mode: "patch", source: {}, position: p + q}], q, feeds, {L: L, H: H, T: T, dh: dh, d: d}, src);
      }
      r = await forward(base.ids, t, feeds, {start: l, x0: entering(l, t), past: past, cancellable: true});
      var row = metrics(r.x, t, t, msg.good, msg.bad);
      /* before p the two prompts' streams are equal: patching there gives the base run itself */
      var before = [];
      for (q = 0; q < p; q++) before.push(metric[directions[di][1]]);
      resid.push(before.concat(row));
      runs += t;
      await step();
    }
    out[name] = {};
    if (sites.indexOf("heads") >= 0) out[name].heads = heads;
    if (sites.indexOf("resid") >= 0) out[name].resid = resid;
  }
  out.runs = runs;
  out.ms = performance.now() - started;
  return out;
}

function tokenize(msg) {
  if (typeof msg.text !== "string") throw new Error("expected text (a string)");
  var ids = state.tok.encode(msg.text);
  return {ids: ids, tokens: ids.map(function (i) { return state.tok.token(i); })};
}

/* Answer the page: "cancel" at once, everything else one at a time in order. */
var queue = Promise.resolve();
self.onmessage = function (event) {
  var msg = event.data || {}, id = msg.id;
  if (msg.cmd === "cancel") { state.cancelled = true; self.postMessage({id: id, ok: true, result: null}); return; }
  queue = queue.then(function () {
    return load(id).then(function (info) {
      if (msg.cmd === "load") return self.postMessage({id: id, ok: true, info: info});
      if (msg.cmd === "tokenize") return self.postMessage({id: id, ok: true, result: tokenize(msg)});
      if (msg.cmd === "decode") {
        if (!Array.isArray(msg.ids)) throw new Error("decode needs a list of token ids");
        return self.postMessage({id: id, ok: true, result: {texts: msg.ids.map(function (i) { return state.tok.token(i); })}});
      }
      if (msg.cmd === "run") {
        return run(msg).then(function (r) { self.postMessage({id: id, ok: true, result: r}, [r.logits.buffer, r.pattern.buffer]); });
      }
      if (msg.cmd === "patch") return patch(msg, id).then(function (r) { self.postMessage({id: id, ok: true, result: r}); });
      throw new Error("unknown command " + JSON.stringify(msg.cmd) + "; expected load, tokenize, decode, run, patch or cancel");
    });
  }).catch(function (err) {
    var text = err && err.message ? err.message : String(err);
    if (/memory|allocation|RangeError/i.test(text)) text = "the browser ran out of memory for the model (" + text + ")";
    self.postMessage({id: id, ok: false, error: text});
  });
};
