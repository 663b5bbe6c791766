"""Power draw and SM clock while a kernel runs: is a GPU compute-bound, or power-bound?

    python -m ladder.power [SIZE ...]    cuBLAS and Triton matmul rungs 6 and 7, 4 s each per size

`nvidia-smi` is sampled every 100 ms while the kernel runs back to back; the first second (clocks
settling) is left out. Needs a GPU and nvidia-smi; changes no setting.
"""
from __future__ import annotations

import datetime
import subprocess
import sys
import tempfile
import time

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
    import torch
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


def main(sizes: list[int]) -> None:
    import torch
    import kernels.matmul as mm
    from kernels.triton import matmul as tm
    for n in sizes:
        a, b = mm.PROBLEM.make_inputs((n, n, n), "cuda", torch.Generator("cuda").manual_seed(1))
        out = torch.empty(n, n, dtype=torch.float16, device="cuda")
        tm.autotuned(a, b, out)  # the search, before anything is sampled
        found = sample({"torch:cublas": lambda: torch.matmul(a, b, out=out),
                        "triton:6_autotuned": lambda: tm.autotuned(a, b, out),
                        "triton:7_tma_persistent": lambda: tm.tma_persistent(a, b, out)})
        for name, s in found.items():
            print(f"{n}^3 {name:24s} {2 * n ** 3 * s['calls_per_s'] / 1e12:6.1f} TFLOP/s  "
                  f"{s['W']:4.0f} W (max {s['max_W']:.0f}, limit {s['limit_W']:.0f})  SM clock {s['MHz']:5.0f} MHz "
                  f"(min {s['min_MHz']:.0f}, max {s['max_MHz']:.0f})  throttle: {', '.join(s['throttle']) or 'none'}")


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [8192, 4096])
