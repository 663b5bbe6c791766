"""Attention rungs 7-15 (Hopper only: wgmma and the TMA; rung 8 warp-specialized, rung 9 ping-pong, rung 10 the softmax under its own P·V, rung 11 its exponentials on MUFU.EX2 alone, rung 12 three consumer warpgroups at D64, rung 13 a persistent grid, rung 14 a shorter path to the next wgmma, rung 15 rung 14 searched) on an H100 or H200: ragged S (1, 100, 1000, 4097), causal or not,
D 64 and 128, several heads, fresh inputs into a NaN-poisoned output against the fp32 reference; a NaN in an input
reaches exactly the outputs it should (never a neighbouring head's: the TMA reads zeros past a head's last row); Q
scaled x30 stays finite; bad inputs are named; no local memory; and timed beside rung 6 and SDPA at the headline
shapes (printed, not asserted).

    pytest tests/gpu/test_attention_wgmma_gpu.py -o addopts="" -s

On any other GPU the first test fails and says why (tests/gpu never skips)."""
import pytest
import torch

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from ladder.runtime import cuda, hardware
from ladder.check import compare
from ladder.runner import check_rung, time_rung, unavailable

RUNGS = {name: at.PROBLEM.rung("cuda", name) for name in cuda_attention.HOPPER}


@pytest.fixture(params=list(RUNGS))
def rung(request):
    return RUNGS[request.param]
HEAD_DIMS = (64, 128)
# (B, H, S): one query; a head shorter than a key tile; several blocks and key tiles (the 2-stage ring wraps, its
# parity flips) with a ragged tail; one row past a multiple of 64; exact tiles; more heads than one
RAGGED = [(1, 1, 1), (2, 3, 100), (1, 2, 1000), (1, 1, 4097), (1, 2, 129), (1, 2, 256), (3, 5, 77)]


def run_poisoned(rung, shape, seed: int = 0, q_scale: float = 1.0, poison=None):
    """`rung` at `shape` = (B, H, S, D, causal) on fresh inputs (Q times q_scale; `poison(q, k, v)` edits them) into a
    NaN-filled output: (verdict against the fp32 reference, out)."""
    q, k, v, causal = at.PROBLEM.make_inputs(shape, "cuda", torch.Generator("cuda").manual_seed(seed))
    q = (q.float() * q_scale).half()
    if poison:
        poison(q, k, v)
    out = torch.full(shape[:4], float("nan"), dtype=torch.float16, device="cuda")
    assert rung.run(q, k, v, causal, out=out) is out
    torch.cuda.synchronize()
    return compare(out, at.reference(q, k, v, causal)), out


def test_this_gpu_is_hopper(rung):
    gpu = hardware.detect()
    assert gpu is not None and gpu.has("wgmma") and gpu.emulated_on is None, \
        f"attention {rung.label} needs a Hopper GPU (sm_90a), not {gpu and gpu.name} ({gpu and gpu.arch})"
    assert unavailable(rung) is None


@pytest.mark.parametrize("causal", (0, 1))
@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("bhs", RAGGED, ids=str)
def test_correct_on_ragged_s(rung, bhs, D, causal):
    for seed in (0, 1):
        verdict, _ = run_poisoned(rung, (*bhs, D, causal), seed)
        assert verdict.ok, ((*bhs, D, causal), str(verdict))


@pytest.mark.parametrize("D", HEAD_DIMS)
def test_scaled_queries_stay_finite(rung, D):
    """Q x30: scores in the thousands, the softmax one-hot; the running max keeps every exp2 at most 1."""
    for causal in (0, 1):
        verdict, out = run_poisoned(rung, (1, 2, 1000, D, causal), 3, q_scale=30.0)
        assert torch.isfinite(out).all() and verdict.ok, str(verdict)


@pytest.mark.parametrize("D", HEAD_DIMS)
def test_nan_reaches_exactly_its_outputs(rung, D):
    def nan_at(tensor, index):
        return lambda q, k, v: {"q": q, "k": k, "v": v}[tensor].__setitem__(index, float("nan"))

    # a query's NaN: its own output row only
    _, out = run_poisoned(rung, (1, 2, 100, D, 0), 4, poison=nan_at("q", (0, 1, 37, 5)))
    bad = ~torch.isfinite(out)
    assert bad[0, 1, 37].all() and bad.sum() == D
    # a value's NaN in column 3 of head 1's first key: that column of head 1, every row; head 0, whose last key tile
    # reaches past its 100 rows (a 2-D map would read head 1's first rows there), stays finite
    _, out = run_poisoned(rung, (1, 2, 100, D, 0), 5, poison=nan_at("v", (0, 1, 0, 3)))
    bad = ~torch.isfinite(out)
    assert bad[0, 1, :, 3].all() and bad.sum() == 100 and not bad[0, 0].any()
    # a key's NaN, causal: the queries at or after it, not those before
    _, out = run_poisoned(rung, (1, 1, 300, D, 1), 6, poison=nan_at("k", (0, 0, 50, 0)))
    rows = (~torch.isfinite(out[0, 0])).any(dim=1).nonzero().flatten().tolist()
    assert rows == list(range(50, 300))


@pytest.mark.parametrize("name", sorted(cuda_attention.PERSISTENT))
@pytest.mark.parametrize("D", HEAD_DIMS)
def test_persistent_blocks_carry_nothing_from_one_item_to_the_next(D, name):
    """Rungs 13-15 with more items than SMs, so that each block computes several (query block, head) items in a row, the
    ring and Q's barrier going on from one to the next: ragged S, causal or not, and a NaN in one head's keys that
    reaches that head alone, never the items its block computes after it."""
    rung = RUNGS[name]
    sms = hardware.detect().sm_count
    for shape in ((4, 16, 1000, D, 0), (3, 50, 77, D, 0), (2, 40, 1000, D, 1)):
        items = -(-shape[2] // cuda_attention.hopper_launch(rung.name, D)[1]) * shape[0] * shape[1]
        assert items > sms
        verdict, _ = run_poisoned(rung, shape, 7)
        assert verdict.ok, (shape, str(verdict))
    heads = 3 * sms   # one query block a head: block 1 computes heads 1, 1 + sms and 1 + 2 sms
    _, out = run_poisoned(rung, (1, heads, 64, D, 0), 8,
                          poison=lambda q, k, v: k.__setitem__((0, 1, 10, 0), float("nan")))
    bad = (~torch.isfinite(out)).flatten(2).any(dim=2)[0]
    assert bad.nonzero().flatten().tolist() == [1]


def test_bad_inputs_are_named(rung):
    base = torch.randn(2 * 300 * 64 + 8, device="cuda").half()
    q = base[8:].view(1, 2, 300, 64)  # 16 bytes in: fine
    assert compare(rung.run(q, q, q, False), at.reference(q, q, q, False)).ok
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        x = base[1:1 + 2 * 300 * 64].view(1, 2, 300, 64)
        rung.run(x, x, x, False)
    with pytest.raises(ValueError, match="D=96 is not supported"):
        x = torch.randn(1, 2, 64, 96, device="cuda").half()
        rung.run(x, x, x, False)
    empty = torch.empty(1, 2, 0, 64, device="cuda").half()
    assert rung.run(empty, empty, empty, True).shape == (1, 2, 0, 64)


@pytest.mark.parametrize("D", HEAD_DIMS)
def test_loads_without_local_memory(rung, D):
    module = cuda.load(f"attention/{rung.name}.cu", dict(HEAD_DIM=D, **cuda_attention.HOPPER[rung.name][0][D]), "sm_90a")
    attributes = module.get_function("attention").attributes
    assert attributes["local_size_bytes"] == 0, attributes


def test_hopper_search_times_what_fits_and_the_winner_is_used():
    """Rung 15's search at a small causal shape: every configuration of D64's space fits an H100 and runs correctly;
    the launcher then runs the winner, correct there and at a ragged shape without a mask."""
    shape = (1, 8, 1000, 64, 1)
    report, = at.tune_cuda([shape], at.HOPPER_TUNERS)
    assert report.failed == report.pruned == [] and len(report.timed) == 12, report.summary()
    assert report.best == at.HOPPER_TUNERS[64].best(shape)
    for shape_, result in check_rung(at.PROBLEM, RUNGS["15_autotuned"], [shape, (2, 3, 333, 64, 0)], seed=3):
        assert result.ok, (shape_, str(result))


def test_timed_beside_rung_6_and_sdpa():
    shown = [at.PROBLEM.rung("cuda", "6_autotuned"), *RUNGS.values(), at.PROBLEM.rung("torch", "sdpa")]
    rows = {(r.name, shape): time_rung(at.PROBLEM, r, shape) for shape in at.HEADLINE for r in shown}
    print(f"\n{'shape (B, H, S, D, causal)':28s}" + "".join(f"{r.name:>20s}" for r in shown)
          + "  8/7  9/8 10/9 top/sdpa")
    for shape in at.HEADLINE:
        t = [rows[r.name, shape]["tflops"] for r in shown]
        print(f"{str(shape):28s}" + "".join(f"{x:11.1f} TFLOP/s" for x in t)
              + f" {t[2] / t[1]:5.2f} {t[3] / t[2]:5.2f} {t[4] / t[3]:5.2f} {max(t[1:-1]) / t[-1]:6.2f}")
    assert all(r["correct"] for r in rows.values())
