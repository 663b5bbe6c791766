"""Small helpers the notebooks call: show a rung's source, the diff from the previous rung,
and the SASS signature table."""
from __future__ import annotations

import difflib
import inspect
from pathlib import Path

from ladder import sass

ROOT = Path(__file__).resolve().parent.parent


def show_source(path: str) -> None:
    print((ROOT / path).read_text())


def show_diff(before: str, after: str) -> None:
    """Unified diff between two rungs' files: the one idea the second rung adds."""
    a, b = (ROOT / before).read_text().splitlines(), (ROOT / after).read_text().splitlines()
    print("\n".join(difflib.unified_diff(a, b, before, after, lineterm="", n=2)))


def _python_function(obj):
    """The Python function behind a Triton kernel (jit, heuristics, autotune, interpreter wrappers)."""
    while not inspect.isfunction(obj) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj


def code(obj) -> str:
    return inspect.getsource(_python_function(obj)).rstrip()


def show_code(*objects) -> None:
    """The source of Python functions or Triton kernels, one after another."""
    print("\n\n".join(code(o) for o in objects))


def show_code_diff(before, after) -> None:
    """Unified diff between two functions or kernels: the one idea the second adds."""
    a, b = code(before).splitlines(), code(after).splitlines()
    print("\n".join(difflib.unified_diff(a, b, _python_function(before).__name__, _python_function(after).__name__,
                                         lineterm="", n=2)))


def lines_of_code(text: str, comment: str = "#") -> int:
    """Lines that are neither blank nor only a comment (docstrings count as code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith(comment))


def load_widths(variants: dict[str, sass.Sass]) -> str:
    """'name: 16-bit global loads' per variant (stable across compiler versions)."""
    return "\n".join(f"{name:28s} global loads: " + ", ".join(f"{b}-bit" for b in sorted(s.global_load_bits()))
                     for name, s in variants.items())


# Opcode families that mark each step of a ladder, in the order a lesson meets them.
SIGNATURE_FAMILIES = ("LDG", "LDS", "BAR", "HMMA", "LDSM", "LDGSTS", "HGMMA")


def signature_table(variants: dict[str, sass.Sass], families: tuple[str, ...] = SIGNATURE_FAMILIES) -> str:
    """Which opcode families each variant's SASS contains ('x' = present): compiler-version stable."""
    widths = [max(7, len(f) + 1) for f in families]   # a column: the family's name and a space, at least 7
    head = f"{'':26s}" + "".join(f"{f:>{w}s}" for f, w in zip(families, widths))
    rows = [f"{name:26s}" + "".join(f"{'x' if s.count(f) else '-':>{w}s}" for f, w in zip(families, widths))
            for name, s in variants.items()]
    return "\n".join([head] + rows)


def speed_table(rows: list[dict], shape: tuple, anchor: str | tuple[str, ...] = "torch:cublas") -> str:
    """TFLOP/s per rung at `shape`, its % of the anchor (one column per anchor if several), and its
    speed-up over the rung before. An anchor not run at `shape` leaves its column blank."""
    at = [r for r in rows if tuple(r["shape"]) == tuple(shape)]
    anchors = (anchor,) if isinstance(anchor, str) else tuple(anchor)
    refs = [next((r["tflops"] for r in at if f"{r['backend']}:{r['rung']}" == a), None) for a in anchors]
    titles = ["% " + a.split(":")[1] for a in anchors]
    widths = [max(9, len(t)) for t in titles]
    lines = [f"{'rung':26s} {'ms':>9s} {'TFLOP/s':>8s} " + " ".join(f"{t:>{w}s}" for t, w in zip(titles, widths))
             + f" {'vs previous':>12s}"]
    previous = {}
    for r in at:
        label = f"{r['backend']}:{r['rung']}"
        before = previous.get(r["backend"])
        step = f"{r['tflops'] / before:11.2f}x" if before else ""
        pcts = [f"{100 * r['tflops'] / ref:8.1f}%" if ref else "" for ref in refs]
        lines.append(f"{label:26s} {r['ms']:9.3f} {r['tflops']:8.1f} "
                     + " ".join(f"{p:>{w}s}" for p, w in zip(pcts, widths)) + f" {step:>12s}"
                     + ("" if r["correct"] else "  WRONG"))
        previous[r["backend"]] = r["tflops"]
    return "\n".join(lines)
