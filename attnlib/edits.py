"""One vocabulary for interventions on a model's forward pass: zero, mean and patch.

An edit names one place and what to put there:

    {"layer": 1, "head": 2, "mode": "zero"}                       # zero ablation of head (1, 2)
    {"layer": 1, "head": 2, "mode": "mean", "source": ref_run}    # mean ablation: the head's mean
                                                                  #   output over ref_run's tokens
    {"layer": 1, "head": 2, "mode": "patch", "source": clean_run} # activation patching: the head's
                                                                  #   output on clean_run's input
    {"layer": 1, "head": 2, "mode": "patch", "source": clean_run, "position": 7}   # ... at one token
    {"layer": 2, "head": None, "mode": "patch", "source": clean_run}               # the residual
                                                                  #   stream entering layer 2

* ``head`` is an int for a head's output, the block of ``d_head`` columns it contributes
  before ``W_O`` mixes the heads (:func:`attnlib.split_heads`), which TransformerLens calls
  ``z``; ``head=None`` names the residual stream entering block ``layer`` (``resid_pre``;
  ``layer = n_layers`` is the stream after the last block, before the final LayerNorm).  The
  residual stream can only be patched.
* ``mode``: ``"zero"`` (Michel et al. 2019), ``"mean"`` (the head's output averaged over the
  batch and positions of ``source``, a run on reference inputs or a list of runs, or given as
  their :func:`head_means` tensor, computed once for many edits), or
  ``"patch"`` (the activation of ``source``, a run on another input of the same length:
  Vig et al. 2020; Meng et al. 2022).
* ``position`` (optional): edit only that token position (negative indices count from the end).

The same edits drive both of the course's models, :func:`attnlib.encoder.run` and
:func:`attnlib.transformer.run`, through one mechanism (:func:`apply_head_edits`,
:func:`apply_resid_edit`); a run records the edits it applied.

Shapes legend: ``B`` batch, ``H`` heads, ``T`` tokens, ``d_head`` the width of one head,
``d_model`` the model width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import _validate

__all__ = ["MODES", "Edit", "as_edits", "head_means", "apply_head_edits", "apply_resid_edit", "edits_by_layer",
           "ACTIVATIONS", "RunReading", "RunActivations"]

#: The intervention modes.
MODES = ("zero", "mean", "patch")
_KEYS = {"layer", "head", "mode", "source", "position"}


@dataclass(frozen=True)
class Edit:
    """One checked edit (see the module docstring).  ``head is None`` means the residual stream."""

    layer: int
    head: int | None
    mode: str
    source: Any = None
    position: int | None = None

    def describe(self) -> str:
        where = "resid_pre" if self.head is None else f"head ({self.layer}, {self.head})"
        at = "" if self.position is None else f" at position {self.position}"
        return f"{self.mode} {where}{'' if self.head is not None else f' of layer {self.layer}'}{at}"


def as_edits(edits, n_layers: int, n_heads: int) -> tuple:
    """Check ``edits`` (a list of dicts in the module's spec, or of :class:`Edit`) against a model
    of ``n_layers`` blocks and ``n_heads`` heads; returns a tuple of :class:`Edit`.

    Raises:
        TypeError: ``edits`` not a list or tuple; an edit not a dict; a layer, head or position
            not an int; a ``source`` without the activations the edit needs; ``n_layers`` or
            ``n_heads`` not an int.
        ValueError: an unknown key, a missing ``layer``/``mode``, an unknown mode, ``patch`` or
            ``mean`` without ``source``, ``zero`` with one, the residual stream edited by
            anything but ``patch``, or the same place edited twice.
        IndexError: a layer or head outside the model.
    """
    n_layers = _validate.positive_int(n_layers, "n_layers")
    n_heads = _validate.positive_int(n_heads, "n_heads")
    if edits is None:
        return ()
    if not isinstance(edits, (list, tuple)):
        raise TypeError(f"edits must be a list of dicts such as {{'layer': 1, 'head': 0, 'mode': 'zero'}}, "
                        f"got {type(edits).__name__}")
    out, seen = [], set()
    for i, e in enumerate(edits):
        if isinstance(e, Edit):
            e = {"layer": e.layer, "head": e.head, "mode": e.mode, "source": e.source, "position": e.position}
        if not isinstance(e, dict):
            raise TypeError(f"edit {i} must be a dict with layer, head, mode (and source, position), "
                            f"got {type(e).__name__}")
        unknown = set(e) - _KEYS
        if unknown:
            raise ValueError(f"edit {i}: unknown keys {sorted(unknown)}; an edit has {sorted(_KEYS)}")
        if "layer" not in e or "mode" not in e:
            raise ValueError(f"edit {i} needs 'layer' and 'mode' (and 'head': an int, or None for the "
                             f"residual stream), got keys {sorted(e)}")
        mode = _validate.choice(e["mode"], MODES, f"edit {i}'s mode")
        head = e.get("head")
        if head is None:
            layer = _validate.index(e["layer"], n_layers + 1, f"edit {i}'s layer")
            if mode != "patch":
                raise ValueError(f"edit {i}: the residual stream (head None) can only be patched, got mode {mode!r}")
        else:
            layer = _validate.index(e["layer"], n_layers, f"edit {i}'s layer")
            head = _validate.index(head, n_heads, f"edit {i}'s head")
        source = e.get("source")
        if mode in ("mean", "patch") and source is None:
            raise ValueError(f"edit {i}: mode {mode!r} needs a source: the run whose "
                             + ("activations are patched in" if mode == "patch" else "mean output per head is used"))
        if mode == "zero" and source is not None:
            raise ValueError(f"edit {i}: mode 'zero' takes no source")
        if mode == "mean" and isinstance(source, torch.Tensor):
            if source.dim() != 3 or source.shape[:2] != (n_layers, n_heads) or not source.is_floating_point():
                raise ValueError(f"edit {i}: a mean given as a tensor must be (n_layers, H, d_head) = "
                                 f"({n_layers}, {n_heads}, d_head) floating point, as head_means returns; "
                                 f"got {tuple(source.shape)} {source.dtype}")
        else:
            runs = source if (mode == "mean" and isinstance(source, (list, tuple))) else [source]
            if source is not None and (not runs or not all(hasattr(r, "z") and hasattr(r, "resid_pre") for r in runs)):
                raise TypeError(f"edit {i}: source must be a run (attnlib.encoder.run or attnlib.transformer.run)"
                                + (", a list of runs, or their head_means tensor for 'mean'" if mode == "mean" else "")
                                + f", got {type(source).__name__}")
        position = e.get("position")
        if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
            raise TypeError(f"edit {i}: position must be an int or None, got {type(position).__name__}")
        key = (layer, head, position)
        if key in seen:
            raise ValueError(f"edit {i}: {('head (%d, %d)' % (layer, head)) if head is not None else 'resid_pre of layer %d' % layer}"
                             f"{'' if position is None else f' at position {position}'} is edited twice")
        seen.add(key)
        out.append(Edit(layer=layer, head=head, mode=mode, source=source, position=position))
    return tuple(out)


def edits_by_layer(edits: tuple) -> tuple[dict, dict]:
    """``({layer: [head edits]}, {layer: resid edit})`` for the hooks of a run."""
    heads, resid = {}, {}
    for e in edits:
        if e.head is None:
            resid[e.layer] = e
        else:
            heads.setdefault(e.layer, []).append(e)
    return heads, resid


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


def apply_head_edits(out: torch.Tensor, n_heads: int, edits: list) -> torch.Tensor:
    """The heads' outputs side by side, as they enter ``W_O``, with ``edits`` (one layer's
    head edits, :class:`Edit`, as :func:`as_edits` returns them) applied; the input is not
    changed.  A negative head counts from the end, as everywhere in attnlib.

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
        IndexError: a head outside ``-H .. H-1``; a layer outside the source; a position
            outside ``T``.

    >>> out = torch.ones(1, 2, 6)
    >>> apply_head_edits(out, 3, [Edit(layer=0, head=-1, mode="zero")])[0, 0]
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
        head = _validate.index(e.head, n_heads, f"{e.describe()}: head")
        p = _position(e.position, T, e.describe())
        if e.mode == "zero":
            value = torch.zeros(d_head, dtype=out.dtype, device=out.device)
        elif e.mode == "mean":
            means = e.source if isinstance(e.source, torch.Tensor) else head_means(e.source)
            if means.dim() != 3 or means.shape[1:] != (n_heads, d_head):
                raise ValueError(f"{e.describe()}: the means must be (n_layers, H, d_head) with H = {n_heads}, "
                                 f"d_head = {d_head}, got {tuple(means.shape)}")
            value = means[_validate.index(e.layer, means.shape[0], f"{e.describe()}: layer"), head].to(out)  # (d_head,)
        else:
            _check_run(e.source, "z", f"{e.describe()}: source")
            zs = e.source.z
            z = _batched(zs[_validate.index(e.layer, len(zs), f"{e.describe()}: layer")], 3)[:, head].to(out)  # (B', T', d_head)
            if z.shape[1] != T or z.shape[0] not in (1, B) or z.shape[2] != d_head:
                raise ValueError(f"{e.describe()}: the source run has z of shape {tuple(z.shape)} "
                                 f"(B, T, d_head) for this head; this run needs B in (1, {B}), T = {T}, "
                                 f"d_head = {d_head}: patch between inputs of the same length")
            value = z                                                       # (B', T, d_head)
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
    _check_run(edit.source, "resid_pre", f"{edit.describe()}: source")
    stream = edit.source.resid_pre
    src = _batched(stream[_validate.index(edit.layer, len(stream), f"{edit.describe()}: layer")], 2).to(x)  # (B', T', d_model)
    if src.shape[1] != T or src.shape[0] not in (1, B) or src.shape[2] != d:
        raise ValueError(f"{edit.describe()}: the source run's resid_pre has shape {tuple(src.shape)}; this run "
                         f"needs (B in (1, {B}), T = {T}, d_model = {d}): patch between inputs of the same length")
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
