"""The CUDA matmul ladder without a GPU: each rung's signature in its SASS (compiled with NVRTC for
sm_75/80/90, and sm_90a for wgmma and TMA), the launchers' checks, rung 8's tensor-map rules, rungs 9-10's grids,
the autotuner's pruning and its reports."""
import re
from collections import Counter

import pytest
import torch

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder import autotune, sass
from ladder.runtime import cuda, tma
from ladder.runtime.cuda import CompileError
from ladder.runtime.hardware import GPU
from ladder.lessons import l06_shipping_a_kernel
from ladder.runner import check_rung, unavailable

H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 50 << 20, 227 << 10, 80 << 30, None)
T4 = GPU("Tesla T4", (7, 5), 40, 4 << 20, 64 << 10, 16 << 30, None)


def compiled(rung: str, arch: str, defines=None) -> sass.Sass:
    return sass.cuda_sass(f"matmul/{rung}.cu", arch, defines)


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("rung", ["1_naive", "2_coalesced"])
def test_naive_and_coalesced_use_only_global_memory(rung, arch):
    s = compiled(rung, arch)
    assert s.count("LDG") > 0 and s.global_load_bits() == {16}  # one fp16 at a time
    assert s.count("LDS") == s.count("STS") == s.count("BAR") == s.count("HMMA") == 0


@pytest.mark.parametrize("arch", sass.ARCHS)
def test_tiled_rungs_use_shared_memory_and_barriers(arch):
    tiled, blocked = compiled("3_smem_tiled", arch), compiled("3b_register_blocked", arch)
    for s in (tiled, blocked):
        assert s.count("LDS") > 0 and s.count("STS") > 0 and s.count("BAR") > 0 and s.count("HMMA") == 0
    # register blocking: many more FMAs per shared-memory load
    assert tiled.count("FFMA") / tiled.count("LDS") < 1
    assert blocked.count("FFMA") / blocked.count("LDS") >= 8


@pytest.mark.parametrize("arch", sass.ARCHS)
def test_tensor_core_rung_uses_hmma_fed_by_ldmatrix(arch):
    s = compiled("4_tensor_core", arch)
    hmma = {op for op in s.opcodes() if op.startswith("HMMA")}
    assert hmma == ({"HMMA.1688.F32"} if arch == "sm_75" else {"HMMA.16816.F32"})  # sm_75: two k8 per k16
    assert s.count("LDSM") > 0 and s.global_load_bits() == {128} and s.count("LDGSTS") == 0


@pytest.mark.parametrize("arch", sass.ARCHS)
@pytest.mark.parametrize("rung", ["5_pipelined", "6_autotuned"])
def test_pipelined_rungs_copy_asynchronously_where_the_gpu_can(rung, arch):
    defines = dict(cm.TWO_STAGES) if arch == "sm_75" else dict(cm.PIPELINED)
    s = compiled(rung, arch, defines)
    assert s.count("HMMA") > 0
    if arch == "sm_75":  # the register-staged double buffer: plain loads, no cp.async
        assert s.count("LDGSTS") == 0 and s.count("LDG") > 0
    else:
        assert s.count("LDGSTS") > 0 and s.count("LDG") == 0


def test_sm75_pipelined_needs_two_stages():
    with pytest.raises(CompileError, match="register-staged double buffer"):
        compiled("5_pipelined", "sm_75", dict(cm.PIPELINED))


def test_wgmma_rung_is_hopper_only_and_uses_hgmma():
    s = compiled("7_wgmma", "sm_90a", cm.WGMMA)
    assert s.count("HGMMA") > 0 and s.count("HMMA") == 0 and s.count("LDGSTS") > 0
    assert s.count("LDL") == s.count("STL") == 0  # 128 accumulators per thread stay in registers
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("7_wgmma", "sm_90")


def test_tma_rung_copies_with_the_tma_specializes_warps_and_keeps_everything_in_registers():
    cubin = cuda.compile_cubin("matmul/8_tma_warp_specialized.cu", "sm_90a", tuple(sorted(cm.TMA_WS.items())))
    s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
    assert s.count("UTMALDG") == 5               # one A box and four B boxes per k-tile, from one thread
    assert s.count("SYNCS.PHASECHK") > 0 and s.count("SYNCS.ARRIVE") > 0  # mbarrier waits and arrivals
    assert s.count("HGMMA") > 0 and s.count("HMMA") == s.count("LDGSTS") == 0
    assert s.count("USETMAXREG") == 2            # the producer gives registers back, the consumers take them
    assert s.count("BAR") == 1                   # one __syncthreads, after the mbarriers' init: none in the loop
    # the wgmmas of a k-tile issue back to back, as in rung 7: one fence, no wait between them (ptxas serializes
    # them, warning C7515, when a branch that only some threads take sits inside the wgmma pipeline)
    assert s.count("WARPGROUP.ARRIVE") == 1 and s.count("WARPGROUP.DEPBAR") == 2
    assert s.count("LDL") == s.count("STL") == usage["local_bytes"] == usage["stack_bytes"] == 0
    # setmaxnreg only moves registers within what the block got at launch: a consumer asking for more than
    # the producer gave back would wait forever
    text = cuda.source("matmul/8_tma_warp_specialized.cu")
    down, up = (int(re.search(rf"setmaxnreg\.{d}\.sync\.aligned\.u32 (\d+)", text).group(1)) for d in ("dec", "inc"))
    assert usage["registers"] == 65536 // 384 // 8 * 8  # the cap __launch_bounds__(384, 1) sets: 168
    assert 128 * down + 256 * up <= 384 * usage["registers"]
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("8_tma_warp_specialized", "sm_90")


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def loops(s: sass.Sass) -> list[Counter]:
    """The opcode families of each loop in the SASS: the instructions from a conditional backward branch's target
    to the branch. (An unconditional one returns from an mbarrier wait's out-of-line retry: not a loop.)"""
    code = [(int(address, 16), guard, op, operands) for address, guard, op, operands in _INSTRUCTION.findall(s.text)
            if guard.strip() != "@!PT"]
    return [Counter(o.split(".")[0] for a, _, o, _ in code if int(operands, 16) <= a <= address)
            for address, guard, op, operands in code
            if op == "BRA" and guard and operands.startswith("0x") and int(operands, 16) <= address]


def test_persistent_rung_is_rung_8_walking_tiles_in_loops():
    cubin = cuda.compile_cubin("matmul/9_persistent.cu", "sm_90a", tuple(sorted(cm.PERSISTENT.items())))
    s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
    # rung 8's signature, unchanged: 5 TMA boxes per k-tile from one thread, mbarriers, a k-tile's 4 wgmmas back
    # to back (no C7515 serialization), registers moved by setmaxnreg, one __syncthreads, no spills
    assert s.count("UTMALDG") == 5 and s.count("HGMMA") == 4 and s.count("HMMA") == s.count("LDGSTS") == 0
    assert s.count("SYNCS.PHASECHK") > 0 and s.count("SYNCS.ARRIVE") > 0
    assert s.count("USETMAXREG") == 2 and s.count("BAR") == 1
    assert s.count("WARPGROUP.ARRIVE") == 1 and s.count("WARPGROUP.DEPBAR") == 2
    assert s.count("LDL") == s.count("STL") == usage["local_bytes"] == usage["stack_bytes"] == 0
    assert usage["registers"] == 168
    # what is new: the consumers store C inside a loop that holds their wgmmas (the tile loop; rung 8 stores once,
    # after its k loop), and the producer's TMA loads sit in a k loop inside a tile loop
    found, rung_8 = loops(s), loops(compiled("8_tma_warp_specialized", "sm_90a", cm.TMA_WS))
    assert any(body["HGMMA"] and body["STG"] for body in found)
    assert not any(body["STG"] for body in rung_8)
    assert sum(1 for body in found if body["UTMALDG"]) == 2 and sum(1 for body in rung_8 if body["UTMALDG"]) == 1
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("9_persistent", "sm_90")


def test_persistent_grid_is_one_block_per_sm_or_per_tile():
    assert cm.persistent_grid(8192, 8192, sms=132) == 132     # 2048 tiles of 128 x 256: 15.5 each
    assert cm.persistent_grid(513, 257, sms=132) == 5 * 2     # fewer tiles than SMs: one block each
    assert cm.persistent_grid(1, 1, sms=132) == 1
    assert cm.wgmma_shared_bytes(cm.PERSISTENT) <= H100.smem_per_block_bytes


def test_cluster_rung_multicasts_b_and_releases_buffers_in_both_blocks():
    cubin = cuda.compile_cubin("matmul/10_cluster_multicast.cu", "sm_90a", tuple(sorted(cm.CLUSTER_MULTICAST.items())))
    s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
    # per k-tile: this block's A box, and its two of B's four boxes multicast to both blocks of the cluster
    assert s.count("UTMALDG") == 3 and s.count("UTMALDG.2D.MULTICAST") == 2
    # a consumer releases a buffer in both blocks (remote arrives), in the k loop and after it
    assert s.count("SYNCS.ARRIVE.TRANS64.RED") == 4
    # cluster barriers after the mbarriers' init and before the consumers exit, instead of __syncthreads
    assert s.count("UCGABAR_ARV") == s.count("UCGABAR_WAIT") == 2 and s.count("BAR") == 0
    assert s.count("HGMMA") == 4 and s.count("WARPGROUP.ARRIVE") == 1 and s.count("WARPGROUP.DEPBAR") == 2
    assert s.count("USETMAXREG") == 2 and usage["registers"] == 168
    assert s.count("LDL") == s.count("STL") == usage["local_bytes"] == usage["stack_bytes"] == 0
    # the releases are relaxed enough to keep memory fences out of the loops (a .release.cluster arrive would put a
    # MEMBAR.ALL.GPU before each); the persistent loops are rung 9's
    found = loops(s)
    assert any(body["HGMMA"] and body["STG"] for body in found) and not any(body["MEMBAR"] for body in found)
    assert "EIATTR_CTA_PER_CLUSTER" in sass._cuobjdump(cubin, "-elf")  # __cluster_dims__: the driver launches pairs
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("10_cluster_multicast", "sm_90")


def test_tma_store_rung_stages_c_in_shared_memory_and_stores_it_with_the_tma():
    cubin = cuda.compile_cubin("matmul/11_tma_store.cu", "sm_90a", tuple(sorted(cm.TMA_STORE.items())))
    s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
    rung_10 = compiled("10_cluster_multicast", "sm_90a", cm.CLUSTER_MULTICAST)
    # rung 10's loads, releases and cluster barriers, unchanged
    for family in ("UTMALDG", "UTMALDG.2D.MULTICAST", "SYNCS.ARRIVE.TRANS64.RED", "UCGABAR_ARV", "HGMMA", "USETMAXREG"):
        assert s.count(family) == rung_10.count(family), family
    # the epilogue: 64 four-byte shared-memory writes per thread between two named barriers, the proxy fence, four
    # TMA stores of 64 x 64 boxes, their commit, and the waits on them (for the buffer's reuse, and before exit)
    assert s.count("STS") == 64 and s.count("BAR.SYNC") == 2 and s.count("FENCE.VIEW.ASYNC.S") == 2
    assert s.count("UTMASTG") == 4 and s.count("UTMACMDFLUSH") == 1 and s.count("DEPBAR") == 2
    assert s.count("LDL") == s.count("STL") == usage["local_bytes"] == usage["stack_bytes"] == 0
    # the stores leave the loop that holds the wgmmas on the fast path: no STG there beside UTMASTG's loop
    assert any(body["HGMMA"] and body["UTMASTG"] for body in loops(s))
    assert not any(body["MEMBAR"] and body["HGMMA"] and not body["UTMASTG"] for body in loops(s))
    assert cm.tma_store_shared_bytes(cm.TMA_STORE) <= H100.smem_per_block_bytes
    assert cm.tma_store_shared_bytes(dict(STAGES=4)) > H100.smem_per_block_bytes  # why the ring has 3 stages
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("11_tma_store", "sm_90")


def test_autotuned_hopper_rung_compiles_each_tile_shape_it_searches():
    """Rung 12 is rung 11's kernel with -D: at rung 11's configuration the same SASS; per BN its own wgmma width; at
    BM 256 two m64 blocks per consumer (twice the HGMMA); clusters of 1 load B themselves, clusters of 2 multicast
    it (a 192-wide B: 2 boxes from one block, 1 from the other), and a cluster of 1 has no cluster barrier; box by
    box, each 64 x 64 box of C staged between its own two named barriers and committed on its own; no configuration
    the search keeps spills."""
    rung_11 = compiled("11_tma_store", "sm_90a", cm.TMA_STORE)
    assert compiled("12_autotuned", "sm_90a", cm.HOPPER_DEFAULT).text == rung_11.text
    for c in mm.HOPPER_SHAPES:
        cubin = cuda.compile_cubin("matmul/12_autotuned.cu", "sm_90a", tuple(sorted(c.items())))
        s, usage = sass.disassemble(cubin, "sm_90a"), sass.resource_usage(cubin)
        m_blocks, boxes = c["BM"] // 128, c["BN"] // 64
        assert s.text.count(f"HGMMA.64x{c['BN']}x16.F32") == 4 * m_blocks == s.count("HGMMA"), c
        assert s.count("UTMASTG") == m_blocks * boxes, c  # C's staged tile, in 64 x 64 boxes
        groups = m_blocks * boxes if c["BOX_BY_BOX"] else 1  # stagings of the buffer per tile
        alone = c["CLUSTER"] == 1  # the block's own barrier at the start, none at the exit: no cluster barrier's fences
        assert s.count("BAR.SYNC") == 2 * groups + alone and s.count("UTMACMDFLUSH") == groups, c
        assert s.count("UCGABAR_ARV") == s.count("UCGABAR_WAIT") == s.count("ERRBAR") == (0 if alone else 2), c
        assert s.count("STS") == 16 * m_blocks * boxes and s.count("DEPBAR") == groups + 1, c
        multicast = s.count("UTMALDG.2D.MULTICAST")
        assert multicast == (0 if c["CLUSTER"] == 1 else -(-boxes // 2)), c
        assert s.count("UTMALDG") == 1 + (boxes if c["CLUSTER"] == 1 else multicast), c
        assert s.count("LDL") == s.count("STL") == usage["local_bytes"] == 0, c
        assert cm.hopper_shared_bytes(c) <= H100.smem_per_block_bytes and not mm.hopper_prune_reason(c, H100), c
    with pytest.raises(CompileError, match="sm_90a"):
        compiled("12_autotuned", "sm_90", cm.HOPPER_DEFAULT)


def test_autotuned_hopper_search_prunes_by_shared_memory_registers_and_stages():
    kept = [c for c in mm.HOPPER_TUNER.configs() if not mm.hopper_prune_reason(c, H100)]
    assert len(mm.HOPPER_TUNER.configs()) == 240 and len(kept) == 76
    assert cm.HOPPER_DEFAULT in kept  # rung 11's configuration: the search can only match or beat it
    assert {(c["BM"], c["BN"]) for c in kept} == {(128, 128), (128, 192), (128, 256), (256, 128)}
    assert max(c["STAGES"] for c in kept if c["BN"] == 128 and c["BM"] == 128) == 6
    # staging one box, not the tile, makes room for one more stage
    for tile, whole in (((128, 192), 4), ((128, 256), 3), ((256, 128), 3)):
        for box in (0, 1):
            deepest = max(c["STAGES"] for c in kept if (c["BM"], c["BN"]) == tile and c["BOX_BY_BOX"] == box)
            assert deepest == whole + box, (tile, box)
    box_by_box = dict(BM=128, BN=192, STAGES=5, BOX_BY_BOX=1)
    assert cm.hopper_shared_bytes(box_by_box) == (5 * 64 * (128 + 192) + 2 * 64 * 64) * 2 + 1024
    assert cm.hopper_config(dict(BM=128)) == dict(BM=128, BOX_BY_BOX=0)  # a search recorded before the choice
    assert mm.hopper_prune_reason(dict(cm.HOPPER_DEFAULT, STAGES=4), H100) == "257 KiB of shared memory > 227 KiB"
    assert mm.hopper_prune_reason(dict(cm.HOPPER_DEFAULT, BM=256), H100).startswith(
        "256x256 needs 256 accumulator registers per consumer thread")
    assert mm.hopper_prune_reason(dict(cm.HOPPER_DEFAULT, BN=128, STAGES=2), H100).startswith("two stages")
    # the grid: CLUSTER blocks per cluster, a cluster per CLUSTER SMs or per block of C, never half a cluster
    assert cm.hopper_grid(dict(cm.HOPPER_DEFAULT, CLUSTER=1), 8192, 8192, sms=132) == 132
    assert cm.hopper_grid(cm.HOPPER_DEFAULT, 8192, 8192, sms=133) == 132
    assert cm.hopper_grid(dict(cm.HOPPER_DEFAULT, BN=192), 513, 257, sms=132) == 2 * 3 * 2  # a cluster per block of C
    assert cm.hopper_grid(dict(cm.HOPPER_DEFAULT, BM=256, BN=128, CLUSTER=1), 1, 1, sms=132) == 1


def test_cluster_grid_is_pairs_of_blocks():
    assert cm.cluster_grid(8192, 8192, sms=132) == 132        # 66 clusters walk 1024 blocks of 256 x 256
    assert cm.cluster_grid(8192, 8192, sms=133) == 132        # never half a cluster
    assert cm.cluster_grid(513, 257, sms=132) == 2 * 3 * 2    # fewer blocks of C than SM pairs: a cluster each
    assert cm.cluster_grid(1, 1, sms=132) == 2


def test_hopper_rungs_say_na_on_older_gpus():
    for name in ("7_wgmma", "8_tma_warp_specialized", "9_persistent", "10_cluster_multicast", "11_tma_store",
                 "12_autotuned"):
        rung = mm.PROBLEM.rung("cuda", name)
        assert rung.unavailable_reason(T4) == "N/A on this GPU (Tesla T4, sm_75): needs wgmma"
        assert rung.unavailable_reason(H100) is None


def test_tensor_maps_of_rung_8_and_their_rules():
    a, b = torch.empty(127, 136).half(), torch.empty(136, 264).half()  # K and N padded to multiples of 8
    assert tma.layout(a, (128, 64)) == dict(data_type=6, dims=(136, 127), row_stride=272, box=(64, 128), swizzle=3)
    assert tma.layout(b, (64, 64))["dims"] == (264, 136)
    with pytest.raises(ValueError, match="multiple of 16 bytes apart: 129 columns"):
        tma.layout(torch.empty(4, 129).half(), (128, 64))
    with pytest.raises(ValueError, match="16-byte aligned start"):
        tma.encode(torch.empty(65 * 8 + 1).half()[1:].view(65, 8), (64, 64))  # refused before the driver
    with pytest.raises(ValueError, match="at most 128 bytes"):
        tma.layout(a, (64, 128))
    with pytest.raises(ValueError, match="1 to 256"):
        tma.layout(a, (512, 64))
    with pytest.raises(ValueError, match="non-empty"):
        tma.layout(a[:0], (128, 64))


def test_cuda_rungs_say_why_they_do_not_run_here_and_refuse_cpu_tensors():
    a, b = torch.randn(8, 8).half(), torch.randn(8, 8).half()
    for rung in mm.PROBLEM.rungs:
        if rung.backend == "cuda":
            assert "needs a GPU" in unavailable(rung)
            with pytest.raises(ValueError, match="a is on cpu"):
                rung.run(a, b)
            with pytest.raises(ValueError, match="a must be torch.float16"):
                rung.run(a.float(), b)


def test_operand_checks_name_the_problem():
    from ladder.runtime.validate import matmul_operands as ops
    a = torch.randn(4, 5).half()
    with pytest.raises(ValueError, match="inner dimensions differ: a is 4x5, b is 4x3"):
        ops(a, torch.randn(4, 3).half(), None, device="cpu")
    with pytest.raises(ValueError, match="not contiguous"):
        ops(a, torch.randn(3, 10).half()[:, ::2], None, device="cpu")
    with pytest.raises(ValueError, match="out has shape"):
        ops(a, torch.randn(5, 3).half(), torch.empty(3, 3).half(), device="cpu")
    with pytest.raises(ValueError, match="2 dimension"):
        ops(a.view(-1), a, None, device="cpu")


def test_cublas_rung_and_reference_agree_on_cpu():
    for shape, result in check_rung(mm.PROBLEM, mm.PROBLEM.rung("torch", "cublas"), seed=5):
        assert result.ok, (shape, str(result))


def test_pad_note_says_when_inputs_are_copied():
    assert cm.pad_note(4096, 4096, 4096) is None
    assert "K=32, N=4104" in cm.pad_note(4095, 4097, 31)


def test_search_space_pruning_depends_on_the_gpu():
    alive = lambda gpu: [c for c in mm.TUNER.configs() if not mm.prune_reason(c, gpu)]  # noqa: E731
    h100, t4 = alive(H100), alive(T4)
    assert 20 < len(h100) < len(mm.TUNER.configs())
    assert all(c["STAGES"] >= 3 and cm.shared_bytes(c) <= 227 << 10 for c in h100)
    assert t4 and all(c["STAGES"] == 2 and cm.shared_bytes(c) <= 64 << 10 for c in t4)
    assert mm.prune_reason(dict(cm.PIPELINED, BM=128, BN=128, BK=64, STAGES=2, WARPS_M=2, WARPS_N=4, GROUP_M=8),
                           T4) == "70 KiB of shared memory > 64 KiB"
    # 512 threads leave 128 registers each: 128 accumulators and their fragments do not fit
    assert mm.prune_reason(dict(cm.PIPELINED, BM=256, BN=256, BK=64, STAGES=4, WARPS_M=4, WARPS_N=4, GROUP_M=8),
                           H100).endswith("512 threads leave 128: it would spill")


def test_best_config_comes_from_the_nearest_tuned_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "detect", lambda: H100)
    autotune._BEST.clear()
    small, big = dict(cm.PIPELINED, BM=64, GROUP_M=8), dict(cm.PIPELINED, BM=256, GROUP_M=8)
    for shape, best in (((1024, 1024, 1024), small), ((8192, 8192, 8192), big)):
        autotune.store(H100.slug, autotune.Report("matmul", mm.TUNER.name, shape, H100.name, best, 1.0, 2.0))
    assert mm.TUNER.best((7000, 7000, 7000)) == big
    assert mm.TUNER.best((1000, 1000, 1000)) == small
    autotune._BEST.clear()


def test_a_local_search_at_one_shape_keeps_the_recorded_winners_at_others(tmp_path, monkeypatch):
    """Rung 12 searched here at 2048^3 only: 2048^3 takes that winner, 8192^3 still the H100 recording's."""
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "detect", lambda: H100)
    autotune._BEST.clear()
    recorded = {tuple(r.shape): r.best for r in autotune.recorded_reports(H100.slug) if r.tuner == mm.HOPPER_TUNER.name}
    assert set(recorded) == set(mm.HOPPER_TUNE_SHAPES)  # record searches each
    local = dict(cm.HOPPER_DEFAULT, BN=128, STAGES=5)
    autotune.store(H100.slug, autotune.Report("matmul", mm.HOPPER_TUNER.name, (2048,) * 3, H100.name, local, 1.0, 2.0))
    assert mm.HOPPER_TUNER.best((2048,) * 3) == local
    assert mm.HOPPER_TUNER.best((8192,) * 3) == recorded[(8192,) * 3]
    autotune._BEST.clear()


def test_run_once_profiles_the_configuration_the_shape_sweep_timed(tmp_path, monkeypatch):
    """A sweep timed rung 12 at the qkv projection in a configuration searched there, whose report stayed in that
    machine's cache (`record` searches other shapes); pinned (what `ladder run-once` does under ncu), rung 12 runs
    it there, and elsewhere the nearest recorded search's winner as before."""
    monkeypatch.setattr(autotune, "CACHE", tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "detect", lambda: H100)
    autotune._BEST.clear()
    qkv = (8192, 2304, 768)
    nearest = mm.HOPPER_TUNER.best(qkv)
    swept = dict(nearest, STAGES=nearest["STAGES"] - 1)
    recording = autotune.results_mod.load(H100.slug)
    rows = [{"problem": "matmul", "backend": "cuda", "rung": "12_autotuned", "shape": list(qkv),
             "config": swept}]
    monkeypatch.setattr(autotune.results_mod, "load",
                        lambda slug: type(recording)(recording.path, {**recording.data, "shape_sweep": rows}))
    assert autotune.swept_config(H100, mm.HOPPER_TUNER.name, qkv) == swept
    assert autotune.swept_config(H100, mm.HOPPER_TUNER.name, (8192, 2304, 769)) is None
    autotune._BEST.clear()
    monkeypatch.setattr(autotune, "PIN_RECORDED", True)
    assert mm.HOPPER_TUNER.best(qkv) == swept
    assert mm.HOPPER_TUNER.best((8192, 8192, 8000)) == mm.HOPPER_TUNER.nearest((8192, 8192, 8000)).best
    autotune._BEST.clear()


def test_hopper_choices_print_each_ring_epilogue_and_cluster_of_the_recorded_search():
    """Lesson 06's ablation at MLP down: one line per (stages, epilogue, cluster) at the winner's block, the best of
    its tile orders against the winner; the winner reads 1.00; the SASS lines: a cluster of 2 has the cluster
    barrier and its fences, a cluster of 1 neither."""
    report = autotune.recorded_report(mm.HOPPER_TUNER.name, mm.MLP_DOWN, "nvidia-h100-80gb-hbm3")
    lines = l06_shipping_a_kernel.hopper_choices(mm.MLP_DOWN, "nvidia-h100-80gb-hbm3").splitlines()
    tile = (report.best["BM"], report.best["BN"])
    assert lines[0].startswith(f"rung 12's search at 8192x768x3072, blocks of {tile[0]}x{tile[1]}")
    rows = [line.split() for line in lines[2:] if line.split()[0].isdigit()]
    timed = {(c["STAGES"], c["BOX_BY_BOX"], c["CLUSTER"]) for c in (cm.hopper_config(t["config"]) for t in report.timed)
             if (c["BM"], c["BN"]) == tile}
    assert len(rows) == len(timed)
    best = min(t["ms"] for t in report.timed)
    winner = [r for r in rows if r[-1] == "1.00"]
    assert winner and float(winner[0][-2]) == pytest.approx(best, abs=5e-5)
    assert all(float(r[-1]) <= 1.0 for r in rows)
    assert lines[-2] == "  2: UCGABAR_WAIT 2, MEMBAR 5, ERRBAR 2, BAR.SYNC 2"
    assert lines[-1].startswith("  1: UCGABAR_WAIT 0,") and "ERRBAR 0" in lines[-1]
    assert l06_shipping_a_kernel.hopper_choices((1, 2, 3)) == "no search of rung 12 at 1x2x3 recorded"
