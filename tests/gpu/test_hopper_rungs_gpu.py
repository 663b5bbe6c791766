"""The Hopper-only CUDA rungs (7: wgmma; 8: TMA copies, warp-specialized; 9: 8 on a persistent grid in grouped
tile order; 10: 9 in 2-block clusters that multicast B; 11: 10 storing C through the TMA; 12: 11 searched) on an H100 or H200: fresh random inputs into a NaN-poisoned
output, compared with the fp64 product, at ragged shapes and at 4096^3-class shapes; NaN never passes; bad inputs are
named; rung 10's clusters all fit on the GPU at once; and rungs 7-10 timed beside cuBLAS (printed, not asserted).

    pytest tests/gpu/test_hopper_rungs_gpu.py -o addopts="" -s

On any other GPU the first test fails and says why (tests/gpu never skips)."""
import ctypes
import dataclasses
import functools

import pytest
import torch

import kernels.matmul as mm
from kernels.cuda import matmul as cm
from ladder.runtime import cuda, hardware
from ladder.check import compare
from ladder.runner import check_rung, time_rung, unavailable

PROBLEM = mm.PROBLEM
HOPPER = [PROBLEM.rung("cuda", name) for name in ("7_wgmma", "8_tma_warp_specialized", "9_persistent",
                                                   "10_cluster_multicast", "11_tma_store", "12_autotuned")]
CUBLAS = PROBLEM.rung("torch", "cublas")
# (M, N, K): no multiple of a tile (128 x 256 x 64) or of 8 (the padding), single tiles smaller than the block,
# several blocks in both directions, more k-tiles than the 4 stages (the ring's parity wraps), and exact tiles;
# rungs 9-10: more tiles than SMs, with 5 or 16 k-tiles (the ring carries on mid-round into the next tile) or one
# (each tile's only k-tile is released after its loop), and a last group of fewer than GROUP_M tile rows; rung 10:
# M <= 128 (the cluster's second block reads A wholly outside the matrix: zeros) and M = 129 (one row of it)
RAGGED = [(127, 255, 129), (513, 257, 1000), (64, 72, 24), (1, 1, 1), (17, 33, 65), (129, 257, 8),
          (128, 256, 64), (256, 512, 320), (4095, 4097, 31), (300, 1000, 2000),
          (2200, 4500, 300), (5000, 2100, 1000), (3000, 3000, 64)]
BIG = [(4096, 4096, 4096), (4095, 4097, 4093), (3968, 4352, 4160), (8192, 8192, 8192)]
TIMED = [(4096, 4096, 4096), (8192, 8192, 8192)]


def where_wrong(out: torch.Tensor, ref: torch.Tensor) -> str:
    """Which elements miss (for a first look at a layout bug): how many, the first few, and how they fall on
    the tiles (rows mod 128 and mod 8, columns mod 256 and mod 64)."""
    out64 = out.double()
    bad = ~torch.isfinite(out64) | ((out64 - ref).abs() > 1e-2 * (ref.abs() + 1))
    idx = bad.nonzero()
    if not len(idx):
        return "no element off by more than 1%"
    rows, cols = idx[:, 0], idx[:, 1]
    spread = lambda x, m: sorted(set((x % m).tolist()))[:12]  # noqa: E731
    return (f"{len(idx)} of {out.numel()} elements off, first {idx[:4].tolist()}; rows mod 128 {spread(rows, 128)}, "
            f"mod 8 {spread(rows, 8)}; cols mod 256 {spread(cols, 256)}, mod 64 {spread(cols, 64)}")


def run_checked(rung, shape, seed):
    M, N, K = shape
    gen = torch.Generator("cuda").manual_seed(seed)
    a, b = PROBLEM.make_inputs(shape, "cuda", gen)
    out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    rung.run(a, b, out=out)
    torch.cuda.synchronize()
    ref = mm.reference(a, b)
    return compare(out, ref), out, ref


def test_this_gpu_is_hopper():
    gpu = hardware.detect()
    assert gpu is not None and gpu.has("wgmma") and gpu.emulated_on is None, \
        f"rungs 7-10 need a Hopper GPU (sm_90a), not {gpu and gpu.name} ({gpu and gpu.arch})"
    for rung in HOPPER:
        assert unavailable(rung) is None


@pytest.mark.parametrize("rung", HOPPER, ids=lambda r: r.label)
@pytest.mark.parametrize("shape", RAGGED, ids=str)
def test_correct_on_ragged_shapes(rung, shape):
    for seed in (0, 1):  # fresh random data each time, output NaN first
        verdict, out, ref = run_checked(rung, shape, 100 * seed + 7)
        assert verdict.ok, (rung.label, shape, str(verdict), where_wrong(out, ref))


@pytest.mark.parametrize("rung", HOPPER, ids=lambda r: r.label)
@pytest.mark.parametrize("shape", BIG, ids=str)
def test_correct_at_4096_class_shapes(rung, shape):
    verdict, out, ref = run_checked(rung, shape, 3)
    assert verdict.ok, (rung.label, shape, str(verdict), where_wrong(out, ref))


@pytest.mark.parametrize("rung", HOPPER, ids=lambda r: r.label)
def test_the_problem_check_shapes_pass(rung):
    for shape, result in check_rung(PROBLEM, rung, seed=11):
        assert result.ok, (rung.label, shape, str(result))


@pytest.mark.parametrize("rung", HOPPER, ids=lambda r: r.label)
def test_nan_never_passes(rung):
    """A NaN in A reaches exactly its row of C (the kernel puts rows where they belong), and the check fails."""
    M, N, K = 300, 520, 200
    a, b = PROBLEM.make_inputs((M, N, K), "cuda", torch.Generator("cuda").manual_seed(5))
    a[131, 77] = float("nan")
    out = rung.run(a, b)
    torch.cuda.synchronize()
    nan_rows = (~torch.isfinite(out)).any(dim=1).nonzero().flatten().tolist()
    assert nan_rows == [131] and torch.isnan(out[131]).all()
    assert not compare(out, mm.reference(a, b)).ok
    untouched = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    assert not compare(untouched, mm.reference(a, b)).ok  # an output the kernel never wrote fails too


@pytest.mark.parametrize("rung", HOPPER, ids=lambda r: r.label)
def test_a_wrong_output_or_rank_is_named(rung):  # dtype, shapes, strides, device: test_matmul_gpu.py, every rung
    a = torch.randn(64, 32, device="cuda").half()
    b = torch.randn(32, 48, device="cuda").half()
    with pytest.raises(ValueError, match="out has shape"):
        rung.run(a, b, out=torch.empty(64, 47, device="cuda").half())
    with pytest.raises(ValueError, match="2 dimension"):
        rung.run(a.view(-1), b)


@pytest.mark.parametrize("name,config", [("8_tma_warp_specialized", cm.TMA_WS), ("9_persistent", cm.PERSISTENT),
                                         ("10_cluster_multicast", cm.CLUSTER_MULTICAST), ("11_tma_store", cm.TMA_STORE)])
def test_tma_rungs_load_without_local_memory(name, config):
    module = cuda.load(f"matmul/{name}.cu", config, "sm_90a")
    attributes = module.get_function("matmul").attributes
    assert attributes["local_size_bytes"] == 0 and attributes["num_regs"] == 168, attributes


@pytest.mark.parametrize("name,launch,config,groups", [
    ("9_persistent", cm.persistent, cm.PERSISTENT, (1, 3, 16, 64)),                        # of 64 tile rows
    ("10_cluster_multicast", cm.cluster_multicast, cm.CLUSTER_MULTICAST, (1, 3, 8, 32)),   # of 32 cluster rows
    ("11_tma_store", cm.tma_store, cm.TMA_STORE, (1, 3, 8, 32))])
def test_persistent_rungs_are_right_in_any_tile_order(name, launch, config, groups):
    """8192 x 4096: 1024 tiles, ~8 per block (rung 10: per cluster) of the persistent grid, 5 k-tiles each;
    GROUP_M 1 (row by row), 3 (a last group of one row), the launcher's and one group of all rows give the product."""
    rung = PROBLEM.rung("cuda", name)
    for group_m in groups:
        run = functools.partial(launch, config=dict(config, GROUP_M=group_m))
        verdict, out, ref = run_checked(dataclasses.replace(rung, run=run), (8192, 4096, 320), 9)
        assert verdict.ok, (name, group_m, str(verdict), where_wrong(out, ref))


@pytest.mark.parametrize("config", mm.HOPPER_SHAPES, ids=mm.autotune.format_config)
@pytest.mark.parametrize("shape", RAGGED + [(8192, 4096, 320)], ids=str)
def test_autotuned_hopper_rung_is_right_in_every_tile_shape_and_cluster_size(config, shape):
    """Rung 12 in each tile shape (BM x BN) and cluster size its search can choose, not just the cached winner."""
    run = functools.partial(cm.run_hopper_config, config)
    verdict, out, ref = run_checked(dataclasses.replace(PROBLEM.rung("cuda", "12_autotuned"), run=run), shape, 3)
    assert verdict.ok, (config, str(verdict), where_wrong(out, ref))


def test_autotuned_hopper_rung_loads_without_local_memory():
    for c in mm.HOPPER_SHAPES:
        attributes = cuda.load("matmul/12_autotuned.cu", c, "sm_90a").get_function("matmul").attributes
        assert attributes["local_size_bytes"] == 0, (c, attributes)


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


@pytest.mark.parametrize("name,launch,config,shared_bytes", [
    ("10_cluster_multicast", cm.cluster_multicast, cm.CLUSTER_MULTICAST, cm.wgmma_shared_bytes),
    ("11_tma_store", cm.tma_store, cm.TMA_STORE, cm.tma_store_shared_bytes),
    *[("12_autotuned", functools.partial(cm.run_hopper_config, c), c, cm.hopper_shared_bytes)
      for c in mm.HOPPER_SHAPES if c["CLUSTER"] == 2]])
def test_cluster_rungs_clusters_all_fit_at_once(name, launch, config, shared_bytes):
    """The persistent grid assumes every cluster runs from the start: a cluster that waited for another to finish
    would walk its blocks of C after the others, doubling the time. The driver says how many fit."""
    a, b = PROBLEM.make_inputs((8192, 8192, 64), "cuda", torch.Generator("cuda").manual_seed(1))
    launch(a, b)  # loads the module and sets its shared-memory size
    function = cuda.load(f"matmul/{name}.cu", config, "sm_90a").get_function("matmul")
    grid = cm.hopper_grid(config, 8192, 8192) if name == "12_autotuned" else cm.cluster_grid(8192, 8192)
    config = LaunchConfig((grid, 1, 1), (384, 1, 1), shared_bytes(config), None, None, 0)
    fits = ctypes.c_int()
    libcuda = ctypes.CDLL("libcuda.so.1")
    assert libcuda.cuOccupancyMaxActiveClusters(ctypes.byref(fits), ctypes.c_void_p(function.kernel.ptr),
                                                ctypes.byref(config)) == 0
    assert fits.value >= grid // 2, f"{fits.value} clusters of 2 fit at once, the grid has {grid // 2}"


def test_hopper_rungs_timed_beside_cublas():
    rows = []
    for shape in TIMED:
        for rung in HOPPER + [CUBLAS]:
            rows.append(time_rung(PROBLEM, rung, shape))
    print()
    best = {tuple(r["shape"]): r["tflops"] for r in rows if r["rung"] == "cublas"}
    for r in rows:
        shape = tuple(r["shape"])
        print(f"{r['backend'] + ':' + r['rung']:30s} {'x'.join(map(str, shape)):>14s} {r['ms']:8.4f} ms "
              f"[{r['ms_p20']:.4f}-{r['ms_p80']:.4f}] {r['tflops']:7.1f} TFLOP/s  {r['tflops'] / best[shape]:5.2f}x cuBLAS"
              f"  {'ok' if r['correct'] else 'WRONG'} (rel. error {r['rel_error']:.1e})")
    assert all(r["correct"] for r in rows)
