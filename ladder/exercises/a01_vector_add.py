"""Assignment 01: the arithmetic intensity of vector add (C = A + B, N fp16 elements)."""
from __future__ import annotations

from ladder.exercises.grading import Result, check_number, not_answered, not_yet, passed, unanswered


def _counts(n: float, size: int) -> tuple[float, float, float]:
    """FLOPs, bytes and intensity of C = A + B: worked out when a check runs, never kept where a student could
    read them."""
    flops, moved = n, 3 * n * size
    return flops, moved, flops / moved


class VectorAddIntensity:
    """The checks of FLOPs, bytes, intensity, bound, minimum time of C = A + B (n elements of `size` bytes)."""

    def __init__(self, n: float = 1e9, bytes_per_element: int = 2):
        self._n, self._size = n, bytes_per_element

    def check_flops(self, answer) -> Result:
        return check_number("(1) FLOPs", answer, _counts(self._n, self._size)[0], [
            (2 * self._n, "an add is one floating-point operation per element; there is no multiply here"),
            (3 * self._n, "count operations, not memory accesses: one add per output element")], "FLOP")

    def check_bytes(self, answer) -> Result:
        n, s = self._n, self._size
        return check_number("(2) bytes moved", answer, _counts(n, s)[1], [
            (2 * n * s, "you counted only the reads; C must be written back too"),
            (n * s, "you counted one array; A and B are read and C is written"),
            (3 * n, "you counted elements, not bytes: an fp16 element is 2 bytes"),
            (3 * n * 4, "fp16 is 2 bytes per element, not 4"),
            (4 * n * s, "C is written, not read: 3 arrays cross the bus once each")], "bytes")

    def check_intensity(self, answer) -> Result:
        flops, moved, intensity = _counts(self._n, self._size)
        return check_number("(3) arithmetic intensity", answer, intensity, [
            (flops / (2 * self._n * self._size), "that divides by the reads only; the write of C counts"),
            (moved / flops, "intensity is FLOPs per byte, not bytes per FLOP"),
            (flops / (3 * self._n), "divide by bytes, not elements (2 bytes each)")], "FLOP/byte")

    def check_bound(self, answer, ridge_flop_per_byte: float) -> Result:
        task = "(3b) bound"
        intensity = _counts(self._n, self._size)[2]
        want = "memory" if intensity < ridge_flop_per_byte else "compute"
        if unanswered(answer):
            return not_answered(task)
        if not isinstance(answer, str) or answer.strip().lower() not in ("memory", "compute"):
            return not_yet(task, f'answer "memory" or "compute" (a string), not {answer!r}')
        if answer.strip().lower() == want:
            return passed(task, f"{want}-bound: correct ({intensity:.3f} FLOP/B is far "
                                f"{'left' if want == 'memory' else 'right'} of the ridge point at "
                                f"{ridge_flop_per_byte:.0f} FLOP/B)")
        return not_yet(task, f"not quite: place your intensity from (3) against the ridge point "
                             f"{ridge_flop_per_byte:.0f} FLOP/B; left of it, bandwidth limits the speed")

    def check_min_time_ms(self, answer, bandwidth_TBps: float) -> Result:
        flops, moved, _ = _counts(self._n, self._size)
        want = moved / (bandwidth_TBps * 1e12) * 1e3
        return check_number(f"(4) minimum time at {bandwidth_TBps:.2f} TB/s", answer, want, [
            (want * 1e3, "that is in microseconds; the question asks for milliseconds"),
            (want * 2 / 3, "that moves only the reads; the write of C takes time too"),
            (flops / (bandwidth_TBps * 1e12) * 1e3, "divide bytes (not FLOPs) by bandwidth")], "ms")
