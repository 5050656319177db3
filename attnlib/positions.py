"""Position information for attention (chapter 10).

Attention by itself has no notion of order: permuting the rows of ``X`` permutes the rows of
the output and changes nothing else.  A model must therefore be told where each token is.
Two ways live here:

* :func:`sinusoidal`, the fixed absolute encoding added to the token embeddings by the
  original Transformer (Vaswani et al. 2017, section 3.5);
* :func:`apply_rope`, rotary position embedding (Su et al. 2021, "RoFormer", eq. 34), in
  Hugging Face Llama's rotate-half pairing or the paper's adjacent pairing, applied to the
  queries and keys of every layer, so that the score ``q_i . k_j`` depends on
  the positions only through the offset ``i - j`` (:func:`rope_scores`).

Shapes legend: ``T`` positions, ``d`` the width of the vectors that receive the position
(``d_model`` for :func:`sinusoidal`, ``d_k`` for :func:`apply_rope`).
"""
from __future__ import annotations

import torch

from . import _validate

__all__ = ["sinusoidal", "rope_frequencies", "apply_rope", "rope_scores"]

#: The two layouts of RoPE's coordinate pairs (see :func:`apply_rope`).
PAIRINGS = ("half", "adjacent")


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


def rope_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The rotation frequencies ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1`` (radians per
    position) of rotary embeddings (Su et al. 2021, eq. 15), float64.

    Shapes:
        returns ``(d/2,)``.

    Raises:
        TypeError / ValueError: as :func:`apply_rope` for ``d`` and ``base``.
    """
    d = _validate.positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d must be even (RoPE rotates pairs of coordinates), got {d}")
    base = _validate.real(base, "base", low=1.0, low_open=True)
    return 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)


def apply_rope(x, positions=None, base: float = 10000.0, *, pairing: str = "half") -> torch.Tensor:
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

    Shapes:
        x ``(..., T, d)`` -> ``(..., T, d)``.

    Raises:
        TypeError: ``x`` not a floating tensor; ``positions`` not a tensor/array/list of
            numbers; ``base`` not a real number.
        ValueError: ``x`` with fewer than 2 dimensions or an odd ``d``; ``positions`` that do not
            broadcast to ``(..., T)``, have fewer leading dimensions than ``x`` (but more than
            one), or hold NaN/infinity; ``base <= 1``; ``pairing`` not ``"half"`` or
            ``"adjacent"``.

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
    inv_freq = rope_frequencies(d, base)                                            # (d/2,)
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
    return (xw * cos + rotated * sin).to(x.dtype)


def rope_scores(q, k, q_positions, k_positions, base: float = 10000.0, *,
                pairing: str = "half") -> torch.Tensor:
    """Dot products ``apply_rope(q, q_positions) @ apply_rope(k, k_positions)^T`` (no
    ``1/sqrt(d_k)`` scaling): the scores of queries placed at ``q_positions`` with keys placed
    at ``k_positions``.  Shifting both position lists by the same amount leaves them unchanged
    (up to rounding): they depend on ``i - j`` only.  ``pairing`` as in :func:`apply_rope`
    (the two pairings give the same scores only for q and k both reordered, see there).

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
    return apply_rope(q, q_positions, base, pairing=pairing) @ \
        apply_rope(k, k_positions, base, pairing=pairing).transpose(-2, -1)
