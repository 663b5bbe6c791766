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

import torch

from ladder.runtime.errors import NotAvailable

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
    "instructions": "smsp__inst_executed.sum",  # warp instructions, all pipes
    "xu_pipe_pct": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",  # MUFU (EX2, RCP, ...) and conversions
    "duration_ns": "gpu__time_duration.sum",
}


# Why warps were not issuing (Nsight Compute's WarpStateStats section): for each reason, the average number of
# warps stalled on it per cycle in which the scheduler issued; they add up, with "selected" (the issuing warp,
# 1 by definition), to the warp cycles each issued instruction took. On sm_90, "gmma" is a warp waiting on wgmma.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "math_pipe_throttle", "wait",
                 "not_selected", "gmma", "lg_throttle", "dispatch_stall", "tex_throttle", "branch_resolving",
                 "membar", "drain", "imc_miss", "no_instruction", "sleeping", "misc")
# the same run's occupancy and launch: how many warps there were to pick from, and what limited them
WARP_STATE = {
    **{f"stall_{r}": f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS},
    "cycles_per_issue": "smsp__average_warp_latency_per_inst_issued.ratio",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "warps_eligible": "smsp__warps_eligible.avg.per_cycle_active",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "occupancy_theoretical_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers_per_thread": "launch__registers_per_thread",
    "shared_bytes_per_block": "launch__shared_mem_per_block_allocated",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "limit_registers": "launch__occupancy_limit_registers",
    "limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "limit_blocks": "launch__occupancy_limit_blocks",
    "duration_ns": "gpu__time_duration.sum",
    "tensor_pipe_pct": METRICS["tensor_pipe_pct"],  # busy share x duration: the kernel's tensor-core time
}


# What decides a time by instructions over the rate they issue at: the time, the instructions (warp instructions, all
# pipes), the share of cycles in which a scheduler issued one, and the resident warps it picked from
# (`python -m ladder issue`; a lesson's "instructions and issue rate" table)
ISSUE = {"duration_ns": METRICS["duration_ns"], "instructions": METRICS["instructions"],
         "issue_active_pct": WARP_STATE["issue_active_pct"], "occupancy_pct": WARP_STATE["occupancy_pct"]}


def issue_table(rows: list[dict], label: str) -> str:
    """ISSUE's counts of profiled rungs (rows as `python -m ladder issue` records them), a line each."""
    width = max([24, *(len(f"{r['backend']}:{r['rung']}") + 1 for r in rows)])
    lines = [f"{'rung':{width}s} {'ncu ms':>7s} {'instr. (G)':>10s} {'issued':>7s} {'occupancy':>9s}"]
    def cell(value, scale: float, width: int, form: str, unit: str = "") -> str:   # "-" where ncu gave no count
        return "-".rjust(width) if value is None else f"{value / scale:{width - len(unit)}{form}}{unit}"
    for r in rows:
        lines.append(f"{r['backend'] + ':' + r['rung']:{width}s} {cell(r['duration_ns'], 1e6, 7, '.3f')} "
                     f"{cell(r['instructions'], 1e9, 10, '.3f')} {cell(r['issue_active_pct'], 1, 7, '.1f', '%')} "
                     f"{cell(r['occupancy_pct'], 1, 9, '.1f', '%')}")
    return "\n".join(lines + [f"(ncu, {label}; issued: share of cycles a scheduler issued an instruction; occupancy: "
                              "resident warps, % of the SM's most)"])


def available() -> bool:
    return shutil.which("ncu") is not None


def _table(problem: str, backend: str, rung: str, shape: tuple, metrics: dict) -> list[dict]:
    """ncu's raw page for one rung run once: a row per kernel launched, each metric a column."""
    return _program_table(run_once_command(problem, backend, rung, shape), metrics)


def run_once_command(problem: str, backend: str, rung: str, shape: tuple) -> list[str]:
    """The program that runs one rung once at `shape` between cudaProfilerStart and Stop."""
    return [sys.executable, "-m", "ladder", "run-once", problem, backend, rung, *map(str, shape)]


def profiled_once(call) -> None:
    """call() once to compile and warm up, then once more between cudaProfilerStart and Stop (what ncu, started with
    --profile-from-start off, counts): the body of a run_once_command's program."""
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def program_profile(program: list[str], metrics: dict) -> dict:
    """profile's answer for whatever `program` runs between cudaProfilerStart and Stop."""
    return _summed(_program_table(program, metrics), metrics)


def _program_table(program: list[str], metrics: dict) -> list[dict]:
    if not available():
        raise NotAvailable("Nsight Compute (ncu) is not on PATH here.")
    out = _ncu(program, list(dict.fromkeys(metrics.values())))
    unknown = {m for m in metrics.values() if f"Failed to find metric regex:^{m}" in out.stdout + out.stderr}
    if out.returncode and unknown:  # a counter this GPU or ncu version lacks: the others still count
        out = _ncu(program, [m for m in dict.fromkeys(metrics.values()) if m not in unknown])
    rows = [line for line in out.stdout.splitlines() if line.startswith('"')]
    if out.returncode or len(rows) < 3:
        raise RuntimeError(f"ncu failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return list(csv.DictReader(io.StringIO("\n".join([rows[0]] + rows[2:]))))  # rows[1] = units


def _number(row: dict, metric: str) -> float | None:
    value = row.get(metric, "").replace(",", "")
    return None if value in ("", "n/a") else float(value)


def profile(problem: str, backend: str, rung: str, shape: tuple, metrics: dict | None = None) -> dict:
    """`metrics` (default METRICS) of one rung, each summed over the kernels it launches; a percentage of a peak
    (a share of each kernel's own time) is averaged over the kernels, weighted by their durations."""
    metrics = metrics or METRICS
    return _summed(_table(problem, backend, rung, shape, metrics), metrics)


def warp_states(problem: str, backend: str, rung: str, shape: tuple) -> dict:
    """WARP_STATE of one rung: stall reasons, issue activity, occupancy and launch of the kernel that takes most of
    its time (a ratio or a launch setting does not add up over kernels), with that kernel's name and share."""
    return _main_kernel(_table(problem, backend, rung, shape, WARP_STATE))


def profile_and_warp_states(problem: str, backend: str, rung: str, shape: tuple) -> tuple[dict, dict]:
    """`profile` and `warp_states` of one rung from a single ncu run: its start-up, not the kernel's replays,
    is most of a run's time."""
    table = _table(problem, backend, rung, shape, {**METRICS, **WARP_STATE})
    return _summed(table, METRICS), _main_kernel(table)


def _summed(table: list[dict], metrics: dict) -> dict:
    times = [_number(r, METRICS["duration_ns"]) or 0.0 for r in table]
    result = {"kernels": [r.get("Kernel Name", "") for r in table], "kernel_ns": times}
    for name, metric in metrics.items():
        found = [(v, t) for r, t in zip(table, times) if (v := _number(r, metric)) is not None]
        if not found:
            result[name] = None
        elif ".pct_of_peak" in metric and sum(t for _, t in found):
            result[name] = sum(v * t for v, t in found) / sum(t for _, t in found)
        else:
            result[name] = sum(v for v, _ in found)
    return result


def _main_kernel(table: list[dict]) -> dict:
    times = [_number(r, WARP_STATE["duration_ns"]) or 0.0 for r in table]
    main = max(range(len(table)), key=times.__getitem__)
    result = {"kernel": table[main].get("Kernel Name", ""), "kernels": len(table),
              "time_share": times[main] / sum(times) if sum(times) else 1.0}
    result.update({name: _number(table[main], metric) for name, metric in WARP_STATE.items()})
    return result


def top_stalls(states: dict, n: int = 3) -> list[tuple[str, float]]:
    """The `n` reasons warps waited on most, as (reason, warps stalled per issued instruction), largest first."""
    found = [(r, states.get(f"stall_{r}") or 0.0) for r in STALL_REASONS]
    return sorted((x for x in found if x[1] > 0), key=lambda x: -x[1])[:n]


def _ncu(program: list[str], metrics) -> subprocess.CompletedProcess:
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
           "--print-units", "base", "--metrics", ",".join(metrics), *program]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "SpeedOfLight_RooflineChart")


def sections_command(problem: str, backend: str, rung: str, shape: tuple, python: str = "python") -> list[str]:
    """The ncu command that prints SECTIONS (as text) for one rung run once at `shape`."""
    return ncu_sections_command([python, *run_once_command(problem, backend, rung, shape)[1:]])


def ncu_sections_command(program: list[str]) -> list[str]:
    """The ncu command that prints SECTIONS for what `program` runs between cudaProfilerStart and Stop."""
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off",
            *[arg for name in SECTIONS for arg in ("--section", name)], *program]


def sections(problem: str, backend: str, rung: str, shape: tuple) -> str:
    """ncu's pages for SECTIONS, as it prints them, for one rung run once (its own ==PROF== lines left out)."""
    return program_sections(sections_command(problem, backend, rung, shape, sys.executable))


def program_sections(command: list[str]) -> str:
    """Run an ncu command of `ncu_sections_command`'s and return its pages (its own ==PROF== lines left out)."""
    if not available():
        raise NotAvailable("Nsight Compute (ncu) is not on PATH here.")
    out = subprocess.run(command, capture_output=True, text=True, timeout=600)
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
