"""Exercises: answer checkers with feedback, and exercise notebooks made from solutions.

One source of truth: each solutions/*.ipynb is complete; exercises/*.ipynb is the same notebook
with every block between `# BEGIN SOLUTION` and `# END SOLUTION` blanked: each assignment
`name = ...` in it stays as `name = ...  # YOUR ANSWER`, every other line goes
(`python -m ladder exercises` rewrites them; tests/test_exercises.py checks they agree).
A checker never raises on an unanswered `...`: it prints "not answered yet".
"""
from __future__ import annotations

import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^([ \t]*)# BEGIN SOLUTION\n.*?^[ \t]*# END SOLUTION\n?", re.M | re.S)


_ASSIGN = re.compile(r"^([ \t]*)(\w+)\s*=(?!=)", re.M)


def strip_solutions(source: str) -> str:
    def blank(m: re.Match) -> str:
        names = dict.fromkeys((ind, name) for ind, name in _ASSIGN.findall(m.group(0)))
        return "".join(f"{ind}{name} = ...  # YOUR ANSWER\n" for ind, name in names)
    return _BLOCK.sub(blank, source)


def exercise_from_solution(nb):
    """The exercise notebook: solution blocks blanked, outputs kept (they are the run's)."""
    import copy
    ex = copy.deepcopy(nb)
    for cell in ex.cells:
        if cell.cell_type == "code" and "# BEGIN SOLUTION" in cell.source:
            cell.source = strip_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
    return ex


def write_exercises() -> list[Path]:
    import nbformat
    written = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        target = ROOT / "exercises" / sol.name
        nbformat.write(exercise_from_solution(nbformat.read(sol, as_version=4)), target)
        written.append(target)
    return written


# ---------------------------------------------------------------- answer checking

def _unanswered(answer) -> bool:
    return answer is ... or answer is None


def _close(answer, want: float, rel: float = 0.02) -> bool:
    try:
        return math.isclose(float(answer), want, rel_tol=rel)
    except (TypeError, ValueError):
        return False


def _report(name: str, answer, want, hints: list[tuple[float, str]], unit: str, rel: float = 0.02) -> None:
    if _unanswered(answer):
        print(f"{name}: not answered yet")
    elif _close(answer, want, rel):
        print(f"{name}: correct ({want:.4g} {unit})")
    else:
        hint = next((h for wrong, h in hints if _close(answer, wrong, rel)), None)
        print(f"{name}: not quite: {hint}" if hint else f"{name}: not quite ({answer!r} is not it); recount step by step")


class VectorAddIntensity:
    """C = A + B with N fp16 elements: FLOPs, bytes, intensity, bound, minimum time."""

    def __init__(self, n: float = 1e9, bytes_per_element: int = 2):
        self.n, self.size = n, bytes_per_element
        self.flops = n
        self.bytes = 3 * n * bytes_per_element
        self.intensity = self.flops / self.bytes

    def check_flops(self, answer) -> None:
        _report("(1) FLOPs", answer, self.flops, [
            (2 * self.n, "an add is one floating-point operation per element; there is no multiply here"),
            (3 * self.n, "count operations, not memory accesses: one add per output element")], "FLOP")

    def check_bytes(self, answer) -> None:
        n, s = self.n, self.size
        return _report("(2) bytes moved", answer, self.bytes, [
            (2 * n * s, "you counted only the reads; C must be written back too"),
            (n * s, "you counted one array; A and B are read and C is written"),
            (3 * n, "you counted elements, not bytes: an fp16 element is 2 bytes"),
            (3 * n * 4, "fp16 is 2 bytes per element, not 4"),
            (4 * n * s, "C is written, not read: 3 arrays cross the bus once each")], "bytes")

    def check_intensity(self, answer) -> None:
        _report("(3) arithmetic intensity", answer, self.intensity, [
            (self.n / (2 * self.n * self.size), "that divides by the reads only; the write of C counts"),
            (self.bytes / self.flops, "intensity is FLOPs per byte, not bytes per FLOP"),
            (self.n / (3 * self.n), "divide by bytes, not elements (2 bytes each)")], "FLOP/byte")

    def check_bound(self, answer, ridge_flop_per_byte: float) -> None:
        want = "memory" if self.intensity < ridge_flop_per_byte else "compute"
        if _unanswered(answer):
            print("(3b) memory- or compute-bound: not answered yet")
        elif str(answer).strip().lower().startswith(want):
            print(f"(3b) {want}-bound: correct ({self.intensity:.3f} FLOP/B is far left of the "
                  f"ridge point at {ridge_flop_per_byte:.0f} FLOP/B)")
        else:
            print(f"(3b) not quite: compare {self.intensity:.3f} FLOP/B with the ridge point "
                  f"{ridge_flop_per_byte:.0f} FLOP/B; left of it, bandwidth limits the speed")

    def min_time_ms(self, bandwidth_TBps: float) -> float:
        return self.bytes / (bandwidth_TBps * 1e12) * 1e3

    def check_min_time_ms(self, answer, bandwidth_TBps: float) -> None:
        want = self.min_time_ms(bandwidth_TBps)
        _report(f"(4) minimum time at {bandwidth_TBps:.2f} TB/s", answer, want, [
            (want * 1e3, "that is in microseconds; the question asks for milliseconds"),
            (want * 2 / 3, "that moves only the reads; the write of C takes time too"),
            (self.flops / (bandwidth_TBps * 1e12) * 1e3, "divide bytes (not FLOPs) by bandwidth")], "ms")
