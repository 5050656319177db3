"""One vocabulary for interventions on a model's forward pass: zero, mean and patch.

An edit names one place and what to put there:

    {"layer": 1, "head": 2, "mode": "zero"}                       # zero ablation of head (1, 2)
    {"layer": 1, "head": 2, "mode": "mean"}                       # mean ablation: the head's mean
                                                                  #   output over the model's reference inputs
    {"layer": 1, "head": 2, "mode": "mean", "source": ref_run}    # ... over ref_run's tokens instead
    {"layer": 1, "head": 2, "mode": "patch", "source": clean_run} # activation patching: the head's
                                                                  #   output on clean_run's input
    {"layer": 1, "head": 2, "mode": "patch", "source": clean_run, "position": 7}   # ... at one token
    {"layer": 2, "head": None, "mode": "patch", "source": clean_run}               # the residual
                                                                  #   stream entering layer 2

* ``head`` is an int for a head's output, the block of ``d_head`` columns it contributes
  before ``W_O`` mixes the heads (:func:`attnlib.split_heads`), which TransformerLens calls
  ``z``; ``head=None`` (``null`` on the page) names the residual stream entering block
  ``layer`` (``resid_pre``; ``layer = n_layers`` is the stream after the last block, before the
  final normalisation).  The residual stream can only be patched.
* ``mode``: ``"zero"`` (Michel et al. 2019), ``"mean"`` (the head's output averaged over every
  token of reference inputs: by default the model's own reference inputs, which each model's
  ``run`` names; or ``source``: a run, a list of runs, or their :func:`head_means` tensor), or
  ``"patch"`` (the activation of ``source``, a run on another input of the same length:
  Vig et al. 2020; Meng et al. 2022).
* ``position`` (optional): edit only that token position.

The rules, the same in the kernel and on the page (``attnlib/static/edits.js`` mirrors
:func:`as_edits` and :func:`graph_inputs` message for message, and ``tests/test_edits_mirror.py``
feeds both the same generated lists):

* Negative layers, heads and positions count from the end, as everywhere in Python, and are
  normalised (for the residual stream, layers count over its ``n_layers + 1`` entries).
* One place, one edit: two edits that touch the same head (or the same residual entry) at a
  common position are refused, whatever their order (a whole-head edit covers every position).
  Without the rule the later edit would silently win.
* ``"mean"`` takes an optional source; ``"patch"`` needs one; ``"zero"`` takes none.

Every model of the course runs edits through its ``run`` (:func:`attnlib.transformer.run`,
:func:`attnlib.encoder.run`), which checks them here with its own sizes and length, then applies
them with :func:`apply_head_edits` and :func:`apply_resid_edit`; the in-page models receive the
same edits as graph inputs (:func:`graph_inputs`).  A run records the edits it applied.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` tokens, ``d_head`` the width of one head,
``d_model`` the model width, ``L`` layers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from . import _validate

__all__ = ["MODES", "Edit", "as_edits", "head_means", "apply_head_edits", "apply_resid_edit", "edits_by_layer", "RunHooks",
           "graph_inputs", "ACTIVATIONS", "RunReading", "RunActivations"]

#: The intervention modes.
MODES = ("zero", "mean", "patch")
#: The keys an edit may have.
KEYS = ("layer", "head", "mode", "source", "position")
_EXAMPLE = '{"layer": 1, "head": 0, "mode": "zero"}'


@dataclass(frozen=True)
class Edit:
    """One checked edit (see the module docstring): ``layer``, ``head`` and ``position``
    normalised to non-negative indices (``head is None`` means the residual stream,
    ``position is None`` every position)."""

    layer: int
    head: int | None
    mode: str
    source: Any = None
    position: int | None = None

    def place(self) -> str:
        """The place in words, as the messages name it: ``head (1, 2)`` or ``the residual
        stream entering layer 2``."""
        return f"head ({self.layer}, {self.head})" if self.head is not None else \
            f"the residual stream entering layer {self.layer}"

    def describe(self) -> str:
        at = "" if self.position is None else f" at position {self.position}"
        return f"{self.mode} {self.place()}{at}"


def show(value) -> str:
    """A value as the edit messages quote it, the same in Python and on the page (JSON for
    numbers, strings, booleans and None; ``a list``, ``an object`` or the type's name otherwise)."""
    if value is None or isinstance(value, (str, bool)) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return type(value).__name__
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _index(value, size: int, what: str, i: int, range_note: str = "") -> int:
    """``value`` as an index into ``size`` items (negative counts from the end), normalised."""
    if not _validate._is_int(value):
        raise TypeError(f"edit {i}: {what} must be an int, got {show(value)}")
    if not -size <= value < size:
        raise IndexError(f"edit {i}: {what} {int(value)} is outside 0..{size - 1} (or -{size}..-1 from the end)"
                         + range_note)
    return int(value) % size


def as_edits(edits, n_layers: int, n_heads: int, *, T: int | None = None, reference=None) -> tuple:
    """Check ``edits`` (a list of dicts in the module's spec, or of :class:`Edit`) against a model
    of ``n_layers`` blocks and ``n_heads`` heads and an input of ``T`` tokens; returns a tuple of
    :class:`Edit` with every index normalised.

    Args:
        T: the input's length.  Every ``run`` gives it; without it a position is checked only
            for its type, and ``-1`` and ``T - 1`` are not recognised as one place.
        reference: what a ``"mean"`` edit without a source uses: the model's reference means,
            ``(n_layers, H, d_head)``, or a function of no argument returning them (called once,
            only when such an edit is present).  Without it such an edit is refused.

    Raises (the messages name the edit by its index, and are the page's, word for word):
        TypeError: ``edits`` not a list or tuple; an edit not a dict; a layer, head or position
            not an int; a ``source`` without the activations the edit needs; ``n_layers``,
            ``n_heads`` or ``T`` not an int.
        ValueError: an unknown key, a missing ``layer``/``mode``, an unknown mode, ``patch``
            without ``source``, ``zero`` with one, the residual stream edited by anything but
            ``patch``, a mean tensor of the wrong shape, or two edits of one place.
        IndexError: a layer, head or position outside the model or the input.

    >>> [e.describe() for e in as_edits([{"layer": -1, "head": -1, "mode": "zero", "position": -1}], 2, 4, T=5)]
    ['zero head (1, 3) at position 4']
    """
    n_layers = _validate.positive_int(n_layers, "n_layers")
    n_heads = _validate.positive_int(n_heads, "n_heads")
    if T is not None:
        T = _validate.positive_int(T, "T")
    if edits is None:
        return ()
    if not isinstance(edits, (list, tuple)):
        raise TypeError(f"edits must be a list of edits such as [{_EXAMPLE}], got {show(edits)}")
    out = []
    for i, e in enumerate(edits):
        if isinstance(e, Edit):
            e = {"layer": e.layer, "head": e.head, "mode": e.mode, "source": e.source, "position": e.position}
        if not isinstance(e, dict):
            raise TypeError(f"edit {i} must be an object such as {_EXAMPLE}, got {show(e)}")
        unknown = sorted(str(k) for k in e if k not in KEYS)
        if unknown:
            raise ValueError(f"edit {i}: unknown key {', '.join(json.dumps(k) for k in unknown)}; "
                             f"an edit has {', '.join(KEYS)}")
        if "layer" not in e or "mode" not in e:
            raise ValueError(f'edit {i} needs "layer" and "mode" (and "head": an int, or None/null for '
                             f'the residual stream)')
        mode = e["mode"]
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f'edit {i}: mode must be "zero", "mean" or "patch", got {show(mode)}')
        head = e.get("head")
        if head is None:
            layer = _index(e["layer"], n_layers + 1, "layer", i,
                           f"; the residual stream has {n_layers + 1} entries, the last after the last block")
            if mode != "patch":
                raise ValueError(f'edit {i}: the residual stream (head None/null) can only be patched, got mode "{mode}"')
        else:
            head = _index(head, n_heads, "head", i)
            layer = _index(e["layer"], n_layers, "layer", i)
        position = e.get("position")
        if position is not None:
            if not _validate._is_int(position):
                raise TypeError(f"edit {i}: position must be an int or None/null, got {show(position)}")
            if T is not None:
                if not -T <= position < T:
                    raise IndexError(f"edit {i}: position {int(position)} is outside the {T} tokens "
                                     f"(0..{T - 1}, or -{T}..-1 from the end)")
                position = int(position) % T
            else:
                position = int(position)
        source = e.get("source")
        if mode == "patch" and source is None:
            raise ValueError(f'edit {i}: mode "patch" needs a source: the run whose activations are patched in')
        if mode == "zero" and source is not None:
            raise ValueError(f'edit {i}: mode "zero" takes no source')
        if mode == "mean" and source is None:
            if reference is None:
                raise ValueError(f'edit {i}: mode "mean" without a source needs the model\'s reference means; '
                                 f"run the model through its run(), or give a source")
            if callable(reference):
                reference = reference()
            source = reference
        if mode == "mean" and isinstance(source, torch.Tensor):
            if source.dim() != 3 or source.shape[:2] != (n_layers, n_heads) or not source.is_floating_point():
                raise ValueError(f"edit {i}: a mean given as a tensor must be (n_layers, H, d_head) = "
                                 f"({n_layers}, {n_heads}, d_head) floating point, as head_means returns; "
                                 f"got {tuple(source.shape)} {source.dtype}")
        elif source is not None:
            runs = source if (mode == "mean" and isinstance(source, (list, tuple))) else [source]
            if not runs or not all(hasattr(r, "z") and hasattr(r, "resid_pre") for r in runs):
                raise TypeError(f"edit {i}: source must be a run (the run() of a model of the course)"
                                + (", a list of runs, or their head_means tensor" if mode == "mean" else "")
                                + f", got {type(source).__name__}")
        edit = Edit(layer=layer, head=head, mode=mode, source=source, position=position)
        for j, other in enumerate(out):
            if (other.layer, other.head) == (layer, head) and (
                    other.position is None or position is None or other.position == position):
                at = position if position is not None else other.position
                raise ValueError(f"edits {j} and {i} both edit {edit.place()} "
                                 + ("at every position" if at is None else f"at position {at}")
                                 + ": the result would depend on their order; give each place one edit")
        out.append(edit)
    return tuple(out)


def edits_by_layer(edits: tuple) -> tuple[dict, dict]:
    """``({layer: [head edits]}, {layer: [residual edits]})`` for the hooks of a run."""
    heads, resid = {}, {}
    for e in edits:
        (resid if e.head is None else heads).setdefault(e.layer, []).append(e)
    return heads, resid


def graph_inputs(edits, *, n_layers: int, n_heads: int, d_head: int, d_model: int, B: int, T: int) -> dict:
    """The inputs that carry ``edits`` into an exported graph (the in-page models): where a mask
    is 1, the graph replaces the head's output ``z`` (or the residual stream entering a layer)
    at that position by the value.  The page's workers make the same translation
    (``attnlib/static/edits.js``, ``fill``).

    Args:
        edits: checked edits (:func:`as_edits` with ``T``), each mean's source a means tensor or
            runs, each patch's source a run of batch 1 or ``B``.

    Returns:
        ``{"head_mask": (B, L, H, T), "head_value": (B, L, H, T, d_head), "resid_mask":
        (B, L + 1, T), "resid_value": (B, L + 1, T, d_model)}``, float32 tensors on the CPU.

    Raises:
        TypeError: an edit that is not an :class:`Edit`.  ValueError: a position not
            normalised into ``0..T-1`` (check with ``T``); a source of another shape.
    """
    L, H = n_layers, n_heads
    feeds = {"head_mask": torch.zeros(B, L, H, T), "head_value": torch.zeros(B, L, H, T, d_head),
             "resid_mask": torch.zeros(B, L + 1, T), "resid_value": torch.zeros(B, L + 1, T, d_model)}
    for k, e in enumerate(edits):
        e = _checked_edit(e, f"edits[{k}]")
        if e.position is not None and not 0 <= e.position < T:
            raise ValueError(f"{e.describe()}: check the edits with as_edits(..., T={T}) first")
        at = slice(None) if e.position is None else e.position
        if e.head is None:
            feeds["resid_mask"][:, e.layer, at] = 1
            feeds["resid_value"][:, e.layer, at] = _source_stream(e, B, T, d_model)[:, at]
            continue
        feeds["head_mask"][:, e.layer, e.head, at] = 1
        if e.mode == "mean":
            feeds["head_value"][:, e.layer, e.head, at] = _means(e, H, d_head)[e.layer, e.head].float()
        elif e.mode == "patch":
            feeds["head_value"][:, e.layer, e.head, at] = _source_z(e, B, T, d_head)[:, at]
    return feeds


class RunHooks:
    """The two hooks every model's ``run`` puts on its blocks, written once: a forward pre-hook on
    each block (and on the final normalisation, entry ``n_layers``) applies the residual edits and
    records ``resid_pre``; a forward pre-hook on each ``W_O`` applies the head edits and records
    ``z``.  ``edits``: checked edits (:func:`as_edits`).  After the pass, ``resid`` holds
    ``n_layers + 1`` tensors ``(B, T, d_model)`` and ``z`` ``n_layers`` tensors ``(B, H, T, d_head)``,
    detached."""

    def __init__(self, edits, n_layers: int, n_heads: int):
        self.heads, self.streams = edits_by_layer(edits)
        self.n_heads = n_heads
        self.resid, self.z = [None] * (n_layers + 1), [None] * n_layers

    def stream(self, layer: int):
        """The pre-hook for the stream entering ``layer``."""
        def hook(module, args):
            x = args[0]
            for edit in self.streams.get(layer, ()):
                x = apply_resid_edit(x, edit)
            self.resid[layer] = x.detach()
            return (x, *args[1:])
        return hook

    def head_outputs(self, layer: int):
        """The pre-hook for ``W_O`` of ``layer``: its input is the heads side by side ``(B, T, H * d_head)``."""
        def hook(module, args):
            out = args[0]
            if layer in self.heads:
                out = apply_head_edits(out, self.n_heads, self.heads[layer])
            self.z[layer] = out.view(out.shape[0], out.shape[1], self.n_heads, -1).transpose(1, 2).detach()
            return (out, *args[1:])
        return hook


def _batched(t: torch.Tensor, n_lead: int) -> torch.Tensor:
    """Give an unbatched activation (no B axis; ``n_lead`` = its dims without B) a B axis of 1."""
    return t if t.dim() > n_lead else t[None]


def head_means(run) -> torch.Tensor:
    """Each head's output (``z``) averaged over every token of ``run`` (its batch and
    positions), or of a list of runs (every token of every run, each counted once: texts of
    different lengths run one by one): what mean ablation puts in a head's place.  One function
    for both models' runs.

    Shapes:
        returns ``(n_layers, H, d_head)``.

    Raises:
        TypeError: ``run`` is not a run (nor a list of runs) of :func:`attnlib.encoder.run` or
            :func:`attnlib.transformer.run`.
        ValueError: an empty list of runs.
    """
    runs = list(run) if isinstance(run, (list, tuple)) else [run]
    if not runs:
        raise ValueError("head_means needs at least one run")
    for r in runs:
        _check_run(r, "z", "head_means's run")
    n_layers = len(runs[0].z)
    means = []
    for layer in range(n_layers):
        # z per layer: (B, H, T, d_head), or (H, T, d_head) for an unbatched run -> (H, tokens, d_head)
        per_token = torch.cat([_batched(r.z[layer], 3).transpose(0, 1).flatten(1, 2) for r in runs], dim=1)
        means.append(per_token.mean(dim=1))
    return torch.stack(means)


def _check_run(source, activation: str, what: str) -> None:
    """``source`` if it is a run holding ``activation`` (``z`` or ``resid_pre``)."""
    if not isinstance(getattr(source, activation, None), (list, tuple)):
        raise TypeError(f"{what} must be a run (attnlib.encoder.run or attnlib.transformer.run) holding "
                        f"{activation}, got {type(source).__name__}")


def _checked_edit(e, what: str) -> "Edit":
    if not isinstance(e, Edit):
        raise TypeError(f"{what} must be an attnlib.edits.Edit as as_edits returns (as_edits([{{'layer': 1, "
                        f"'head': 0, 'mode': 'zero'}}], n_layers, n_heads)), got {type(e).__name__}")
    return e


def _position(p: int | None, T: int, what: str) -> int | None:
    if p is None:
        return None
    if not -T <= p < T:
        raise IndexError(f"{what}: position {p} is outside the {T} tokens (0..{T - 1}, or -{T}..-1)")
    return p % T


def _means(e: Edit, n_heads: int, d_head: int) -> torch.Tensor:
    """The means a mean edit puts in place, ``(n_layers, H, d_head)``."""
    means = e.source if isinstance(e.source, torch.Tensor) else head_means(e.source)
    if means.dim() != 3 or means.shape[1:] != (n_heads, d_head):
        raise ValueError(f"{e.describe()}: the means must be (n_layers, H, d_head) with H = {n_heads}, "
                         f"d_head = {d_head}, got {tuple(means.shape)}")
    _validate.index(e.layer, means.shape[0], f"{e.describe()}: layer")
    return means


def _source_z(e: Edit, B: int, T: int, d_head: int) -> torch.Tensor:
    """The patch source's output of ``e``'s head, ``(B', T, d_head)`` with ``B'`` 1 or ``B``."""
    _check_run(e.source, "z", f"{e.describe()}: source")
    zs = e.source.z
    z = _batched(zs[_validate.index(e.layer, len(zs), f"{e.describe()}: layer")], 3)[:, e.head]
    if z.shape[1] != T or z.shape[0] not in (1, B) or z.shape[2] != d_head:
        raise ValueError(f"{e.describe()}: the source run has z of shape {tuple(z.shape)} "
                         f"(B, T, d_head) for this head; this run needs B in (1, {B}), T = {T}, "
                         f"d_head = {d_head}: patch between inputs of the same length")
    return z


def _source_stream(e: Edit, B: int, T: int, d_model: int) -> torch.Tensor:
    """The patch source's residual stream entering ``e.layer``, ``(B', T, d_model)``."""
    _check_run(e.source, "resid_pre", f"{e.describe()}: source")
    stream = e.source.resid_pre
    src = _batched(stream[_validate.index(e.layer, len(stream), f"{e.describe()}: layer")], 2)
    if src.shape[1] != T or src.shape[0] not in (1, B) or src.shape[2] != d_model:
        raise ValueError(f"{e.describe()}: the source run's resid_pre has shape {tuple(src.shape)}; this run "
                         f"needs (B in (1, {B}), T = {T}, d_model = {d_model}): patch between inputs of the same length")
    return src


def apply_head_edits(out: torch.Tensor, n_heads: int, edits: list) -> torch.Tensor:
    """The heads' outputs side by side, as they enter ``W_O``, with ``edits`` (one layer's
    head edits, :class:`Edit`, as :func:`as_edits` returns them) applied; the input is not
    changed.

    Shapes:
        out: ``(B, T, H * d_head)``; returns the same shape.  A patch source's ``z`` must have
        the same ``T`` (and a batch of 1 or ``B``); a mean given as a tensor is
        ``(n_layers, H, d_head)``.

    Raises:
        TypeError: ``out`` not a floating-point tensor; ``n_heads`` not an int; ``edits`` not a
            list or tuple of :class:`Edit` (check dicts with :func:`as_edits` first); a head
            not an int (``None``, the residual stream, is :func:`apply_resid_edit`'s); a
            source that is not a run.
        ValueError: ``out`` not 3-D or its width not a multiple of ``n_heads``; a patch
            source of another length, batch or width; a mean of another width.
        IndexError: a head outside ``0 .. H-1``; a layer outside the source; a position
            outside ``T``.

    >>> out = torch.ones(1, 2, 6)
    >>> apply_head_edits(out, 3, [Edit(layer=0, head=2, mode="zero")])[0, 0]
    tensor([1., 1., 1., 1., 0., 0.])
    """
    out = _validate.floating(out, "out")
    n_heads = _validate.positive_int(n_heads, "n_heads")
    if not isinstance(edits, (list, tuple)):
        raise TypeError(f"edits must be a list of attnlib.edits.Edit, got {type(edits).__name__}")
    if out.dim() != 3 or out.shape[-1] % n_heads:
        raise ValueError(f"out must be (B, T, H * d_head) with H = {n_heads}, got {tuple(out.shape)}")
    B, T, width = out.shape
    d_head = width // n_heads
    heads = out.reshape(B, T, n_heads, d_head).clone()                     # (B, T, H, d_head)
    for i, e in enumerate(edits):
        e = _checked_edit(e, f"edits[{i}]")
        if e.head is None:
            raise TypeError(f"edits[{i}] ({e.describe()}) edits the residual stream: apply it with apply_resid_edit")
        if not _validate._is_int(e.head):
            raise TypeError(f"{e.describe()}: head must be an int, got {type(e.head).__name__}")
        if not 0 <= e.head < n_heads:
            raise IndexError(f"{e.describe()}: head must be in 0..{n_heads - 1} (as_edits normalises a "
                             f"negative head), got {e.head}")
        head = e.head
        p = _position(e.position, T, e.describe())
        if e.mode == "zero":
            value = torch.zeros(d_head, dtype=out.dtype, device=out.device)
        elif e.mode == "mean":
            value = _means(e, n_heads, d_head)[e.layer, head].to(out)           # (d_head,)
        else:
            value = _source_z(e, B, T, d_head).to(out)                          # (B', T, d_head)
        if p is None:
            heads[:, :, head] = value
        else:
            heads[:, p, head] = value if value.dim() == 1 else value[:, p]
    return heads.reshape(B, T, width)


def apply_resid_edit(x: torch.Tensor, edit: Edit) -> torch.Tensor:
    """The residual stream ``x`` entering block ``edit.layer`` with ``edit`` (a patch of the
    residual stream, ``head=None``, as :func:`as_edits` returns it) applied.

    Shapes:
        x: ``(B, T, d_model)``; returns the same shape.

    Raises:
        TypeError: ``x`` not a floating-point tensor; ``edit`` not an :class:`Edit` of the
            residual stream; a source that is not a run.
        ValueError: ``x`` not 3-D; ``edit`` not a patch; a source of another length, batch or width.
        IndexError: a layer outside the source; a position outside ``T``.
    """
    x = _validate.floating(x, "x")
    edit = _checked_edit(edit, "edit")
    if edit.head is not None or edit.mode != "patch":
        raise ValueError(f"edit must patch the residual stream (head None, mode 'patch'), got {edit.describe()}")
    if x.dim() != 3:
        raise ValueError(f"x must be (B, T, d_model), got shape {tuple(x.shape)}")
    B, T, d = x.shape
    src = _source_stream(edit, B, T, d).to(x)                                  # (B', T, d_model)
    p = _position(edit.position, T, edit.describe())
    x = x.clone()
    if p is None:
        x[:] = src
    else:
        x[:, p] = src[:, p]
    return x


#: What a run keeps, by TransformerLens's names.  ``resid_pre`` has ``n_layers + 1`` entries (the
#: last is the stream after the last block); the others one per layer.
ACTIVATIONS = ("resid_pre", "q", "k", "v", "attn_scores", "pattern", "z")


class RunReading:
    """How a run of either model is read (TransformerLens's ``ActivationCache`` indexing), shared
    by :class:`attnlib.encoder.Run` and :class:`attnlib.transformer.Run`: ``run["pattern", 3]``
    is layer 3's weights, ``run.head("q", 3, 5)`` one head's queries, ``run.stacked("z")`` every
    layer at once.  Per-head activations hold the head axis third from the end (``(H, T, d)`` for
    one text, ``(B, H, T, d)`` for a batch)."""

    @property
    def n_layers(self) -> int:
        return len(self.pattern)

    @property
    def n_heads(self) -> int:
        return self.pattern[0].shape[-3]

    def __getitem__(self, key) -> torch.Tensor:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise KeyError(f"index a run with (name, layer), e.g. run['pattern', 3]; got {key!r}")
        name, layer = key
        _validate.choice(name, ACTIVATIONS, "activation name")
        values = getattr(self, name)
        return values[_validate.index(layer, len(values), "layer")]

    def head(self, name: str, layer: int, head: int) -> torch.Tensor:
        """One head's slice of a per-head activation (``q``, ``k``, ``v``, ``attn_scores``,
        ``pattern``, ``z``). Shapes: ``([B,] T, d_k)`` or ``([B,] T, T)``.

        Raises:
            ValueError: ``name`` is ``resid_pre`` or unknown. IndexError: out of range.
        """
        _validate.choice(name, ACTIVATIONS[1:], "per-head activation name")
        return self[name, layer][..., _validate.index(head, self.n_heads, "head"), :, :]

    def stacked(self, name: str) -> torch.Tensor:
        """Every layer of one activation in one tensor.
        Shapes: ``(n_layers, [B,] H, T, ...)``; ``(n_layers + 1, [B,] T, d_model)`` for ``resid_pre``."""
        _validate.choice(name, ACTIVATIONS, "activation name")
        return torch.stack(getattr(self, name))


@dataclass(frozen=True)
class RunActivations(RunReading):
    """The activations every run keeps, per layer, under TransformerLens's names (the fields of
    both :class:`attnlib.encoder.Run` and :class:`attnlib.transformer.Run`; their docstrings give
    the shapes)."""

    resid_pre: tuple
    q: tuple
    k: tuple
    v: tuple
    attn_scores: tuple
    pattern: tuple
    z: tuple
