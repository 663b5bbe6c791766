"""Lesson 02b's Hopper primer: its constants are the kernels', its pictures read cleanly and follow the constants
they are given, and the kernel lines its outputs quote are the files' lines today. No GPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernels.cuda import matmul as cm
from ladder import figcheck
from ladder.diagrams import hopper
from ladder.diagrams.matmul_hopper import wgmma_shape
from ladder.lessons import l02_matmul_cuda as l02
from ladder.lessons.source import cu_define

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "02b_matmul_cuda_hopper.ipynb"
RUNG8 = "matmul/8_tma_warp_specialized.cu"
CONST = l02.hopper_primer_constants()


def test_constants_are_the_kernels():
    source = (ROOT / "kernels/cuda/matmul/8_tma_warp_specialized.cu").read_text()
    bm, bn, bk = (cu_define(RUNG8, n) for n in ("BM", "BN", "BK"))
    assert (CONST["BM"], CONST["BN"], CONST["BK"]) == (bm, bn, bk)
    assert CONST["STAGES"] == cm.TMA_WS["STAGES"] and CONST["THREADS"] == cu_define(RUNG8, "THREADS")
    assert f"setmaxnreg.dec.sync.aligned.u32 {CONST['producer_regs']};" in source
    assert f"setmaxnreg.inc.sync.aligned.u32 {CONST['consumer_regs']};" in source
    assert CONST["box_a"] == (bm, bk) and CONST["box_b"] == (bk, 64)   # A's k-tile; B's in BN / 64 boxes
    assert CONST["STAGE_BYTES"] == 2 * (bm * bk + bk * bn)
    assert CONST["wgmma"] == wgmma_shape(RUNG8)
    assert (CONST["a_leading"], CONST["b_leading"], CONST["stride"], CONST["swizzle_mode"]) == (16, bk * 128, 1024, 1)
    assert CONST["launch_regs"] * CONST["THREADS"] <= CONST["regs_per_sm"]
    assert CONST["producer_regs"] * 128 + CONST["consumer_regs"] * 128 * CONST["CONSUMERS"] <= CONST["regs_per_sm"]


def _texts(fig) -> str:
    from matplotlib.text import Text
    return "\n".join(t.get_text() for t in fig.findobj(Text) if t.get_visible())


DRAWN = [("mbarrier_ring", lambda c: hopper.mbarrier_ring(c["STAGES"], c["STAGE_BYTES"])),
         ("tensor_map_box", lambda c: hopper.tensor_map_box(4096, 4096, c["box_a"], swizzle=c["swizzle"])),
         ("wgmma_operands", lambda c: hopper.wgmma_operands(c["wgmma"], c["BK"], c["a_leading"], c["b_leading"],
                                                            c["stride"], c["swizzle_mode"])),
         ("warp_specialized_registers", lambda c: hopper.warp_specialized_registers(
             c["THREADS"], c["CONSUMERS"], c["launch_regs"], c["producer_regs"], c["consumer_regs"],
             c["regs_per_sm"], 1 + c["BN"] // 64, c["BK"] // 16, c["wgmma"][0] * c["wgmma"][1] // 128)),
         ("cluster_multicast", lambda c: hopper.cluster_multicast(c["CLUSTER"], c["BK"], c["BN"]))]


@pytest.mark.parametrize("name,draw", DRAWN, ids=[n for n, _ in DRAWN])
def test_picture_reads_cleanly_and_is_in_the_lesson(name, draw):
    fig = draw(CONST)
    assert figcheck.collisions(fig) == []
    assert f"hopper.{name}(" in NOTEBOOK.read_text()


def test_pictures_follow_their_constants():
    assert "arrive.expect_tx(49152)" in _texts(hopper.mbarrier_ring(4, 49152))
    assert "stage 2" in _texts(hopper.mbarrier_ring(3, 100)) and "stage 3" not in _texts(hopper.mbarrier_ring(3, 100))
    assert "box: 64 columns × 128 rows, 16 KiB" in _texts(hopper.tensor_map_box(4096, 4096, (128, 64)))
    text = _texts(hopper.warp_specialized_registers(384, 2, 168, 24, 240, 65536, 5, 4, 128))
    assert "WG0\n24" in text and "240 registers × 128 threads" in text
    assert "leading byte offset 4096 B" in _texts(hopper.wgmma_operands((64, 128, 16), 32, 16, 4096, 1024, 1))
    assert "part 3" in _texts(hopper.cluster_multicast(4, 64, 256))


def test_swizzle_spreads_a_k_slice_over_every_bank_group():
    from ladder.diagrams.matmul_hopper import swizzled_chunk
    assert sorted(swizzled_chunk(r, 0, 128) for r in range(8)) == list(range(8))


def test_quoted_kernel_lines_are_the_files_lines():
    quote = re.compile(r"^// (\S+), lines (\d+)-(\d+)\n((?:.*\n?)*?)(?=^// \S+, lines|\Z)", re.M)
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    found = 0
    for cell in cells:
        if "kernel_lines(" not in "".join(cell["source"]):
            continue
        text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
        for path, first, last, body in quote.findall(text):
            lines = (ROOT / path).read_text().splitlines()[int(first) - 1:int(last)]
            assert [b.strip() for b in body.rstrip("\n").split("\n")] == [x.strip() for x in lines], path
            assert int(last) - int(first) + 1 <= (14 if "7_wgmma" in path else 10)
            found += 1
    assert found >= 9


def test_primer_comes_before_the_first_hopper_rung_and_shows_the_host_side():
    heads = [("".join(c["source"]).split("\n", 1)[0]) for c in json.loads(NOTEBOOK.read_text())["cells"]
             if c["cell_type"] == "markdown"]
    assert heads.index("## A Hopper primer") < next(i for i, h in enumerate(heads) if h.startswith("## Rung 7"))
    host = l02.hopper_host_side()
    assert "tma.encode(a, (128, 64))" in host and 'arch="sm_90a"' in host and "encode_tiled(" in host
    cell = next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if "hopper_host_side()" in "".join(c["source"]))
    assert "".join(cell["outputs"][0]["text"]) == host + "\n"   # the printed lines are the files' lines today
