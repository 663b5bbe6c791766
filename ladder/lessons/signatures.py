"""The SASS signature tables lessons 01-04 print (no GPU needed: the kernels compiled here): which opcode
families each variant's SASS holds, the families a ladder meets in the order its rungs bring them (02a's CUDA
matmul table, 03's Triton one, the attention lessons' with their own families), and the widths of its global
loads (01's vector add).
"""
from __future__ import annotations

from ladder.sass import Sass

# Opcode families that mark each step of a ladder, in the order a lesson meets them.
SIGNATURE_FAMILIES = ("LDG", "LDS", "BAR", "HMMA", "LDSM", "LDGSTS", "HGMMA")


def signature_table(variants: dict[str, Sass], families: tuple[str, ...] = SIGNATURE_FAMILIES) -> str:
    """Which opcode families each variant's SASS contains ('x' = present): compiler-version stable."""
    widths = [max(7, len(f) + 1) for f in families]   # a column: the family's name and a space, at least 7
    head = f"{'':26s}" + "".join(f"{f:>{w}s}" for f, w in zip(families, widths))
    rows = [f"{name:26s}" + "".join(f"{'x' if s.count(f) else '-':>{w}s}" for f, w in zip(families, widths))
            for name, s in variants.items()]
    return "\n".join([head] + rows)


def load_widths(variants: dict[str, Sass]) -> str:
    """'name: 16-bit global loads' per variant (stable across compiler versions)."""
    return "\n".join(f"{name:28s} global loads: " + ", ".join(f"{b}-bit" for b in sorted(s.global_load_bits()))
                     for name, s in variants.items())
