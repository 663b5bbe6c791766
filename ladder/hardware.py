"""The GPU we are on: what it is (detected) and what its datasheet promises.

Datasheet figures are dense (no 2:4 sparsity) peak rates at boost clock, from NVIDIA's
product pages. They are the "advertised" roof; `ladder.ceilings` measures the real one.
"""
from __future__ import annotations

import functools

import re
from dataclasses import dataclass, asdict

import torch


@dataclass(frozen=True)
class Datasheet:
    name: str
    hbm_TBps: float        # peak DRAM bandwidth
    fp32_TFLOPs: float     # CUDA-core FP32 FMA rate (2 FLOPs per FMA)
    fp16_tc_TFLOPs: float  # dense fp16 tensor-core rate, fp32 accumulate


# (pattern matched against torch.cuda.get_device_name(), datasheet); first match wins.
DATASHEETS: list[tuple[str, Datasheet]] = [
    (r"H200", Datasheet("H200 SXM", 4.8, 67.0, 989.0)),
    (r"H100.*PCIe", Datasheet("H100 PCIe", 2.0, 51.0, 756.0)),
    (r"H100", Datasheet("H100 SXM", 3.35, 67.0, 989.0)),
    (r"A100.*80GB.*PCIe|A100 80GB PCIe", Datasheet("A100 80GB PCIe", 1.935, 19.5, 312.0)),
    (r"A100.*80GB", Datasheet("A100 80GB SXM", 2.039, 19.5, 312.0)),
    (r"A100", Datasheet("A100 40GB", 1.555, 19.5, 312.0)),
    (r"A10G", Datasheet("A10G", 0.6, 31.2, 70.0)),
    (r"A10\b", Datasheet("A10", 0.6, 31.2, 125.0)),
    (r"L4\b", Datasheet("L4", 0.3, 30.3, 121.0)),
    (r"T4\b", Datasheet("T4", 0.32, 8.1, 65.0)),
]


def datasheet_for(name: str) -> Datasheet | None:
    for pattern, sheet in DATASHEETS:
        if re.search(pattern, name):
            return sheet
    return None


def slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the results/ file name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass(frozen=True)
class GPU:
    name: str
    capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    smem_per_block_bytes: int   # opt-in maximum a block may ask for
    memory_bytes: int
    datasheet: Datasheet | None

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def has(self, feature: str) -> bool:
        """Architecture features the rungs depend on."""
        need = {"gpu": (0, 0), "cp.async": (8, 0), "bf16": (8, 0), "tma": (9, 0), "wgmma": (9, 0),
                "tensor_cores": (7, 0),
                "triton_mma": (8, 0),   # Triton's tl.dot emits no tensor-core MMA before sm_80
                "flash_attention": (8, 0)}[feature]   # PyTorch's FlashAttention backend: sm_80 and newer
        return self.capability >= need

    def as_dict(self) -> dict:
        d = asdict(self)
        d["arch"] = self.arch
        return d


@functools.lru_cache(maxsize=None)  # launchers ask on every call; the answer does not change
def detect(index: int = 0) -> GPU | None:
    """The visible GPU, or None in the CPU-only world."""
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(index)
    smem = getattr(p, "shared_memory_per_block_optin", 0) or _cupy_attribute("MaxSharedMemoryPerBlockOptin", index)
    return GPU(
        name=p.name,
        capability=(p.major, p.minor),
        sm_count=p.multi_processor_count,
        l2_bytes=getattr(p, "L2_cache_size", 0) or _cupy_attribute("L2CacheSize", index),
        smem_per_block_bytes=smem,
        memory_bytes=p.total_memory,
        datasheet=datasheet_for(p.name),
    )


def _cupy_attribute(key: str, index: int) -> int:
    try:
        import cupy
    except ImportError:
        return 0
    return int(cupy.cuda.Device(index).attributes.get(key, 0))


def describe(gpu: GPU | None) -> str:
    if gpu is None:
        return "No GPU visible: CPU-only world."
    sheet = gpu.datasheet
    lines = [
        f"{gpu.name}  ({gpu.arch}, {gpu.sm_count} SMs, L2 {gpu.l2_bytes / 2**20:.0f} MiB, "
        f"shared memory per block up to {gpu.smem_per_block_bytes // 1024} KiB, "
        f"{gpu.memory_bytes / 2**30:.0f} GiB)",
        f"datasheet: {sheet.name}: {sheet.hbm_TBps} TB/s, fp32 {sheet.fp32_TFLOPs} TFLOP/s, "
        f"fp16 tensor cores {sheet.fp16_tc_TFLOPs} TFLOP/s" if sheet else "datasheet: not in ladder's table",
    ]
    return "\n".join(lines)
