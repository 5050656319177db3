/* attnlib's in-page models: one way for a Web Worker to download a model's file (used by
 * _static/model/worker.js, the encoder, and _static/tiny/worker.js, the circuit lab).
 * Served next to each worker as fetch_bytes.js; imported with importScripts. */
"use strict";
/* Fetch a file whole, reporting progress; kept in the Cache Storage API (when the page is
 * served over http(s)) so that later pages and visits do not download it again. */
function fetchBytes(url, name, report) {
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

