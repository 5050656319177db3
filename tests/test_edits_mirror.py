"""One edit list, one reading (issue 47): the kernel (attnlib.edits.as_edits and graph_inputs) and
the page (attnlib/static/edits.js, which both in-page workers load) are fed the same generated edit
lists, valid and invalid, for both in-page models' sizes, and must give the same checked edits and
the same graph inputs, or the same refusal word for word.

The lists are drawn with a seeded generator, not written by hand: layers, heads and positions
inside, at the edges of and outside their ranges, negative ones, wrong types (strings,
non-integral numbers, booleans, null), unknown and missing keys, modes that do not exist, sources
where they are needed, forbidden or absent, and the same place named twice (position -1 and
T - 1, a whole-head edit beside a one-position edit).  The page's JavaScript runs in node.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlib.edits import as_edits, graph_inputs

ROOT = Path(__file__).resolve().parent.parent
EDITS_JS = ROOT / "attnlib" / "static" / "edits.js"

# the two in-page models' sizes: the circuit lab's model (d_head and d_model shrunk: the
# translation copies values, so their width does not matter) and the encoder
MODELS = {"tiny": {"L": 2, "H": 4, "dh": 3, "d": 5}, "encoder": {"L": 6, "H": 12, "dh": 2, "d": 3}}
N_CASES = 600

HARNESS = r"""
const E = require(process.argv[process.argv.length - 1]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf-8"));
const out = cases.map(function (c) {
  const dims = c.dims;
  let checked;
  try { checked = E.check(c.edits, dims); } catch (err) { return {error: err.message}; }
  const L = dims.L, H = dims.H, T = dims.T, dh = dims.dh, d = dims.d;
  const arrays = {headMask: new Float32Array(L * H * T), headValue: new Float32Array(L * H * T * dh),
                  residMask: new Float32Array((L + 1) * T), residValue: new Float32Array((L + 1) * T * d)};
  E.fill(checked, 0, arrays, dims, {means: c.means, z: c.z, resid: c.resid,
                                     index: function (e) { return e.source.src; }});
  return {edits: checked.map(function (e) { return [e.layer, e.head, e.mode, e.position]; }),
          head_mask: Array.from(arrays.headMask), head_value: Array.from(arrays.headValue),
          resid_mask: Array.from(arrays.residMask), resid_value: Array.from(arrays.residValue)};
});
process.stdout.write(JSON.stringify(out));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("ATTNLIB_REQUIRE_BROWSER"):
            pytest.fail("node is needed to run the page's edits.js (CI has it)")
        pytest.skip("node is not installed: the page's edits.js cannot be run here")
    return node


def _valid_edit(rng: random.Random, L: int, H: int, T: int, n_sources: int) -> dict:
    """A well-formed edit: any place (negative indices included), any mode it allows."""
    if rng.random() < 0.25:                                    # the residual stream: patched only
        e = {"layer": rng.randint(-L - 1, L), "mode": "patch", "source": {"src": rng.randrange(n_sources)}}
        if rng.random() < 0.5:
            e["head"] = None
    else:
        mode = rng.choice(["zero", "mean", "patch"])
        e = {"layer": rng.randint(-L, L - 1), "head": rng.randint(-H, H - 1), "mode": mode}
        if mode == "patch":
            e["source"] = {"src": rng.randrange(n_sources)}
    r = rng.random()
    if r < 0.45:
        e["position"] = rng.randint(-T, T - 1)
    elif r < 0.55:
        e["position"] = None
    return e


WRONG = ["1", 1.5, -0.5, True, False, None, [0], {"i": 0}]


def _fault(rng: random.Random, e: dict, L: int, H: int, T: int):
    """One fault in a well-formed edit (or the edit replaced by a non-edit)."""
    kind = rng.choice(["layer_range", "layer_type", "head_range", "head_type", "position_range", "position_type",
                       "mode", "resid_mode", "no_source", "zero_source", "unknown_key", "missing", "not_an_edit"])
    e = dict(e)
    if kind == "layer_range":
        e["layer"] = rng.choice([L + 1 if e.get("head") is None else L, -L - 2, L + 3])
    elif kind == "layer_type":
        e["layer"] = rng.choice([w for w in WRONG if w is not None] + [None])
    elif kind == "head_range":
        e["head"] = rng.choice([H, -H - 1, H + 5])
    elif kind == "head_type":
        e["head"] = rng.choice([w for w in WRONG if w is not None])
    elif kind == "position_range":
        e["position"] = rng.choice([T, -T - 1, T + 2])
    elif kind == "position_type":
        e["position"] = rng.choice([w for w in WRONG if w is not None])
    elif kind == "mode":
        e["mode"] = rng.choice(["ablate", "Zero", 1, None, ["zero"]])
    elif kind == "resid_mode":
        e.pop("head", None)
        e["mode"] = rng.choice(["zero", "mean"])
        e.pop("source", None)
        e["layer"] = rng.randint(0, L)
    elif kind == "no_source":
        e["mode"] = "patch"
        e.pop("source", None)
    elif kind == "zero_source":
        e["mode"], e["source"] = "zero", {"src": 0}
        e["head"] = e["head"] if isinstance(e.get("head"), int) else 0
    elif kind == "unknown_key":
        e[rng.choice(["colour", "heads", "pos"])] = 1
    elif kind == "missing":
        e.pop(rng.choice(["layer", "mode"]), None)
    else:
        return rng.choice(["zero", 3, None, [1, 2], True])
    return e


def _edit_list(rng: random.Random, L: int, H: int, T: int, n_sources: int):
    if rng.random() < 0.03:
        return rng.choice([{"layer": 0, "head": 0, "mode": "zero"}, "zero", 7])
    edits = [_valid_edit(rng, L, H, T, n_sources) for _ in range(rng.randint(0, 4))]
    if edits and rng.random() < 0.3:                           # one place named again, perhaps another way
        again = dict(edits[rng.randrange(len(edits))])
        p = again.get("position")
        if p is not None:
            again["position"] = p - T if p >= 0 else p + T
        elif rng.random() < 0.5:
            again["position"] = rng.randrange(T)
        if "head" in again and again["head"] is not None and rng.random() < 0.5:
            again["mode"] = "zero" if again["mode"] != "zero" else "mean"
            again.pop("source", None)
        edits.insert(rng.randrange(len(edits) + 1), again)
    if edits and rng.random() < 0.35:
        k = rng.randrange(len(edits))
        edits[k] = _fault(rng, edits[k], L, H, T)
    return edits


def _cases(seed: int = 47):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    cases = []
    for k in range(N_CASES):
        name = "tiny" if k % 2 == 0 else "encoder"
        dims = dict(MODELS[name], T=rng.randint(1, 6))
        L, H, T, dh, d = dims["L"], dims["H"], dims["T"], dims["dh"], dims["d"]
        n_sources = 2
        means = torch.randn(L, H, dh, generator=g)
        z = torch.randn(n_sources, L, H, T, dh, generator=g)               # each source's intact z
        resid = torch.randn(n_sources, L + 1, T, d, generator=g)
        cases.append({"model": name, "dims": dims, "edits": _edit_list(rng, L, H, T, n_sources),
                      "means": means, "z": z, "resid": resid})
    return cases


def _python(case):
    """The kernel's reading: as_edits (with T and the reference means), then graph_inputs."""
    dims = case["dims"]
    L, H, T, dh, d = dims["L"], dims["H"], dims["T"], dims["dh"], dims["d"]
    runs = [SimpleNamespace(z=tuple(case["z"][s, l][None] for l in range(L)),
                            resid_pre=tuple(case["resid"][s, l][None] for l in range(L + 1)))
            for s in range(case["z"].shape[0])]

    def source_of(e):
        return {**e, "source": runs[e["source"]["src"]]} if isinstance(e, dict) and isinstance(e.get("source"), dict) else e

    edits = [source_of(e) for e in case["edits"]] if isinstance(case["edits"], list) else case["edits"]
    try:
        checked = as_edits(edits, L, H, T=T, reference=case["means"])
    except (TypeError, ValueError, IndexError) as err:
        return {"error": str(err)}
    feeds = graph_inputs(checked, n_layers=L, n_heads=H, d_head=dh, d_model=d, B=1, T=T)
    return {"edits": [[e.layer, e.head, e.mode, e.position] for e in checked],
            **{k: v.flatten().tolist() for k, v in feeds.items()}}


@pytest.fixture(scope="module")
def both():
    node = _node()
    cases = _cases()
    payload = [{"dims": c["dims"], "edits": c["edits"], "means": c["means"].flatten().tolist(),
                "z": c["z"].flatten().tolist(), "resid": c["resid"].flatten().tolist()} for c in cases]
    done = subprocess.run([node, "-e", HARNESS, str(EDITS_JS)], input=json.dumps(payload), capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return cases, json.loads(done.stdout)


def test_the_kernel_and_the_page_read_every_generated_edit_list_alike(both):
    cases, page = both
    accepted = refused = 0
    for k, (case, got) in enumerate(zip(cases, page)):
        want = _python(case)
        where = f"case {k} ({case['model']}, T = {case['dims']['T']}): edits {case['edits']!r}"
        if "error" in want or "error" in got:
            assert got.get("error") == want.get("error"), where
            refused += 1
            continue
        assert got["edits"] == want["edits"], where
        for key in ("head_mask", "head_value", "resid_mask", "resid_value"):
            assert torch.equal(torch.tensor(got[key], dtype=torch.float32), torch.tensor(want[key])), (where, key)
        accepted += 1
    # the generator reaches both outcomes, for both models, often enough to mean something
    assert accepted >= 80 and refused >= 150, (accepted, refused)


def test_the_generated_lists_reach_every_rule(both):
    """Each refusal of as_edits is met by some generated list, so no rule is left untested."""
    cases, _ = both
    messages = [_python(c).get("error", "") for c in cases]
    rules = ["must be a list of edits", "must be an object such as", "unknown key", 'needs "layer" and "mode"',
             "mode must be", "layer must be an int", "head must be an int", "is outside 0..",
             "can only be patched", "position must be an int", "tokens (0..", '"patch" needs a source',
             '"zero" takes no source', "at every position: the result would depend",
             "at position", ]
    missing = [rule for rule in rules if not any(rule in m for m in messages)]
    assert not missing, missing
    accepted = [c for c in cases if "error" not in _python(c)]
    kinds = {(e.get("mode"), e.get("head") is None, e.get("position") is None)
             for c in accepted for e in c["edits"] if isinstance(e, dict)}
    assert {("zero", False, True), ("zero", False, False), ("mean", False, True), ("mean", False, False),
            ("patch", False, True), ("patch", False, False), ("patch", True, True), ("patch", True, False)} <= kinds
    negative = [c for c in accepted for e in c["edits"] if isinstance(e, dict) and any(
        isinstance(e.get(k), int) and not isinstance(e.get(k), bool) and e[k] < 0 for k in ("layer", "head", "position"))]
    assert negative, "no accepted list with a negative index"
