"""Nsight Compute, from Python: profile one rung once and read its counters back.

The rung runs in a child process (`python -m ladder run-once ...`) between cudaProfilerStart and
cudaProfilerStop, so input set-up kernels are not counted; ncu runs with `--clock-control none`
(the GPU's clocks as we found them) and `--print-units base` (bytes, not "Gbyte").
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys

from ladder.world import NotAvailable

# name we report -> Nsight Compute metric (summed over the rung's kernels)
METRICS = {
    "dram_bytes_read": "dram__bytes_read.sum",
    "dram_bytes_write": "dram__bytes_write.sum",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_to_sm_bytes": "l1tex__m_xbar2l1tex_read_bytes.sum",  # what the SMs receive from L2, TMA included
    "global_load_instructions": "smsp__inst_executed_op_global_ld.sum",
    "global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "shared_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "tensor_instructions": "sm__inst_executed_pipe_tensor_op_hmma.sum",  # HMMA and HGMMA
    "tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "duration_ns": "gpu__time_duration.sum",
}


def available() -> bool:
    return shutil.which("ncu") is not None


def profile(problem: str, backend: str, rung: str, shape: tuple, metrics: dict | None = None) -> dict:
    if not available():
        raise NotAvailable("Nsight Compute (ncu) is not on PATH here.")
    metrics = metrics or METRICS
    out = _ncu(problem, backend, rung, shape, metrics.values())
    unknown = {m for m in metrics.values() if f"Failed to find metric regex:^{m}" in out.stdout + out.stderr}
    if out.returncode and unknown:  # a counter this GPU or ncu version lacks: the others still count
        out = _ncu(problem, backend, rung, shape, [m for m in metrics.values() if m not in unknown])
    rows = [line for line in out.stdout.splitlines() if line.startswith('"')]
    if out.returncode or len(rows) < 3:
        raise RuntimeError(f"ncu failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    table = list(csv.DictReader(io.StringIO("\n".join([rows[0]] + rows[2:]))))  # rows[1] = units
    result = {"kernels": [r.get("Kernel Name", "") for r in table]}
    for name, metric in metrics.items():
        values = [r.get(metric, "").replace(",", "") for r in table]
        numbers = [float(v) for v in values if v not in ("", "n/a")]
        result[name] = sum(numbers) if numbers else None
    return result


def _ncu(problem: str, backend: str, rung: str, shape: tuple, metrics) -> subprocess.CompletedProcess:
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
           "--print-units", "base", "--metrics", ",".join(metrics),
           sys.executable, "-m", "ladder", "run-once", problem, backend, rung, *map(str, shape)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "SpeedOfLight_RooflineChart")


def sections_command(problem: str, backend: str, rung: str, shape: tuple, python: str = "python") -> list[str]:
    """The ncu command that prints SECTIONS (as text) for one rung run once at `shape`."""
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off",
            *[arg for name in SECTIONS for arg in ("--section", name)],
            python, "-m", "ladder", "run-once", problem, backend, rung, *map(str, shape)]


def sections(problem: str, backend: str, rung: str, shape: tuple) -> str:
    """ncu's pages for SECTIONS, as it prints them, for one rung run once (its own ==PROF== lines left out)."""
    if not available():
        raise NotAvailable("Nsight Compute (ncu) is not on PATH here.")
    out = subprocess.run(sections_command(problem, backend, rung, shape, sys.executable),
                         capture_output=True, text=True, timeout=600)
    text = "\n".join(line for line in out.stdout.splitlines() if not line.startswith("==PROF=="))
    if out.returncode or "Section:" not in text:
        raise RuntimeError(f"ncu failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return text.strip("\n")


def summary(metrics: dict, shape: tuple, min_bytes: float) -> str:
    dram = (metrics["dram_bytes_read"] or 0) + (metrics["dram_bytes_write"] or 0)
    per_req = (metrics["global_load_sectors"] or 0) / max(metrics["global_load_requests"] or 1, 1)
    return (f"DRAM {dram / 1e9:.3f} GB ({dram / min_bytes:.2f}x the minimum), "
            f"{metrics['global_load_instructions'] or 0:.3g} global load instr., "
            f"{per_req:.1f} sectors/request")
