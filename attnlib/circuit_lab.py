"""The circuit lab: chapter 7's trained language model, and its training checkpoints, in the page.

Chapter 7 trains a two-layer attention-only model (:mod:`attnlib.induction`) in which a
previous-token head and an induction head form.  The circuit lab lets a reader of the published
page run that model on a word sequence of their own, at any of :data:`N_CHECKPOINTS` moments of
its training, switch heads off and patch activations between two runs, with no kernel.  This
module is the lab in the kernel: which checkpoints it offers (:func:`checkpoint_steps`), the same
checkpoints as PyTorch models (:func:`lab_models`), and :func:`read`, what a lab exercise's
grader receives, computed with PyTorch; the page computes the same dict with
``window.attnlibTiny`` (``attnlib/static/xp_tiny.js``).  The build-time exporter that writes
those checkpoints for the page is :mod:`attnlib.circuit_export`.

The lab's patching metric (:func:`pair_metric`) reads the clean sequence only: its **copy
target** (:func:`copy_target`) is the word that followed the most recent earlier occurrence of
the last word, and the metric is that word's logit minus the mean logit over the vocabulary at
the last position (:func:`attnlib.patching.copy_logit`).  So any one-word corruption gives a
meaningful table: changing the copy target's earlier copy (the chapter's token corruption) or
the last word's earlier occurrence (the *match corruption*, which shows the previous-token
head).  A clean sequence with nothing to copy has no metric (:func:`copy_problem` says so in
words); :func:`pair_tables` is the whole patching readout, the same dict as the page's
``attnlibTiny.patch``, with heads switched off honoured in every run.

The edits are :mod:`attnlib.edits`'s spec: ``{"layer", "head", "mode": "zero" | "mean" | "patch",
"source"?, "position"?}``.  Mean ablation replaces a head's output by its mean over the
chapter's held-out repeated sequences (:func:`attnlib.transformer.reference_means`), stored per
checkpoint so that the page uses the same numbers.

Shapes legend: ``B`` batch, ``L`` layers, ``H`` heads, ``T`` tokens, ``V`` vocabulary,
``d_head`` a head's width, ``d_model`` the model's width.
"""
from __future__ import annotations

import math

import torch

from . import _validate, induction
from .patching import MIN_GAP
from .transformer import TinyTransformer, reference_means, run

__all__ = ["N_CHECKPOINTS", "checkpoint_steps", "lab_checkpoints", "lab_models",
           "head_scores", "copy_target", "copy_problem", "pair_metric", "range_problem", "pair_tables",
           "NORMALISED_RANGE", "corrupted_position", "default_pair", "lab_data",
           "read_words", "read", "check_variants", "VARIANT_KEYS", "QUOTE_CHARS", "CONTROL"]

#: Checkpoints of the two-layer run the page offers (the first and last steps included).
N_CHECKPOINTS = 16

#: The name of the one-layer control in the lab.
CONTROL = "one-layer"

#: The keys of a variant of :func:`read`: its name and the heads it switches off.
VARIANT_KEYS = ("name", "edits")
_VARIANT_EXAMPLE = '{"name": "induction_off", "edits": [{"layer": 1, "head": 0, "mode": "zero"}]}'

#: A message quotes at most this many characters of a word (then "…" and the word's length);
#: the page's ``attnlibTiny.words`` quotes the same way.
QUOTE_CHARS = 40


def _shortened(word: str) -> str:
    """``word`` as a message quotes it: whole up to :data:`QUOTE_CHARS` characters, else its start,
    "…" and its length.

    >>> _shortened("battle-field"), _shortened("x" * 10_000)[-24:]
    ("'battle-field'", "xx…' (10,000 characters)")
    """
    if len(word) <= QUOTE_CHARS:
        return f"'{word}'"
    return f"'{word[:QUOTE_CHARS]}\u2026' ({len(word):,} characters)"


#: The range of normalised patching scores read as shares of the gap between the corrupted (0)
#: and the clean (1) run; outside it :func:`range_problem` warns (the page mirrors it).
NORMALISED_RANGE = (-0.5, 1.5)

def checkpoint_steps(history: dict, n: int = N_CHECKPOINTS) -> list:
    """``n`` probe steps of a training run, dense where the induction head forms: the first
    and last steps, then, for ``n - 2`` levels evenly spaced between the last layer's best
    induction score at the start and at its highest, the first step that reaches each level;
    steps that coincide are replaced by the probe steps furthest from those already chosen.

    Returns:
        the steps, sorted (ints).

    Raises:
        TypeError: ``history`` not a :func:`attnlib.induction.train` history; ``n`` not an int.
        ValueError: ``n`` below 2 or above the number of probe steps.
    """
    if not isinstance(history, dict) or "probe_step" not in history or "induction" not in history:
        raise TypeError("history must be the history dict of attnlib.induction.train")
    n = _validate.positive_int(n, "n")
    steps = [int(s) for s in history["probe_step"]]
    if not 2 <= n <= len(steps):
        raise ValueError(f"n must be between 2 and the {len(steps)} probe steps, got {n}")
    score = [float(x[-1].max()) for x in history["induction"]]          # the last layer's best head
    low, high = score[0], max(score)
    chosen = {steps[0], steps[-1]}
    for i in range(1, n - 1):
        level = low + (high - low) * i / (n - 1)
        chosen.add(next(s for s, v in zip(steps, score) if v >= level))
    while len(chosen) < n:                                              # fill the widest gaps in time
        chosen.add(max((s for s in steps if s not in chosen), key=lambda s: min(abs(s - c) for c in chosen)))
    return sorted(chosen)


def head_scores(history: dict, step: int) -> dict:
    """Each head's induction and previous-token scores at ``step`` of a training run, as the run
    read them (:func:`attnlib.induction.train`'s probes: 64 held-out repeated sequences and 64
    windows of the speech), rounded to 4 decimals: ``{"induction": L lists of H, "previous": L
    lists of H}``.

    Raises:
        ValueError: ``step`` is not a probe step of the run.
    """
    steps = [int(s) for s in history["probe_step"]]
    if step not in steps:
        raise ValueError(f"step {step} is not a probe step of the run")
    at = steps.index(step)
    return {name: [[round(float(x), 4) for x in row] for row in history[name][at]] for name in ("induction", "previous")}


def _words(seq) -> list:
    """A sequence as words: words (str) as they are, word ids decoded."""
    seq = list(seq)
    return [str(w) for w in seq] if all(isinstance(w, str) for w in seq) else induction.decode([int(w) for w in seq])


def copy_target(seq) -> int | None:
    """The position of the lab's **copy target** in a clean sequence (words or word ids): the
    word that followed the most recent earlier occurrence of the last word, what an induction
    head copies.  An occurrence just before the last word does not count (the word after it is
    the last word itself).  ``None`` when nothing can be copied (:func:`copy_problem`).

    >>> copy_target(["we", "are", "met", "we"])
    1
    >>> copy_target(["we", "are", "met"]) is None
    True
    """
    seq = list(seq)
    last = len(seq) - 1
    for j in range(last - 2, -1, -1):                # the most recent earlier occurrence, j + 1 < last
        if seq[j] == seq[last]:
            return j + 1
    return None


def copy_problem(seq) -> str | None:
    """Why a clean sequence (words or word ids) gives the lab's metric nothing to measure, in
    words, or ``None`` when it has a copy target (:func:`copy_target`).  The page shows the same
    sentence (``attnlibTiny.copyProblem``)."""
    words = _words(seq)
    if copy_target(words) is not None:
        return None
    last = words[-1]
    if len(words) >= 2 and words[-2] == last:
        return (f"nothing to copy: \u201c{last}\u201d, the last word, occurs earlier only just before itself, so no "
                f"earlier occurrence is followed by a word to copy and no score here measures copying")
    return (f"nothing to copy: \u201c{last}\u201d, the last word, does not occur earlier in the clean sequence, so "
            f"there is no copy target and no score here measures copying")


def pair_metric(logits: torch.Tensor, clean) -> float:
    """The lab's patching metric: at the last position, the logit of the clean sequence's copy
    target (:func:`copy_target`) minus the mean logit over the vocabulary (nats;
    :func:`attnlib.patching.copy_logit`).  It reads the clean sequence only, so the clean run,
    the corrupted run and every patched run of a pair are scored on the same word, whichever
    word the corruption changed; linear in the logits, so normalised scores are meaningful.

    Shapes:
        logits ``(1, T, V)``; clean ``(T,)`` word ids.

    Raises:
        ValueError: the clean sequence has nothing to copy (:func:`copy_problem`'s sentence).
    """
    from .patching import copy_logit
    target = copy_target([int(x) for x in clean])
    if target is None:
        raise ValueError(copy_problem(clean))
    return copy_logit(logits, {"query": len(clean) - 1, "clean_next": torch.tensor([int(clean[target])])})


def range_problem(normalised, low: float = NORMALISED_RANGE[0], high: float = NORMALISED_RANGE[1]) -> str | None:
    """A warning, in words, when a normalised patching score (finite ones; a switched-off head's
    NaN is skipped) leaves ``[low, high]``, else ``None``.  ``normalised``: nested lists, arrays
    or dicts of them (:func:`pair_tables`'s ``normalised``).  The page shows the same sentence
    (``attnlibTiny.rangeProblem``)."""
    values = []

    def collect(x):
        if isinstance(x, dict):
            for v in x.values():
                collect(v)
        elif isinstance(x, (list, tuple)) or (isinstance(x, torch.Tensor) and x.dim() > 0):
            for v in x:
                collect(v)
        elif x is not None and math.isfinite(float(x)):
            values.append(float(x))
    collect(normalised)
    if not values or (min(values) >= low and max(values) <= high):
        return None
    return (f"some normalised scores leave [{low:g}, {high:g}] (lowest {min(values):.2f}, highest {max(values):.2f}): "
            f"a patch moved the metric more than half the gap beyond the clean or the corrupted run, so these "
            f"scores are not shares of the gap: read them as how far each patch moves the metric, in units of the gap")


@torch.no_grad()
def pair_tables(clean, corrupt, model_name: str | None = None, *, edits=()) -> dict:
    """The circuit lab's whole patching readout for one pair, computed with PyTorch: the page's
    ``attnlibTiny.patch`` returns the same numbers (``tests/test_page_tiny.py``).  Every head's
    output and the residual stream entering every layer at every position, patched one at a time
    from the clean run into the corrupted (denoising) and back (noising), scored with
    :func:`pair_metric`; ``edits`` (heads switched off: zero or mean, :mod:`attnlib.edits`) apply
    in every run, the sources included.  A switched-off head's own cell is NaN (it has nothing to
    patch, and one place takes one edit).

    Args:
        clean, corrupt: word lists (or text, read by :func:`read_words`) that differ at one position.
        model_name: one of :func:`lab_checkpoints` (default: the last step).
        edits: the heads switched off, ``[{"layer", "head", "mode": "zero" | "mean", "position"?}]``.

    Returns:
        ``{"position", "clean_word", "corrupt_word", "target_position", "target", "match",
        "copy_problem", "off", "clean", "corrupted", "denoise": {"heads": L x H, "resid": (L+1) x T},
        "noise", "normalised": {"denoise", "noise"}, "problem", "range_problem", "runs"}``; when the
        clean sequence has nothing to copy, ``copy_problem`` says so and the metrics and tables are
        ``None`` (nothing is run).  ``problem`` is :func:`attnlib.patching.gap_problem` (then every
        normalised score is NaN); ``range_problem`` is :func:`range_problem` of the normalised scores.

    Raises:
        ValueError: as :func:`read_words` and :func:`corrupted_position`; an edit that is not a
            head's zero or mean ablation; an unknown model.
    """
    from .edits import as_edits
    from .patching import copy_logit, gap_problem
    names = list(lab_checkpoints())
    model_name = names[-2] if model_name is None else model_name
    model = _lab_model(model_name)
    a_words = read_words(clean) if isinstance(clean, str) else list(clean)
    b_words = read_words(corrupt) if isinstance(corrupt, str) else list(corrupt)
    a, b = induction.encode(a_words), induction.encode(b_words)
    p = corrupted_position(a, b)
    T, L, H = len(a_words), model.n_layers, model.n_heads
    off = [dict(e) for e in edits]
    for i, e in enumerate(off):
        if e.get("head") is None or e.get("mode") not in ("zero", "mean") or e.get("source") is not None:
            raise ValueError(f"edits[{i}]: a head switched off is {{'layer', 'head', 'mode': 'zero' | 'mean'}}, got {e}")
    checked = as_edits(off, L, H, T=T, reference=reference_means(model))   # normalised: negative layers and heads count from the end
    off_heads = sorted({(e.layer, e.head) for e in checked})
    target = copy_target(a_words)
    out = {"position": p, "clean_word": a_words[p], "corrupt_word": b_words[p],
           "target_position": target, "target": None if target is None else a_words[target],
           "match": None if target is None else target - 1, "copy_problem": copy_problem(a_words),
           "off": [f"{l}.{h}" for l, h in off_heads], "clean": None, "corrupted": None, "denoise": None,
           "noise": None, "normalised": None, "problem": None, "range_problem": None, "runs": 0}
    if target is None:
        return out
    pairs = {"query": T - 1, "clean_next": a[target:target + 1]}
    ra, rb = run(model, a[None], edits=off), run(model, b[None], edits=off)
    clean_m, corrupt_m = copy_logit(ra.logits, pairs), copy_logit(rb.logits, pairs)
    runs = 2
    tables = {}
    for key, tokens, source in (("denoise", b[None], ra), ("noise", a[None], rb)):
        heads = [[math.nan] * H for _ in range(L)]
        for layer in range(L):
            for head in range(H):
                if (layer, head) in off_heads:
                    continue
                edit = {"layer": layer, "head": head, "mode": "patch", "source": source}
                heads[layer][head] = copy_logit(run(model, tokens, edits=off + [edit]).logits, pairs)
                runs += 1
        resid = [[copy_logit(run(model, tokens, edits=off + [{"layer": layer, "head": None, "mode": "patch",
                                                              "source": source, "position": t}]).logits, pairs)
                  for t in range(T)] for layer in range(L + 1)]
        runs += (L + 1) * T
        tables[key] = {"heads": heads, "resid": resid}
    problem = gap_problem(clean_m, corrupt_m)

    def norm(x):
        return math.nan if problem or not math.isfinite(x) else (x - corrupt_m) / (clean_m - corrupt_m)
    normalised = {key: {part: [[norm(x) for x in row] for row in t[part]] for part in ("heads", "resid")}
                  for key, t in tables.items()}
    out.update(clean=clean_m, corrupted=corrupt_m, denoise=tables["denoise"], noise=tables["noise"],
               normalised=normalised, problem=problem, runs=runs,
               range_problem=None if problem else range_problem(normalised))
    return out


def corrupted_position(clean, corrupt) -> int:
    """The one position where two word-id sequences differ.

    Raises:
        ValueError: they differ in length, nowhere, or at more than one position.
    """
    clean, corrupt = [int(x) for x in clean], [int(x) for x in corrupt]
    if len(clean) != len(corrupt):
        raise ValueError(f"the clean and corrupted sequences must have the same length, got {len(clean)} and {len(corrupt)}")
    where = [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b]
    if len(where) != 1:
        raise ValueError(f"the clean and corrupted sequences must differ at exactly one position, "
                         f"they differ at {len(where)}")
    return where[0]


def default_pair() -> tuple:
    """The lab's first pair: the first of the chapter's patching pairs
    (:func:`attnlib.patching.induction_pairs`), cut after its query, so that the metric at the
    last position is the chapter's.  Returns ``(clean words, corrupted words)``."""
    from .patching import induction_pairs
    pairs = induction_pairs(1)
    q = pairs["query"]
    return induction.decode(pairs["clean"][0, :q + 1]), induction.decode(pairs["corrupt"][0, :q + 1])


def lab_data(words=None, corrupt=None, *, model_name: str | None = None, layer: int = 1, head: int | None = None) -> dict:
    """The data of the circuit lab's first view (``attnlib/static/xp_tiny.js``), computed with
    PyTorch: the models and their head scores, the words, the loss per word and every head's
    pattern at ``model_name`` (default: the last checkpoint), and the pair's metric
    (:func:`pair_metric`; ``None``, with ``copy_problem`` saying why, when the clean sequence has
    nothing to copy).

    Raises:
        ValueError: as :func:`read_words` (text given as a str is read by it); an unknown model; a
            pair that does not differ at exactly one position.
        IndexError: ``layer`` or ``head`` outside the model.
    """
    import torch.nn.functional as F
    checkpoints = lab_checkpoints()
    names = list(checkpoints)
    model_name = names[-2] if model_name is None else model_name
    if model_name not in checkpoints:
        raise ValueError(f"model_name must be one of {names}, got {model_name!r}")
    model = _lab_model(model_name)
    if words is None and corrupt is None:
        words, corrupt = default_pair()
    words = read_words(words) if isinstance(words, str) else list(words)
    corrupt = None if corrupt is None else (read_words(corrupt) if isinstance(corrupt, str) else list(corrupt))
    ids = induction.encode(words)
    if head is None:
        head = int(torch.tensor(checkpoints[model_name][1]["induction"][-1]).argmax())
    layer = _validate.index(layer, model.n_layers, "layer")
    head = _validate.index(head, model.n_heads, "head")
    r = run(model, ids[None])
    loss = F.cross_entropy(r.logits[0, :-1], ids[1:], reduction="none")
    pair = None
    if corrupt is not None:
        bad = induction.encode(corrupt)
        p = corrupted_position(ids, bad)
        target, problem = copy_target(words), copy_problem(words)
        pair = {"corrupt": corrupt, "position": p, "target_position": target, "copy_problem": problem,
                "clean": None if problem else pair_metric(r.logits, ids),
                "corrupted": None if problem else pair_metric(run(model, bad[None]).logits, ids)}
    return {
        "vocabulary": induction.vocabulary(), "max_len": induction.SEQ_LEN, "n_heads": model.n_heads,
        "models": [{"name": n, "step": s, "n_layers": len(scores["induction"]), "control": n == CONTROL, **scores}
                   for n, (s, scores) in checkpoints.items()],
        "model": model_name, "layer": layer, "head": head, "words": words, "pair": pair,
        "loss": [round(float(x), 5) for x in loss],
        "attentions": [round(float(x), 4) for x in r.stacked("pattern")[:, 0].flatten()],
        "uniform_induction": induction.uniform_induction_score(), "uniform_previous": induction.uniform_previous_score(),
        "min_gap": MIN_GAP, "normalised_range": list(NORMALISED_RANGE),
    }


# The lab in this process: its checkpoints, and each model once built, for the
# trained runs they come from (held here, so that they stay alive while they key the entry).  A lab
# exercise's grader reads the reader's words with one model (:func:`read`), twenty times in
# chapter 7's feeder solution, which built all 17 models every time (the head means are
# attnlib.transformer.reference_means's, kept per model there).
_LAB: dict = {}


def _lab() -> dict:
    """The lab's entry for the current trained runs (:func:`attnlib.induction.trained`), made anew
    when they changed: ``{"runs", "checkpoints": {name: (history, step, scores)}, "models": {}}``."""
    _, history2 = induction.trained(2)
    _, history1 = induction.trained(1)
    runs = _LAB.get("runs")
    if runs is None or runs[0] is not history2 or runs[1] is not history1:
        checkpoints = {f"step-{s}": (history2, s, head_scores(history2, s)) for s in checkpoint_steps(history2)}
        last = int(history1["probe_step"][-1])
        checkpoints[CONTROL] = (history1, last, head_scores(history1, last))
        _LAB.clear()
        _LAB.update(runs=(history2, history1), checkpoints=checkpoints, models={})
    return _LAB


def lab_checkpoints() -> dict:
    """The lab's models without building them: ``{name: (step, scores)}`` in the page's order (as
    :func:`lab_models`)."""
    return {name: (step, scores) for name, (_, step, scores) in _lab()["checkpoints"].items()}


def _lab_model(name: str) -> TinyTransformer:
    """The model ``name`` of :func:`lab_models`, built the first time it is asked for.

    Raises:
        ValueError: ``name`` is not one of the lab's models.
    """
    lab = _lab()
    if name not in lab["checkpoints"]:
        raise ValueError(f"model_name must be one of {list(lab['checkpoints'])}, got {name!r}")
    if name not in lab["models"]:
        history, step, _ = lab["checkpoints"][name]
        lab["models"][name] = induction.checkpoint(history, step)
    return lab["models"][name]


def lab_models() -> dict:
    """The lab's models in the kernel: ``{name: (model, step, scores)}`` in the page's order, the
    :func:`checkpoint_steps` of the chapter's two-layer run (names ``"step-<step>"``) and the
    one-layer control (:data:`CONTROL`, its last step); ``scores`` is :func:`head_scores`.  Built
    from the trained runs (:func:`attnlib.induction.trained`: the cache, or a training run), once
    per process and run: every call returns the same model objects, so treat them as read-only
    (:func:`lab_checkpoints` lists them without building any)."""
    return {name: (_lab_model(name), step, scores) for name, (step, scores) in lab_checkpoints().items()}


def read_words(text) -> list:
    """The lab's reading of typed text: :func:`attnlib.corpus.words_of` (lower-cased words and
    punctuation marks), each checked against the model's vocabulary.

    Raises:
        TypeError: ``text`` not a str.
        ValueError: empty, longer than the model's context (``SEQ_LEN`` words), or a word not in
            the vocabulary (the message names it and suggests the closest words:
            :func:`attnlib.exercises.core.unknown_word`).
    """
    from . import corpus
    from .exercises.core import unknown_word
    if not isinstance(text, str):
        raise TypeError(f"text must be a str of words, got {type(text).__name__}")
    found = corpus.words_of(text)
    if not found:
        raise ValueError("no words: type words of the Gettysburg Address, e.g. 'we are met on a great battle-field'")
    if len(found) > induction.SEQ_LEN:
        raise ValueError(f"{len(found)} words: the model reads at most {induction.SEQ_LEN}")
    vocab = induction.vocabulary()
    known = set(vocab)
    for w in found:
        if w not in known:
            raise ValueError(unknown_word(w, vocab))     # the lab's grader and the page say the same
    return found


def _variant(i: int, name) -> str:
    """A variant as the messages name it: ``variant 1 ('induction_off')``."""
    return f"variant {i}" + (f" ({_shortened(name)})" if isinstance(name, str) else "")


def check_variants(variants, n_layers: int, n_heads: int) -> list:
    """Check the variants of :func:`read` against a model of ``n_layers`` blocks and ``n_heads``
    heads: a non-empty list of ``{"name": str, "edits": [...]}`` (:data:`VARIANT_KEYS`, no other
    key), each name non-empty and used once (the losses are keyed by it), each variant's edits
    heads switched off (``{"layer", "head", "mode": "zero" | "mean", "position"?}``, checked by
    :func:`attnlib.edits.as_edits`, whose message follows the variant's name; positions are
    checked against each text's length when it is run).  :func:`attnlib.exercises.ch07.lab_data`
    passes its variants through this when it makes them, so the page (which runs the data's
    variants, ``tinyAnswer`` in ``attnlib/static/exercises.js``) only ever receives checked ones.

    Returns:
        ``[(name, edits)]``, the edits as given (lists of dicts).

    Raises:
        TypeError: ``variants`` not a list or tuple; a variant not a dict; a name not a str; as
            :func:`attnlib.edits.as_edits`.
        ValueError: no variant; an unknown or a missing key; an empty name; two variants of one
            name; an edit that patches or has a source; as :func:`attnlib.edits.as_edits`.
        IndexError: as :func:`attnlib.edits.as_edits` (a layer or head outside the model).

    >>> check_variants([{"name": "off", "edits": [{"layer": 1, "head": 0, "mode": "zero"}]}], 2, 4)
    [('off', [{'layer': 1, 'head': 0, 'mode': 'zero'}])]
    >>> check_variants([{"name": "a", "edits": []}, {"name": "a", "edits": []}], 2, 4)
    Traceback (most recent call last):
    ...
    ValueError: variants 0 and 1 are both named 'a': give each variant its own name (its losses are keyed by it)
    """
    from .edits import as_edits, show
    if not isinstance(variants, (list, tuple)):
        raise TypeError(f"variants must be a list of variants such as [{_VARIANT_EXAMPLE}], got {show(variants)}")
    if not variants:
        raise ValueError(f"variants must hold at least one variant such as {_VARIANT_EXAMPLE}, got an empty list")
    seen, out = {}, []
    for i, v in enumerate(variants):
        if not isinstance(v, dict):
            raise TypeError(f"variant {i} must be an object such as {_VARIANT_EXAMPLE}, got {show(v)}")
        unknown = sorted(str(k) for k in v if k not in VARIANT_KEYS)
        if unknown:
            raise ValueError(f"{_variant(i, v.get('name'))}: unknown key {', '.join(_shortened(k) for k in unknown)}; "
                             f"a variant has {' and '.join(VARIANT_KEYS)}")
        missing = [k for k in VARIANT_KEYS if k not in v]
        if missing:
            raise ValueError(f"{_variant(i, v.get('name'))} needs {' and '.join(repr(k) for k in VARIANT_KEYS)}, "
                             f"got no {' and no '.join(repr(k) for k in missing)}")
        name, edits = v["name"], v["edits"]
        if not isinstance(name, str):
            raise TypeError(f"variant {i}: name must be a str, got {show(name)}")
        if not name.strip():
            raise ValueError(f"variant {i}: name must not be empty")
        if name in seen:
            raise ValueError(f"variants {seen[name]} and {i} are both named {_shortened(name)}: give each variant "
                             f"its own name (its losses are keyed by it)")
        seen[name] = i
        if not isinstance(edits, (list, tuple)):
            raise TypeError(f"{_variant(i, name)}: edits must be a list of heads switched off such as "
                            f'[{{"layer": 1, "head": 0, "mode": "zero"}}] (or [] for the intact model), got {show(edits)}')
        for j, e in enumerate(edits):
            if isinstance(e, dict) and (e.get("mode") == "patch" or e.get("source") is not None):
                raise ValueError(f"{_variant(i, name)}: edit {j} switches no head off: a variant's edits are heads "
                                 f'switched off, {{"layer", "head", "mode": "zero" | "mean", "position"?}}, '
                                 f"without a source")
        try:                        # a mean edit's means are the model's own when it runs: a stand-in here
            as_edits(list(edits), n_layers, n_heads, reference=lambda: torch.zeros(n_layers, n_heads, 1))
        except (TypeError, ValueError, IndexError) as err:
            raise type(err)(f"{_variant(i, name)}: {err}") from None
        out.append((name, list(edits)))
    return out


def _texts(texts) -> list:
    """``texts`` as a list of str, or a TypeError / ValueError naming what arrived."""
    if isinstance(texts, str):
        raise TypeError(f"texts must be a list of texts, e.g. [{_shortened(texts)}], got a str: one text alone "
                        f"would be read letter by letter")
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of texts (str), got {type(texts).__name__}")
    if not texts:
        raise ValueError("texts must hold at least one text, got an empty list")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str of words, got {type(text).__name__}")
    return list(texts)


@torch.no_grad()
def read(texts, model_name: str, variants) -> dict:
    """What a circuit-lab exercise's grader receives, computed in the kernel with PyTorch (the
    page computes the same dict with ``window.attnlibTiny``, ``tinyAnswer`` in
    ``attnlib/static/exercises.js``): for each text, its words and, per variant ``{"name",
    "edits"}`` (:func:`check_variants`: edits as :mod:`attnlib.edits`, heads switched off with
    ``mode`` "zero" or "mean"), the next-token loss at every position (nats; entry ``i`` is the
    loss of word ``i + 1``).

    Args:
        texts: a list of str (one text alone is refused: it would be read letter by letter).
        model_name: one of :func:`lab_checkpoints`.
        variants: as :func:`check_variants`.

    Returns:
        ``{"texts", "runs": [{"words", "loss": {variant: [T - 1 floats]}}]}``, or
        ``{"texts", "error"}`` when a text is refused (:func:`read_words`'s message): what a
        reader typed is never an exception.

    Raises (the caller's arguments, checked before any text is read):
        TypeError: ``texts`` not a list or tuple of str; ``model_name`` not a str; as
            :func:`check_variants`.
        ValueError: no text; an unknown model; as :func:`check_variants`.
        IndexError: as :func:`check_variants`; an edit's position outside a text (the message
            names the variant and :func:`attnlib.edits.as_edits`'s reason).
    """
    import torch.nn.functional as F
    texts = _texts(texts)
    if not isinstance(model_name, str):
        raise TypeError(f"model_name must be a str, one of {list(lab_checkpoints())}, got {type(model_name).__name__}")
    model = _lab_model(model_name)                  # this one model, built once per process
    checked = check_variants(variants, model.n_layers, model.n_heads)
    out = {"texts": list(texts), "runs": []}
    for text in texts:
        try:
            found = read_words(text)
        except ValueError as err:
            return {"texts": list(texts), "error": str(err)}
        tokens = induction.encode(found)[None]
        losses = {}
        for i, (name, edits) in enumerate(checked):
            try:
                logits = run(model, tokens, edits=edits).logits[0]
            except (TypeError, ValueError, IndexError) as err:          # a position beyond this text
                raise type(err)(f"{_variant(i, name)}: {err}") from None
            losses[name] = [round(float(x), 6) for x in F.cross_entropy(logits[:-1], tokens[0, 1:], reduction="none")]
        out["runs"].append({"words": found, "loss": losses})
    return out
