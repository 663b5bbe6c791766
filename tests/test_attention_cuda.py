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
    """What the launcher passes: rung 1 takes D at run time, rung 2 HEAD_DIM, rungs 3-6 HEAD_DIM and tiles."""
    return {"1_naive": None, "2_coalesced": dict(HEAD_DIM=head_dim),
            "3_fused": dict(HEAD_DIM=head_dim, **at.FUSED_TILES[head_dim]),
            "4_tensor_core": dict(HEAD_DIM=head_dim, **at.TENSOR_CORE),
            "5_pipelined": dict(HEAD_DIM=head_dim, **at.PIPELINED),
            "6_autotuned": dict(HEAD_DIM=head_dim, **at.PIPELINED)}[rung]


def compiled(rung: str, arch: str, head_dim: int = 64) -> sass.Sass:
    return sass.cuda_sass(f"attention/{rung}.cu", arch, defines(rung, head_dim))


def test_the_cuda_ladder_comes_first():
    assert [r.name for r in CUDA_RUNGS] == ["1_naive", "2_coalesced", "3_fused", "4_tensor_core", "5_pipelined",
                                            "6_autotuned"]
    assert at.PROBLEM.rungs[:6] == CUDA_RUNGS   # before the Triton rungs of the same names
    assert [r.slow for r in CUDA_RUNGS] == [True, True, False, False, False, False]
    assert all(r.source == f"kernels/cuda/attention/{r.name}.cu" for r in CUDA_RUNGS)


# rung 1 takes D as an argument: one build; causal is an argument of every rung, not a define
RUNGS = [r.name for r in CUDA_RUNGS]
BUILDS = [("1_naive", 64)] + [(rung, d) for rung in RUNGS[1:] for d in HEAD_DIMS]


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("rung, head_dim", BUILDS, ids=lambda x: str(x))
def test_every_rung_compiles_without_spills(rung, head_dim, arch):
    s = compiled(rung, arch, head_dim)
    assert s.count("LDL") == s.count("STL") == 0   # no local memory: the per-thread arrays stay in registers
    assert s.count("HGMMA") == 0                     # mma.sync at most: wgmma needs warpgroups
    assert (s.count("HMMA") > 0) == (rung >= "4")   # CUDA cores up to rung 3, tensor cores from rung 4


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


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_tensor_core_rung_keeps_s_and_p_in_registers(head_dim, arch):
    s = compiled("4_tensor_core", arch, head_dim)
    assert list(s.functions) == ["attention"]
    assert s.count("LDSM") > 0                       # ldmatrix feeds the mma fragments
    assert s.count("FFMA") < s.count("HMMA")         # the products are on tensor cores now (rung 3: thousands)
    assert s.count("STS") == s.count("LDG")          # shared memory holds only copied tiles: P never goes there
    assert s.count("SHFL") > 0 and s.count("MUFU.EX2") > 0 and s.count("LDGSTS") == 0
    assert s.global_load_bits() == {128}


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_pipelined_rungs_copy_with_cp_async_from_sm_80(head_dim, arch):
    for rung in ("5_pipelined", "6_autotuned"):
        s = compiled(rung, arch, head_dim)
        assert s.count("HMMA") > 0 and s.count("LDSM") > 0
        if arch == "sm_75":  # no cp.async: rung 4's loads
            assert s.count("LDGSTS") == 0 and s.global_load_bits() == {128}
        else:
            assert s.count("LDGSTS") > 0 and s.count("LDG") == s.count("STS") == 0
            assert s.count("BAR", "attention") == 1      # one barrier per tile (rung 4: two)
    assert set(compiled("6_autotuned", arch, head_dim).functions) == {"attention", "attention_heavy_first"}


class _H100:
    """What pruning asks of a GPU, for an H100 (no GPU needed)."""
    smem_per_block_bytes = 227 * 1024

    def has(self, feature):
        return True


H100 = _H100()


def test_search_space_prunes_with_reasons():
    reasons = {D: [at.prune_reason(c, H100, D) for c in at.TUNERS[D].configs()] for D in HEAD_DIMS}
    assert sum(r is None for r in reasons[64]) == 16 and sum(r is None for r in reasons[128]) == 13
    assert any("16-row tiles" in r for r in reasons[64] if r)
    assert any("fragment registers" in r for r in reasons[128] if r)
    assert any("KiB of shared memory" in r for r in reasons[128] if r)
    assert at.prune_reason(at.PIPELINED, H100, 128) is None
    assert at.flash_shared_bytes(at.PIPELINED, 128, H100) == 2 * 136 * (64 + 2 * 2 * 64)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_searched_configuration_compiles_without_spills(head_dim):
    for c in at.TUNERS[head_dim].configs():
        if at.prune_reason(c, H100, head_dim) is None:
            s = sass.cuda_sass("attention/6_autotuned.cu", "sm_90", dict(HEAD_DIM=head_dim, **c))
            assert s.count("LDL") == s.count("STL") == 0, c


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
