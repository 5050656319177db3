/* attnlib's in-page models: what their Web Workers share (_static/model/worker.js, the encoder,
 * and _static/tiny/worker.js, the circuit lab): starting onnxruntime-web, downloading a model's
 * files (checked, cached), and answering the page.  Served next to each worker as
 * worker_common.js; imported with importScripts. */
"use strict";
/* Set onnxruntime-web up as every in-page model runs it (one thread, in this worker, its files
 * from the vendored copy at vendor) and fetch the model's description (a JSON file next to the
 * worker, never from the HTTP cache): a Promise of the parsed description. */
function startModel(vendor, description, what) {
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmPaths = vendor.href;
  return fetch(new URL(description, self.location.href).href, {cache: "no-cache"}).then(function (r) {
    if (!r.ok) throw new Error(what + "'s description (" + description + ") is missing from this copy of the book");
    return r.json();
  });
}

/* Fetch a file whole, reporting progress; kept in the Cache Storage API (when the page is
 * served over http(s)) so that later pages and visits do not download it again.  With sha256
 * (hex), the bytes are checked where the browser can hash (crypto.subtle: https and localhost):
 * a copy that differs, from the cache or the network, is dropped and an error names the file. */
function fetchBytes(url, name, report, sha256) {
  return fetchOnce(url, name, report).then(function (buffer) {
    if (!sha256 || !(self.crypto && self.crypto.subtle)) return buffer;
    return self.crypto.subtle.digest("SHA-256", buffer).then(function (digest) {
      var hex = Array.prototype.map.call(new Uint8Array(digest), function (x) { return (x < 16 ? "0" : "") + x.toString(16); }).join("");
      if (hex === sha256) return buffer;
      var drop = (self.caches && name) ? self.caches.open(name).then(function (c) { return c.delete(url); }).catch(function () {})
                                       : Promise.resolve();
      return drop.then(function () {
        throw new Error(url.split("/").pop() + " arrived damaged or out of date (its SHA-256 differs from the book's); reload the page to download it again");
      });
    });
  });
}

/* Delete this page's earlier caches of a model (names starting with prefix), keeping `keep`:
 * a rebuilt book leaves nothing behind in the reader's browser. */
function forgetOldCaches(prefix, keep) {
  if (!self.caches || !self.caches.keys) return Promise.resolve();
  return self.caches.keys().then(function (names) {
    return Promise.all(names.filter(function (n) { return n.indexOf(prefix) === 0 && n !== keep; })
                            .map(function (n) { return self.caches.delete(n); }));
  }).catch(function () {});
}

function fetchOnce(url, name, report) {
  var cachePromise = (self.caches && name) ? self.caches.open(name).catch(function () { return null; })
                                           : Promise.resolve(null);
  return cachePromise.then(function (cache) {
    var hit = cache ? cache.match(url).catch(function () { return null; }) : Promise.resolve(null);
    return hit.then(function (cached) {
      if (cached) return cached.arrayBuffer();
      return fetch(url).then(function (response) {
        if (!response.ok) throw new Error("could not download " + url + " (HTTP " + response.status + ")");
        var total = Number(response.headers.get("Content-Length")) || 0;
        if (!response.body || !response.body.getReader) return response.arrayBuffer();
        var reader = response.body.getReader(), chunks = [], loaded = 0;
        function pump() {
          return reader.read().then(function (step) {
            if (step.done) return;
            chunks.push(step.value);
            loaded += step.value.length;
            report(loaded, total);
            return pump();
          });
        }
        return pump().then(function () {
          var bytes = new Uint8Array(loaded), at = 0;
          chunks.forEach(function (c) { bytes.set(c, at); at += c.length; });
          if (cache) cache.put(url, new Response(bytes.slice().buffer)).catch(function () {});
          return bytes.buffer;
        });
      });
    });
  });
}


/* Answer the page's messages ({id, cmd: "load"} and {id, cmd: "run", ...}) one at a time, in
 * order (a second run waits for the first): load(id) gives the description, run(msg) the result,
 * whose typed arrays transfer(result) lists (moved to the page, not copied).  An error becomes
 * {id, ok: false, error} with a message for the reader. */
function answerMessages(load, run, transfer) {
  var queue = Promise.resolve();
  self.onmessage = function (event) {
    var msg = event.data || {}, id = msg.id;
    queue = queue.then(function () {
      if (msg.cmd === "load") return load(id).then(function (info) { self.postMessage({id: id, ok: true, info: info}); });
      if (msg.cmd === "run") {
        return load(id).then(function () { return run(msg); }).then(function (result) {
          self.postMessage({id: id, ok: true, result: result}, transfer(result));
        });
      }
      throw new Error("unknown command " + JSON.stringify(msg.cmd) + "; expected \"load\" or \"run\"");
    }).catch(function (err) {
      var text = err && err.message ? err.message : String(err);
      if (/memory|allocation|RangeError/i.test(text)) text = "the browser ran out of memory for the model (" + text + ")";
      self.postMessage({id: id, ok: false, error: text});
    });
  };
}
