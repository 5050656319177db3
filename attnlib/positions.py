"""Position information for attention (chapter 12).

Attention by itself has no notion of order: permuting the rows of ``X`` permutes the rows of
the output and changes nothing else.  A model must therefore be told where each token is.
Two ways live here:

* :func:`sinusoidal`, the fixed absolute encoding added to the token embeddings by the
  original Transformer (Vaswani et al. 2017, section 3.5);
* :func:`apply_rope`, rotary position embedding (Su et al. 2021, "RoFormer", eq. 34), in
  Hugging Face Llama's rotate-half pairing or the paper's adjacent pairing, applied to the
  queries and keys of every layer, so that the score ``q_i . k_j`` depends on
  the positions only through the offset ``i - j`` (:func:`rope_scores`);
* RoPE **scaling** (``scaling=`` of :func:`rope_frequencies`, :func:`apply_rope` and
  :func:`rope_scores`), what practice does to run a rotary model past the length it was trained
  on: position interpolation (Chen et al. 2023), NTK-aware scaling (bloc97 2023) and YaRN
  (Peng et al. 2023), each tested against Hugging Face's ``modeling_rope_utils``.

Shapes legend: ``T`` positions, ``d`` the width of the vectors that receive the position
(``d_model`` for :func:`sinusoidal`, ``d_k`` for :func:`apply_rope`).
"""
from __future__ import annotations

import math

import torch

from . import _validate

__all__ = ["sinusoidal", "rope_frequencies", "rope_attention_factor", "apply_rope", "rope_scores", "ROPE_SCALINGS"]

#: The two layouts of RoPE's coordinate pairs (see :func:`apply_rope`).
PAIRINGS = ("half", "adjacent")

#: The RoPE scaling methods (``scaling={"type": ...}``, see :func:`rope_frequencies`).
ROPE_SCALINGS = ("linear", "ntk", "yarn")

_SCALING_KEYS = {"linear": {"type", "factor"}, "ntk": {"type", "factor"},
                 "yarn": {"type", "factor", "original_length", "beta_fast", "beta_slow"}}


def _scaling(scaling) -> dict | None:
    """``scaling`` checked and completed (YaRN's ``beta_fast = 32``, ``beta_slow = 1``), or
    ``None``.  The errors are those of :func:`rope_frequencies`."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be None or a dict such as {{'type': 'linear', 'factor': 2.0}}, "
                        f"got {type(scaling).__name__}")
    if "type" not in scaling or "factor" not in scaling:
        raise ValueError(f"scaling needs 'type' (one of {', '.join(map(repr, ROPE_SCALINGS))}) and 'factor', "
                         f"got keys {sorted(map(str, scaling))}")
    kind = _validate.choice(scaling["type"], ROPE_SCALINGS, "scaling['type']")
    extra = set(scaling) - _SCALING_KEYS[kind]
    if extra:
        raise ValueError(f"scaling of type {kind!r} takes the keys {sorted(_SCALING_KEYS[kind])}, got also "
                         f"{sorted(map(str, extra))}")
    out = {"type": kind, "factor": _validate.real(scaling["factor"], "scaling['factor']", low=1.0)}
    if kind == "yarn":
        if "original_length" not in scaling:
            raise ValueError("scaling of type 'yarn' needs 'original_length', the context length the model was "
                             "trained on")
        out["original_length"] = _validate.positive_int(scaling["original_length"], "scaling['original_length']")
        out["beta_fast"] = _validate.real(scaling.get("beta_fast", 32.0), "scaling['beta_fast']", low=0.0, low_open=True)
        out["beta_slow"] = _validate.real(scaling.get("beta_slow", 1.0), "scaling['beta_slow']", low=0.0, low_open=True)
        if out["beta_fast"] <= out["beta_slow"]:
            raise ValueError(f"scaling['beta_fast'] must exceed scaling['beta_slow'], got {out['beta_fast']} and "
                             f"{out['beta_slow']}")
    return out


def sinusoidal(T: int, d: int, *, base: float = 10000.0, dtype=torch.float32) -> torch.Tensor:
    """The sinusoidal position encoding of Vaswani et al. (2017), section 3.5:

    ``PE[pos, 2i] = sin(pos / base^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/d))``

    for ``pos = 0 .. T-1`` and ``i = 0 .. d/2 - 1`` (``base = 10000`` in the paper).  Row
    ``pos`` is added to the embedding of the token at position ``pos``.  The wavelengths run
    from ``2 pi`` to ``2 pi * base``; a shift by ``k`` positions is a rotation of each
    (sin, cos) pair, so ``PE[i] . PE[j]`` depends on ``i - j`` only.  Computed in float64 and
    cast to ``dtype``.

    Shapes:
        returns ``(T, d)``.

    Raises:
        TypeError: ``T`` or ``d`` not an int, ``base`` not a real number, ``dtype`` not a
            floating dtype.
        ValueError: ``T < 0``, ``d`` below 2 or odd, ``base <= 1``.

    >>> sinusoidal(3, 4)[1]
    tensor([0.8415, 0.5403, 0.0100, 0.9999])
    """
    T = _validate.non_negative_int(T, "T")
    d = _validate.positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d must be even (sin and cos come in pairs), got {d}")
    base = _validate.real(base, "base", low=1.0, low_open=True)
    dtype = _validate.float_dtype(dtype)
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)      # (d/2,)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]    # (T, d/2)
    pe = torch.empty(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(dtype)


def rope_frequencies(d: int, base: float = 10000.0, *, scaling: dict | None = None) -> torch.Tensor:
    """The rotation frequencies ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1`` (radians per
    position) of rotary embeddings (Su et al. 2021, eq. 15), float64; with ``scaling``, the
    frequencies of a RoPE model run at ``factor`` times the length it was trained on.

    Pair ``i`` turns through one full circle every ``2 pi / theta_i`` positions, its
    **wavelength**: from ``2 pi`` for ``i = 0`` to almost ``2 pi base`` for the last pair.  A
    model trained on ``L`` tokens has seen every angle of the pairs whose wavelength is shorter
    than ``L``, but only part of a turn of the others.  ``scaling`` is a dict with ``"type"`` and
    ``"factor"`` ``s >= 1`` (the new length over the trained one; ``s = 1`` changes nothing):

    * ``{"type": "linear", "factor": s}``, **position interpolation** (Chen et al. 2023,
      eq. 4): ``theta_i / s`` for every pair, which is the same as reading position ``p`` as
      ``p / s``.  Every angle stays inside the trained range, and neighbouring tokens turn
      ``s`` times less apart.
    * ``{"type": "ntk", "factor": s}``, **NTK-aware** scaling (bloc97 2023, in Peng et al.
      2023, section 3.1): a larger base ``base * s^(d / (d - 2))``, so the fastest pair
      (``i = 0``) is unchanged and the slowest is divided by ``s``, the pairs between by
      less.  Needs ``d >= 4``.
    * ``{"type": "yarn", "factor": s, "original_length": L}`` (optional ``"beta_fast"``,
      default 32, and ``"beta_slow"``, default 1), **YaRN**'s "NTK-by-parts" frequencies
      (Peng et al. 2023, section 3.2 and 3.4): pairs that turn more than ``beta_fast`` times
      over the trained length ``L`` keep ``theta_i``, pairs that turn less than ``beta_slow``
      times are interpolated (``theta_i / s``), and the pairs between mix the two along a
      linear ramp in ``i``.  The ramp's ends are the (fractional) pair indices where
      ``L theta_i / (2 pi)`` equals ``beta_fast`` and ``beta_slow``, rounded outwards (down and
      up) and clipped to ``0 .. d - 1``, as in the authors' code and Hugging Face's
      ``_compute_yarn_parameters`` (the paper's eq. 18 ramps linearly in the number of
      turns instead).  YaRN also sharpens the softmax: :func:`rope_attention_factor`.

    Shapes:
        returns ``(d/2,)`` float64.

    Raises:
        TypeError: ``d`` not an int; ``base`` not a real number; ``scaling`` not a dict or
            ``None``, or a value of the wrong type.
        ValueError: ``d`` odd or below 2; ``base <= 1``; ``scaling`` without ``"type"`` or
            ``"factor"``, of another type, with a key its type does not take, a factor below 1,
            YaRN without ``"original_length"`` or with ``beta_fast <= beta_slow``; ``"ntk"``
            with ``d = 2``.

    Sources: Su et al. (2021); Chen et al. (2023), "Extending Context Window of Large Language
    Models via Positional Interpolation"; bloc97 (2023), "NTK-Aware Scaled RoPE" (Reddit
    r/LocalLLaMA); Peng et al. (2023), "YaRN: Efficient Context Window Extension of Large
    Language Models".

    >>> rope_frequencies(4)
    tensor([1.0000, 0.0100], dtype=torch.float64)
    >>> rope_frequencies(4, scaling={"type": "linear", "factor": 2.0})
    tensor([0.5000, 0.0050], dtype=torch.float64)
    >>> rope_frequencies(4, scaling={"type": "ntk", "factor": 2.0})
    tensor([1.0000, 0.0050], dtype=torch.float64)
    """
    d = _validate.positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d must be even (RoPE rotates pairs of coordinates), got {d}")
    base = _validate.real(base, "base", low=1.0, low_open=True)
    scaling = _scaling(scaling)
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d                     # (d/2,): 2i/d
    if scaling is None:
        return 1.0 / base ** exponents
    s = scaling["factor"]
    if scaling["type"] == "linear":                                                # Chen et al. (2023), eq. 4
        return 1.0 / base ** exponents / s
    if scaling["type"] == "ntk":                                                   # base * s^(d/(d-2))
        if d < 4:
            raise ValueError("NTK-aware scaling needs d >= 4 (its base is base * s^(d / (d - 2)))")
        return 1.0 / (base * s ** (d / (d - 2))) ** exponents
    theta = 1.0 / base ** exponents                                                # YaRN, NTK-by-parts
    L = scaling["original_length"]

    def pair_index(turns: float) -> float:
        """The fractional pair index i at which L theta_i / (2 pi) = turns."""
        return d * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_index(scaling["beta_fast"])), 0)
    high = min(math.ceil(pair_index(scaling["beta_slow"])), d - 1)
    if low == high:
        high += 0.001                                                              # as the authors' code
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)   # 0: keep, 1: interpolate
    return theta * (1 - ramp) + theta / s * ramp


def rope_attention_factor(scaling: dict | None = None) -> float:
    """The factor by which :func:`apply_rope` multiplies the rotated queries and keys, so that
    the scores are multiplied by its square: ``0.1 ln(s) + 1`` for YaRN with ``factor = s > 1``
    (Peng et al. 2023, eq. 22: ``sqrt(1/t) = 0.1 ln(s) + 1``, a softmax temperature ``t`` that
    keeps the attention as sharp at the new length as it was), ``1`` otherwise.

    Raises:
        as :func:`rope_frequencies` for ``scaling``.

    >>> round(rope_attention_factor({"type": "yarn", "factor": 4.0, "original_length": 32}), 4)
    1.1386
    """
    scaling = _scaling(scaling)
    if scaling is None or scaling["type"] != "yarn" or scaling["factor"] <= 1:
        return 1.0
    return 0.1 * math.log(scaling["factor"]) + 1.0


def apply_rope(x, positions=None, base: float = 10000.0, *, pairing: str = "half",
               scaling: dict | None = None) -> torch.Tensor:
    """Rotary position embedding (RoPE): rotate each pair of coordinates of ``x`` by an angle
    proportional to the token's position.

    Pair ``i`` (``i = 0 .. d/2 - 1``) at position ``p`` is rotated by the angle ``p * theta_i``,
    ``theta_i = base^(-2i/d)``.  Which two coordinates form pair ``i`` is the ``pairing``:

    * ``"half"`` (default), the **rotate-half** layout of GPT-NeoX and Hugging Face's Llama:
      coordinate ``i`` with coordinate ``i + d/2``.
      ``out = x * cos + rotate_half(x) * sin``, ``rotate_half(x) = (-x[d/2:], x[:d/2])``, with
      ``cos`` and ``sin`` of the angles repeated over both halves; equal to Hugging Face's
      ``apply_rotary_pos_emb`` (``transformers.models.llama``; tested).
    * ``"adjacent"``, the layout of Su et al.'s eq. (34) (and of Meta's original Llama code
      and Stanford CS336): coordinate ``2i`` with ``2i + 1``.  Read as the complex number
      ``x[2i] + 1j * x[2i+1]``, pair ``i`` is multiplied by ``exp(1j * p * theta_i)``
      (tested against that complex form).

    **When the two agree.**  They are the same rotation on differently ordered coordinates:
    with ``perm = (0, 2, 4, .., d-2, 1, 3, .., d-1)`` (even coordinates first, then odd),
    ``apply_rope(x, pairing="adjacent")[..., perm] == apply_rope(x[..., perm], pairing="half")``.
    So the scores agree when q **and** k are both reordered by ``perm`` (in a model: the rows of
    ``W_Q`` and ``W_K`` of every head, which is how Llama checkpoints are converted between the
    two layouts).  For the *same* q and k the two pairings rotate different coordinate pairs
    by different frequencies and give different scores in general; they agree for every q and
    k only when the query and key sit at the same position (offset 0: both give ``q . k``) or
    when ``d = 2`` (one pair, the same in both layouts).

    Either way, a rotation by ``p theta`` followed by the dot product with one by ``r theta``
    equals one rotation by ``(r - p) theta``, so the score of a rotated query at ``i`` with a
    rotated key at ``j`` depends on the positions only through ``i - j``
    (:func:`rope_scores`), and norms are preserved.  The angles are computed in float64 and the
    rotation in ``x``'s dtype (float32 for float16/bfloat16 input, cast back).

    Args:
        x: queries or keys, ``(..., T, d)`` with ``d`` even.
        positions: the position of each of the ``T`` rows, ints or floats ``(T,)``, or with
            all of x's leading dimensions, broadcastable to ``(..., T)`` (``(B, 1, T)`` for
            per-sequence positions of an ``x (B, H, T, d)``); a list is read as float64;
            default ``0 .. T-1``.  A decoder with a cache passes
            ``T_cached .. T_cached + t - 1`` for its new tokens.
        base: ``10000`` in RoFormer and Llama 1-2 (Llama 3 uses ``500000``).
        pairing: ``"half"`` (coordinate ``i`` with ``i + d/2``) or ``"adjacent"`` (``2i`` with
            ``2i + 1``); see above.
        scaling: ``None``, or a RoPE scaling for a model run past its training length
            (:func:`rope_frequencies`): the angles use the scaled frequencies, and for YaRN the
            result is also multiplied by :func:`rope_attention_factor` (as Hugging Face
            multiplies its ``cos`` and ``sin``), so that a score of two rotated vectors is
            multiplied by its square.  The score still depends on ``i - j`` only.

    Shapes:
        x ``(..., T, d)`` -> ``(..., T, d)``.

    Raises:
        TypeError: ``x`` not a floating tensor; ``positions`` not a tensor/array/list of
            numbers; ``base`` not a real number.
        ValueError: ``x`` with fewer than 2 dimensions or an odd ``d``; ``positions`` that do not
            broadcast to ``(..., T)``, have fewer leading dimensions than ``x`` (but more than
            one), or hold NaN/infinity; ``base <= 1``; ``pairing`` not ``"half"`` or
            ``"adjacent"``; a bad ``scaling`` (:func:`rope_frequencies`).

    Source: Su et al. (2021), "RoFormer: Enhanced Transformer with Rotary Position Embedding",
    eq. (34) (``pairing="adjacent"``); rotate-half layout of GPT-NeoX (Black et al. 2022) and
    Hugging Face's Llama (``pairing="half"``).

    >>> q = torch.ones(1, 4)
    >>> torch.allclose(apply_rope(q, torch.tensor([0])), q)
    True
    """
    _validate.choice(pairing, PAIRINGS, "pairing")
    x = _validate.min_dims(_validate.floating(x, "x"), 2, "x", "(..., T, d)")
    T, d = x.shape[-2], x.shape[-1]
    inv_freq = rope_frequencies(d, base, scaling=scaling)                           # (d/2,)
    if positions is None:
        pos = torch.arange(T, dtype=torch.float64)
    else:
        if isinstance(positions, (list, tuple)):
            try:   # Python floats are float64: never round them through torch's float32 default
                positions = torch.tensor(positions, dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError) as err:
                raise TypeError(f"positions must be a list of numbers (one per row), got {positions!r:.80}: {err}") from None
        pos = _validate.tensor(positions, "positions")
        if pos.dtype == torch.bool or pos.is_complex():
            raise TypeError(f"positions must hold real numbers, got dtype {pos.dtype}")
        if pos.device.type == "meta" and x.device.type != "meta":
            _validate.has_values(pos, "positions", "apply_rope")
        pos = pos.to(torch.float64)
        if pos.device.type != "meta" and not bool(torch.isfinite(pos).all()):
            raise ValueError("positions must be finite numbers")
        if pos.dim() not in (0, 1, x.dim() - 1):
            # (B, T) against x (B, H, T, d) would line B up with H: silently wrong when B == H
            raise ValueError(f"positions must be (T,) or have x's {x.dim() - 1} leading dimensions "
                             f"{tuple(x.shape[:-1])} (e.g. (B, 1, T) for one row of positions per sequence of "
                             f"an x of shape (B, H, T, d)), got shape {tuple(pos.shape)}")
        try:
            torch.broadcast_shapes(pos.shape, x.shape[:-1])
        except RuntimeError:
            raise ValueError(f"positions must broadcast to x's (..., T) = {tuple(x.shape[:-1])}, got shape "
                             f"{tuple(pos.shape)}") from None
    angles = pos.to(x.device)[..., None] * inv_freq.to(x.device)                    # (..., T, d/2)
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    xw = x.to(work)
    if pairing == "half":
        angles = torch.cat([angles, angles], dim=-1)                                # (..., T, d): both halves
        rotated = torch.cat([-xw[..., d // 2:], xw[..., : d // 2]], dim=-1)         # rotate_half(x)
    else:
        angles = angles.repeat_interleave(2, dim=-1)                                # (..., T, d): theta_0, theta_0, theta_1, ..
        rotated = torch.stack([-xw[..., 1::2], xw[..., 0::2]], dim=-1).flatten(-2)  # (-x1, x0, -x3, x2, ..)
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    factor = rope_attention_factor(scaling)
    if factor != 1.0:                                                               # YaRN: scores * factor^2
        cos, sin = cos * factor, sin * factor
    return (xw * cos + rotated * sin).to(x.dtype)


def rope_scores(q, k, q_positions, k_positions, base: float = 10000.0, *,
                pairing: str = "half", scaling: dict | None = None) -> torch.Tensor:
    """Dot products ``apply_rope(q, q_positions) @ apply_rope(k, k_positions)^T`` (no
    ``1/sqrt(d_k)`` scaling): the scores of queries placed at ``q_positions`` with keys placed
    at ``k_positions``.  Shifting both position lists by the same amount leaves them unchanged
    (up to rounding): they depend on ``i - j`` only.  ``pairing`` as in :func:`apply_rope`
    (the two pairings give the same scores only for q and k both reordered, see there), and
    ``scaling`` as in :func:`rope_frequencies` (the scores still depend on ``i - j`` only).

    Shapes:
        q ``(..., T_q, d_k)``, k ``(..., T_k, d_k)``; positions ``(T_q,)`` and ``(T_k,)``;
        returns ``(..., T_q, T_k)``.

    Raises:
        as :func:`apply_rope`; ValueError when q and k differ in ``d_k`` or device;
        TypeError when they differ in dtype.

    Source: Su et al. (2021), eq. (16)-(17).
    """
    q = _validate.min_dims(_validate.floating(q, "q"), 2, "q", "(..., T_q, d_k)")
    k = _validate.min_dims(_validate.floating(k, "k"), 2, "k", "(..., T_k, d_k)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k: q {_validate.shape_of(q)} vs k {_validate.shape_of(k)}")
    if q.dtype != k.dtype:
        raise TypeError(f"q and k must share a dtype, got q {q.dtype}, k {k.dtype}")
    _validate.same_device(q=q, k=k)
    return apply_rope(q, q_positions, base, pairing=pairing, scaling=scaling) @ \
        apply_rope(k, k_positions, base, pairing=pairing, scaling=scaling).transpose(-2, -1)
