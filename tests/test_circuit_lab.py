"""attnlib.circuit_lab: the checkpoints the page offers, the graph it runs (every edit an input)
against attnlib.transformer.run, the build's check failing on a wrong export, and the reading of
a reader's words."""
from __future__ import annotations

import math

import pytest
import torch

from attnlib import circuit_export, circuit_lab, induction, patching, transformer
from attnlib.edits import head_means
from attnlib.transformer import TinyTransformer, run


@pytest.fixture(scope="module")
def history():
    return induction.trained(2)[1]


def test_checkpoints_are_dense_where_the_induction_head_forms(history):
    steps = circuit_lab.checkpoint_steps(history)
    assert steps == sorted(set(steps)) and len(steps) == circuit_lab.N_CHECKPOINTS
    assert steps[0] == 0 and steps[-1] == induction.STEPS
    score = {int(s): float(x[-1].max()) for s, x in zip(history["probe_step"], history["induction"])}
    low, high = score[0], max(score.values())
    rising = [s for s in score if low + 0.1 * (high - low) <= score[s] <= low + 0.9 * (high - low)]
    inside = [s for s in steps if rising[0] <= s <= rising[-1]]
    # evenly spaced in time, the rise (a fraction of the run) would get that fraction of the checkpoints
    share_of_time = (rising[-1] - rising[0]) / induction.STEPS
    assert len(inside) / len(steps) > 1.5 * share_of_time, (inside, rising[0], rising[-1])
    with pytest.raises(ValueError, match="between 2"):
        circuit_lab.checkpoint_steps(history, 1000)


def test_a_checkpoint_is_the_model_at_that_step(history):
    model = induction.trained(2)[0]
    last = induction.checkpoint(history, induction.STEPS)
    assert all(torch.equal(a.cpu(), b) for a, b in zip(model.state_dict().values(), last.state_dict().values()))
    first = induction.checkpoint(history, 0)
    assert all(torch.equal(a, b) for a, b in zip(induction.build_model(2).cpu().state_dict().values(), first.state_dict().values()))
    with pytest.raises(ValueError, match="no checkpoint at step 7"):
        induction.checkpoint(history, 7)
    with pytest.raises(TypeError, match="history"):
        induction.checkpoint({"loss": []}, 0)


def _edits(model, g, T, source):
    means = head_means(run(model, torch.randint(model.vocab_size, (8, model.max_len), generator=g)))
    return circuit_export._check_edits(model, g, T, source, means)


@pytest.mark.parametrize("n_layers", [2, 1])
def test_the_lab_graph_equals_a_run_with_every_edit(n_layers):
    """LabGraph, in PyTorch (what is exported), fed the page's translation of each edit, against
    transformer.run on seeded random sequences."""
    model = TinyTransformer(40, d_model=16, n_heads=4, n_layers=n_layers, max_len=12, seed=3).eval()
    graph = circuit_export.LabGraph(model)
    g = torch.Generator().manual_seed(5)
    for _ in range(4):
        T = int(torch.randint(2, 13, (1,), generator=g))
        tokens = torch.randint(40, (2, T), generator=g)
        source = run(model, torch.randint(40, (2, T), generator=g))
        for edits in _edits(model, g, T, source):
            feeds = {k: torch.from_numpy(v) for k, v in circuit_export.feeds(model, tokens, edits).items()}
            with torch.no_grad():
                logits, pattern, z, resid = graph(**feeds)
            want = run(model, tokens, edits=edits)
            assert torch.allclose(logits, want.logits, atol=1e-5), edits
            assert torch.allclose(pattern, want.stacked("pattern").transpose(0, 1), atol=1e-6)
            assert torch.allclose(z, want.stacked("z").transpose(0, 1), atol=1e-6)
            assert torch.allclose(resid, want.stacked("resid_pre").transpose(0, 1), atol=1e-5)


def test_the_build_check_fails_on_an_export_of_another_model(tmp_path):
    pytest.importorskip("onnxruntime")
    a = TinyTransformer(30, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=1)
    b = TinyTransformer(30, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=2)
    path = circuit_export.export(a, tmp_path / "a.onnx")
    figures = circuit_export.check(path, a, n=3)
    assert figures["max_logit_diff"] <= circuit_export.BUILD_TOLERANCE and figures["runs"] == 30
    with pytest.raises(ValueError, match="differs from PyTorch"):
        circuit_export.check(path, b, n=3)


@pytest.mark.parametrize("text, error, message", [
    (None, TypeError, "str of words"),
    ("", ValueError, "no words"),
    ("the " * 33, ValueError, "at most 32"),
    ("we are met on a great battel-field", ValueError, "did you mean \u201cbattle-field\u201d?"),
    ("fourscore and seven", ValueError, "did you mean \u201cscore\u201d or \u201cfour\u201d?"),
    ("xylophone", ValueError, "^\u201cxylophone\u201d is not in the model's vocabulary \\(the 141 words and marks of the Gettysburg Address\\)$"),
])
def test_read_words_names_the_problem(text, error, message):
    with pytest.raises(error, match=message):
        circuit_lab.read_words(text)


def test_read_words_reads_as_the_corpus_does():
    assert circuit_lab.read_words("We are met on a great battle-field -- of that war.") == \
        ["we", "are", "met", "on", "a", "great", "battle-field", "--", "of", "that", "war", "."]


@pytest.mark.parametrize("words, target", [
    ("we are met we", 1),                              # the word after the earlier "we"
    ("we are we are met we", 3),                       # the most recent earlier occurrence
    ("we are met", None),                              # no earlier occurrence
    ("we are met met", None),                          # only just before itself: nothing follows it
    ("we met are met met", 2),                         # ... but an older occurrence counts
    ("we", None),
])
def test_the_copy_target_follows_the_most_recent_earlier_occurrence(words, target):
    seq = words.split()
    assert circuit_lab.copy_target(seq) == target
    assert circuit_lab.copy_target(induction.encode(seq)) == target              # ids read alike
    problem = circuit_lab.copy_problem(seq)
    assert (problem is None) == (target is not None)
    if target is None:
        assert problem.startswith(f"nothing to copy: \u201c{seq[-1]}\u201d, the last word")
        assert ("just before itself" in problem) == (len(seq) > 1 and seq[-2] == seq[-1])


def test_the_pair_metric_is_the_copy_targets_logit_minus_the_mean_for_any_corrupted_word():
    """The metric reads the clean sequence only: logit[T*] - mean logit at the last position
    (patching.copy_logit), whichever word the corruption changed; the token corruption and the
    match corruption both lower it, and a clean sequence with nothing to copy is refused in words."""
    clean, corrupt = circuit_lab.default_pair()
    a, b = induction.encode(clean), induction.encode(corrupt)
    p = circuit_lab.corrupted_position(a, b)
    assert p == len(clean) // 2 and circuit_lab.copy_target(clean) == p      # the chapter's B, in the first copy
    model = induction.trained(2)[0]
    logits = run(model, a[None]).logits
    want = float(logits[0, -1, a[p]] - logits[0, -1].mean())
    assert abs(circuit_lab.pair_metric(logits, a) - want) < 1e-5
    assert circuit_lab.pair_metric(logits, a) == patching.copy_logit(logits, {"query": len(a) - 1, "clean_next": a[p:p + 1]})
    match = a.clone()
    match[p - 1] = b[p]                                                      # the last word's earlier occurrence
    for bad in (b, match):
        assert circuit_lab.pair_metric(run(model, bad[None]).logits, a) < circuit_lab.pair_metric(logits, a) - 1
    nothing = induction.encode("we are met on a great battle-field".split())
    with pytest.raises(ValueError, match="nothing to copy: \u201cbattle-field\u201d"):
        circuit_lab.pair_metric(run(model, nothing[None]).logits, nothing)
    with pytest.raises(ValueError, match="exactly one position"):
        circuit_lab.corrupted_position(a, a)
    with pytest.raises(ValueError, match="same length"):
        circuit_lab.corrupted_position(a, a[:-1])


def _match_pair():
    """The chapter's first pair with the match corrupted instead: the last word's earlier occurrence."""
    clean, corrupt = circuit_lab.default_pair()
    p = circuit_lab.copy_target(clean)
    match = list(clean)
    match[p - 1] = corrupt[p]
    return clean, match


def test_pair_tables_equal_patch_table_with_the_copy_metric():
    """The lab's readout against attnlib.patching.patch_table (the chapter's patching) with
    copy_logit on the copy target, for the token and the match corruption; the match
    corruption shows the previous-token head of layer 0 (the head with the best
    previous-token score) restoring most of the gap on its own."""
    name = [n for n in circuit_lab.lab_checkpoints() if n != circuit_lab.CONTROL][-1]
    model, _, scores = circuit_lab.lab_models()[name]
    for clean, corrupt in (circuit_lab.default_pair(), _match_pair()):
        got = circuit_lab.pair_tables(clean, corrupt, name)
        a, b = induction.encode(clean)[None], induction.encode(corrupt)[None]
        t = circuit_lab.copy_target(clean)
        pairs = {"query": a.shape[1] - 1, "clean_next": a[:, t]}
        ra, rb = run(model, a), run(model, b)
        assert got["clean"] == patching.copy_logit(ra.logits, pairs) and got["corrupted"] == patching.copy_logit(rb.logits, pairs)
        assert got["target"] == clean[t] and got["match"] == t - 1 and got["off"] == [] and got["copy_problem"] is None
        for key, target, source in (("denoise", b, ra), ("noise", a, rb)):
            for site, part in (("z", "heads"), ("resid_pre", "resid")):
                want = patching.patch_table(model, target, source, pairs, site=site, metric=patching.copy_logit)
                assert torch.allclose(torch.tensor(got[key][part], dtype=torch.float64), want, atol=1e-6), (key, site)
                norm = patching.normalised(want, got["clean"], got["corrupted"])
                assert torch.allclose(torch.tensor(got["normalised"][key][part], dtype=torch.float64), norm, atol=1e-9)
        assert got["runs"] == 2 + 2 * (model.n_layers * model.n_heads + (model.n_layers + 1) * len(clean))
    previous = int(torch.tensor(scores["previous"][0]).argmax())
    den = torch.tensor(got["normalised"]["denoise"]["heads"])               # the match corruption
    assert den[0].argmax() == previous and den[0, previous] > 0.5, den


def test_pair_tables_honour_heads_switched_off_in_every_run():
    """With heads off, every run of the pair (the two references, the sources and each patched
    run) has them off: the numbers equal runs written out here; a head that is off has NaN cells."""
    name = [n for n in circuit_lab.lab_checkpoints() if n != circuit_lab.CONTROL][-1]
    model = circuit_lab.lab_models()[name][0]
    clean, corrupt = _match_pair()
    off = [{"layer": 1, "head": 0, "mode": "zero"}, {"layer": -2, "head": 3, "mode": "mean"}]
    got = circuit_lab.pair_tables(clean, corrupt, name, edits=off)
    assert got["off"] == ["0.3", "1.0"]
    a, b = induction.encode(clean)[None], induction.encode(corrupt)[None]
    pairs = {"query": a.shape[1] - 1, "clean_next": a[:, circuit_lab.copy_target(clean)]}
    ra, rb = run(model, a, edits=off), run(model, b, edits=off)
    assert abs(got["clean"] - patching.copy_logit(ra.logits, pairs)) < 1e-9
    assert abs(got["corrupted"] - patching.copy_logit(rb.logits, pairs)) < 1e-9
    assert abs(got["clean"] - circuit_lab.pair_tables(clean, corrupt, name)["clean"]) > 0.1      # the edits matter
    for key, target, source in (("denoise", b, ra), ("noise", a, rb)):
        heads = got[key]["heads"]
        assert math.isnan(heads[1][0]) and math.isnan(heads[0][3]) and math.isnan(got["normalised"][key]["heads"][1][0])
        want = patching.copy_logit(run(model, target, edits=off + [{"layer": 1, "head": 2, "mode": "patch", "source": source}]).logits, pairs)
        assert abs(heads[1][2] - want) < 1e-9
        want = patching.patch_table(model, target, source, pairs, site="resid_pre", extra_edits=off, metric=patching.copy_logit)
        assert torch.allclose(torch.tensor(got[key]["resid"], dtype=torch.float64), want, atol=1e-9)
    assert got["runs"] == 2 + 2 * (model.n_layers * model.n_heads - 2 + (model.n_layers + 1) * len(clean))
    with pytest.raises(ValueError, match="a head switched off"):
        circuit_lab.pair_tables(clean, corrupt, name, edits=[{"layer": 1, "head": None, "mode": "zero"}])


def test_pair_tables_say_when_there_is_nothing_to_copy_and_run_nothing(monkeypatch):
    words = "we are met on a great battle-field of that war".split()
    bad = list(words)
    bad[3] = "nation"
    calls = []
    real = circuit_lab.run
    monkeypatch.setattr(circuit_lab, "run", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = circuit_lab.pair_tables(words, bad)
    assert calls == [] and got["runs"] == 0
    assert got["copy_problem"] == circuit_lab.copy_problem(words) and "nothing to copy" in got["copy_problem"]
    assert got["normalised"] is None and got["clean"] is None and got["range_problem"] is None
    data = circuit_lab.lab_data(words, bad)
    assert data["pair"]["copy_problem"] == got["copy_problem"] and data["pair"]["clean"] is None


@pytest.mark.parametrize("values, lowest, highest", [
    ([[0.0, 1.0], [-0.5, 1.5]], None, None),
    ([[0.2, float("nan")], [1.51, 0.0]], "0.00", "1.51"),
    ([[-0.51]], "-0.51", "-0.51"),
    ([[float("nan")]], None, None),
])
def test_range_problem_warns_outside_its_range(values, lowest, highest):
    got = circuit_lab.range_problem({"denoise": {"heads": values, "resid": [[0.5]]}})
    if lowest is None:
        assert got is None
    else:
        low = min(lowest, "0.50", key=float)
        assert got.startswith(f"some normalised scores leave [-0.5, 1.5] (lowest {low}, highest {max(float(highest), 0.5):.2f})"), got
        assert circuit_lab.NORMALISED_RANGE == (-0.5, 1.5)


def _counting(monkeypatch, name, module=induction):
    """Count the calls of <module>.<name> (the real function still runs)."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    return calls


def test_read_builds_the_one_model_it_reads_once_and_reads_as_a_fresh_model(monkeypatch):
    """A lab exercise's grader reads the reader's words with one checkpoint: read() builds that
    model and its head means once per process (chapter 7's feeder solution reads twenty sequences;
    building the lab's 17 models and the head means on every call cost the kernel memory), and
    the cached model reads exactly as a freshly built one."""
    monkeypatch.setattr(circuit_lab, "_LAB", {})
    built, means = _counting(monkeypatch, "checkpoint"), _counting(monkeypatch, "head_means", transformer)
    name = [n for n in circuit_lab.lab_checkpoints() if n != circuit_lab.CONTROL][-1]
    assert built == [] and means == []                                   # listing builds nothing
    text = "we are met on a great battle-field of that war . we are met on a great battle-field of that nation"
    variants = [{"name": "intact", "edits": []}, {"name": "off", "edits": [{"layer": 1, "head": 0, "mode": "zero"}]},
                {"name": "mean", "edits": [{"layer": 0, "head": 1, "mode": "mean"}]}]
    answers = [circuit_lab.read([text], name, variants) for _ in range(3)]
    assert built == [(induction.STEPS,)] and len(means) == 1
    assert answers[0] == answers[1] == answers[2]
    monkeypatch.undo()
    fresh = induction.checkpoint(induction.trained(2)[1], induction.STEPS)
    tokens = induction.encode(circuit_lab.read_words(text))[None]
    for variant in variants:
        edits = [{**e, "source": head_means(run(fresh, induction.repeated_sequences()))} if e["mode"] == "mean" else e
                 for e in variant["edits"]]
        want = torch.nn.functional.cross_entropy(run(fresh, tokens, edits=edits).logits[0, :-1], tokens[0, 1:],
                                                 reduction="none")
        assert answers[0]["runs"][0]["loss"][variant["name"]] == [round(float(x), 6) for x in want]


def test_lab_models_are_built_once_per_trained_run(monkeypatch):
    """lab_models() returns the same models on every call while the trained runs are the same,
    and builds them anew for new runs."""
    monkeypatch.setattr(circuit_lab, "_LAB", {})
    built = _counting(monkeypatch, "checkpoint")
    first = circuit_lab.lab_models()
    assert len(built) == circuit_lab.N_CHECKPOINTS + 1
    again = circuit_lab.lab_models()
    assert len(built) == circuit_lab.N_CHECKPOINTS + 1 and all(again[n][0] is first[n][0] for n in first)
    assert list(circuit_lab.lab_checkpoints()) == list(first)
    runs = {n: induction.trained(n) for n in (2, 1)}
    monkeypatch.setattr(induction, "trained", lambda n=2, seed=0: (runs[n][0], dict(runs[n][1])))  # a new run
    circuit_lab.lab_models()
    assert len(built) == 2 * (circuit_lab.N_CHECKPOINTS + 1)


# ------------------------------------------------- issue 47: every guard fails a test when broken
@pytest.mark.parametrize("n, ok", [(31, True), (32, True), (33, False)])
def test_read_words_takes_exactly_the_models_context(n, ok):
    text = " ".join(["we"] * n)
    assert induction.SEQ_LEN == 32
    if ok:
        assert circuit_lab.read_words(text) == ["we"] * n
    else:
        with pytest.raises(ValueError, match=f"{n} words: the model reads at most 32"):
            circuit_lab.read_words(text)


def _by_definition(steps, score, n):
    """checkpoint_steps written from its docstring, independently: the first and last steps; for
    n - 2 levels evenly spaced between the best score at the start and the highest, the first step
    that reaches each level; then, while fewer than n, the step furthest from those chosen."""
    low, high = score[0], max(score)
    chosen = [steps[0], steps[-1]]
    for i in range(1, n - 1):
        level = low + (high - low) * i / (n - 1)
        first = min(s for s, v in zip(steps, score) if v >= level)
        if first not in chosen:
            chosen.append(first)
    while len(chosen) < n:
        rest = [s for s in steps if s not in chosen]
        distance = [min(abs(s - c) for c in chosen) for s in rest]
        chosen.append(rest[distance.index(max(distance))])
    return sorted(chosen)


@pytest.mark.parametrize("seed", range(6))
def test_checkpoint_steps_follow_their_definition_on_generated_runs(seed):
    """Generated training histories (a rise at a random step with a random width, noise, plateaus
    that make levels coincide) against the rule written independently above."""
    g = torch.Generator().manual_seed(seed)
    n_probe = int(torch.randint(20, 80, (1,), generator=g))
    steps = (torch.arange(n_probe) * int(torch.randint(5, 50, (1,), generator=g))).tolist()
    centre, width = float(torch.rand(1, generator=g)) * steps[-1], 1 + float(torch.rand(1, generator=g)) * steps[-1] / 4
    rise = torch.sigmoid((torch.tensor(steps, dtype=torch.float32) - centre) / width)
    score = (rise + 0.05 * torch.randn(n_probe, generator=g)).clamp(min=0).round(decimals=1)   # plateaus
    history = {"probe_step": steps, "induction": [torch.stack([torch.zeros(4), torch.full((4,), float(v))]) for v in score]}
    for n in (2, 5, 16, min(n_probe, 30)):
        assert circuit_lab.checkpoint_steps(history, n) == _by_definition(steps, [float(v) for v in score], n)


def _perturbing_session(monkeypatch, output: int, by: float):
    """onnxruntime sessions whose run() adds ``by`` to one output (0 logits, 1 pattern, 2 z, 3 resid)."""
    import onnxruntime as ort
    real = ort.InferenceSession

    class Perturbed:
        def __init__(self, *a, **k):
            self.inner = real(*a, **k)

        def run(self, names, feeds):
            out = list(self.inner.run(names, feeds))
            out[output] = out[output] + by
            return out

    monkeypatch.setattr(ort, "InferenceSession", Perturbed)


@pytest.mark.parametrize("output, name", [(0, "logits"), (1, "pattern"), (2, "z"), (3, "resid")])
def test_the_build_check_fails_on_any_output_beyond_its_tolerance(tmp_path, monkeypatch, output, name):
    pytest.importorskip("onnxruntime")
    model = TinyTransformer(30, d_model=16, n_heads=4, n_layers=2, max_len=10, seed=1)
    path = circuit_export.export(model, tmp_path / "m.onnx")
    _perturbing_session(monkeypatch, output, 0.5 * circuit_export.BUILD_TOLERANCE)
    circuit_export.check(path, model, n=1)                                  # within the tolerance: passes
    monkeypatch.undo()
    _perturbing_session(monkeypatch, output, 3 * circuit_export.BUILD_TOLERANCE)
    with pytest.raises(ValueError, match=f"differs from PyTorch in {name} by 3.00e-04"):
        circuit_export.check(path, model, n=1)


# ------------------------------------------- issue 46 item 7: read() refuses malformed arguments clearly
_OFF = {"layer": 1, "head": 0, "mode": "zero"}


def _last_name():
    return [n for n in circuit_lab.lab_checkpoints() if n != circuit_lab.CONTROL][-1]


@pytest.mark.parametrize("texts, variants, error, message", [
    ("we are met", [{"name": "a", "edits": []}], TypeError, r"texts must be a list of texts, e\.g\. \['we are met'\], got a str: one text alone would be read letter by letter"),
    (("we" for _ in range(1)), [{"name": "a", "edits": []}], TypeError, "texts must be a list of texts .str., got generator"),
    ([], [{"name": "a", "edits": []}], ValueError, "texts must hold at least one text, got an empty list"),
    (["we are met", 7], [{"name": "a", "edits": []}], TypeError, r"texts\[1\] must be a str of words, got int"),
    (["we are met"], {"name": "a", "edits": []}, TypeError, "variants must be a list of variants such as .*, got an object"),
    (["we are met"], [], ValueError, "variants must hold at least one variant"),
    (["we are met"], ["intact"], TypeError, 'variant 0 must be an object such as .*, got "intact"'),
    (["we are met"], [{"edits": []}], ValueError, "variant 0 needs 'name' and 'edits', got no 'name'"),
    (["we are met"], [{"name": "a"}], ValueError, r"variant 0 \('a'\) needs 'name' and 'edits', got no 'edits'"),
    (["we are met"], [{"name": "a", "edits": [], "mode": "zero"}], ValueError, r"variant 0 \('a'\): unknown key 'mode'; a variant has name and edits"),
    (["we are met"], [{"name": 3, "edits": []}], TypeError, "variant 0: name must be a str, got 3"),
    (["we are met"], [{"name": " ", "edits": []}], ValueError, "variant 0: name must not be empty"),
    (["we are met"], [{"name": "a", "edits": []}, {"name": "b", "edits": []}, {"name": "a", "edits": [_OFF]}],
     ValueError, r"variants 0 and 2 are both named 'a': give each variant its own name \(its losses are keyed by it\)"),
    (["we are met"], [{"name": "a", "edits": _OFF}], TypeError, r"variant 0 \('a'\): edits must be a list of heads switched off .*, got an object"),
    (["we are met"], [{"name": "a", "edits": "zero"}], TypeError, r"variant 0 \('a'\): edits must be a list .*, got \"zero\""),
    # the edits' own errors are attnlib.edits.as_edits's, after the variant's name
    (["we are met"], [{"name": "a", "edits": [5]}], TypeError, r"variant 0 \('a'\): edit 0 must be an object such as"),
    (["we are met"], [{"name": "a", "edits": [{"layer": 1, "head": "0", "mode": "zero"}]}], TypeError, r"variant 0 \('a'\): edit 0: head must be an int, got \"0\""),
    (["we are met"], [{"name": "a", "edits": [{"layer": 1, "head": 0, "mode": "off"}]}], ValueError, r"variant 0 \('a'\): edit 0: mode must be"),
    (["we are met"], [{"name": "a", "edits": [{"layer": 1, "mode": "zero"}]}], ValueError, r"variant 0 \('a'\): edit 0: the residual stream .* can only be patched"),
    (["we are met"], [{"name": "a", "edits": [_OFF, _OFF]}], ValueError, r"variant 0 \('a'\): edits 0 and 1 both edit head \(1, 0\)"),
    (["we are met"], [{"name": "a", "edits": [{"layer": 1, "head": 0, "mode": "patch"}]}], ValueError, r"variant 0 \('a'\): edit 0 switches no head off"),
    (["we are met"], [{"name": "a", "edits": [{"layer": 1, "head": 0, "mode": "mean", "source": [1]}]}], ValueError, r"variant 0 \('a'\): edit 0 switches no head off"),
    (["we are met"], [{"name": "a", "edits": [{"layer": 9, "head": 0, "mode": "zero"}]}], IndexError, r"variant 0 \('a'\): edit 0: layer 9 is outside 0..1"),
    (["we are met"], [{"name": "a", "edits": [{**_OFF, "position": 3}]}], IndexError, r"variant 0 \('a'\): edit 0: position 3 is outside the 3 tokens"),
])
def test_read_refuses_malformed_arguments_with_a_clear_error(texts, variants, error, message):
    """Each malformed argument raises one clear TypeError / ValueError (IndexError for an index
    outside the model or the text: attnlib.edits's error) naming what was expected and what came,
    not a KeyError or an AttributeError from deep inside."""
    with pytest.raises(error, match=message) as caught:
        circuit_lab.read(texts, _last_name(), variants)
    assert type(caught.value) is error


def test_read_refuses_an_unknown_model_by_name():
    with pytest.raises(TypeError, match="model_name must be a str, one of .*, got list"):
        circuit_lab.read(["we are met"], ["step-1"], [{"name": "a", "edits": []}])
    with pytest.raises(ValueError, match="model_name must be one of"):
        circuit_lab.read(["we are met"], "step-0.5", [{"name": "a", "edits": []}])


def test_read_keeps_every_variant_and_quotes_a_long_word_short():
    """Two variants of distinct names give two losses (a reader's refused text is the error dict,
    not an exception), and a 10,000-letter word is quoted by its first 40 letters and length."""
    variants = [{"name": "intact", "edits": []}, {"name": "off", "edits": [{**_OFF, "position": -1}]}]
    out = circuit_lab.read(("we are met on a great battle-field we are",), _last_name(), variants)
    assert list(out["runs"][0]["loss"]) == ["intact", "off"]
    refused = circuit_lab.read(["we " + "x" * 10_000], _last_name(), variants)
    assert refused["error"].startswith("\u201c" + "x" * 40 + "\u2026\u201d (10,000 characters) is not in the model's "
                                       "vocabulary (the 141 words and marks of the Gettysburg Address)"), refused["error"]
    with pytest.raises(ValueError, match="\u201c" + "x" * 40 + "\u201d is not in"):   # 40 letters: whole
        circuit_lab.read_words("x" * 40)


def test_the_pages_reader_quotes_a_long_word_as_the_kernel_does():
    """attnlibTiny.words (attnlib/static/xp_tiny.js) shortens a word in its message as
    circuit_lab._shortened does: the same 40 characters, the ellipsis and the length, in the
    page's quotation marks."""
    import json
    import os
    import re
    import shutil
    import subprocess
    from pathlib import Path
    node = shutil.which("node")
    if node is None:                                    # as tests/test_edits_mirror.py
        if os.environ.get("ATTNLIB_REQUIRE_BROWSER"):
            pytest.fail("node is needed to run the page's xp_tiny.js (CI has it)")
        pytest.skip("node is not installed: the page's xp_tiny.js cannot be run here")
    source = (Path(__file__).resolve().parents[1] / "attnlib" / "static" / "xp_tiny.js").read_text(encoding="utf-8")
    block = re.search(r"var QUOTE_CHARS = \d+;\nfunction shortened\(word\) \{.*?\n\}\n", source, re.S).group(0)
    words = ["battle-field", "x" * 40, "x" * 41, "ab" * 5000]
    script = block + f"process.stdout.write(JSON.stringify({json.dumps(words)}.map(shortened)));"
    page = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)
    kernel = [circuit_lab._shortened(w) for w in words]
    assert [p.replace("\u201c", "'").replace("\u201d", "'") for p in page] == kernel
    assert "QUOTE_CHARS = %d;" % circuit_lab.QUOTE_CHARS in source


def test_variants_are_checked_before_any_text_is_read():
    """check_variants checks the edits itself (lab_data uses it with no text), so a malformed
    variant is refused even when the reader's text would be refused first."""
    bad = [{"name": "a", "edits": [{"layer": 1, "head": 7, "mode": "zero"}]}]
    with pytest.raises(IndexError, match=r"variant 0 \('a'\): edit 0: head 7 is outside 0..3"):
        circuit_lab.check_variants(bad, 2, 4)
    with pytest.raises(IndexError, match=r"variant 0 \('a'\): edit 0: head 7"):
        circuit_lab.read(["xylophone"], _last_name(), bad)
    assert circuit_lab.check_variants([{"name": "m", "edits": [{"layer": -1, "head": 0, "mode": "mean"}]}], 2, 4) == \
        [("m", [{"layer": -1, "head": 0, "mode": "mean"}])]
