"""Power draw and SM clock while a kernel runs: is a GPU compute-bound, or power-bound?

    python -m ladder.power [SIZE ...] [--record]   cuBLAS and Triton matmul rungs 6 and 7

Each kernel runs back to back for 4 s, three times, the order rotated each round; `nvidia-smi` is
sampled every 100 ms and the first second of each run (clocks settling) is left out. From power,
clock and speed follow what a power cap makes matter: the energy per FLOP (pJ) and the work per SM
clock (GFLOP per cycle: the kernel's own efficiency, whatever the clock). `--record` adds the table
to the GPU's recording (results/). Needs a GPU and nvidia-smi; changes no setting.
"""
from __future__ import annotations

import datetime
import subprocess
import sys
import tempfile
import time

import torch

import kernels.matmul as mm
from kernels import matmul_triton_search as triton_search
from kernels.triton import matmul as tm
from ladder import results
from ladder.runtime import hardware
from ladder.runtime.errors import NotAvailable
from ladder.runtime.world import require_gpu

QUERY = "timestamp,power.draw,power.limit,clocks.sm,clocks.max.sm,clocks_throttle_reasons.active"
THROTTLE = {0x1: "idle", 0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal",
            0x80: "HW power brake"}


def _samples(path: str) -> list[dict]:
    rows = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        try:
            rows.append({"t": datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(),
                         "W": float(f[1].split()[0]), "limit_W": float(f[2].split()[0]),
                         "MHz": float(f[3].split()[0]), "max_MHz": float(f[4].split()[0]), "throttle": int(f[5], 16)})
        except (ValueError, IndexError):  # a header or a line cut short when sampling stops
            pass
    return rows


def sample(kernels: dict, seconds: float = 4.0, settle: float = 1.0) -> dict[str, dict]:
    """Per name: calls/s, mean and max power (W), mean and min SM clock (MHz), the throttle reasons."""
    with tempfile.NamedTemporaryFile("w+", suffix=".csv") as log:
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader", "-lms", "100"],
                               stdout=log)
        spans = {}
        try:
            for name, run in kernels.items():
                run()
                torch.cuda.synchronize()
                start, calls = time.time(), 0
                while time.time() - start < seconds:
                    for _ in range(10):
                        run()
                    torch.cuda.synchronize()
                    calls += 10
                spans[name] = (start + settle, time.time(), calls / (time.time() - start))
        finally:
            smi.terminate()
            smi.wait()
        rows = _samples(log.name)
    out = {}
    for name, (t0, t1, rate) in spans.items():
        s = [r for r in rows if t0 <= r["t"] <= t1]
        reasons = sorted({why for r in s for bit, why in THROTTLE.items() if r["throttle"] & bit})
        out[name] = {"calls_per_s": rate, "W": sum(r["W"] for r in s) / len(s), "max_W": max(r["W"] for r in s),
                     "limit_W": s[0]["limit_W"], "MHz": sum(r["MHz"] for r in s) / len(s),
                     "min_MHz": min(r["MHz"] for r in s), "max_MHz": s[0]["max_MHz"], "throttle": reasons}
    return out


def compare(kernels: dict, flop: float, rounds: int = 3, seconds: float = 4.0) -> dict[str, dict]:
    """sample() of each kernel `rounds` times, the order rotated each round (the clock drifts as the
    GPU warms); per name the means, pJ per FLOP and GFLOP per SM clock, and the throttle reasons."""
    names, runs = list(kernels), {name: [] for name in kernels}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(sample({name: kernels[name]}, seconds)[name])
    out = {}
    for name, ss in runs.items():
        mean = {k: sum(s[k] for s in ss) / len(ss) for k in ("calls_per_s", "W", "MHz")}
        tflops = flop * mean["calls_per_s"] / 1e12
        out[name] = {"tflops": tflops, "W": mean["W"], "limit_W": ss[0]["limit_W"], "MHz": mean["MHz"],
                     "max_MHz": ss[0]["max_MHz"], "pj_per_flop": mean["W"] / tflops,
                     "kflop_per_clock": tflops * 1e3 / mean["MHz"], "rounds": len(ss),
                     "throttle": sorted({why for s in ss for why in s["throttle"]})}
    return out


def table(rows: list[dict]) -> str:
    lines = [f"{'size':>6s} {'kernel':26s} {'TFLOP/s':>8s} {'W':>5s} {'SM MHz':>7s} {'pJ/FLOP':>8s} {'kFLOP/clk':>9s}  throttle"]
    for r in rows:
        lines.append(f"{r['shape'][0]:>5d}³ {r['backend'] + ':' + r['rung']:26s} {r['tflops']:8.1f} {r['W']:5.0f} "
                     f"{r['MHz']:7.0f} {r['pj_per_flop']:8.3f} {r['kflop_per_clock']:9.1f}  {', '.join(r['throttle']) or 'none'}")
    return "\n".join(lines)


def main(sizes: list[int], record: bool = False) -> None:
    rows = []
    for n in sizes:
        a, b = mm.PROBLEM.make_inputs((n, n, n), "cuda", torch.Generator("cuda").manual_seed(1))
        out = torch.empty(n, n, dtype=torch.float16, device="cuda")
        triton_search.autotuned(a, b, out)  # the search, before anything is sampled
        found = compare({("torch", "cublas"): lambda: torch.matmul(a, b, out=out),
                         ("triton", "6_autotuned"): lambda: triton_search.autotuned(a, b, out),
                         ("triton", "7_tma_persistent"): lambda: tm.tma_persistent(a, b, out)}, flop=2 * n ** 3)
        rows += [{"problem": "matmul", "backend": be, "rung": rung, "shape": [n, n, n], **s}
                 for (be, rung), s in found.items()]
    print(f"power limit {rows[0]['limit_W']:.0f} W, SM clock max {rows[0]['max_MHz']:.0f} MHz; means of {rows[0]['rounds']} rounds")
    print(table(rows))
    if record:
        print(f"wrote {results.add_rows(hardware.detect(), 'power', rows)}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not all(x.isdigit() for x in args if x != "--record"):
        sys.exit("usage: python -m ladder.power [SIZE ...] [--record]")
    try:
        require_gpu("ladder.power (it samples the GPU's power draw)")
    except NotAvailable as e:
        sys.exit(f"not available here: {e}")
    main([int(x) for x in args if x != "--record"] or [8192, 4096], record="--record" in args)
