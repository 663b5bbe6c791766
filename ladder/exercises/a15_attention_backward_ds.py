"""Assignment 15: attention's backward, D and dS: in NumPy, then as the two formulas of a Triton backward kernel.

For O = P·V with P = softmax(scale·Q·Kᵀ) row by row (masked above the diagonal when causal) and the loss's
gradient dO: dP = dO·Vᵀ, D = rowsum(dO ∘ O) (one number per query) and dS = P ∘ (dP − D), D subtracted from
each row of dP.

(1) NumPy: the student's `delta_and_ds(q, k, v, do, scale, causal)` returns (D, dS) for one head; it runs on a
few small heads (causal and not, one whose scale is not 1/√d) against float64. (2) Triton: the student's
`delta(o, do)` (the preprocess) and `p_and_ds(qk, lse, dp, delta, keep, scale)` (the tile of P recomputed from the
log-sum-exp, and its dS) run first alone on one causal tile (kernels/triton/exercises.py's probe kernel), then
inside its small backward kernels (dQ, dK, dV) at two shapes, against float64 autograd.

A wrong answer is named by the mistake it matches: each typical one (no softmax scale, D from the output before
its division by the row sum, the causal mask on dS but not on P, no D, D along the wrong axis, ...) is tried,
alone and together, and the feedback says which; the expected values are never printed.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import torch

from kernels.triton.exercises import attention_ds_backward, p_and_ds_step
from ladder.exercises.a09_epilogue import _what_broke as broke
from ladder.exercises.grading import Fail, Result, first_line, judge


NUMPY, TRITON = "D and dS (NumPy)", "D and dS (Triton)"

# (S, head dim, causal, scale): small heads; the last one's scale is not 1/sqrt(d)
NUMPY_CASES = [(6, 4, False, 0.5), (7, 4, True, 0.5), (5, 3, True, 0.8)]
PROBE_SCALE = 0.35
PROBE_S = 13                      # keys past it are outside S in the probe's 16x16 tile
# (B, H, S, head dim, causal): a ragged S, and causal
TRITON_SHAPES = [(1, 2, 37, 16, False), (1, 1, 40, 16, True)]
RTOL = {"numpy": 1e-6, "probe": 1e-4, "kernel": 1e-4}


# ------------------------------------------------------------------ the mistakes, as variants of the math

class _Way:
    """One way of computing D and dS: the right one, or with some of the typical mistakes."""
    __slots__ = ("scaled", "mask_p", "mask_ds", "normalized", "minus", "ds_factor", "exp_base")

    def __init__(self, scaled="yes", mask_p=True, mask_ds=False, normalized="yes", minus="rows", ds_factor=1.0,
                 exp_base="e"):
        self.scaled, self.mask_p, self.mask_ds, self.normalized = scaled, mask_p, mask_ds, normalized
        self.minus, self.ds_factor, self.exp_base = minus, ds_factor, exp_base

    def mistakes(self, causal: bool, triton: bool = False) -> list[str]:
        said = []
        if self.scaled == "no":
            said.append("P is the softmax of Q·Kᵀ without the scale: the scores are scale·Q·Kᵀ (did you scale the "
                        "scores?)")
        elif self.scaled == "sqrt":
            said.append("P uses 1/√d as its scale where the scale given is another: use the `scale` argument")
        if self.exp_base == "2":
            said.append("P uses base 2: lse here is a natural log, so P = e^(scaled score − lse)")
        if causal and not self.mask_p:
            said.append(("the causal mask is applied to dS but not to P: p must be 0 wherever keep is False, "
                         "because the kernel uses p itself too (dV = Pᵀ·dO would sum keys the query never saw)"
                         if triton else
                         "the causal mask is applied to dS but not to P: P must be 0 above the diagonal before "
                         "anything uses it; masking dS afterwards leaves P (and what comes from it) made of keys "
                         "the query never saw") if self.mask_ds else
                        ("no mask: p is 0 wherever keep is False (keys after the query, and keys outside S)"
                         if triton else
                         "no causal mask: query i sees only keys j ≤ i, so its probabilities after the diagonal "
                         "are 0"))
        if self.normalized != "yes":
            said.append("D comes from the unnormalized output (the exponentials times V, before the division by the "
                        "row sum ℓ): O = P·V, whose weights sum to 1 in every row")
        if self.minus == "none":
            said.append("dS is P ∘ dP: D, one number per query, is subtracted from dP first")
        elif self.minus == "columns":
            said.append("D is subtracted along the wrong axis: D_i belongs to query i, so it comes off row i of dP "
                        "(every key of that query), not column i")
        elif self.minus == "no_p":
            said.append("dS is dP − D without P: the difference is multiplied elementwise by P")
        if self.ds_factor != 1.0:
            said.append("dS is off by a factor ≈ the softmax scale: the kernel multiplies by the scale once, when it "
                        "forms dQ and dK from dS; dS itself is P ∘ (dP − D)")
        return said


def _numpy_ways(causal: bool, scale_is_sqrt: bool) -> list[_Way]:
    """Every combination of the NumPy task's typical mistakes, fewest first (the right way first)."""
    ways = []
    for scaled, mask, normalized, minus in itertools.product(
            ("yes", "no") + (() if scale_is_sqrt else ("sqrt",)),
            ((True, False), (False, True), (False, False)) if causal else ((True, False),),
            ("yes", "max", "raw"), ("rows", "none", "columns", "no_p")):
        ways.append(_Way(scaled, mask[0], mask[1], normalized, minus))
    return sorted(ways, key=lambda w: len(w.mistakes(True)))


def _triton_ways() -> list[_Way]:
    ways = []
    for scaled, mask, minus, factor, base in itertools.product(
            ("yes", "no"), ((True, False), (False, True), (False, False)), ("rows", "none", "columns", "no_p"),
            (1.0, PROBE_SCALE), ("e", "2")):
        ways.append(_Way(scaled, mask[0], mask[1], "yes", minus, factor, base))
    return sorted(ways, key=lambda w: len(w.mistakes(True)))


def _head(q, k, v, do, scale: float, causal: bool, way: _Way):
    """(D, dS) of one head, float64, computed `way`."""
    S, d = q.shape
    s = q @ k.T * {"yes": scale, "no": 1.0, "sqrt": 1 / np.sqrt(d)}[way.scaled]
    above = np.triu(np.ones((S, S), dtype=bool), 1) if causal else np.zeros((S, S), dtype=bool)
    if way.mask_p:
        s = np.where(above, -np.inf, s)
    e_max = np.exp(s - s.max(axis=1, keepdims=True))
    p = e_max / e_max.sum(axis=1, keepdims=True)
    weights = {"yes": p, "max": e_max, "raw": np.exp(s)}[way.normalized]
    D = (do * (weights @ v)).sum(axis=1)
    return D, _ds(p, do @ v.T, D, above, way)


def _ds(p, dp, D, above, way: _Way):
    ds = {"rows": p * (dp - D[:, None]), "none": p * dp, "columns": p * (dp - D[None, :]),
          "no_p": dp - D[:, None]}[way.minus] * way.ds_factor
    return np.where(above, 0.0, ds) if way.mask_ds else ds


def _close(got, want, rtol: float) -> bool:
    if got.shape != want.shape or not np.isfinite(got).all():
        return False
    return bool(np.allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.abs(want).max(initial=0.0)))))


def _named(mistakes: list[str]) -> str:
    return "; and ".join(mistakes)


def _span(idx) -> str:
    lo, hi = int(min(idx)), int(max(idx))
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def _case_name(S: int, d: int, causal: bool, scale: float) -> str:
    return f"S = {S}, d = {d}{', causal' if causal else ''}, scale = {scale:g}"


class AttentionBackwardDs:
    """Exercise 15: D and dS of attention's backward, in NumPy and inside a Triton backward kernel."""

    def check_numpy(self, fn) -> Result:
        def body() -> str:
            if hasattr(fn, "fn"):   # called from Python, Triton's interpreter patches triton.language for good
                raise Fail("this is a @triton.jit function; the NumPy task takes a plain Python function")
            rng = np.random.default_rng(15)
            for S, d, causal, scale in NUMPY_CASES:
                q, k, v, do = (rng.standard_normal((S, d)) * f for f in (2.0, 2.0, 1.0, 1.0))
                _numpy_case(fn, q, k, v, do, scale, causal)
            return (f"correct: D = rowsum(dO ∘ O) and dS = P ∘ (dP − D) on {len(NUMPY_CASES)} heads (causal and not, "
                    f"a scale other than 1/√d)")
        return judge(NUMPY, (fn,), body)

    def check_triton(self, delta, p_and_ds) -> Result:
        def body() -> str:
            for name, fn in (("delta", delta), ("p_and_ds", p_and_ds)):
                if not hasattr(fn, "fn"):
                    raise Fail(f"decorate {name} with @triton.jit: the kernels call it from GPU code")
            _probe(p_and_ds)
            for shape in TRITON_SHAPES:
                _kernels(delta, p_and_ds, shape)
            return (f"correct: P and dS on a causal tile, then D, dQ, dK and dV of the backward kernels at "
                    f"{len(TRITON_SHAPES)} shapes (a ragged S, causal) match float64 autograd")
        return judge(TRITON, (delta, p_and_ds), body)


def _numpy_case(fn, q, k, v, do, scale: float, causal: bool) -> None:
    S, d = q.shape
    where = _case_name(S, d, causal, scale)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fn(q.copy(), k.copy(), v.copy(), do.copy(), scale, causal)
    except Exception as e:  # the student's code: what broke, not where
        raise Fail(f"your function fails at {where} ({first_line(e)})") from None
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Fail("return two things: D and dS")
    try:
        D, ds = (np.asarray(x, dtype=np.float64) for x in got)
    except (TypeError, ValueError) as e:
        raise Fail(f"return arrays of numbers: D and dS ({first_line(e)})") from None
    if D.shape != (S,) or ds.shape != (S, S):
        raise Fail(f"at {where}: D has shape {D.shape} and dS {ds.shape}; D is one number per query, shape (S,), "
                   f"and dS one per query and key, (S, S)")
    if not (np.isfinite(D).all() and np.isfinite(ds).all()):
        raise Fail(f"at {where}: NaN or inf in {'D' if not np.isfinite(D).all() else 'dS'}; a masked score is −∞ "
                   f"before the softmax, and its probability 0, never −∞ or NaN")
    ways = _numpy_ways(causal, scale_is_sqrt=abs(scale - 1 / np.sqrt(d)) < 1e-12)
    right = _head(q, k, v, do, scale, causal, ways[0])
    tol = RTOL["numpy"]
    d_ok, ds_ok = _close(D, right[0], tol), _close(ds, right[1], tol)
    if d_ok and ds_ok:
        return
    with np.errstate(all="ignore"):
        made = [(w, _head(q, k, v, do, scale, causal, w)) for w in ways[1:]]
    made = [(w, r) for w, r in made if not (_close(r[0], right[0], tol) and _close(r[1], right[1], tol))]
    for w, (wD, wds) in made:
        if _close(D, wD, tol) and _close(ds, wds, tol):
            raise Fail(f"at {where}: {_named(w.mistakes(causal))}")
    if not d_ok:
        hint = next((w.mistakes(causal) for w, (wD, _) in made if _close(D, wD, tol)), None)
        rows = np.nonzero(~np.isclose(D, right[0], rtol=tol, atol=tol))[0]
        raise Fail(f"at {where}: D is not rowsum(dO ∘ O)"
                   + (f": {_named(hint)}" if hint else
                      f" in queries {_span(rows)}; O = P·V with P's rows summing to 1"))
    above = np.triu(np.ones((S, S), dtype=bool), 1) if causal else np.zeros((S, S), dtype=bool)
    with np.errstate(all="ignore"):
        s = np.where(above, -np.inf, q @ k.T * scale)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p = p / p.sum(axis=1, keepdims=True)
    for w in ways[1:]:   # D right: what dS does with it
        if w.scaled == "yes" and w.mask_p and w.normalized == "yes" and _close(ds, _ds(p, do @ v.T, D, above, w), tol):
            raise Fail(f"at {where}: D is right, but {_named(w.mistakes(causal))}")
    bad = ~np.isclose(ds, right[1], rtol=tol, atol=tol * max(1.0, float(np.abs(right[1]).max())))
    r, c = np.nonzero(bad)
    raise Fail(f"at {where}: D is right, but dS is not P ∘ (dP − D) in {int(bad.sum())} of {S * S} places (queries "
               f"{_span(r)}, keys {_span(c)})")


# ------------------------------------------------------------------ Triton: one tile, then the kernels

def _what_broke(e: BaseException) -> str:
    return broke(e)


def _probe(p_and_ds) -> None:
    """p_and_ds alone on one 16x16 causal tile whose keys past PROBE_S are outside S."""
    BM = BN = 16
    rng = np.random.default_rng(151)
    qk = rng.standard_normal((BM, BN)) * 4.0
    keep = (np.arange(BN)[None, :] <= np.arange(BM)[:, None]) & (np.arange(BN)[None, :] < PROBE_S)
    above = ~keep
    s = qk * PROBE_SCALE
    lse = np.log(np.exp(np.where(keep, s, -np.inf)).sum(axis=1))
    dp, delta = rng.standard_normal((BM, BN)), rng.standard_normal(BM)
    where = f"on one {BM}x{BN} causal tile (scale {PROBE_SCALE:g}, keys from {PROBE_S} on outside S)"
    try:
        got = p_and_ds_step(p_and_ds, *(torch.from_numpy(x) for x in (qk, lse, dp, delta, keep)), PROBE_SCALE)
    except Exception as e:
        raise Fail(f"the probe kernel fails with your p_and_ds {where} ({_what_broke(e)}); qk, dp and keep are "
                   f"[BLOCK_M, BLOCK_N], lse and D [BLOCK_M]: return two tiles shaped like qk, p and ds") from None
    p, ds = (t.cpu().double().numpy() for t in got)

    def way(w: _Way):
        with np.errstate(all="ignore"):
            sc = {"yes": PROBE_SCALE, "no": 1.0}[w.scaled]
            x = qk * sc - lse[:, None]
            wp = np.exp2(x) if w.exp_base == "2" else np.exp(x)
            wp = np.where(above, 0.0, wp) if w.mask_p else wp
            return wp, _ds(wp, dp, delta, above, w)

    tol = RTOL["probe"]
    ways = _triton_ways()
    right = way(ways[0])
    if _close(p, right[0], tol) and _close(ds, right[1], tol):
        return
    for w in ways[1:]:
        wp, wds = way(w)
        if _close(p, wp, tol) and _close(ds, wds, tol):
            raise Fail(f"{where}: {_named(w.mistakes(True, triton=True))}")
    if not np.isfinite(p).all() or not np.isfinite(ds).all():
        raise Fail(f"{where}: NaN or inf in {'p' if not np.isfinite(p).all() else 'ds'}; p is e^(scaled score − "
                   f"lse), at most 1, and 0 where keep is False")
    if not _close(p, right[0], tol):
        bad = ~np.isclose(p, right[0], rtol=tol, atol=tol)
        masked = bad & above
        if masked.any() and not (bad & keep).any():
            raise Fail(f"{where}: p is right where keep is True but not 0 where it is False (the keys after the "
                       f"query and outside S)")
        r, c = np.nonzero(bad)
        raise Fail(f"{where}: p is not the tile of P = e^(scale·qk − lse) in {int(bad.sum())} of {BM * BN} places "
                   f"(rows {_span(r)}, columns {_span(c)})")
    bad = ~np.isclose(ds, right[1], rtol=tol, atol=tol)
    r, c = np.nonzero(bad)
    raise Fail(f"{where}: p is right, but ds is not P ∘ (dP − D) in {int(bad.sum())} of {BM * BN} places (rows "
               f"{_span(r)}, columns {_span(c)})")


def _reference(q, k, v, do, causal: bool):
    """D, dQ, dK, dV in float64, by autograd through the math."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    S, d = q.shape[-2:]
    s = q @ k.transpose(-1, -2) / d ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    o.backward(do.double())
    return (o.detach() * do.double()).sum(-1), q.grad, k.grad, v.grad


def _kernels(delta, p_and_ds, shape) -> None:
    B, H, S, d, causal = shape
    where = f"at {B}x{H}x{S}x{d}{', causal' if causal else ''}"
    gen = torch.Generator().manual_seed(1500 + S)
    q, k, v, do = (torch.randn(B, H, S, d, generator=gen) for _ in range(4))
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [t.cpu().double() for t in attention_ds_backward(q, k, v, do, delta, p_and_ds, causal=causal)]
    except Exception as e:
        raise Fail(f"the backward kernels fail with your functions {where} ({_what_broke(e)}); delta returns "
                   f"[BLOCK_M], one number per row of o and do, and p_and_ds two tiles shaped like qk") from None
    want = _reference(q, k, v, do, causal)
    tol = RTOL["kernel"]
    D, Dw = got[0], want[0]
    if not torch.allclose(D, Dw, rtol=tol, atol=tol):
        if torch.allclose(D, do.double().sum(-1), rtol=tol, atol=tol):
            raise Fail(f"{where}: D is the row sum of dO alone: D = rowsum(dO ∘ O), elementwise first")
        rows = (~torch.isclose(D, Dw, rtol=tol, atol=tol)).nonzero()[:, -1]
        raise Fail(f"{where}: D from your delta is not rowsum(dO ∘ O) in {len(rows)} of {B * H * S} queries "
                   f"(positions {_span(rows.tolist())}); o and do are [BLOCK_M, HEAD_DIM], a row per query")
    for name, g, w in zip(("dQ", "dK", "dV"), got[1:], want[1:]):
        scale = float(w.abs().max())
        bad = ~torch.isclose(g, w, rtol=tol, atol=tol * scale)
        if bad.any():
            rows = bad.any(-1).nonzero()[:, -1]
            raise Fail(f"{where}: D and the probe's tile are right, but {name} is not, in rows {_span(rows.tolist())} "
                       f"(p and ds must hold for every tile the kernels pass, ragged and masked ones too)")
