"""The GPU we are on: what it is (detected) and what its datasheet promises.

Datasheet figures are dense (no 2:4 sparsity) peak rates at boost clock, from NVIDIA's
product pages. They are the "advertised" roof; `ladder.ceilings` measures the real one.
Each sheet also holds the limits a kernel is built against (capability, SMs, shared memory
per block), so that a big GPU can stand in for a small one: with KERNEL_LADDER_EMULATE=sm_75
(a T4) or sm_80 (an A100), `detect()` answers with that GPU's limits, CUDA C++ is compiled to
PTX for it and JIT-compiled by the driver for the real GPU. That checks the small GPU's code
paths for correctness; its timings are the real GPU's.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, asdict, replace

import torch

from ladder.runtime.errors import NotAvailable


@dataclass(frozen=True)
class Datasheet:
    name: str
    hbm_TBps: float        # peak DRAM bandwidth
    fp32_TFLOPs: float     # CUDA-core FP32 FMA rate (2 FLOPs per FMA)
    fp16_tc_TFLOPs: float  # dense fp16 tensor-core rate, fp32 accumulate
    capability: tuple[int, int]
    sm_count: int
    smem_per_block_bytes: int  # opt-in maximum: the SM's shared memory less 1 KiB the system keeps


# (pattern matched against torch.cuda.get_device_name(), datasheet); first match wins.
_HOPPER, _A100, _SM86_89 = 227 << 10, 163 << 10, 99 << 10  # shared memory per block (CUDA guide, per capability)
DATASHEETS: list[tuple[str, Datasheet]] = [
    (r"H200", Datasheet("H200 SXM", 4.8, 67.0, 989.0, (9, 0), 132, _HOPPER)),
    (r"H100.*PCIe", Datasheet("H100 PCIe", 2.0, 51.0, 756.0, (9, 0), 114, _HOPPER)),
    (r"H100", Datasheet("H100 SXM", 3.35, 67.0, 989.0, (9, 0), 132, _HOPPER)),
    (r"A100.*80GB.*PCIe|A100 80GB PCIe", Datasheet("A100 80GB PCIe", 1.935, 19.5, 312.0, (8, 0), 108, _A100)),
    (r"A100.*80GB", Datasheet("A100 80GB SXM", 2.039, 19.5, 312.0, (8, 0), 108, _A100)),
    (r"A100", Datasheet("A100 40GB", 1.555, 19.5, 312.0, (8, 0), 108, _A100)),
    (r"A10G", Datasheet("A10G", 0.6, 31.2, 70.0, (8, 6), 80, _SM86_89)),
    (r"A10\b", Datasheet("A10", 0.6, 31.2, 125.0, (8, 6), 72, _SM86_89)),
    (r"L4\b", Datasheet("L4", 0.3, 30.3, 121.0, (8, 9), 58, _SM86_89)),
    (r"T4\b", Datasheet("T4", 0.32, 8.1, 65.0, (7, 5), 40, 64 << 10)),
]

EMULATE_ENV = "KERNEL_LADDER_EMULATE"
# What KERNEL_LADDER_EMULATE may name: the architecture, and the device name whose datasheet stands in.
EMULATED = {"sm_75": "Tesla T4", "sm_80": "NVIDIA A100-SXM4-80GB"}


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
    emulated_on: str | None = None  # the real GPU's name when this one is emulated (KERNEL_LADDER_EMULATE)

    @property
    def slug(self) -> str:
        """The results/ file name. An emulated GPU's starts with 'emulated-', which no device name does."""
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

    @property
    def emulation_note(self) -> str | None:
        """What every output says about an emulated GPU: what it checks, and what its timings are not."""
        if self.emulated_on is None:
            return None
        model = self.datasheet.name.split()[0]  # "T4", "A100"
        article = "an" if model[0] in "AEIO" else "a"
        return f"emulated {self.arch} on {self.emulated_on}: correctness only, timings are not {article} {model}'s"


def emulate(real: GPU, arch: str) -> GPU:
    """`real` answering as the GPU of EMULATED[arch]: its capability, SM count, shared memory per block and
    datasheet (L2 and memory stay the real GPU's: those are what the kernels get)."""
    if arch not in EMULATED:
        raise NotAvailable(f"{EMULATE_ENV}={arch}: emulation covers {', '.join(EMULATED)}")
    sheet = datasheet_for(EMULATED[arch])
    if sheet.capability > real.capability:
        raise NotAvailable(f"{EMULATE_ENV}={arch} on {real.name} ({real.arch}): the driver JIT-compiles PTX "
                           "for its own or a newer GPU only, so emulate an older architecture")
    return replace(real, name=f"emulated {sheet.name.split()[0]} ({arch}) on {real.name}", capability=sheet.capability,
                   sm_count=sheet.sm_count, smem_per_block_bytes=sheet.smem_per_block_bytes, datasheet=sheet,
                   emulated_on=real.name)


def require_real(what: str) -> None:
    """Refuse `what` (recording results) under emulation: the timings would be the real GPU's."""
    gpu = detect()
    if gpu is not None and gpu.emulated_on:
        raise NotAvailable(f"{what} is refused under {EMULATE_ENV}: {gpu.emulation_note}. "
                           f"Unset {EMULATE_ENV} to record {gpu.emulated_on}.")


@functools.lru_cache(maxsize=None)  # launchers ask on every call; the answer does not change
def detect(index: int = 0) -> GPU | None:
    """The visible GPU (or the one KERNEL_LADDER_EMULATE names, emulated on it), or None in the CPU-only world."""
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(index)
    smem = getattr(p, "shared_memory_per_block_optin", 0) or _cupy_attribute("MaxSharedMemoryPerBlockOptin", index)
    gpu = GPU(
        name=p.name,
        capability=(p.major, p.minor),
        sm_count=p.multi_processor_count,
        l2_bytes=getattr(p, "L2_cache_size", 0) or _cupy_attribute("L2CacheSize", index),
        smem_per_block_bytes=smem,
        memory_bytes=p.total_memory,
        datasheet=datasheet_for(p.name),
    )
    arch = os.environ.get(EMULATE_ENV)
    return emulate(gpu, arch) if arch else gpu


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
    if gpu.emulated_on:
        lines.append(f"{gpu.emulation_note} (L2 and memory above are the {gpu.emulated_on}'s)")
    return "\n".join(lines)
