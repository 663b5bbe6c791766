"""The CUDA attention ladder without a GPU: each rung compiled with NVRTC for sm_75/80/90 and both head
dimensions (no spills), its signature in the SASS, and the launchers' checks, which must fail on a CPU
tensor with a ValueError before anything touches CUDA."""
import pytest
import torch

import kernels.attention as at
from ladder import sass
from ladder.cuda import CompileError
from ladder.runner import unavailable

CUDA_RUNGS = [r for r in at.PROBLEM.rungs if r.backend == "cuda"]
HEAD_DIMS = (64, 128)


def defines(rung: str, head_dim: int) -> dict | None:
    """What the launcher passes: rung 1 takes D at run time, rung 2 HEAD_DIM, rung 3 HEAD_DIM and its tiles."""
    return {"1_naive": None, "2_coalesced": dict(HEAD_DIM=head_dim),
            "3_fused": dict(HEAD_DIM=head_dim, **at.FUSED_TILES[head_dim])}[rung]


def compiled(rung: str, arch: str, head_dim: int = 64) -> sass.Sass:
    return sass.cuda_sass(f"attention/{rung}.cu", arch, defines(rung, head_dim))


def test_the_cuda_ladder_comes_first():
    assert [r.name for r in CUDA_RUNGS] == ["1_naive", "2_coalesced", "3_fused"]
    assert at.PROBLEM.rungs[:3] == CUDA_RUNGS   # before the Triton rungs of the same names
    assert [r.slow for r in CUDA_RUNGS] == [True, True, False]
    assert all(r.source == f"kernels/cuda/attention/{r.name}.cu" for r in CUDA_RUNGS)


# rung 1 takes D as an argument: one build; causal is an argument of every rung, not a define
BUILDS = [("1_naive", 64)] + [(rung, d) for rung in ("2_coalesced", "3_fused") for d in HEAD_DIMS]


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("rung, head_dim", BUILDS, ids=lambda x: str(x))
def test_every_rung_compiles_without_spills(rung, head_dim, arch):
    s = compiled(rung, arch, head_dim)
    assert s.count("LDL") == s.count("STL") == 0   # no local memory: the per-thread arrays stay in registers
    assert s.count("HMMA") == s.count("HGMMA") == 0  # CUDA cores only, up to rung 3


@pytest.mark.parametrize("arch", sass.ARCHS)
def test_naive_is_three_kernels_on_global_memory(arch):
    s = compiled("1_naive", arch)
    assert set(s.functions) == {"scores", "softmax", "pv"}
    assert s.global_load_bits("scores") == {16}      # one fp16 of Q and of K at a time
    assert s.global_load_bits("pv") == {16, 32}      # one fp32 of P, one fp16 of V
    assert s.count("LDS") == s.count("STS") == s.count("BAR") == s.count("SHFL") == 0
    assert s.count("MUFU.EX2", "softmax") > 0 and s.count("MUFU.EX2", "scores") == s.count("MUFU.EX2", "pv") == 0


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_coalesced_reduces_across_the_warp_with_shuffles(head_dim, arch):
    s = compiled("2_coalesced", arch, head_dim)
    assert set(s.functions) == {"scores", "softmax", "pv"}
    assert s.count("SHFL", "scores") > 0 and s.count("SHFL", "softmax") > 0   # the butterflies
    assert s.count("SHFL", "pv") == 0
    assert s.global_load_bits("scores") == {32}      # q and K rows read as half2 along D
    assert s.count("LDS") == s.count("STS") == s.count("BAR") == 0   # still no shared memory


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_fused_is_one_kernel_with_tiles_in_shared_memory(head_dim, arch):
    s = compiled("3_fused", arch, head_dim)
    assert list(s.functions) == ["attention"]        # the point of the rung: S and P never leave the chip
    assert s.count("LDS") > 0 and s.count("STS") > 0 and s.count("BAR") > 0
    assert s.count("FFMA") > 0 and s.count("MUFU.EX2") > 0 and s.count("SHFL") > 0
    assert s.global_load_bits() == {128}             # Q, K, V tiles copied as 16-byte vectors
    # both products read shared memory through wide loads: several FMAs per LDS
    assert s.count("FFMA") / s.count("LDS") >= 4


def test_fused_refuses_tiles_over_48_kib_of_static_shared_memory():
    with pytest.raises(CompileError, match="over 48 KiB"):
        sass.cuda_sass("attention/3_fused.cu", "sm_80", dict(HEAD_DIM=128, BLOCK_M=64, BLOCK_N=32))


def test_cuda_rungs_say_why_they_do_not_run_here_and_refuse_cpu_tensors():
    q = torch.randn(1, 2, 8, 64).half()
    for rung in CUDA_RUNGS:
        assert "needs a GPU" in unavailable(rung)
        with pytest.raises(ValueError, match="q is on cpu"):
            rung.run(q, q, q, False)
        with pytest.raises(ValueError, match="q must be torch.float16"):
            rung.run(q.float(), q, q, True)
        with pytest.raises(ValueError, match="must have 4 dimension"):
            rung.run(q[0], q[0], q[0], False)


def test_grid_dimensions_are_checked():
    with pytest.raises(ValueError, match="BH=70000 blocks"):
        at._grid_fits(BH=70000)
    at._grid_fits(S=65535, BH=1)
