"""Matmul in CUDA C++, C = A·B (A M×K, B K×N, fp16 row-major; fp32 sums; C fp16): the launchers of the rungs in
kernels/cuda/matmul/ (one .cu file a rung), each at a fixed configuration or the one it is given.

Every launcher takes (a, b, out=None) and returns out; a bad argument raises a ValueError that names it. Rungs 6
and 12 run at the configuration they are given (`run_config`, `run_hopper_config`); their searches, the problem
and the rung list are in kernels/matmul.py.

Rungs 4-12 load 16-byte vectors (rungs 8-12: TMA boxes, whose rows the TMA wants 16 bytes apart), so every row of A
and B must start on a 16-byte boundary: when K or N is not a multiple of 8 the launcher pads A and B with zeros (a
copy, said in `pad_note`). M and N edges are handled inside the kernels (rungs 8-12: the TMA reads zeros past them,
the stores are masked).

Run alone, `python -m kernels.cuda.matmul` checks each rung against torch and times it beside torch.matmul on a GPU;
without one it compiles each rung's file with NVRTC.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
import triton

from ladder.runtime import cuda, tma, validate
from ladder.runtime.hardware import detect
from ladder.runtime.world import WORLD

SCALAR_TILE = 32               # rungs 1-3: 32×32 threads, one output each
REGISTER_BLOCK = (128, 128)    # rung 3b: BM×BN block tile, 8×8 outputs per thread, 256 threads
TENSOR_CORE = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=4)            # must match 4_tensor_core.cu
PIPELINED = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=4, STAGES=4)    # rung 5's choice
TWO_STAGES = dict(PIPELINED, STAGES=2)  # sm_75: register-staged double buffer, two shared buffers


def _operands(a, b, out, where="cuda"):
    return validate.matmul_operands(a, b, out, device=where)


# ------------------------------------------------------------- rungs 1-3b: CUDA cores, any shape

def _scalar_launcher(filename: str, grid, threads):
    """A launcher for a CUDA-core rung: kernel `matmul(A, B, C, M, N, K)`, any shape."""
    def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        M, N, K, out = _operands(a, b, out)
        if out.numel():
            module = cuda.load(f"matmul/{filename}")
            cuda.launch(module, "matmul", grid(M, N), threads, (a, b, out) + cuda.int32s(M, N, K))
        return out
    run.__name__ = filename.removesuffix(".cu")
    return run


T = SCALAR_TILE
naive = _scalar_launcher("1_naive.cu", lambda M, N: (cuda.cdiv(M, T), cuda.cdiv(N, T)), (T, T))
coalesced = _scalar_launcher("2_coalesced.cu", lambda M, N: (cuda.cdiv(N, T), cuda.cdiv(M, T)), (T, T))
smem_tiled = _scalar_launcher("3_smem_tiled.cu", lambda M, N: (cuda.cdiv(N, T), cuda.cdiv(M, T)), (T, T))
register_blocked = _scalar_launcher(
    "3b_register_blocked.cu",
    lambda M, N: (cuda.cdiv(N, REGISTER_BLOCK[1]), cuda.cdiv(M, REGISTER_BLOCK[0])), 256)


# ------------------------------------------------------------- rungs 4-6: tensor cores, 16-byte rows

def pad_note(M: int, N: int, K: int) -> str | None:
    """Why a tensor-core launcher copies its inputs for this shape, or None."""
    if K % 8 or N % 8:
        return (f"K={K} or N={N} is not a multiple of 8: A and B are zero-padded to "
                f"K={cuda.cdiv(K, 8) * 8}, N={cuda.cdiv(N, 8) * 8} so every row starts on 16 bytes")
    return None


def threads(config: dict) -> int:
    return 32 * config["WARPS_M"] * config["WARPS_N"]


def shared_bytes(config: dict) -> int:
    """Dynamic shared memory of rungs 5-6: STAGES × (A tile + B tile), rows padded by 8 halves."""
    c = config
    return 2 * c["STAGES"] * (c["BM"] * (c["BK"] + 8) + c["BK"] * (c["BN"] + 8))


def _tensor_core_launch(filename, kernel, defines, grid, n_threads, a, b, out, smem=0, arch=None, operands=None,
                        checked=None):
    """Shared by rungs 4-12: kernel(A, B, C, M, N, K, ldb) on 16-byte rows, grid(M, N) blocks. `operands(a, b, out)`
    gives what the kernel takes in place of the pointers A and B (rungs 8-12: their tensor maps, and C's).
    `checked`: (M, N, K, out) from a caller that validated the operands already (rungs 6 and 12, to pick a
    configuration by the shape)."""
    M, N, K, out = checked or _operands(a, b, out)
    if out.numel() and out.data_ptr() % 4:  # a view of C 2 bytes in: the kernels store pairs of halves, 4-byte aligned
        out.copy_(_tensor_core_launch(filename, kernel, defines, grid, n_threads, a, b, None, smem, arch, operands))
        return out
    if out.numel():
        if K == 0:
            return out.zero_()
        a, b, Kp, Np = validate.padded_rows(a, b)
        module = cuda.load(f"matmul/{filename}", defines, arch)
        inputs = operands(a, b, out) if operands else (a, b)
        cuda.launch(module, kernel, grid(M, N), n_threads, inputs + (out,) + cuda.int32s(M, N, Kp, Np), smem)
    return out


def _tile_grid(c: dict):
    return lambda M, N: (cuda.cdiv(N, c["BN"]), cuda.cdiv(M, c["BM"]))


def tensor_core(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("4_tensor_core.cu", "matmul", None, _tile_grid(TENSOR_CORE), threads(TENSOR_CORE),
                               a, b, out)


def pipelined_config(gpu=None) -> dict:
    gpu = gpu or detect()
    return PIPELINED if gpu is None or gpu.has("cp.async") else TWO_STAGES


def pipelined(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    c = pipelined_config()
    return _tensor_core_launch("5_pipelined.cu", "matmul", c, _tile_grid(c), threads(c), a, b, out, shared_bytes(c))


# ------------------------------------------------------------- rung 6: rung 5's kernel, any configuration

def run_config(c: dict, a, b, out=None, checked=None):
    """Rung 6's kernel with one configuration (what the search times): a 1-D grid, grouped inside."""
    return _tensor_core_launch("6_autotuned.cu", "matmul_grouped", c,
                               lambda M, N: cuda.cdiv(M, c["BM"]) * cuda.cdiv(N, c["BN"]), threads(c),
                               a, b, out, shared_bytes(c), checked=checked)


def default_config(gpu) -> dict:
    """Rung 6 where no search has run: rung 5's tiles for this GPU (two register-staged stages without cp.async),
    which fit every GPU in ladder.runtime.hardware's table (tests/test_matmul_cuda.py)."""
    return dict(pipelined_config(gpu), GROUP_M=8)


# ------------------------------------------------------------- rung 7: Hopper's wgmma

WGMMA = dict(STAGES=4)  # BM x BN x BK = 128 x 256 x 64 (two warpgroups) is fixed in 7_wgmma.cu


def wgmma_shared_bytes(c: dict) -> int:
    """Rungs 7-10: STAGES x (A tile + B tile), unpadded (the swizzle avoids bank conflicts), + 1 KiB to align
    the atoms."""
    return 2 * c["STAGES"] * 64 * (128 + 256) + 1024


def wgmma(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("7_wgmma.cu", "matmul", WGMMA, _tile_grid(dict(BM=128, BN=256)), 256,
                               a, b, out, wgmma_shared_bytes(WGMMA), arch="sm_90a")


# ------------------------------------------------------------- rung 8: TMA copies, warp-specialized

TMA_WS = dict(STAGES=4)  # BM x BN x BK = 128 x 256 x 64, 1 producer + 2 consumer warpgroups, fixed in the .cu


def tma_maps(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> tuple:
    """Rungs 8-10's tensor maps, 128-byte swizzle: A (M x K) in boxes of 128 rows x 64 columns (one per k-tile),
    B (K x N) in boxes of 64 x 64 (four side by side make a 64 x 256 k-tile). `out`: theirs has none (rung 11's does)."""
    return tma.encode(a, (128, 64)), tma.encode(b, (64, 64))


def tma_warp_specialized(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _tensor_core_launch("8_tma_warp_specialized.cu", "matmul", TMA_WS, _tile_grid(dict(BM=128, BN=256)),
                               384, a, b, out, wgmma_shared_bytes(TMA_WS), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 9: persistent, grouped tile order

PERSISTENT = dict(STAGES=4, GROUP_M=16)  # rung 8's tiles and warpgroups; GROUP_M tile rows down a column, then right


@functools.lru_cache(maxsize=None)  # launchers ask on every call
def _sms_of(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _sm_count() -> int:
    return _sms_of(torch.cuda.current_device())


def walking_grid(M: int, N: int, bm: int, bn: int, cluster: int = 1, sms: int | None = None) -> int:
    """The persistent grid of rungs 9-12: clusters of `cluster` blocks, a cluster per `cluster` SMs (default: this
    GPU's), or per cluster * bm x bn block of C where there are fewer; each walks the blocks of C its number,
    + clusters, ..."""
    return cluster * min((sms or _sm_count()) // cluster, cuda.cdiv(M, cluster * bm) * cuda.cdiv(N, bn))


def persistent_grid(M: int, N: int, sms: int | None = None) -> int:
    """Rung 9's blocks: one per SM (default: this GPU's), or one per 128 x 256 tile of C where there are fewer;
    each block walks the tiles blockIdx.x, + gridDim.x, ..."""
    return walking_grid(M, N, 128, 256, sms=sms)


def persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
               config: dict = PERSISTENT) -> torch.Tensor:
    """Rung 9; `config` may change GROUP_M (the tile order) or STAGES."""
    return _tensor_core_launch("9_persistent.cu", "matmul", config, persistent_grid, 384, a, b, out,
                               wgmma_shared_bytes(config), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 10: 2-block clusters, B multicast

CLUSTER_MULTICAST = dict(STAGES=4, GROUP_M=8)  # GROUP_M in cluster rows of 256 rows of C (rung 9: 16 of 128)


def cluster_grid(M: int, N: int, sms: int | None = None) -> int:
    """Rung 10's blocks, two per cluster (__cluster_dims__ in the .cu): a cluster per two SMs, or per 256 x 256
    block of C where there are fewer; each cluster walks the blocks of C clusterid, + clusters, ..."""
    return walking_grid(M, N, 128, 256, cluster=2, sms=sms)


def cluster_multicast(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
                      config: dict = CLUSTER_MULTICAST) -> torch.Tensor:
    """Rung 10; `config` may change GROUP_M (the order of the clusters' blocks of C) or STAGES."""
    return _tensor_core_launch("10_cluster_multicast.cu", "matmul", config, cluster_grid, 384, a, b, out,
                               wgmma_shared_bytes(config), arch="sm_90a", operands=tma_maps)


# ------------------------------------------------------------- rung 11: the epilogue through the TMA

TMA_STORE = dict(STAGES=3, GROUP_M=8)  # rung 10's order; a stage fewer makes room for C's staging buffers
NO_MAP = np.zeros(1, dtype=np.dtype((np.void, tma.MAP_BYTES)))  # C's map where the TMA cannot store C's rows


def tma_store_shared_bytes(c: dict) -> int:
    """Rung 11: rung 10's ring of STAGES, and the two consumers' 64 x 256 fp16 tiles of C staged for the TMA."""
    return hopper_shared_bytes(dict(c, BM=128, BN=256))


def c_map(out: torch.Tensor):
    """Rung 11's tensor map of C, 64 x 64 boxes in the 128-byte swizzle; NO_MAP where C's rows are not 16-byte
    multiples apart or C does not start on 16 bytes (the kernel checks the same, and stores from registers)."""
    return tma.encode(out, (64, 64)) if out.shape[1] % 8 == 0 and out.data_ptr() % 16 == 0 else NO_MAP


def tma_store(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
              config: dict = TMA_STORE) -> torch.Tensor:
    """Rung 11; `config` may change GROUP_M or STAGES (at most 3: the staging buffers take the fourth's room)."""
    return _tensor_core_launch("11_tma_store.cu", "matmul", config, cluster_grid, 384, a, b, out,
                               tma_store_shared_bytes(config), arch="sm_90a",
                               operands=lambda a, b, out: tma_maps(a, b) + (c_map(out),))


# ------------------------------------------------------------- rung 12: rung 11's kernel, any configuration

def hopper_shared_bytes(c: dict) -> int:
    """Rung 12's dynamic shared memory: STAGES x (A's BM x 64 + B's 64 x BN), C staged for the TMA (the BM x BN
    tile; with BOX_BY_BOX one 64 x 64 box per consumer warpgroup), and 1 KiB to align the swizzle atoms (rung 11's
    at BM 128, BN 256)."""
    staged = 2 * 64 * 64 if c.get("BOX_BY_BOX") else c["BM"] * c["BN"]
    return 2 * (c["STAGES"] * 64 * (c["BM"] + c["BN"]) + staged) + 1024


def hopper_grid(c: dict, M: int, N: int, sms: int | None = None) -> int:
    """Rung 12's blocks: CLUSTER per cluster, a cluster per CLUSTER SMs (default: this GPU's) or per CLUSTER*BM x BN
    block of C where there are fewer."""
    return walking_grid(M, N, c["BM"], c["BN"], c["CLUSTER"], sms)


def run_hopper_config(c: dict, a, b, out=None, checked=None):
    """Rung 12's kernel (11_tma_store.cu's) with one configuration: what the search times."""
    return _tensor_core_launch("12_autotuned.cu", "matmul", c, lambda M, N: hopper_grid(c, M, N), 384, a, b, out,
                               hopper_shared_bytes(c), arch="sm_90a",
                               operands=lambda a, b, out: (tma.encode(a, (c["BM"], 64)), tma.encode(b, (64, 64)),
                                                           c_map(out)), checked=checked)


HOPPER_DEFAULT = dict(BM=128, BN=256, STAGES=3, CLUSTER=2, GROUP_M=8, BOX_BY_BOX=0)  # rung 11's configuration


def hopper_config(c: dict) -> dict:
    """`c` in full: a search recorded before BOX_BY_BOX joined the space staged the whole tile."""
    return {"BOX_BY_BOX": 0, **c}


# ------------------------------------------------------------- run alone: python -m kernels.cuda.matmul

def _rung6(a, b, out=None):
    return run_config(default_config(detect()), a, b, out)


def _rung12(a, b, out=None):
    return run_hopper_config(HOPPER_DEFAULT, a, b, out)


# Per rung: its launcher (rungs 6 and 12 at one configuration: default_config, HOPPER_DEFAULT), the GPU feature it
# needs, its file and the -D defines it compiles with (on sm_80; the wgmma rungs for sm_90a).
SELF_CHECK = {
    "1_naive": (naive, None, "1_naive.cu", None),
    "2_coalesced": (coalesced, None, "2_coalesced.cu", None),
    "3_smem_tiled": (smem_tiled, None, "3_smem_tiled.cu", None),
    "3b_register_blocked": (register_blocked, None, "3b_register_blocked.cu", None),
    "4_tensor_core": (tensor_core, "tensor_cores", "4_tensor_core.cu", None),
    "5_pipelined": (pipelined, "tensor_cores", "5_pipelined.cu", PIPELINED),
    "6_autotuned": (_rung6, "tensor_cores", "6_autotuned.cu", default_config(None)),
    "7_wgmma": (wgmma, "wgmma", "7_wgmma.cu", WGMMA),
    "8_tma_warp_specialized": (tma_warp_specialized, "wgmma", "8_tma_warp_specialized.cu", TMA_WS),
    "9_persistent": (persistent, "wgmma", "9_persistent.cu", PERSISTENT),
    "10_cluster_multicast": (cluster_multicast, "wgmma", "10_cluster_multicast.cu", CLUSTER_MULTICAST),
    "11_tma_store": (tma_store, "wgmma", "11_tma_store.cu", TMA_STORE),
    "12_autotuned": (_rung12, "wgmma", "12_autotuned.cu", HOPPER_DEFAULT),
}
SLOW = ("1_naive", "2_coalesced", "3_smem_tiled")  # CUDA cores without register blocking: checked, not timed


def _compile_check():
    """Without a GPU: each rung's file compiled by NVRTC, as its launcher would compile it."""
    print("no GPU: each rung's file compile-checked with NVRTC (sm_80; the wgmma rungs sm_90a)")
    for name, (_, needs, filename, defines) in SELF_CHECK.items():
        arch = "sm_90a" if needs == "wgmma" else "sm_80"
        start = time.perf_counter()
        cubin = cuda.compile_cubin(f"matmul/{filename}", arch, tuple(sorted((defines or {}).items())))
        print(f"  {name:24s} {arch:7s} {len(cubin) / 1024:5.0f} KiB cubin  {time.perf_counter() - start:4.1f} s")
    print("running them needs a GPU")


def _self_check(shape: tuple[int, int, int] = (37, 45, 29), timed: tuple[int, int, int] = (4096, 4096, 4096)):
    """On a GPU each rung checked against torch.matmul's fp32 product at a ragged `shape`, then timed beside
    torch.matmul at `timed` (rungs 1-3 checked only); without one, each rung's file compiled."""
    if not WORLD.gpu:
        return _compile_check()
    gpu = detect()
    runs = {name: run for name, (run, needs, _, _) in SELF_CHECK.items() if needs is None or gpu.has(needs)}
    gen = torch.Generator("cuda").manual_seed(0)
    M, N, K = shape
    a, b = (torch.randn(*s, generator=gen, device="cuda").half() for s in ((M, K), (K, N)))
    want = a.float() @ b.float()
    print(f"checked at {M}x{N}x{K} on {gpu.name} ({gpu.arch}), max |error| against the fp32 product "
          f"(torch.matmul's own: {(torch.matmul(a, b).float() - want).abs().max():.3g})")
    for name, run in runs.items():
        error = (run(a, b).float() - want).abs().max().item()
        print(f"  {name:24s} {error:.3g}" + ("" if error < 0.05 else "   WRONG"))
    M, N, K = timed
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    print(f"median ms at {M}x{N}x{K} (triton.testing.do_bench), TFLOP/s")
    for name, run in {"torch.matmul": torch.matmul, **{n: f for n, f in runs.items() if n not in SLOW}}.items():
        ms = triton.testing.do_bench(lambda: run(a, b))
        print(f"  {name:24s} {ms:8.3f} ms  {2 * M * N * K / ms / 1e9:6.1f}")


if __name__ == "__main__":
    _self_check()
