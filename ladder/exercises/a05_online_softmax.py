"""Assignment 05: the online softmax, in NumPy and as a @triton.jit update inside a fused attention kernel."""
from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings

import numpy as np
import torch

from kernels.attention import reference
from kernels.triton.exercises import online_attention, online_update_step
from ladder.check import compare
from ladder.exercises.grading import Result, not_answered, not_yet, passed, unanswered as _unanswered
from ladder.runtime.world import device


def _blanks(fn) -> tuple[list[str], bool] | None:
    """What is left of a stub in the function's source, in words: the names assigned `...` that it goes
    on to use, and a `...` anywhere else; and whether anything else is assigned. None without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    except (OSError, TypeError, SyntaxError):
        return None
    blank, placed, real = {}, set(), False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            is_blank = isinstance(node.value, ast.Constant) and node.value.value is Ellipsis
            if is_blank:
                placed.add(id(node.value))
            for target in node.targets:
                if is_blank and isinstance(target, ast.Name):
                    blank.setdefault(target.id, node.lineno)
                else:
                    real = True
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            real = True
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    stray = any(isinstance(node, ast.Constant) and node.value is Ellipsis and id(node) not in placed
                for node in ast.walk(tree))
    still = sorted((n for n in blank if n in used), key=blank.get)
    parts = ([f"{', '.join(still)} {'is' if len(still) == 1 else 'are'} still `...`"] if still else []) \
        + (["a `...` is left in an expression"] if stray else [])
    return parts, real


class _Verdict(Exception):
    """The rest of one verdict line (after "name: "), raised from deep inside a check."""


class OnlineSoftmax:
    """Exercise 05: the online softmax, one block of keys at a time, in NumPy and in a Triton kernel.

    The contract, per query row: m is the largest score seen so far, l the sum of exp(score - m) over
    the keys seen so far, acc the same sum of exp(score - m) · value (unnormalized); they start at
    -inf, 0, 0, and acc / l at the end is softmax(scores) @ values. A masked key's score is -inf.

    Each kind of score stream runs block by block through the student's update; a stream is right when
    acc / l matches softmax(scores) @ values in float64. The first that is not says why: the states
    after each block show whether m is the running max, and whether l and acc agree with m.
    The Triton function runs on the same streams in 16x16 tiles (kernels/triton/exercises.py's probe
    kernel, scores in base 2), then inside the fused attention kernel at a few shapes.
    """
    NUMPY, TRITON = "online softmax (NumPy)", "online softmax (Triton)"
    NUMPY_BLOCKS = (1, 5, 8)
    TRITON_TILE = 16
    LARGE = 300.0  # scores of a few hundred: exp overflows float64 past 709, exp2 overflows fp32 past 128
    # (B, H, S, D, causal, window, scale of Q): ragged S, causal, a sliding window, scores past exp2's range
    ATTENTION_SHAPES = [(1, 2, 37, 16, False, None, 1.0), (1, 1, 45, 32, True, None, 1.0),
                        (1, 1, 50, 16, True, 6, 1.0), (1, 1, 24, 16, False, None, 60.0)]

    # ------------------------------------------------------------ the two checks

    def check_numpy(self, fn) -> Result:
        ready = self._not_ready(self.NUMPY, fn)
        if ready is not None:
            return ready
        try:
            self._streams(fn, base=math.e, rows=6, D=5, blocks=self.NUMPY_BLOCKS, tol=1e-9, triton=False)
        except _Verdict as v:
            return not_yet(self.NUMPY, str(v))
        return passed(self.NUMPY, f"correct: acc / l = softmax(scores) @ values, block by block (blocks of "
                           f"{', '.join(map(str, self.NUMPY_BLOCKS))} keys), with masked keys, a wholly masked first "
                           f"block, and scores of ±{self.LARGE * 3:.0f}")

    def check_triton(self, fn) -> Result:
        ready = self._not_ready(self.TRITON, fn)
        if ready is not None:
            return ready
        if not hasattr(fn, "fn"):  # the interpreter would call a plain function; a GPU compile would not
            return not_yet(self.TRITON, "decorate your function with @triton.jit: the kernel calls it from GPU code")
        try:
            self._streams(self._probe(fn), base=2.0, rows=self.TRITON_TILE, D=self.TRITON_TILE,
                          blocks=(self.TRITON_TILE,), tol=2e-3, triton=True)
            for shape in self.ATTENTION_SHAPES:
                self._attention(fn, shape)
        except _Verdict as v:
            return not_yet(self.TRITON, str(v))
        return passed(self.TRITON, f"correct: block by block in 16x16 tiles, and fused attention at "
                                   f"{len(self.ATTENTION_SHAPES)} shapes (ragged S, causal, a sliding window, "
                                   f"scores past exp2's range) matches fp32 math attention")

    @staticmethod
    def _not_ready(name: str, fn) -> Result | None:
        """"not answered yet" for the stub (nothing but `name = ...` assignments), "not finished" when a
        `...` the function still uses is left (None: ready); a `name = ...` never used is no matter."""
        if _unanswered(fn):
            return not_answered(name)
        left = _blanks(fn)
        if left is None or not left[0]:
            return None
        still, answered_any = left
        return not_yet(name, "not finished: " + "; ".join(still)) if answered_any else not_answered(name)

    # ------------------------------------------------------------ the score streams

    def _cases(self, rows: int, D: int, blocks: tuple, rng) -> list:
        """(what, scores [rows, S], values [S, D], block sizes): the kinds of stream, in checking order."""
        block = max(blocks)
        S = 3 * block
        values = rng.standard_normal((S, D))
        stays = rng.standard_normal((rows, S))
        stays[:, 0] += 8.0                                  # every row's max is its first key
        grows = rng.standard_normal((rows, S)) + np.linspace(0.0, 40.0, S)  # each block's max is higher
        holes = rng.standard_normal((rows, S))
        holes[rng.random((rows, S)) < 0.3] = -np.inf        # masked keys, but never key 0: m is finite at once
        holes[np.arange(S)[None, :] > np.arange(rows)[:, None] + S // 2] = -np.inf  # and a causal-like tail
        holes[:, 0] = rng.standard_normal(rows)
        first = rng.standard_normal((rows, S))
        half, masked = rows // 2, block + block // 4
        first[:half, :masked] = -np.inf                     # these rows: the first block(s) wholly masked
        first[half:, block:2 * block] = -np.inf             # these: a wholly masked block in the middle
        large = rng.standard_normal((rows, S)) * self.LARGE
        return [("one block", rng.standard_normal((rows, block)), values[:block], (block,)),
                ("a max that stays in the first block", stays, values, blocks),
                ("a max that grows from block to block", grows, values, blocks),
                ("masked keys (-inf)", holes, values, blocks),
                ("a first block whose keys are all masked", first, values, blocks),
                (f"large scores (±{self.LARGE * 3:.0f})", large, values, blocks)]

    def _streams(self, fn, base: float, rows: int, D: int, blocks: tuple, tol: float, triton: bool) -> None:
        for what, scores, values, sizes in self._cases(rows, D, blocks, np.random.default_rng(5)):
            for block in sizes:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    states = self._stream(fn, scores, values, block, what)
                    m, l, acc = states[-1]
                    out = acc / l[:, None]
                ref = self._softmax_values(scores, values, base)
                if np.isfinite(out).all() and self._rel(out, ref) <= tol:
                    continue
                at = f"{what}, blocks of {block} key{'s' if block > 1 else ''}"
                with np.errstate(all="ignore"):
                    raise _Verdict(f"not quite at {at}: "
                                   + self._diagnose(what, states, scores, values, block, base, tol, triton, ref))

    @staticmethod
    def _stream(fn, scores, values, block: int, what: str) -> list:
        rows, S = scores.shape
        D = values.shape[1]
        m, l, acc = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, D))
        states = []
        for start in range(0, S, block):
            try:
                got = fn(m.copy(), l.copy(), acc.copy(), scores[:, start:start + block].copy(),
                         values[start:start + block].copy())
            except _Verdict:
                raise
            except Exception as e:  # the function is the student's: say what broke, not where
                first = (str(e).strip().splitlines() or [""])[0][:200]
                raise _Verdict(f"your function fails at {what}, keys {start} to {min(start + block, S) - 1} "
                               f"({type(e).__name__}: {first})") from None
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                raise _Verdict("return three things: the new m, l and acc")
            if any(_unanswered(x) for x in got):
                raise _Verdict("not answered yet")
            try:
                m, l, acc = (np.array(x, dtype=np.float64) for x in got)
            except (TypeError, ValueError) as e:
                raise _Verdict(f"return arrays of numbers: m, l, acc ({e})") from None
            want = {"m": (rows,), "l": (rows,), "acc": (rows, D)}
            shapes = {"m": m.shape, "l": l.shape, "acc": acc.shape}
            if shapes != want:
                raise _Verdict("return m, l of shape (rows,) and acc of shape (rows, D); got "
                               + ", ".join(f"{k} {s}" for k, s in shapes.items())
                               + f" for {rows} rows and D = {D} (reduce over the keys: axis=1)")
            states.append((m, l, acc))
        return states

    @staticmethod
    def _softmax_values(scores, values, base: float):
        x = scores * math.log(base)
        w = np.exp(x - x.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True)) @ values

    @staticmethod
    def _rel(got, want) -> float:
        if not np.isfinite(got).all():
            return math.inf
        return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))

    def _diagnose(self, what, states, scores, values, block, base, tol, triton, ref) -> str:
        exp = "tl.exp2" if triton else "np.exp"
        mx = "tl.maximum(m, tl.max(s, axis=1))" if triton else "np.maximum(m, scores.max(axis=1))"
        rows, S = scores.shape
        # 1. NaN or inf: at the first block that makes any
        for t, (m, l, acc) in enumerate(states):
            end = min((t + 1) * block, S)
            out = acc / l[:, None]
            bad = (np.isnan(m) | ~np.isfinite(l) | ~np.isfinite(acc).all(axis=1)
                   | (t == len(states) - 1) & ~np.isfinite(out).all(axis=1))
            if not bad.any():
                continue
            seen = np.isfinite(scores[:, :end]).any(axis=1)      # rows with a key that is not masked, so far
            this = np.isfinite(scores[:, t * block:end]).any(axis=1)
            if not seen[bad].any():
                return (f"NaN in rows whose keys so far are all masked: there m_new is -inf, and "
                        f"-inf - (-inf) is NaN; where m_new is -inf, subtract 0 instead ({exp}(-inf - 0) = 0: "
                        f"nothing to add yet, and l = acc = 0 need no rescaling)")
            if what.startswith("large"):
                return (f"NaN or inf with scores of a few hundred: {exp} of a score that is not shifted by "
                        f"the max overflows to inf ({'past 128 in fp32' if triton else 'past 709 in float64'}) "
                        f"or underflows to 0, and inf / inf or 0 / 0 is NaN; subtract the running max first, "
                        f"so that every exponent is <= 0: p = {exp}(scores - m_new[:, None]), "
                        f"alpha = {exp}(m - m_new)")
            if not this[bad].any():
                return (f"NaN or inf after a block whose keys are all masked (-inf) in rows that had seen "
                        f"keys before: such a block must leave m, l and acc as they are: m stays the "
                        f"running max, {mx}, so alpha = 1 and p = 0")
            if t == 0:
                return (f"NaN or inf already after the first block, from m = -inf, l = 0, acc = 0: alpha = "
                        f"{exp}(m - m_new) is 0 there (not {exp}(m_new - m), which is inf: 0 · inf is NaN)")
            return f"NaN or inf in l or acc after keys {t * block} to {end - 1}"
        m, l, acc = states[-1]
        # 2. finite, but acc / l is not the answer
        if self._rel(acc, ref) <= tol:
            return ("acc is already normalized: keep acc the unnormalized sum (acc · alpha + p @ values); "
                    "the division by l comes once, at the end")
        for t, (mt, _, _) in enumerate(states):
            end = min((t + 1) * block, S)
            run = scores[:, :end].max(axis=1)
            seen = np.isfinite(run)
            if not np.allclose(mt[seen], run[seen], rtol=1e-6, atol=1e-6):
                return (f"after keys 0 to {end - 1}, m is not the largest score so far in every row: "
                        f"m_new = {mx}")
        safe = np.where(np.isfinite(m), m, 0.0)

        def weights(b):
            return b ** (scores - safe[:, None])

        def close(got, want):
            return self._rel(got, want) <= tol

        other = 2.0 if base != 2.0 else math.e
        if close(l, weights(other).sum(axis=1)) and not close(l, weights(base).sum(axis=1)):
            return ("the scores are in base 2 (log2(e) is folded into their scale): use tl.exp2, not tl.exp"
                    if triton else "these scores are in base e: use np.exp, not exp2")
        l_ok, acc_ok = close(l, weights(base).sum(axis=1)), close(acc, weights(base) @ values)
        if what == "one block":
            parts = ([] if l_ok else ["l_new = l · alpha + the sum of p over the keys (axis=1)"]) \
                + ([] if acc_ok else ["acc_new = acc · alpha[:, None] + p @ values (p [rows, keys] @ values [keys, D])"])
            return (f"wrong already for one block from m = -inf, l = 0, acc = 0: with p = {exp}(scores - "
                    f"m_new[:, None]), " + "; ".join(parts or ["acc / l"]))
        alpha = f"alpha = {exp}(m - m_new)"
        if not l_ok and not acc_ok:
            return (f"l and acc are right while the max stays, wrong once a later block raises it: when the "
                    f"max grows, rescale both by {alpha} before adding the new block")
        if not acc_ok:
            return (f"l is right but acc is not: forgot to rescale acc when the max grows: acc_new = "
                    f"acc · alpha[:, None] + p @ values, with {alpha}")
        if not l_ok:
            return (f"acc is right but l is not: forgot to rescale l when the max grows: l_new = "
                    f"l · alpha + the sum of p, with {alpha}")
        return f"acc / l differs from softmax(scores) @ values (relative error {self._rel(acc / l[:, None], ref):.2g})"

    # ------------------------------------------------------------ Triton: the probe and the fused kernel

    @staticmethod
    def _probe(fn):
        """The @triton.jit update as a NumPy function: one launch of the probe kernel per block."""

        def update(m, l, acc, s, v):
            t = [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) for x in (m, l, acc, s, v)]
            return tuple(x.cpu().double().numpy() for x in online_update_step(fn, *t))
        return update

    @staticmethod
    def _attention(fn, shape) -> None:
        B, H, S, D, causal, window, scale = shape
        gen = torch.Generator().manual_seed(6)
        q, k, v = (torch.randn(B, H, S, D, generator=gen) for _ in range(3))
        q, k, v = ((q * scale).half().to(device()), k.half().to(device()), v.half().to(device()))
        if window is None:
            want = reference(q, k, v, causal)
        else:  # fp32 math attention, as kernels.attention.reference, with the window's mask too
            i, j = torch.arange(S, device=q.device)[:, None], torch.arange(S, device=q.device)[None, :]
            s = (q.float() @ k.float().transpose(-1, -2)) / D ** 0.5
            s = s.masked_fill((j > i) | (i - j >= window) if causal else (i - j >= window), float("-inf"))
            want = torch.softmax(s, dim=-1) @ v.float()
        what = (f"{B}x{H}x{S}x{D}" + (", causal" if causal else "") + (f", window {window}" if window else "")
                + (f", Q scaled by {scale:g}" if scale != 1 else ""))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = online_attention(q, k, v, fn, causal=causal, window=window)
        except Exception as e:  # the function is the student's: say what broke, not where
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise _Verdict(f"the attention kernel fails with your update at {what} ({type(e).__name__}: "
                           f"{first}); return (m, l, acc) shaped [BLOCK_M], [BLOCK_M], [BLOCK_M, D], fp32") from None
        result = compare(got, want)
        if not result.ok:
            raise _Verdict(f"right block by block, but attention at {what} differs from fp32 math attention "
                           f"({result})")
