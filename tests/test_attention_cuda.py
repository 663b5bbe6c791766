"""The CUDA attention ladder without a GPU: each rung compiled with NVRTC for sm_75/80/90 (rung 7: sm_90a) and both
head dimensions (no spills), its signature in the SASS, and the launchers' checks, which must fail on a CPU
tensor with a ValueError before anything touches CUDA."""
import pytest
import torch

import kernels.attention as at
from kernels.cuda import attention as cuda_attention
from ladder import sass
from ladder.runtime import cuda, hardware, tma
from ladder.lessons.l04e_attention_hopper import setmaxnreg_split
from ladder.lessons.l04f_attention_softmax_instructions import path_to_next_issue
from ladder.runtime.cuda import CompileError
from ladder.runtime.hardware import GPU
from ladder.runner import unavailable

CUDA_RUNGS = [r for r in at.PROBLEM.rungs if r.backend == "cuda"]
HEAD_DIMS = (64, 128)


def defines(rung: str, head_dim: int) -> dict | None:
    """What the launcher passes: rung 1 takes D at run time, rung 2 HEAD_DIM, rungs 3-9 HEAD_DIM and tiles."""
    return {"1_naive": None, "2_coalesced": dict(HEAD_DIM=head_dim),
            "3_fused": dict(HEAD_DIM=head_dim, **cuda_attention.FUSED_TILES[head_dim]),
            "4_tensor_core": dict(HEAD_DIM=head_dim, **cuda_attention.TENSOR_CORE),
            "5_pipelined": dict(HEAD_DIM=head_dim, **cuda_attention.PIPELINED),
            "6_autotuned": dict(HEAD_DIM=head_dim, **cuda_attention.PIPELINED),
            **{name: dict(HEAD_DIM=head_dim, **tiles[head_dim])
               for name, (tiles, _, _) in cuda_attention.HOPPER.items()}}[rung]


def compiled(rung: str, arch: str, head_dim: int = 64) -> sass.Sass:
    return sass.cuda_sass(f"attention/{rung}.cu", arch, defines(rung, head_dim))


def test_the_cuda_ladder_comes_first():
    assert [r.name for r in CUDA_RUNGS] == ["1_naive", "2_coalesced", "3_fused", "4_tensor_core", "5_pipelined",
                                            "6_autotuned", "7_wgmma_tma", "8_warp_specialized", "9_pingpong",
                                            "10_intra_overlap", "11_fast_exp2", "12_three_consumers", "13_persistent",
                                            "14_critical_path", "15_autotuned"]
    assert at.PROBLEM.rungs[:15] == CUDA_RUNGS   # before the Triton rungs of the same names
    assert [r.slow for r in CUDA_RUNGS] == [True, True] + [False] * 13
    assert all(r.source == f"kernels/cuda/attention/{r.name}.cu" for r in CUDA_RUNGS)


# rung 1 takes D as an argument: one build; causal is an argument of every rung, not a define. Rung 7 (Hopper only)
# has tests of its own below.
RUNGS = [r.name for r in CUDA_RUNGS if r.needs != "wgmma"]
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
    assert at.prune_reason(cuda_attention.PIPELINED, H100, 128) is None
    assert cuda_attention.flash_shared_bytes(cuda_attention.PIPELINED, 128, H100) == 2 * 136 * (64 + 2 * 2 * 64)


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
        cuda_attention._grid_fits(BH=70000)
    cuda_attention._grid_fits(S=65535, BH=1)


# ------------------------------------------------------------- rung 7 (sm_90a): wgmma and the TMA

@pytest.fixture(scope="module", params=HEAD_DIMS, ids=lambda d: f"D{d}")
def wgmma_tma(request):
    """(head_dim, SASS, resource usage) of rung 7, compiled once per head dimension."""
    D = request.param
    cubin = cuda.compile_cubin("attention/7_wgmma_tma.cu", "sm_90a", tuple(sorted(defines("7_wgmma_tma", D).items())))
    return D, sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)


def test_wgmma_rung_multiplies_on_hgmma_and_loads_with_the_tma(wgmma_tma):
    D, s, usage = wgmma_tma
    BN = cuda_attention.WGMMA_TMA[D]["BLOCK_N"]
    assert list(s.functions) == ["attention"]
    assert s.count("HGMMA") == D // 16 + BN // 16      # S = Q·Kᵀ (k16 steps over D), then P·V (over the keys)
    assert s.count("HMMA") == s.count("LDSM") == 0     # no mma.sync, no ldmatrix: wgmma reads shared memory itself
    assert s.count("UTMALDG") == 3 * D // 64           # Q, K, V: a box per 64 columns, from one thread
    assert s.count("SYNCS.PHASECHK") > 0 and s.count("SYNCS.ARRIVE") > 0  # mbarrier waits and arrivals
    assert s.count("LDGSTS") == s.count("LDG") == 0    # every load is the TMA's
    assert s.count("MUFU.EX2") > 0 and s.count("SHFL") > 0  # rung 6's softmax, on the wgmma accumulators
    assert s.count("BAR") == 1                         # one __syncthreads, after the barriers' setup
    # each product's wgmmas back to back: one fence and one wait apiece (ptxas adds fences when registers a wgmma
    # reads are written between them, note C7519, and serializes them when accumulators are read, C7514)
    assert s.count("WARPGROUP.ARRIVE") == s.count("WARPGROUP.DEPBAR") == 2
    assert s.count("LDL") == s.count("STL") == 0 and usage["stack_bytes"] == usage["local_bytes"] == 0


def test_wgmma_rung_fits_two_or_three_blocks_per_sm(wgmma_tma):
    """The design's overlap (one block's softmax beside another's wgmma) needs several blocks on an SM: three at
    D=64, two at D=128, by registers and by shared memory (an H100's 64 Ki registers and 228 KiB, 1 KiB of it
    reserved per block)."""
    D, _, usage = wgmma_tma
    blocks = {64: 3, 128: 2}[D]
    warps = cuda_attention.WGMMA_TMA_THREADS // 32
    registers_per_warp = -(-usage["registers"] * 32 // 256) * 256  # allocated per warp, 256 at a time
    assert blocks * warps * registers_per_warp <= 64 * 1024, usage
    assert blocks * (cuda_attention.wgmma_tma_shared_bytes(D) + usage["shared_bytes"] + 1024) <= 228 * 1024


@pytest.mark.parametrize("name", ["7_wgmma_tma", "8_warp_specialized", "9_pingpong", "10_intra_overlap",
                                  "11_fast_exp2", "12_three_consumers", "13_persistent", "14_critical_path",
                                  "15_autotuned"])
def test_wgmma_rungs_are_hopper_only(name):
    with pytest.raises(CompileError, match="sm_90a"):
        sass.cuda_sass(f"attention/{name}.cu", "sm_90", defines(name, 64))
    rung = at.PROBLEM.rung("cuda", name)
    t4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, hardware.datasheet_for("T4"))
    h100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, hardware.datasheet_for("H100"))
    assert rung.unavailable_reason(t4) == "N/A on this GPU (Tesla T4, sm_75): needs wgmma"
    for arch in ("sm_75", "sm_80"):  # KERNEL_LADDER_EMULATE: N/A, not a crash
        assert rung.unavailable_reason(hardware.emulate(h100, arch)).endswith("needs wgmma")
    assert rung.unavailable_reason(h100) is None


def test_wgmma_rung_maps_each_head_as_one_matrix_of_a_stack():
    """A 3-D tensor map (head, row, column): a box past a head's last row reads zeros, not the next head."""
    q = torch.empty(2 * 3, 100, 128).half()
    assert tma.layout(q, (64, 64)) == dict(data_type=6, dims=(128, 100, 6), row_stride=256, box=(64, 64), swizzle=3,
                                           matrix_stride=100 * 256)
    with pytest.raises(ValueError, match="3-D stack"):
        tma.layout(q.view(1, 6, 100, 128), (64, 64))
    assert cuda_attention.wgmma_tma_shared_bytes(64) == 2 * 64 * (64 + 2 * 2 * 128) + 1024


# ------------------------------------------------------------- rung 8 (sm_90a): warp specialization

OVERLAPPING = ("10_intra_overlap", "11_fast_exp2")   # rung 10's loop, and rung 11's on it


@pytest.fixture(scope="module", params=[(name, D) for name in ("8_warp_specialized", "9_pingpong") + OVERLAPPING
                        for D in HEAD_DIMS],
                ids=lambda p: f"{p[0]}-D{p[1]}")
def warp_specialized(request):
    """(head_dim, SASS, resource usage, rung, tiles) of rungs 8-11, compiled once per head dimension."""
    name, D = request.param
    cubin = cuda.compile_cubin(f"attention/{name}.cu", "sm_90a", tuple(sorted(defines(name, D).items())))
    tiles = cuda_attention.HOPPER[name][0][D]
    return D, sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin), name, tiles


def test_warp_specialized_rung_moves_registers_to_its_two_consumer_warpgroups(warp_specialized):
    """Rung 7's instructions (both products on HGMMA, Q, K and V by UTMALDG, mbarriers) plus the two setmaxnreg;
    nothing spilled; one block's registers (as launched, before setmaxnreg moves them) and shared memory fit an
    SM (an H100's 64 Ki registers and 228 KiB, 1 KiB of it reserved per block)."""
    D, s, usage, name, tiles = warp_specialized
    BN = tiles["BLOCK_N"]
    copies = 2 if name in OVERLAPPING else 1    # rung 10: the first S and the last P·V outside the loop too
    assert s.count("USETMAXREG") == 2                  # the producer's decrease, the consumers' increase
    assert s.count("HGMMA") == copies * (D // 16 + BN // 16)
    assert s.count("UTMALDG") == 3 * D // 64           # Q's box is 128 rows: still one copy a 64-column block
    assert s.count("SYNCS.PHASECHK") > 0 and s.count("SYNCS.ARRIVE") > 0
    assert s.count("HMMA") == s.count("LDSM") == s.count("LDGSTS") == 0
    assert s.count("LDL") == s.count("STL") == 0 and usage["stack_bytes"] == usage["local_bytes"] == 0
    assert usage["registers"] * cuda_attention.WARP_SPECIALIZED_THREADS <= 64 * 1024, usage
    shared = cuda_attention.wgmma_tma_shared_bytes(D, tiles, cuda_attention.WARP_SPECIALIZED_ROWS)
    assert shared + usage["shared_bytes"] + 1024 <= 228 * 1024


def test_pingpong_rung_takes_turns_on_named_barriers(warp_specialized):
    """Rung 9 adds its turns to rung 8: a wait (BAR.SYNC, beside __syncthreads') and the passes (BAR.ARV: the
    first, before the loop, and one a tile); rung 8 has neither."""
    D, s, _, name, _ = warp_specialized
    turns = {"8_warp_specialized": (1, 0), "9_pingpong": (2, 2)}.get(name, (4, 4))
    assert (s.count("BAR.SYNC"), s.count("BAR.ARV")) == turns   # rung 10: its first and last turns outside the loop


def test_intra_overlap_rung_waits_for_the_scores_alone(warp_specialized):
    """Rung 10's loop issues S of tile t and P·V of tile t - 1 behind one fence and waits twice (wait_group 1:
    S alone, then 0), plus the first S's fence and wait and the last P·V's; rungs 8 and 9 fence and wait once a
    product. A pipeline that ptxas serialized (note C7514) would fence and wait at every HGMMA."""
    D, s, _, name, _ = warp_specialized
    fences_waits = (3, 4) if name in OVERLAPPING else (2, 2)
    assert (s.count("WARPGROUP.ARRIVE"), s.count("WARPGROUP.DEPBAR")) == fences_waits


def test_fast_exp2_rung_exponentiates_on_mufu_alone(warp_specialized):
    """Each softmax (the first tile's, and the loop's) takes BLOCK_N / 2 exponentials a thread for its scores and
    2 for its rows' rescale factors, each one MUFU.EX2. exp2f (rungs 8-10) guards each with a range check
    (FSETP.GEU) and two predicated FMULs; rung 11's ex2.approx.ftz has none, so it issues fewer instructions."""
    D, s, _, name, tiles = warp_specialized
    copies = 2 if name in OVERLAPPING else 1
    exps = copies * (tiles["BLOCK_N"] // 2 + 2)
    assert s.count("MUFU.EX2") == exps
    assert s.count("FSETP.GEU") == (0 if name == "11_fast_exp2" else exps)
    if name == "11_fast_exp2":
        rung10 = sass.cuda_sass("attention/10_intra_overlap.cu", "sm_90a", defines("10_intra_overlap", D))
        assert sum(rung10.opcodes().values()) - sum(s.opcodes().values()) >= 2 * exps


# ------------------------------------------------------------- rung 12 (sm_90a): three consumer warpgroups at D64

def test_three_consumers_rung_adds_a_warpgroup_at_d64_only():
    """At D64 rung 12 is rung 11's loop for three consumer warpgroups: 512 threads, 192 queries a block; setmaxnreg
    lifts the consumers to 160 registers, not 240 (3 x 128 x 160 + 128 x 24 fits the SM's 64 Ki), with nothing
    spilled; the same products and turns a warpgroup. At D128 it compiles to rung 11's SASS, instruction for
    instruction."""
    cubin = cuda.compile_cubin("attention/12_three_consumers.cu", "sm_90a",
                               tuple(sorted(defines("12_three_consumers", 64).items())))
    s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
    rung11 = compiled("11_fast_exp2", "sm_90a", 64)
    assert cuda_attention.hopper_launch("12_three_consumers", 64)[1:] == (192, 512)
    assert (cuda_attention.hopper_launch("12_three_consumers", 128)[1:]
            == cuda_attention.hopper_launch("11_fast_exp2", 128)[1:] == (128, 384))
    assert setmaxnreg_split(s.text) == (24, 160) and setmaxnreg_split(rung11.text) == (24, 240)
    assert 3 * 128 * 160 + 128 * 24 <= 64 * 1024 and usage["registers"] * 512 <= 64 * 1024
    assert s.count("LDL") == s.count("STL") == 0 and usage["local_bytes"] == 0
    for op in ("HGMMA", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR"):
        assert s.count(op) == rung11.count(op), op
    assert compiled("12_three_consumers", "sm_90a", 128).text == compiled("11_fast_exp2", "sm_90a", 128).text


# ------------------------------------------------------------- rung 13 (sm_90a): a persistent grid

@pytest.mark.parametrize("D", HEAD_DIMS)
def test_persistent_rung_adds_the_item_loop_and_nothing_else(D):
    """Rung 13 is rung 12 walking items: the same products, exponentials, turns and copies, nothing spilled; one
    barrier more (q_empty: initialized, waited for by the producer before it replaces Q, arrived at by the
    consumers once an item's last S has landed: after the first S when that is the only one, else in the loop)."""
    cubin = cuda.compile_cubin("attention/13_persistent.cu", "sm_90a", tuple(sorted(defines("13_persistent", D).items())))
    s, usage, rung12 = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin), compiled("12_three_consumers",
                                                                                                "sm_90a", D)
    assert cuda_attention.hopper_launch("13_persistent", D) == cuda_attention.hopper_launch("12_three_consumers", D)
    for op in ("HGMMA", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR", "UTMALDG", "USETMAXREG", "STG"):
        assert s.count(op) == rung12.count(op), op
    assert s.count("SYNCS.EXCH") == rung12.count("SYNCS.EXCH") + 1       # q_empty's init
    assert s.count("SYNCS.ARRIVE") == rung12.count("SYNCS.ARRIVE") + 2   # the consumers' two arrives on it
    assert s.count("SYNCS.PHASECHK") > rung12.count("SYNCS.PHASECHK")    # the producer's wait on it
    assert s.count("LDL") == s.count("STL") == 0 and usage["local_bytes"] == 0


# ------------------------------------------------------------- rung 14 (sm_90a): the softmax's critical path

@pytest.mark.parametrize("D", HEAD_DIMS)
def test_critical_path_rung_moves_the_rescale_and_adds_nothing_else(D):
    """Rung 14 is rung 13 with O's rescale moved from the path between S landing and the next S (path_to_next_issue)
    to the turn at the tensor cores: the same products, exponentials, turns, copies and barriers; one wgmma fence more
    (before P·V, O written again); fewer FMULs on the path and no fewer in the kernel; nothing spilled."""
    cubin = cuda.compile_cubin("attention/14_critical_path.cu", "sm_90a",
                               tuple(sorted(defines("14_critical_path", D).items())))
    s, usage, rung13 = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin), compiled("13_persistent",
                                                                                                "sm_90a", D)
    assert cuda_attention.hopper_launch("14_critical_path", D) == cuda_attention.hopper_launch("13_persistent", D)
    for op in ("HGMMA", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR", "UTMALDG", "USETMAXREG", "STG",
               "SYNCS.EXCH", "SYNCS.ARRIVE"):
        assert s.count(op) == rung13.count(op), op
    assert s.count("WARPGROUP.ARRIVE") == rung13.count("WARPGROUP.ARRIVE") + 1
    assert s.count("FMUL") >= rung13.count("FMUL")
    path, path13 = path_to_next_issue(s.text), path_to_next_issue(rung13.text)
    assert path.count("FMUL") < path13.count("FMUL") and len(path) < len(path13)
    assert path.count("MUFU.EX2") == path13.count("MUFU.EX2") == 64 + 2   # a score each, the two rows' alphas
    assert s.count("LDL") == s.count("STL") == 0 and usage["local_bytes"] == 0


def test_persistent_grid_is_one_block_an_sm_without_a_mask_and_a_block_an_item_with_one():
    assert cuda_attention.persistent_grid(4096, False, 132) == 132
    assert cuda_attention.persistent_grid(100, False, 132) == 100     # fewer items than SMs: a block each
    assert cuda_attention.persistent_grid(4096, True, 132) == 4096    # causal: the hardware's scheduler balances them
    assert cuda_attention.PERSISTENT == {"13_persistent", "14_critical_path", "15_autotuned"}


# ------------------------------------------------------------- rung 15 (sm_90a): rung 14, searched

def test_hopper_search_holds_rung_14_and_prunes_what_does_not_fit():
    """Rung 14's launch is a point of rung 15's space (what runs unsearched), compiled to rung 14's SASS; a
    configuration's launch follows its consumer warpgroups; shared memory past the block's limit is pruned."""
    h100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, hardware.datasheet_for("H100"))
    t4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, hardware.datasheet_for("T4"))
    for D in HEAD_DIMS:
        tuner, default = at.HOPPER_TUNERS[D], at.rung14_config(D)
        assert default in tuner.configs() and tuner.default(h100) == default and tuner.prune(default, h100) is None
        assert cuda_attention.autotuned_launch(default) == (
            dict(default, CONSUMER_REGISTERS={64: 160, 128: 240}[D]), *cuda_attention.hopper_launch("14_critical_path", D)[1:])
        assert tuner.prune(default, t4) == "no wgmma on sm_75"
    assert cuda_attention.autotuned_launch(dict(CONSUMERS=2, BLOCK_N=64, STAGES=4))[1:] == (128, 384)
    assert at.hopper_prune_reason(dict(CONSUMERS=2, BLOCK_N=128, STAGES=4), h100, 128) == (
        "289 KiB of shared memory > 227 KiB")
    for D in HEAD_DIMS:
        rung15 = sass.cuda_sass("attention/15_autotuned.cu", "sm_90a",
                                dict(HEAD_DIM=D, **cuda_attention.autotuned_launch(at.rung14_config(D))[0]))
        assert rung15.opcodes() == compiled("14_critical_path", "sm_90a", D).opcodes()


# ------------------------------------------------------------- rung 15 as ladder.ops launches it

def test_the_ops_heads_map_takes_a_models_views_in_the_order_of_their_strides():
    """(D, H, S, B) for the views of one (B, S, 3, H, D) projection, (D, S, H, B) for contiguous heads; a box of
    rows of one head either way, so the kernel's tiles land in shared memory alike."""
    packed = torch.empty(2, 100, 3, 4, 64).half().permute(2, 0, 3, 1, 4)[0]   # q's view: (B, H, S, D)
    spec = tma.heads_layout(packed, 128)
    assert spec["heads_inner"] and spec["dims"] == (64, 4, 100, 2) and spec["box"] == (64, 1, 128)
    assert spec["strides"] == (64 * 2, 3 * 4 * 64 * 2, 100 * 3 * 4 * 64 * 2)
    contiguous = torch.empty(2, 4, 100, 128).half()
    spec = tma.heads_layout(contiguous, 64)
    assert not spec["heads_inner"] and spec["dims"] == (128, 100, 4, 2) and spec["box"] == (64, 64)
    with pytest.raises(ValueError, match="D contiguous"):
        tma.heads_layout(contiguous.transpose(2, 3), 64)
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        tma.heads_layout(torch.empty(1, 2, 10, 68).half()[..., :64], 64)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_ops_kernel_is_rung_15_with_strided_maps_and_the_log_sum_exp(head_dim):
    """op_attention.cu compiles without spills, loads through 4-D maps, stores the log-sum-exp; rung 15's own file
    (what the lessons show) has none of it."""
    defines = dict(HEAD_DIM=head_dim, **cuda_attention.autotuned_launch(at.rung14_config(head_dim))[0])
    op = sass.cuda_sass("attention/hopper_overlays/op_attention.cu", "sm_90a", defines)
    assert op.count("LDL") == op.count("STL") == 0 and op.count("UTMALDG") > 0
    source = cuda.source("attention/hopper_overlays/op_attention.cu")
    assert "cp.async.bulk.tensor.4d" in source and "lse + (size_t)head * S" in source
    assert "OP_LAYOUT" not in cuda.resolve("attention/15_autotuned.cu").read_text()
