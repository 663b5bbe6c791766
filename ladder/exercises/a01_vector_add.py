"""Assignment 01: the arithmetic intensity of vector add (C = A + B, N fp16 elements)."""
from __future__ import annotations

from ladder.exercises.grading import Result, check_number, not_answered, not_yet, passed, unanswered


class VectorAddIntensity:
    """FLOPs, bytes, intensity, bound, minimum time of C = A + B."""

    def __init__(self, n: float = 1e9, bytes_per_element: int = 2):
        self.n, self.size = n, bytes_per_element
        self.flops = n
        self.bytes = 3 * n * bytes_per_element
        self.intensity = self.flops / self.bytes

    def check_flops(self, answer) -> Result:
        return check_number("(1) FLOPs", answer, self.flops, [
            (2 * self.n, "an add is one floating-point operation per element; there is no multiply here"),
            (3 * self.n, "count operations, not memory accesses: one add per output element")], "FLOP")

    def check_bytes(self, answer) -> Result:
        n, s = self.n, self.size
        return check_number("(2) bytes moved", answer, self.bytes, [
            (2 * n * s, "you counted only the reads; C must be written back too"),
            (n * s, "you counted one array; A and B are read and C is written"),
            (3 * n, "you counted elements, not bytes: an fp16 element is 2 bytes"),
            (3 * n * 4, "fp16 is 2 bytes per element, not 4"),
            (4 * n * s, "C is written, not read: 3 arrays cross the bus once each")], "bytes")

    def check_intensity(self, answer) -> Result:
        return check_number("(3) arithmetic intensity", answer, self.intensity, [
            (self.n / (2 * self.n * self.size), "that divides by the reads only; the write of C counts"),
            (self.bytes / self.flops, "intensity is FLOPs per byte, not bytes per FLOP"),
            (self.n / (3 * self.n), "divide by bytes, not elements (2 bytes each)")], "FLOP/byte")

    def check_bound(self, answer, ridge_flop_per_byte: float) -> Result:
        task = "(3b) bound"
        want = "memory" if self.intensity < ridge_flop_per_byte else "compute"
        if unanswered(answer):
            return not_answered(task)
        if str(answer).strip().lower().startswith(want):
            return passed(task, f"{want}-bound: correct ({self.intensity:.3f} FLOP/B is far left of the "
                                f"ridge point at {ridge_flop_per_byte:.0f} FLOP/B)")
        return not_yet(task, f"not quite: compare {self.intensity:.3f} FLOP/B with the ridge point "
                             f"{ridge_flop_per_byte:.0f} FLOP/B; left of it, bandwidth limits the speed")

    def min_time_ms(self, bandwidth_TBps: float) -> float:
        return self.bytes / (bandwidth_TBps * 1e12) * 1e3

    def check_min_time_ms(self, answer, bandwidth_TBps: float) -> Result:
        want = self.min_time_ms(bandwidth_TBps)
        return check_number(f"(4) minimum time at {bandwidth_TBps:.2f} TB/s", answer, want, [
            (want * 1e3, "that is in microseconds; the question asks for milliseconds"),
            (want * 2 / 3, "that moves only the reads; the write of C takes time too"),
            (self.flops / (bandwidth_TBps * 1e12) * 1e3, "divide bytes (not FLOPs) by bandwidth")], "ms")
