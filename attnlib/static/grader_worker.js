/* The page's exercise checker, off the main thread: a Web Worker that runs the course's
 * Python graders (attnlib/exercises, the very files the notebook imports) in the vendored
 * Pyodide.  exercises.js starts one worker per page before the reader's first Check (when the
 * page is idle after its load, or when an exercise comes near the screen; see its preload())
 * and keeps it for the visit; every exercise of the page shares it.
 *
 * Messages in:  {type: "init", pyodide: <indexURL>, graders: <graders.json URL>}
 *               {type: "check", id, chapter, name, answer (JSON text), data (JSON text)}
 * Messages out: {type: "ready", ms}            Pyodide and the graders are loaded
 *               {type: "failed", error}        they could not be loaded
 *               {type: "result", id, out}      out: Feedback.to_dict() as JSON text
 *               {type: "result", id, error}    the checker itself raised (never the learner's fault)
 * Checks that arrive before "ready" wait for it and are answered in order.
 */
/* A module worker (new Worker(url, {type: "module"})): the vendored Pyodide (314.0.7) refuses a
 * classic one ("Classic web workers are not supported"). */

var ready = null;  // Promise of the Python function attnlib.exercises.check_json

function start(msg) {
  var t0 = performance.now();
  ready = Promise.all([
    import(msg.pyodide + "pyodide.mjs"),
    fetch(msg.graders).then(function (r) {
      if (!r.ok) throw new Error("could not load the graders (" + r.status + ")");
      return r.json();
    }),
  ]).then(function (results) {
    var sources = results[1];
    return results[0].loadPyodide({indexURL: msg.pyodide, packages: []}).then(function (py) {
      var root = "/home/pyodide/attnlib";
      py.FS.mkdirTree(root + "/exercises");
      py.FS.writeFile(root + "/__init__.py", "");  // the graders need nothing else of attnlib
      Object.keys(sources).forEach(function (path) { py.FS.writeFile(root + "/" + path, sources[path]); });
      py.runPython("import sys\nif '/home/pyodide' not in sys.path: sys.path.insert(0, '/home/pyodide')");
      var fn = py.pyimport("attnlib.exercises").check_json;
      self.postMessage({type: "ready", ms: performance.now() - t0});
      return fn;
    });
  });
  ready.catch(function (err) { self.postMessage({type: "failed", error: String(err && err.message || err)}); });
}

self.onmessage = function (event) {
  var msg = event.data || {};
  if (msg.type === "init") {
    if (!ready) start(msg);
    return;
  }
  if (msg.type !== "check") return;
  if (!ready) {
    self.postMessage({type: "result", id: msg.id, error: "the checker was not started"});
    return;
  }
  ready.then(function (fn) {
    var out;
    try {
      out = fn(msg.chapter, msg.name, msg.answer, msg.data);
    } catch (err) {
      self.postMessage({type: "result", id: msg.id, error: String(err && err.message || err)});
      return;
    }
    self.postMessage({type: "result", id: msg.id, out: String(out)});
  }, function () { /* "failed" was posted once; exercises.js answers the pending checks */ });
};
