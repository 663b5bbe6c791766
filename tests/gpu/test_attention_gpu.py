"""Attention ladder on a GPU: every rung on ragged S (causal and not, D 64 and 128) with fresh data and a
NaN-poisoned output, and bad inputs; the fused Triton rungs keep a NaN in its row and head and stay finite on
large scores. Run with `pytest tests/gpu -o addopts=""`."""
import pytest
import torch

import kernels.attention as at
from ladder.check import compare
from ladder.runner import check_rung, unavailable

RUNNABLE = [r for r in at.PROBLEM.rungs if unavailable(r) is None]


@pytest.mark.parametrize("rung", RUNNABLE, ids=lambda r: r.label)
def test_every_rung_correct_on_ragged_s(rung):
    for shape, result in check_rung(at.PROBLEM, rung, seed=7):
        assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("rung", [r for r in RUNNABLE if r.backend == "triton"], ids=lambda r: r.label)
def test_bad_inputs_are_named(rung):
    q = torch.randn(1, 2, 64, 64, device="cuda").half()
    with pytest.raises(ValueError, match="is on cpu"):
        rung.run(q.cpu(), q.cpu(), q.cpu(), False)
    with pytest.raises(ValueError, match="D=96 is not supported"):
        x = torch.randn(1, 2, 64, 96, device="cuda").half()
        rung.run(x, x, x, False)


FUSED_TRITON = [r for r in RUNNABLE if r.backend == "triton" and not r.slow]


def _inputs(D: int, seed: int = 11):
    """Q, K, V of 3 heads at S = 300: a ragged last block, and heads that follow one another in memory."""
    q, k, v, _ = at.PROBLEM.make_inputs((1, 3, 300, D, 0), "cuda", torch.Generator("cuda").manual_seed(seed))
    return q, k, v


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("rung", FUSED_TRITON, ids=lambda r: r.label)
def test_a_nan_stays_in_its_row_and_head(rung, D):
    """A NaN in Q makes its query's output row NaN, and only it. A NaN in V's first key of head 2 makes all of
    head 2 NaN, and none of head 1: head 1's last key block, past its S, must not read head 2's rows (it would in
    a flat (B·H·S, D) view: a zero weight times NaN is NaN)."""
    q, k, v = _inputs(D)
    for causal in (False, True):
        bad_q = q.clone()
        bad_q[0, 1, 77, 5] = float("nan")
        out = rung.run(bad_q, k, v, causal)
        nan_rows = out.isnan().any(dim=-1).nonzero().tolist()
        assert nan_rows == [[0, 1, 77]] and out[0, 1, 77].isnan().all(), (causal, nan_rows[:5])
        ref = at.reference(q, k, v, causal)
        keep = torch.ones(300, dtype=torch.bool, device="cuda")
        keep[77] = False
        assert compare(out[:, :, keep], ref[:, :, keep]).ok
        bad_v = v.clone()
        bad_v[0, 2, 0, 3] = float("nan")
        out = rung.run(q, k, bad_v, causal)
        assert out[0, 2].isnan().any(dim=-1).all(), causal
        assert compare(out[:, :2], ref[:, :2]).ok, causal


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("rung", FUSED_TRITON, ids=lambda r: r.label)
def test_large_scores_stay_finite(rung, D):
    """Q × 30: scaled scores near 100, whose exp overflows fp32 (e^89 > 3.4e38) unless the running max is taken
    out first."""
    q, k, v = _inputs(D, seed=12)
    q = q * 30
    for causal in (False, True):
        out = rung.run(q, k, v, causal)
        assert out.isfinite().all() and compare(out, at.reference(q, k, v, causal)).ok, causal


def test_cuda_search_times_what_fits_and_the_winner_is_used():
    shape = (1, 4, 1000, 128, 1)
    report, = at.tune_cuda([shape])
    assert report.failed == [] and len(report.timed) >= 10, report.summary()
    assert report.best == at.TUNERS[128].best(shape)
    autotuned = next(r for r in RUNNABLE if r.label == "cuda:6_autotuned")
    for shape_, result in check_rung(at.PROBLEM, autotuned, [shape, (2, 3, 333, 128, 0)], seed=3):
        assert result.ok, (shape_, str(result))


@pytest.mark.parametrize("rung", [r for r in RUNNABLE if r.backend == "torch"], ids=lambda r: r.label)
def test_anchors_take_misaligned_views_and_empty_inputs_without_faulting(rung):
    base = torch.randn(1 * 2 * 300 * 64 + 1, device="cuda").half()
    q = base[1:].view(1, 2, 300, 64)  # starts 2 bytes into its allocation: SDPA's kernels would fault
    k, v = torch.randn_like(q), torch.randn_like(q)
    assert q.data_ptr() % 16 == 2
    for causal in (False, True):
        assert compare(rung.run(q, k, v, causal), at.reference(q, k, v, causal)).ok
    empty = torch.empty(1, 2, 0, 64, device="cuda").half()
    assert rung.run(empty, empty, empty, False).shape == (1, 2, 0, 64)
    torch.cuda.synchronize()  # nothing sticky: the next CUDA call works
    assert torch.ones(1, device="cuda").item() == 1


@pytest.mark.parametrize("D", [64, 128] if any(r.label == "triton:8_barrier_pass" for r in RUNNABLE) else [])
def test_rungs_7_and_8_on_ragged_s_and_rung_8_through_the_pass(D):
    """Rung 7 (as Triton compiles it) and rung 8 (through ladder/ptx.py's pass), each searched, and flash_tma_kernel
    launched through the pass at an 8-warp tile (two warpgroups: the pass splits its refill barrier), on ragged S,
    causal and not, into a NaN-poisoned output, Q x 1 and x 30; rung 8's launch says the pass applied."""
    import math
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor
    from kernels.triton import attention as ta
    from ladder import ptx
    block_n = 64 if D == 128 else 128
    for S in (333, 1000):
        for scale in (1, 30):
            q, k, v = (torch.randn(2, 3, S, D, device="cuda").half() for _ in range(3))
            q = (q * scale).half()
            for causal in (False, True):
                ref = at.reference(q, k, v, causal)
                rung7 = at.triton_tma(q, k, v, causal, torch.full_like(q, float("nan")))
                rung8 = at.triton_barrier_pass(q, k, v, causal, torch.full_like(q, float("nan")))
                assert at.LAST_PASS["sha256"] == ptx.version() and at.LAST_PASS["split"] > 0, at.LAST_PASS
                out = torch.full_like(q, float("nan"))
                boxes = [TensorDescriptor.from_tensor(t, [1, 1, r, D])
                         for t, r in ((q, 128), (k, block_n), (v, block_n), (out, 128))]
                with ptx.refill_barriers_split(require=True):
                    compiled = ta.flash_tma_kernel[(triton.cdiv(S, 128), 6)](
                        *boxes, S, 3, ta.LOG2E / math.sqrt(D), D, 128, block_n, causal, ptx.tag(), num_warps=8,
                        num_stages=3)
                assert ptx.applied(compiled)["split"] > 0
                for got in (rung7, rung8, out):
                    assert got.isfinite().all() and compare(got, ref).ok, (S, scale, causal)
