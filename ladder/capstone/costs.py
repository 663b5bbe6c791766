"""What each op of the model must cost, from its shapes alone: FLOPs, the fewest bytes (each input read
once, the output written once, fp16), its place on the roofline and the floor under its time.
Then Amdahl's law: what a faster op can buy end to end."""
from __future__ import annotations

from dataclasses import dataclass

from ladder import roofline
from ladder.capstone.model import Config

FP16 = 2  # bytes an element


@dataclass(frozen=True)
class Op:
    name: str
    family: str
    per_forward: int       # how many times one forward pass runs it
    flops: float           # one run's
    bytes: float           # one run's fewest bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def floor_ms(self, ceilings: dict) -> float:
        """The best time the roofline allows: the FLOPs at the attainable rate (at least the bytes at the
        copy bandwidth, for an op with next to no FLOPs)."""
        bandwidth, peak = ceilings["copy_TBps"], ceilings["fp16_tc_TFLOPs"]
        by_memory = self.bytes / (bandwidth * 1e12) * 1e3
        if not self.flops:
            return by_memory
        return max(self.flops / (roofline.attainable(self.intensity, bandwidth, peak) * 1e12) * 1e3, by_memory)

    def bound(self, ceilings: dict) -> str:
        return roofline.bound(self.intensity, ceilings["copy_TBps"], ceilings["fp16_tc_TFLOPs"])


def linear(name: str, family: str, M: int, K: int, N: int, count: int, bias: bool = True) -> Op:
    return Op(name, family, count, 2 * M * K * N, FP16 * (M * K + K * N + M * N + (N if bias else 0)))


def ops(cfg: Config) -> list[Op]:
    """Every op of one forward pass at cfg's sizes, the per-layer ones once with their count."""
    M, d, L, H, S, D = cfg.tokens, cfg.d_model, cfg.layers, cfg.heads, cfg.seq, cfg.head_dim
    activation = FP16 * M * d                          # one (tokens × d) fp16 matrix
    return [
        linear("qkv projection", "matmul", M, d, 3 * d, L),
        # causal: half the score matrix is computed; Q, K, V read once and O written once
        Op("attention (causal)", "attention", L, 4 * cfg.batch * H * S * S * D * 0.5, 4 * activation),
        linear("attention output proj.", "matmul", M, d, d, L),
        linear("MLP up (d -> 4d)", "matmul", M, d, 4 * d, L),
        # an elementwise pass: reads and writes the 4d-wide activation; ~10 FLOPs an element, left out
        Op("GELU", "GELU/bias", L, 0, 2 * 4 * activation),
        linear("MLP down (4d -> d)", "matmul", M, 4 * d, d, L),
        Op("layer norm", "layer norm", 2 * L + 1, 0, 2 * activation + 2 * FP16 * d),
        Op("residual add", "elementwise", 2 * L, 0, 3 * activation),
        linear("vocabulary projection", "matmul", M, d, cfg.vocab, 1, bias=False),
    ]


# The two swaps this lesson makes, and the ops each replaces (ours runs them as one kernel).
SWAPS = {"attention": ("attention (causal)",), "MLP up + GELU": ("MLP up (d -> 4d)", "GELU")}


def fused_up_gelu(cfg: Config) -> Op:
    """MLP up and GELU as our fused kernel runs them: the 4d-wide activation written once, never re-read."""
    M, d = cfg.tokens, cfg.d_model
    return linear("MLP up + GELU (fused)", "matmul", M, d, 4 * d, cfg.layers)


def floor_table(cfg: Config, ceilings: dict, label: str) -> str:
    """One line per op: FLOPs, bytes, intensity, bound, floor per run and per forward pass."""
    rows = [f"{cfg.name}: d={cfg.d_model}, {cfg.heads} heads of {cfg.head_dim}, {cfg.layers} layers, "
            f"batch {cfg.batch} x sequence {cfg.seq}, fp16; floors from the ceilings {label}:",
            f"tensor-core roof {ceilings['fp16_tc_TFLOPs']:.0f} TFLOP/s, copy bandwidth {ceilings['copy_TBps']:.2f} "
            f"TB/s, ridge point {ceilings['fp16_tc_TFLOPs'] / ceilings['copy_TBps']:.0f} FLOP/B",
            f"{'op':24s} {'x':>3s} {'GFLOP':>8s} {'MB':>8s} {'FLOP/B':>7s} {'bound':>8s} {'floor µs':>9s} {'all µs':>8s}"]
    total = 0.0
    for op in ops(cfg):
        floor = op.floor_ms(ceilings)
        total += floor * op.per_forward
        rows.append(f"{op.name:24s} {op.per_forward:3d} {op.flops / 1e9:8.2f} {op.bytes / 1e6:8.2f} "
                    f"{op.intensity:7.1f} {op.bound(ceilings):>8s} {1e3 * floor:9.1f} {1e3 * floor * op.per_forward:8.0f}")
    rows.append(f"floor of one forward pass: {total:.3f} ms (every op at its roof, nothing else)")
    return "\n".join(rows)


def amdahl(fraction: float, speedup: float) -> float:
    """End-to-end speed-up when a `fraction` of the time runs `speedup` times faster: 1 / ((1 - f) + f / s)."""
    return 1.0 / ((1.0 - fraction) + fraction / speedup)


def predicted_ms(baseline_ms: float, swaps: list[tuple[float, float]]) -> float:
    """Amdahl for several swaps: `swaps` is [(the replaced op's ms per forward pass, its speed-up)]; each
    saves its time minus its time over its speed-up."""
    return baseline_ms - sum(ms - ms / speedup for ms, speedup in swaps)
