"""Assignment 04: the A, B and C masks of a tiled Triton matmul at ragged shapes (kernels/triton/exercises.py)."""
from __future__ import annotations

import torch

from kernels.triton.exercises import masked_matmul, tile_masks_used
from ladder.check import compare
from ladder.exercises.grading import Result, not_answered, not_yet, passed, still_blank, unanswered as _unanswered
from ladder.runtime.world import device


TASK = "tile masks"

_still_blank = still_blank


# Why a mask that lets indices past an edge through is wrong, per (mask, axis of its tile).
_PAST_EDGE = {
    ("c_mask", 0): "those rows lie past the end of C",
    ("c_mask", 1): "those columns land in C's next row, or past its end",
    ("a_mask", 0): "those rows lie past the end of A (the store drops their sums, but the loads are out of bounds)",
    ("a_mask", 1): "in the last K step those are the next row's elements, or past the end of A: masked off, "
                   "they load as other=0.0 and add nothing",
    ("b_mask", 0): "in the last K step those rows lie past the end of B: masked off, they load as other=0.0 "
                   "and add nothing",
    ("b_mask", 1): "those are the next row's elements, or past the end of B (the store drops their sums, "
                   "but the loads are out of bounds)",
}


class TileMasks:
    """Exercise 04: the A, B and C masks of a tiled Triton matmul (kernels/triton/exercises.py).

    Each shape runs the matmul with fresh data. C is a view at the start of a longer buffer whose
    tail holds SENTINEL, so a store past C's end shows, and C starts as NaN, so an element never
    stored shows. A and B are views too, their tails GUARD: a load past an edge changes the sums but
    never reads memory that is not ours. Then the masks the kernel used say which one is wrong where.
    """
    SHAPES = [(1, 1, 1), (17, 33, 65), (33, 47, 31), (16, 16, 16), (32, 48, 40)]  # the last: only K ragged
    BLOCK = (16, 16, 16)
    GUARD, SENTINEL = 8.0, -1000.0

    def check(self, masks_fn) -> Result:
        if _unanswered(masks_fn) or _still_blank(masks_fn):
            return not_answered(TASK)
        if not hasattr(masks_fn, "fn"):  # the interpreter would call a plain function; a GPU compile would not
            return not_yet(TASK, "decorate your function with @triton.jit: the kernel calls it from GPU code")
        for shape in self.SHAPES:
            try:
                symptom, fault = self._run(masks_fn, shape), self._fault(masks_fn, shape)
            except Exception as e:  # the masks are the student's: say what broke, not where in Triton
                first = (str(e).strip().splitlines() or [""])[0][:200]
                return not_yet(TASK, f"the kernel fails with your masks at {'x'.join(map(str, shape))} "
                                     f"({type(e).__name__}: {first}); return three boolean tensors shaped like (or "
                                     f"broadcasting to) the A, B and C tiles, made with <, & and [:, None]")
            if symptom or fault:
                lead = f"{symptom}: " if symptom else "C is right, but "
                return not_yet(TASK, f"not quite at {'x'.join(map(str, shape))}: {lead}{fault or 'check your masks'}")
        return passed(TASK, f"correct: C = A·B on {len(self.SHAPES)} shapes with ragged edges, "
                            f"and no load or store outside A, B or C")

    def _run(self, masks_fn, shape) -> str | None:
        M, N, K = shape
        BM, BN, BK = self.BLOCK
        gen = torch.Generator().manual_seed(4)

        def guarded(rows, cols, block_rows, block_cols, fill):
            """A rows x cols view at the start of a buffer that also holds every element the
            kernel's tiles can address (rows and columns rounded up to whole tiles)."""
            whole_rows, whole_cols = -(-rows // block_rows) * block_rows, -(-cols // block_cols) * block_cols
            buf = torch.full(((whole_rows - 1) * cols + whole_cols,), fill, dtype=torch.float16, device=device())
            return buf, buf[:rows * cols].view(rows, cols)

        _, a = guarded(M, K, BM, BK, self.GUARD)
        _, b = guarded(K, N, BK, BN, self.GUARD)
        a.copy_(torch.randn(M, K, generator=gen).half())
        b.copy_(torch.randn(K, N, generator=gen).half())
        c_buf, c = guarded(M, N, BM, BN, self.SENTINEL)
        c.fill_(float("nan"))
        masked_matmul(a, b, masks_fn, out=c, block=self.BLOCK)
        if (c_buf[M * N:] != self.SENTINEL).any():
            return "the kernel stored past the end of C"
        result = compare(c, a.double() @ b.double())
        if result.non_finite:
            return "elements of C were never stored (they are still NaN)"
        return None if result.ok else "C differs from A·B"

    def _fault(self, masks_fn, shape) -> str | None:
        """How the first mask that is not exact (true inside its matrix, false outside) is wrong."""
        M, N, K = shape
        a, b, c = tile_masks_used(masks_fn, shape, self.BLOCK)
        for name, used, axes in (("c_mask", c, (("rows", "M", M), ("columns", "N", N))),
                                 ("a_mask", a, (("rows", "M", M), ("ks", "K", K))),
                                 ("b_mask", b, (("ks", "K", K), ("columns", "N", N)))):
            used = used.reshape(-1, *used.shape[-2:])
            inside = ((torch.arange(used.shape[1]) < axes[0][2])[:, None]
                      & (torch.arange(used.shape[2]) < axes[1][2])[None, :])
            outside = (used & ~inside).any(0)
            for axis, (index, bound, size) in enumerate(axes):
                past = outside.any(1 - axis)[size:]  # per index from the edge on: touched in some tile?
                if past.any():
                    if past.nonzero().flatten().tolist() == [0] and len(past) > 1:
                        return (f"{name} lets {index} == {bound} through: {index} run from 0 to {bound} - 1, "
                                f"so compare with <, not <=")
                    return f"{name} lets {index} >= {bound} through: {_PAST_EDGE[name, axis]}"
            if (inside & ~used).any():
                return (f"{name} masks off elements inside the matrix: "
                        + ("they are never stored" if name == "c_mask" else "their products are missing from the sums"))
        return None


