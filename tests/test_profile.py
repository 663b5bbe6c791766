"""ladder.profile reads ncu's raw CSV page: one ncu run gives both a rung's summed counters and its main kernel's
warp states, the same as two runs would."""
import subprocess

from ladder import profile


def _fake_ncu(program, metrics):
    metrics = list(metrics)
    kernels = [("small", 1000.0), ("big", 3000.0)]
    head = ",".join(f'"{c}"' for c in ["ID", "Kernel Name", *metrics])
    units = ",".join('""' for _ in range(2 + len(metrics)))
    rows = []
    for i, (name, ns) in enumerate(kernels):
        values = [ns if m == profile.METRICS["duration_ns"] else (50.0 + i if "pct" in m else 10.0 * (i + 1) + len(m))
                  for m in metrics]
        rows.append(",".join(f'"{v}"' for v in [i, name, *values]))
    return subprocess.CompletedProcess([], 0, "\n".join(["==PROF== done", head, units, *rows]), "")


def test_one_ncu_run_gives_the_profile_and_the_warp_states_of_two(monkeypatch):
    monkeypatch.setattr(profile, "available", lambda: True)
    monkeypatch.setattr(profile, "_ncu", _fake_ncu)
    job = ("matmul", "cuda", "6_autotuned", (64, 64, 64))
    both = profile.profile_and_warp_states(*job)
    assert both == (profile.profile(*job), profile.warp_states(*job))
    counters, states = both
    assert counters["kernel_ns"] == [1000.0, 3000.0]
    assert counters["tensor_pipe_pct"] == (50.0 * 1000 + 51.0 * 3000) / 4000   # weighted by each kernel's time
    assert states["kernel"] == "big" and states["time_share"] == 0.75
    program = profile.run_once_command(*job)
    assert program[1:] == ["-m", "ladder", "run-once", "matmul", "cuda", "6_autotuned", "64", "64", "64"]
    assert profile.program_profile(program, profile.METRICS) == counters
