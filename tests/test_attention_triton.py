"""The Triton attention ladder without a GPU: every rung in the interpreter on ragged S, causal and not (rungs 7 and
8's tensor descriptors too: the interpreter runs them); bad inputs named; the fused rungs' signatures in the SASS
compiled for sm_80 and sm_90 (rung 7's TMA copies on sm_90, pointer loads before); rung 8 compiled for sm_90a through
ladder/ptx.py's pass, which must change it under the Triton installed."""
import pytest
import torch
import triton

import kernels.attention as at
from kernels.triton import attention as ta
from ladder import ptx, sass
from ladder.check import compare
from ladder.runtime.hardware import GPU
from ladder.runner import check_rung, unavailable

RUNGS = [r for r in at.PROBLEM.rungs if r.backend == "triton"]


def test_the_ladder():
    assert [r.name for r in RUNGS] == ["1_naive", "2_coalesced", "3_fused", "4_tensor_core", "5_pipelined",
                                       "6_autotuned", "7_tma", "8_barrier_pass"]
    assert at.flops((4, 32, 4096, 64, 0)) == 4 * 4 * 32 * 4096 ** 2 * 64 == 2 * at.flops((4, 32, 4096, 64, 1))


@pytest.mark.parametrize("rung", at.PROBLEM.rungs, ids=lambda r: r.label)
def test_rung_correct_on_ragged_s_in_the_interpreter(rung):
    if rung.backend == "cuda" or rung.needs == "gpu":   # CUDA C++ and SDPA's flash backend run on a GPU only
        assert "GPU" in unavailable(rung)
        return
    report = check_rung(at.PROBLEM, rung, seed=2)
    assert [s for s, _ in report] == at.PROBLEM.interpret_shapes
    for shape, result in report:
        assert result.ok, (shape, str(result))


@pytest.mark.parametrize("rung", [r for r in RUNGS if not r.slow], ids=lambda r: r.label)
def test_causal_rows_see_only_earlier_keys(rung):
    q, k, v = (torch.randn(1, 1, 20, 64).half() for _ in range(3))
    v2 = v.clone()
    v2[:, :, 10:] = 0  # later values: must not change the first 10 rows of a causal result
    first, second = rung.run(q, k, v, True), rung.run(q, k, v2, True)
    assert torch.equal(first[:, :, :10], second[:, :, :10])


@pytest.mark.parametrize("rung", RUNGS, ids=lambda r: r.label)
def test_bad_inputs_are_named(rung):
    q = torch.randn(1, 2, 8, 64).half()
    with pytest.raises(ValueError, match="q must be torch.float16"):
        rung.run(q.float(), q, q, False)
    with pytest.raises(ValueError, match="shape mismatch"):
        rung.run(q, torch.randn(1, 2, 4, 64).half(), q, False)
    with pytest.raises(ValueError, match="D=32 is not supported"):
        rung.run(q[..., :32].contiguous(), q[..., :32].contiguous(), q[..., :32].contiguous(), False)
    with pytest.raises(ValueError, match="k is not contiguous"):
        rung.run(q, q.transpose(2, 3).contiguous().transpose(2, 3), q, False)
    with pytest.raises(ValueError, match="must have 4 dimension"):
        rung.run(q[0], q[0], q[0], False)


@pytest.mark.parametrize("run", [at.triton_tma, at.triton_barrier_pass], ids=["7_tma", "8_barrier_pass"])
def test_tma_rungs_name_a_misaligned_tensor(run):
    q = torch.randn(1 * 2 * 8 * 64 + 1).half()[1:].view(1, 2, 8, 64)   # 2 bytes into its allocation
    with pytest.raises(ValueError, match="q is not 16-byte aligned"):
        run(q, q.clone(), q.clone(), False)


def test_materialized_rungs_need_the_score_matrix():
    assert ta.score_matrix_bytes(4, 32, 16384) == 4 * 4 * 32 * 16384 ** 2   # 137 GB: more than an H100 has
    assert at.min_bytes((4, 32, 16384, 64, 0)) == 8 * 4 * 32 * 16384 * 64   # what the fused rungs move


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_fused_rungs_in_the_sass(arch):
    fused, tc, pipe = (sass.triton_sass(**at.flash_sass_case(r), arch=arch)
                       for r in ("3_fused", "4_tensor_core", "5_pipelined"))
    mma = "HMMA" if arch == "sm_80" else "HGMMA"
    assert fused.count("HMMA") == fused.count("HGMMA") == 0 and fused.count("FFMA") > 0
    assert tc.count(mma) > 0 and tc.count("LDGSTS") == 0
    assert pipe.count(mma) > 0 and pipe.count("LDGSTS") > 0
    assert fused.count("MUFU.EX2") > 0   # the softmax's exp2, one instruction


H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)
A100 = GPU("NVIDIA A100-SXM4-80GB", (8, 0), 108, 40 << 20, 163 << 10, 80 << 30, None)
T4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)
TMA_EXAMPLE = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def test_tma_rung_copies_by_tma_on_hopper_and_loads_by_pointer_before():
    """On sm_90 Q, K and V arrive by TMA (UTMALDG) and O leaves by it (UTMASTG): no thread loads or stores them,
    and no program builds a descriptor (the host did: no UTMACCTL, the fence a descriptor written in the kernel
    needs before its first copy). Before sm_90 Triton rewrites the descriptors into pointer loads: a direct call
    there would run, but the ladder reports the rung N/A, as it is rung 6 again."""
    hopper, ampere = (at.tma_sass(TMA_EXAMPLE, arch) for arch in ("sm_90", "sm_80"))
    assert hopper.count("UTMALDG") > 0 and hopper.count("UTMASTG") > 0 and hopper.count("HGMMA") > 0
    assert hopper.count("LDG") == hopper.count("STG") == hopper.count("LDGSTS") == hopper.count("UTMACCTL") == 0
    assert ampere.count("UTMALDG") == 0 and ampere.count("LDG") > 0 and ampere.count("HMMA") > 0
    assert hopper.count("MUFU.EX2") > 0   # the scale and log2 e in one multiply, the exponent an exp2
    for tma in RUNGS[-2:]:   # rungs 7 and 8
        assert tma.unavailable_reason(H100) is None
        for gpu in (A100, T4):
            assert tma.unavailable_reason(gpu).endswith("needs tma")


def test_prune_reasons():
    big = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    assert at.triton_prune_reason(big, (4, 32, 4096, 128, 1), H100) is None
    assert "multiple of BLOCK_N" in at.triton_prune_reason(dict(big, BLOCK_M=64, BLOCK_N=128), (1, 1, 64, 64, 0), H100)
    assert "registers spill" in at.triton_prune_reason(dict(big, num_warps=4, BLOCK_N=128), (1, 1, 64, 128, 0), H100)
    assert at.triton_prune_reason(big, (1, 1, 64, 128, 0), T4) == "128 KiB of shared memory > 64 KiB on sm_75"
    assert "16 query rows a warp" in at.triton_prune_reason(dict(big, BLOCK_M=64, BLOCK_N=64), (1, 1, 64, 64, 0), H100)


def test_the_search_reports_in_the_interpreter():
    q, k, v = (torch.randn(1, 2, 24, 64).half() for _ in range(3))
    at.triton_autotuned(q, k, v, True)
    [report] = at.tune_triton([(1, 2, 24, 64, 1)])   # already searched at this key: that search's report
    assert report.problem == "attention" and report.shape == (1, 2, 24, 64, 1)
    assert len(report.timed) == 2 and not report.pruned and not report.failed
    at.triton_tma(q, k, v, True)
    [report] = at.tune_triton([(1, 2, 24, 64, 1)], "triton:7_tma")   # rung 7's search, logged apart from rung 6's
    assert report.tuner == "triton:7_tma" and len(report.timed) == 2 and not report.failed
    at.triton_barrier_pass(q, k, v, True)
    [report] = at.tune_triton([(1, 2, 24, 64, 1)], "triton:8_barrier_pass")   # rung 8's, apart from rung 7's
    assert report.tuner == "triton:8_barrier_pass" and len(report.timed) == 2 and not report.failed
    assert {t["config"]["num_warps"] for t in report.timed} == {8}   # two warpgroups: tiles the pass changes


def test_naive_scores_launch_a_few_heads_at_a_time(monkeypatch):
    """Triton launches nothing, silently, for a grid of 2^31 programs or more (S = 4096, B·H = 128): rung 1
    splits the heads over launches. Here the limit is lowered so that the split shows at interpreter sizes."""
    monkeypatch.setattr(ta, "MAX_PROGRAMS", 300)   # 17² = 289 programs a head: one head per launch
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 17, 64, generator=gen).half() for _ in range(3))
    out = torch.full_like(q, float("nan"))
    ta.naive(q, k, v, True, out=out)
    assert compare(out, at.reference(q, k, v, True)).ok
    with pytest.raises(ValueError, match="S=18: S² = 324 programs"):
        ta.naive(*(torch.randn(1, 1, 18, 64).half() for _ in range(3)), False)


def test_sdpa_anchor_gets_aligned_copies_of_misaligned_views(monkeypatch):
    q = torch.randn(2 * 40 * 64 + 1).half()[1:].view(1, 2, 40, 64)  # 2 bytes into its allocation
    assert q.data_ptr() % 16 == 2
    sdpa, offsets = at.F.scaled_dot_product_attention, []
    monkeypatch.setattr(at.F, "scaled_dot_product_attention",
                        lambda q, k, v, is_causal: offsets.append(q.data_ptr() % 16) or sdpa(q, k, v, is_causal=is_causal))
    assert compare(at.sdpa(q, q, q, True), at.reference(q, q, q, True)).ok  # (sdpa_flash's backend is CUDA only)
    assert offsets == [0]


@pytest.mark.parametrize("rung", [r for r in at.PROBLEM.rungs if r.backend == "torch"], ids=lambda r: r.label)
def test_anchors_give_an_empty_output_at_s_0(rung, monkeypatch):
    monkeypatch.setattr(at.F, "scaled_dot_product_attention", None)  # SDPA is not called (it raises a TypeError)
    empty = torch.empty(1, 2, 0, 64).half()
    assert rung.run(empty, empty, empty, False).shape == (1, 2, 0, 64)


def test_sdpa_anchor_is_timed_without_its_copy_into_out(monkeypatch):
    """SDPA has no `out`: given one, it copies its result in (a check's poisoned output is filled); timed, it
    returns its own output, so the anchor's time is its kernels' alone."""
    q = torch.randn(1, 2, 40, 64).half()
    result = at.F.scaled_dot_product_attention(q, q, q, is_causal=False)
    monkeypatch.setattr(at.F, "scaled_dot_product_attention", lambda q, k, v, is_causal: result)
    rung = at.PROBLEM.rung("torch", "sdpa")
    out = torch.full_like(q, float("nan"))
    assert rung.run(q, q, q, False, out=out) is out and torch.equal(out, result)
    assert rung.own_output and rung.timed_call((q, q, q, False), out)() is result
    cuda_rung = at.PROBLEM.rung("cuda", "11_fast_exp2")
    assert not cuda_rung.own_output


# Rung 8 at D128 on rung 7's recorded H100 winner there (two warpgroups): each build compiled once for the tests below.
PASS_TILE = dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)


@pytest.fixture(scope="module")
def rung8_d128():
    """(rung 7's build, rung 8's) of flash_tma_kernel at PASS_TILE, D128, for sm_90a: Triton's compiled kernels."""
    return at.tma_compile(PASS_TILE, "sm_90a", 128), at.tma_compile(PASS_TILE, "sm_90a", 128, ptx_pass=True)


def test_rung_8_is_rung_7_through_the_pass_which_must_apply(rung8_d128):
    """Rung 8 compiled for sm_90a at D128 with 8 warps under the Triton installed (CI: the floor, 3.6, and the newest):
    the pass must find rung 7's loop and change it, or this fails (a Triton whose loop it no longer matches: rung 8
    would be rung 7's binary). The key loop keeps one CTA barrier of its three (Triton 3.6) or five (3.9), split into
    BAR.SYNC (the warps that issue the copies) and BAR.ARV (the others) on named barriers 1 and 2, in both key loops;
    the products and the copies unchanged; rung 7's build does not go through the pass."""
    stock, through = rung8_d128
    applied = ptx.applied(through)
    assert applied is not None and applied["split"] > 0 and applied["dropped"] > 0, applied
    assert applied["name"] == "split_refill_barriers" and applied["sha256"] == ptx.version()
    assert ptx.applied(stock) is None and stock.hash != through.hash   # cached apart
    stock, split = (sass.compiled_sass(k, "sm_90a") for k in rung8_d128)
    assert stock.count("BAR.ARV") == 0 and split.count("BAR.ARV") == 4
    assert split.count("BAR.SYNC") < stock.count("BAR.SYNC")
    # (barriers the pass dropped from the PTX, BAR.SYNC fewer in the SASS) under the Tritons it was written for
    fewer = {"3.6": (12, 10), "3.9": (22, 20)}.get(triton.__version__[:3])
    if fewer is not None:
        assert (applied["dropped"], stock.count("BAR.SYNC") - split.count("BAR.SYNC")) == fewer
    assert split.count("HGMMA") == stock.count("HGMMA") and split.count("UTMALDG") == stock.count("UTMALDG")
    assert split.count("LDL") == split.count("STL") == 0


def test_rung_8_does_not_build_where_the_pass_changes_nothing():
    """One warpgroup (4 warps) has no lockstep to end: the pass leaves its PTX as compiled, and rung 8 refuses it
    (its search would rule such a configuration out, PassDidNotApply being a PTXASError; its space has none)."""
    with pytest.raises(ptx.PassDidNotApply, match="left its PTX as compiled"):
        at.tma_compile(dict(PASS_TILE, num_warps=4, BLOCK_N=64), "sm_90a", 128, ptx_pass=True)
    # nor in 4 stages: three refills in flight, which its two named barriers in turn cannot keep apart
    with pytest.raises(ptx.PassDidNotApply, match="more than 3 stages"):
        at.tma_compile(dict(PASS_TILE, num_stages=4, BLOCK_N=64), "sm_90a", 128, ptx_pass=True)
    assert at.PASS_SPACE["num_warps"] == [8] and max(at.PASS_SPACE["num_stages"]) == ptx.MAX_STAGES


def test_an_edited_pass_compiles_anew(rung8_d128, monkeypatch):
    """The binary's cache key holds the pass's content on every Triton: rung 8's PTX_PASS constexpr (ptx.tag()), which
    Triton 3.6 needs (it asks the hook for no key), and on 3.9 the hook's key as well. Another content hash: another
    key, so a compile, which the metadata shows."""
    monkeypatch.setattr(ptx, "version", lambda: "0123456789abcdef")
    edited = at.tma_compile(PASS_TILE, "sm_90a", 128, ptx_pass=True)
    assert edited.hash != rung8_d128[1].hash and ptx.applied(edited)["sha256"] == "0123456789abcdef"
