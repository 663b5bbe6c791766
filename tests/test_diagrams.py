"""Every rung diagram (ladder.diagrams' modules) draws on CPU, reads cleanly (ladder.figcheck), and follows the
constant it is drawn from: change the constant (or the .cu line it is parsed from) and the picture changes with it."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import nbformat
import pytest
from matplotlib.text import Text

import kernels.attention as at
import kernels.matmul as mm
from kernels.cuda import attention as cuda_attention
from kernels.cuda import matmul as cm
from kernels.cuda import vector_add as cva
from kernels.triton import attention as ta
from kernels.triton import matmul as tm
from ladder import autotune, diagrams, figcheck, sass
from ladder.runtime import cuda
from ladder.diagrams import attention, attention_hopper, matmul, matmul_hopper, vector_add
from ladder.exercises import a07_group_order, a08_causal_skip
from ladder.lessons.l04_attention import attention_sass
from ladder.lessons.l04f_attention_softmax_instructions import path_to_next_issue
from ladder.lessons.source import compiled_lines, cu_define

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# Every diagram the lessons draw, by its module of ladder.diagrams, in course order.
DIAGRAMS = {
    "vector_add": ["vector_add_loads"],
    "matmul": ["matmul_warp_sectors", "matmul_shared_tile", "matmul_register_block", "matmul_warp_tiles",
               "matmul_stage_ring", "matmul_tile_order", "matmul_triton_lanes", "matmul_triton_dot"],
    "matmul_hopper": ["matmul_wgmma", "tma_tile_copy", "matmul_tma_ring", "matmul_cluster_multicast",
                      "matmul_tma_store_epilogue", "matmul_hopper_search"],
    "attention": ["attention_scores_in_dram", "attention_flash_sweep", "attention_causal_skip",
                  "attention_tensor_core_tile", "attention_p_fragment", "attention_kv_ring", "attention_search"],
    "attention_backward": ["attention_backward_programs", "attention_backward_atomics"],
    "attention_hopper": ["attention_wgmma_tma_ring", "attention_warp_specialized_ring", "attention_pingpong",
                         "attention_intra_overlap", "softmax_instruction_mix", "attention_three_consumers",
                         "attention_persistent", "attention_critical_path", "attention_query_blocks"],
}
MODULE = {name: module for module, names in DIAGRAMS.items() for name in names}
VARIANTS = [(name, ()) for name in MODULE] + [
    ("matmul_warp_sectors", ("1_naive",)), ("matmul_shared_tile", ("triton",)), ("matmul_tile_order", ("cuda",)),
    ("matmul_triton_lanes", ("1_naive",)), ("matmul_stage_ring", ("triton",)), ("attention_tensor_core_tile", ("triton",)),
    ("attention_search", ("cuda",)), ("attention_search", ("triton", 1)), ("tma_tile_copy", ("triton",)),
    ("matmul_tile_order", ("cuda", (8192, 8192, 8192), "9_persistent"))]
# Diagrams drawn for lessons whose owners insert them (the cell to add is in the commit that added the diagram):
# the test below fails once one of them is in its lesson, so that it leaves this list.
AWAITING_A_LESSON: dict[str, str] = {}  # a diagram drawn by no lesson yet: its "module.name" and where it will go


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def joined(fig) -> str:
    return "\n".join(texts(fig))


def edited_source(monkeypatch, path: str, old: str, new: str):
    """Make ladder.runtime.cuda.source return `path` with `old` replaced by `new` (the .cu file as if edited)."""
    real = cuda.source

    def source(p):
        text = real(p)
        if str(p) == path:
            assert old in text, f"{old!r} is not in {path}"
            text = text.replace(old, new)
        return text
    monkeypatch.setattr(cuda, "source", source)


@pytest.mark.parametrize("name,args", VARIANTS, ids=[f"{n}{'-' + '-'.join(map(str, a)) if a else ''}" for n, a in VARIANTS])
def test_diagram_is_readable(name, args):
    fig = getattr(getattr(diagrams, MODULE[name]), name)(*args)
    assert figcheck.collisions(fig) == []
    assert fig.texts or any(ax.get_title() for ax in fig.axes) or fig._suptitle is not None


def test_every_diagram_is_in_a_lesson():
    called = {".".join(call) for nb in NOTEBOOKS.glob("*.ipynb") for cell in nbformat.read(nb, 4).cells
              if cell.cell_type == "code" for call in re.findall(r"\bdiagrams\.(\w+)\.(\w+)\(", cell.source)}
    assert called | set(AWAITING_A_LESSON) == {f"{module}.{name}" for name, module in MODULE.items()}
    assert not called & set(AWAITING_A_LESSON), "now in a lesson: remove it from AWAITING_A_LESSON"


# ------------------------------------------------------------- each picture follows its constants

def test_vector_add_follows_loads_per_thread_and_vector_width(monkeypatch):
    assert vector_add.cu_vector_bytes("vector_add/2_vectorized.cu") == 16
    assert cu_define("vector_add/1_scalar.cu", "ELEMS_PER_THREAD") == cva.SCALAR_ELEMS_PER_THREAD
    fig = vector_add.vector_add_loads()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"load {k + 1}" for k in range(4)]
    assert "512 B, 16 sectors" in joined(fig)
    monkeypatch.setattr(cva, "SCALAR_ELEMS_PER_THREAD", 2)
    edited_source(monkeypatch, "vector_add/2_vectorized.cu", "const uint4*>(a)", "const uint2*>(a)")
    fig = vector_add.vector_add_loads()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["load 1", "load 2"]
    assert "8-byte loads" in joined(fig) and "256 B, 8 sectors" in joined(fig)


def test_warp_sectors_follow_the_kernels_index_mapping(monkeypatch):
    assert matmul.warp_elements("matmul/1_naive.cu", (32, 32))[0].tolist() == list(range(32))  # rows
    titles = [ax.get_title() for ax in matmul.matmul_warp_sectors().axes]
    assert titles[0].endswith("32 sectors") and titles[4].endswith("2 sectors")   # naive A, coalesced B
    # rung 1 rewritten with rung 2's mapping draws rung 2's picture
    edited_source(monkeypatch, "matmul/1_naive.cu", "threadIdx.x;", "threadIdx.y;")
    edited_source(monkeypatch, "matmul/1_naive.cu", "threadIdx.y;\n", "threadIdx.x;\n")
    assert [ax.get_title() for ax in matmul.matmul_warp_sectors("1_naive").axes] == titles[3:]
    monkeypatch.undo()
    monkeypatch.setattr(cm, "SCALAR_TILE", 16)   # a warp is two rows of 16 threads
    assert matmul.matmul_warp_sectors("2_coalesced").axes[1].get_title() == "B: load touches 16 elements, 1 sector"


def test_shared_tile_follows_tile_sizes(monkeypatch):
    assert "TILE = 32" in joined(matmul.matmul_shared_tile("cuda"))
    edited_source(monkeypatch, "matmul/3_smem_tiled.cu", "#define TILE 32", "#define TILE 16")
    assert "a 16×16 tile of C" in joined(matmul.matmul_shared_tile("cuda"))
    monkeypatch.setitem(tm.GPU_TILES, "3_tiled", dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=16))
    text = joined(matmul.matmul_shared_tile("triton"))
    assert "a 128×32 tile of C" in text and "A's 128×16 and B's 16×32 tiles" in text


def test_register_block_follows_the_defines(monkeypatch):
    assert "thread 17 keeps 8×8 values of C" in joined(matmul.matmul_register_block())
    edited_source(monkeypatch, "matmul/3b_register_blocked.cu", "#define TM 8", "#define TM 4")
    text = joined(matmul.matmul_register_block())
    assert "keeps 4×8 values" in text and "32×16 threads" in text and "32 FMAs" in text


def test_warp_tiles_follow_the_warp_layout(monkeypatch):
    assert matmul.mma_shape() == (16, 8, 16)
    assert "warp 7" in texts(matmul.matmul_warp_tiles())
    monkeypatch.setattr(cm, "TENSOR_CORE", dict(cm.TENSOR_CORE, WARPS_N=2))
    fig = matmul.matmul_warp_tiles()
    assert "warp 3" in texts(fig) and "warp 4" not in texts(fig)
    assert "2×2 warps of 64×64" in joined(fig)


def test_stage_ring_follows_stages_and_plays_the_kernels_loop(monkeypatch):
    for stages in (2, 3, 4, 5):
        steps = matmul.cp_async_ring(stages, tiles=9)
        for t, held in enumerate(steps):
            assert held[f"buffer {t % stages}"] == (t, "math")            # compute(t % STAGES)
            assert sorted(tile for tile, _ in held.values()) == list(range(t, min(9, t + stages)))
    assert [t.get_text() for t in matmul.matmul_stage_ring().axes[0].get_yticklabels()] == \
        [f"buffer {b}" for b in range(4)]
    monkeypatch.setattr(cm, "PIPELINED", dict(cm.PIPELINED, STAGES=3))
    fig = matmul.matmul_stage_ring()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["buffer 0", "buffer 1", "buffer 2"]
    assert "2 k-tiles ahead" in joined(fig)


def test_tile_order_is_the_kernels_and_follows_group_m(monkeypatch):
    for tiles_m, tiles_n, group_m in a07_group_order.GRIDS:   # Triton's tile_coords, as the exercise states it
        assert matmul.tile_order(tiles_m, tiles_n, group_m) == \
            [a07_group_order._reference(t, tiles_m, tiles_n, group_m) for t in range(tiles_m * tiles_n)]
    assert "GROUP_M = 16" in joined(matmul.matmul_tile_order("triton"))
    monkeypatch.setattr(tm, "group_rows", lambda *args, **kw: 32)   # a whole column of 128x256 tiles at 4096^2
    text = joined(matmul.matmul_tile_order("triton"))
    assert "GROUP_M = 32: the first 128 tiles read 32×128 rows of A\n+ 4×256 columns of B" in text
    edited_source(monkeypatch, "matmul/6_autotuned.cu", "#define GROUP_M 8", "#define GROUP_M 2")
    assert "GROUP_M = 2" in joined(matmul.matmul_tile_order("cuda"))


def test_scores_in_dram_follow_the_headline_shape(monkeypatch):
    assert "S×S matrix holds 64× Q's elements\n(128× its bytes" in joined(attention.attention_scores_in_dram())
    monkeypatch.setattr(at, "HEADLINE", [(1, 8, 2048, 128, 0)])
    text = joined(attention.attention_scores_in_dram())
    assert "S×S matrix holds 16× Q's elements\n(32× its bytes" in text
    assert f"{ta.score_matrix_bytes(1, 8, 2048) / 1e9:.1f} GB for B·H = 8 heads" in text


def test_flash_sweep_follows_the_tiles(monkeypatch):
    fig = attention.attention_flash_sweep()
    bm, bn = ta.GPU_TILES["3_fused"]["BLOCK_M"], ta.GPU_TILES["3_fused"]["BLOCK_N"]
    assert f"BLOCK_N = {bn}" in joined(fig) and str(6 * bm // bn) in texts(fig)   # key blocks numbered 1..
    monkeypatch.setitem(ta.GPU_TILES, "3_fused", dict(ta.GPU_TILES["3_fused"], BLOCK_N=bm))
    fig = attention.attention_flash_sweep()
    assert f"BLOCK_N = {bm}" in joined(fig) and "6" in texts(fig) and "7" not in texts(fig)


def test_causal_skip_is_the_kernels_rule_and_follows_the_tiles(monkeypatch):
    line = next(l for l in inspect.getsource(ta.key_passes.fn).splitlines() if "return start_m" in l)
    rule = line.split("return", 1)[1].split("#")[0].replace("tl.minimum", "min")
    for S, bm, _ in a08_causal_skip.CASES:
        for start_m in range(0, S, bm):
            assert ta.causal_key_range(start_m, bm, S) == eval(rule, {"start_m": start_m, "S": S, "BLOCK_M": bm})
    for tiles in (None, dict(BLOCK_M=64, BLOCK_N=32)):
        if tiles:
            monkeypatch.setitem(ta.GPU_TILES, "5_pipelined", dict(ta.GPU_TILES["5_pipelined"], **tiles))
        bm, bn = ta.GPU_TILES["5_pipelined"]["BLOCK_M"], ta.GPU_TILES["5_pipelined"]["BLOCK_N"]
        S = 8 * bm - bn // 2
        computed = a08_causal_skip._blocks_computed(S, bm, bn)
        assert f"{computed} of {-(-S // bm) * -(-S // bn)} blocks computed" in joined(attention.attention_causal_skip())


# ------------------------------------------------------------- the Triton pictures against the compiler

def ttgir(case: dict, capability: int) -> str:
    """The TritonGPU IR of a kernel (one of the modules' SASS cases) compiled for sm_<capability>, no GPU needed:
    the layouts and shared-memory buffers the compiler chose."""
    import triton   # here, not at the top: ladder (imported first) sets TRITON_INTERPRET on CPU before triton loads
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction
    kernel = case["kernel"]
    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    fn = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel)
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in case["divisible_by_16"]}
    sig = {k: ("constexpr" if k in case["constexprs"] else v) for k, v in case["signature"].items()}
    with sass._compilable(fn.fn):
        compiled = triton.compile(ASTSource(fn, signature=sig, constexprs=case["constexprs"], attrs=attrs),
                                  target=GPUTarget("cuda", capability, 32),
                                  options={"num_warps": case["num_warps"], "num_stages": case.get("num_stages", 3)})
    return compiled.asm["ttgir"]


def ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


@pytest.mark.parametrize("block_n", [64, 256, 1024])
def test_lane_elements_are_the_compilers_layout(block_n):
    case = dict(mm.TRITON_SASS_CASES["2_coalesced"], constexprs=dict(BLOCK_N=block_n))
    layout = re.search(r"#ttg.blocked<\{sizePerThread = \[(\d+)\]", ttgir(case, 90))
    assert int(layout.group(1)) == matmul.triton_lane_elements(block_n, case["num_warps"])


def test_p_fragment_picture_reads_the_kernels_packing(monkeypatch):
    assert attention.p_fragment_packing() == [(0, 0, 1), (0, 2, 3), (1, 0, 1), (1, 2, 3)]
    assert "a7" in texts(attention.attention_p_fragment()) and "c3" in texts(attention.attention_p_fragment())
    edited_source(monkeypatch, "attention/flash_mma.cuh", "p[1] = pack_half2(s[mi][kj][2], s[mi][kj][3])",
                  "p[1] = pack_half2(s[mi][kj + 1][0], s[mi][kj + 1][1])")
    with pytest.raises(ValueError, match=r"p\[1\] is not lane 0's part of the A operand"):
        attention.attention_p_fragment()


def test_triton_lanes_follow_the_launch(monkeypatch):
    text = joined(matmul.matmul_triton_lanes())
    assert "BLOCK_N = 256 columns on 4 warps" in text and "2 neighbouring elements each (4 B): 128 useful bytes, 4 sectors" in text
    assert "every lane of the warp loads the same 2 bytes" in joined(matmul.matmul_triton_lanes("1_naive"))
    monkeypatch.setitem(tm.GPU_TILES, "2_coalesced", dict(BLOCK_N=1024))
    assert "8 neighbouring elements each (16 B): 512 useful bytes, 16 sectors" in joined(matmul.matmul_triton_lanes())


@pytest.mark.parametrize("rung", ["4_tensor_core", "5_pipelined"])
@pytest.mark.parametrize("capability", [80, 90])
def test_dot_layout_is_the_compilers(rung, capability):
    t, warps = tm.GPU_TILES[rung], tm.LAUNCH[rung]["num_warps"]
    mma = matmul.triton_mma(t["BLOCK_M"], t["BLOCK_N"], warps, divmod(capability, 10))
    layout = re.search(r"#ttg.nvidia_mma<\{versionMajor = (\d), versionMinor = \d+, warpsPerCTA = (\[[^]]*\]), "
                       r"instrShape = (\[[^]]*\])", ttgir(mm.TRITON_SASS_CASES[rung], capability))
    assert int(layout.group(1)) == (3 if mma["name"] == "wgmma" else 2)
    assert tuple(ints(layout.group(2))) == mma["warps"]
    per_warp = (16, mma["shape"][1], 16) if mma["name"] == "wgmma" else (16, 8)   # a warp's share of one instruction
    assert tuple(ints(layout.group(3))) == per_warp


def test_triton_dot_follows_the_tiles(monkeypatch):
    text = joined(matmul.matmul_triton_dot())
    assert "4 × wgmma m64n128k16" in text and "256 × mma.sync m16n8k16" in text and "warps 2×2" in text
    monkeypatch.setitem(tm.GPU_TILES, "4_tensor_core", dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64))
    text = joined(matmul.matmul_triton_dot())
    assert "8 × wgmma m64n64k16" in text and "A's 128×64 tile by B's 64×64" in text


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("capability", [80, 90])
def test_triton_ring_is_the_compilers(stages, capability):
    config = dict(tm.GPU_TILES["5_pipelined"], **dict(tm.LAUNCH["5_pipelined"], num_stages=stages))
    ir = ttgir(mm.tile_sass_case(config), capability)
    buffers = {int(m) for m in re.findall(r"ttg.local_alloc : \(\) -> !ttg.memdesc<(\d+)x", ir)}
    prologue = ir[:ir.index("scf.for")].count("ttg.async_copy_global_to_local")
    assert (buffers.pop(), prologue // 2) == matmul.triton_ring(config, divmod(capability, 10))   # A and B


def test_triton_stage_ring_follows_num_stages(monkeypatch):
    fig = matmul.matmul_stage_ring("triton")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"buffer {b}" for b in range(4)]
    assert "sm_80 (mma.sync reads registers): 3 buffers, copies 3 k-tiles ahead" in joined(fig)
    for t, held in enumerate(matmul.register_operand_ring(3, 9)):
        assert held["registers"] == (t, "math") and held.get(f"buffer {t % 3}", (t + 3, ""))[0] == t + 3
    monkeypatch.setitem(tm.LAUNCH, "5_pipelined", dict(tm.LAUNCH["5_pipelined"], num_stages=3))
    fig = matmul.matmul_stage_ring("triton")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["buffer 0", "buffer 1", "buffer 2"]


# ------------------------------------------------------------- Hopper

def test_wgmma_follows_the_kernels_defines(monkeypatch):
    assert matmul_hopper.wgmma_shape() == (64, 256, 16)
    text = joined(matmul_hopper.matmul_wgmma())
    assert "a 128×256 block tile, 256 threads = 2 warpgroups" in text
    assert "warp 7" in texts(matmul_hopper.matmul_wgmma())
    edited_source(monkeypatch, "matmul/7_wgmma.cu", "#define THREADS 256", "#define THREADS 128")
    edited_source(monkeypatch, "matmul/7_wgmma.cu", "#define BM 128", "#define BM 64")
    fig = matmul_hopper.matmul_wgmma()
    assert "a 64×256 block tile, 128 threads = 1 warpgroups" in joined(fig) and "warp 4" not in texts(fig)


def test_swizzle_is_the_kernels():
    source = cuda.source("matmul/7_wgmma.cu")
    assert "((c % 8) ^ (row % 8)) * 8" in source   # copy_swizzled: chunk c of a 128-byte row
    for row in range(16):
        assert [matmul_hopper.swizzled_chunk(row, c, 128) for c in range(8)] == [c ^ (row % 8) for c in range(8)]
        assert [matmul_hopper.swizzled_chunk(row, c, 64, 64) for c in range(4)] == \
            [c ^ (row // 2 % 4) for c in range(4)]


def test_tma_follows_the_box(monkeypatch):
    assert "TMA (CUDA rung 8's A tile): one instruction copies a 128×64 box (16 KiB)" in joined(matmul_hopper.tma_tile_copy())
    edited_source(monkeypatch, matmul_hopper.TMA_RUNG, "#define BK 64", "#define BK 32")
    assert "a 128×32 box (8 KiB)" in joined(matmul_hopper.tma_tile_copy())
    monkeypatch.setattr(tm, "TMA_PERSISTENT", dict(tm.TMA_PERSISTENT, BLOCK_M=64))
    assert "expects 8192 bytes" in joined(matmul_hopper.tma_tile_copy("triton"))


def test_producer_consumer_ring_follows_its_parameters(monkeypatch):
    fig = matmul_hopper.matmul_tma_ring()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["producer", "stage 0", "stage 1", "stage 2",
                                                                     "stage 3", "consumer 0", "consumer 1"]
    monkeypatch.setattr(cm, "TMA_WS", dict(cm.TMA_WS, STAGES=2))
    edited_source(monkeypatch, matmul_hopper.TMA_RUNG, "#define CONSUMERS 2", "#define CONSUMERS 1")
    assert "2 stages, 2 producer warpgroups issuing TMA 1 k-tile ahead, 1 consumer warpgroup" in \
        joined(matmul_hopper.matmul_tma_ring())   # THREADS stays 384: three warpgroups, one of them consuming
    fig = matmul_hopper.warp_specialized_ring(stages=3, producers=1, consumers=1, tiles=6)
    assert figcheck.collisions(fig) == []
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["producer", "stage 0", "stage 1", "stage 2",
                                                                     "consumer 0"]
    assert "TMA 2 k-tiles ahead" in joined(fig)


def rung9_tile_origin(tile: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """9_persistent.cu's tile_origin, in tiles (checked against its source below)."""
    per_group = group_m * tiles_n
    first_m = tile // per_group * group_m
    rows, in_group = min(tiles_m - first_m, group_m), tile % per_group
    return first_m + in_group % rows, in_group // rows


def test_persistent_tile_order_is_rung_9s_and_follows_its_constants(monkeypatch):
    source = cuda.source("matmul/9_persistent.cu")
    assert "return {(first_m + in_group % rows) * BM, in_group / rows * BN};" in source
    assert "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)" in source
    for tiles_m, tiles_n, group_m in ((64, 32, 16), (13, 7, 4), (5, 9, 8)):
        assert matmul.tile_order(tiles_m, tiles_n, group_m) == \
            [rung9_tile_origin(t, tiles_m, tiles_n, group_m) for t in range(tiles_m * tiles_n)]
    shape = (8192, 8192, 8192)
    sms = matmul._sm_count()
    assert cm.persistent_grid(8192, 8192, sms) == min(sms, 64 * 32)
    fig = matmul.matmul_tile_order("cuda", shape, rung="9_persistent")
    text = joined(fig)
    assert f"rung 9: {sms} persistent blocks, block 0's tiles numbered" in text
    assert "rung 8, row-major" in text and f"CUDA rung 8: one block per tile, {sms} running" in text
    assert "C 8192×8192 in 128×256 tiles" in text and f"GROUP_M = {cm.PERSISTENT['GROUP_M']}:" in text
    assert str(_cdiv(64 * 32, sms)) in texts(fig)       # block 0's last tile, numbered
    # the launcher's GROUP_M (a -D over the .cu's default), and the .cu's tile
    monkeypatch.setattr(cm, "PERSISTENT", dict(cm.PERSISTENT, GROUP_M=4))
    assert "GROUP_M = 4:" in joined(matmul.matmul_tile_order("cuda", shape, rung="9_persistent"))
    edited_source(monkeypatch, "matmul/9_persistent.cu", "#define BN 256", "#define BN 128")
    text = joined(matmul.matmul_tile_order("cuda", shape, rung="9_persistent"))
    assert "in 128×128 tiles" in text and f"{min(sms, 64 * 64)} persistent blocks" in text
    assert "CUDA rung 6" in joined(matmul.matmul_tile_order("cuda"))   # the default stays rung 6's
    with pytest.raises(ValueError):
        matmul.matmul_tile_order("cuda", rung="8_tma_warp_specialized")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_cluster_multicast_follows_rung_10s_defines(monkeypatch):
    path = "matmul/10_cluster_multicast.cu"
    source = cuda.source(path)
    assert "const int j = rank * B_BOXES_PER_BLOCK + i;" in source and "WHOLE_CLUSTER" in source
    assert "ring_init(full, empty, STAGES, CONSUMERS * CLUSTER);" in source
    fig = matmul_hopper.matmul_cluster_multicast()
    assert figcheck.collisions(fig) == []
    text = joined(fig)
    assert "a cluster of 2 blocks on 2 SMs computes a 256×256 block of C" in text
    assert "rung 9 16 KiB A + 32 KiB B = 48 KiB;  rung 10 16 KiB A + 16 KiB B = 32 KiB (0.67×)" in text
    assert "B part 1: 64×128" in texts(fig) and "empty[s]: 4 arrivals" in texts(fig)
    assert matmul_hopper.cluster_bytes_per_k_step() == dict(rung9_a=16384, rung9_b=32768, rung10_a=16384,
                                                            rung10_b=16384)
    edited_source(monkeypatch, path, "#define CLUSTER 2", "#define CLUSTER 4")
    fig = matmul_hopper.matmul_cluster_multicast()
    assert figcheck.collisions(fig) == []
    text = joined(fig)
    assert "a cluster of 4 blocks on 4 SMs computes a 512×256 block of C" in text
    assert "rung 10 16 KiB A + 8 KiB B = 24 KiB (0.50×)" in text
    assert "B part 3: 64×64" in texts(fig) and "empty[s]: 8 arrivals" in texts(fig)
    monkeypatch.undo()
    edited_source(monkeypatch, "matmul/9_persistent.cu", "#define BN 256", "#define BN 128")
    assert "rung 9 16 KiB A + 16 KiB B = 32 KiB;" in joined(matmul_hopper.matmul_cluster_multicast())


# ------------------------------------------------------------- attention rungs 4-6

def test_attention_tile_follows_the_constants(monkeypatch):
    assert "BLOCK_M = 64 queries on 4 warps, 16 rows each" in joined(attention.attention_tensor_core_tile())
    t = ta.GPU_TILES["4_tensor_core"]
    assert f"BLOCK_M = {t['BLOCK_M']} queries on {t['num_warps']} warps" in joined(attention.attention_tensor_core_tile("triton"))
    assert "loaded once, kept in shared memory" in joined(attention.attention_tensor_core_tile())   # Q, with K and V
    monkeypatch.setattr(cuda_attention, "TENSOR_CORE", dict(cuda_attention.TENSOR_CORE, WARPS=2))
    assert "on 2 warps, 32 rows each" in joined(attention.attention_tensor_core_tile())


@pytest.mark.parametrize("capability,buffers", [(80, 2), (90, 3)])
def test_attention_ring_follows_stages_and_the_compilers_buffers(monkeypatch, capability, buffers):
    ir = ttgir(at.flash_sass_case("5_pipelined"), capability)
    assert {int(m) for m in re.findall(r"ttg.local_alloc : \(\) -> !ttg.memdesc<(\d+)x", ir)} == {buffers}
    if capability == 90:   # the picture's note states the Hopper ring only
        assert f"{buffers} K and {buffers} V buffers on sm_90" in joined(attention.attention_kv_ring(triton=True))
    assert "BLOCK_M = 64 queries, BLOCK_N = 64 keys a block" in joined(attention.attention_kv_ring())
    monkeypatch.setattr(cuda_attention, "PIPELINED", dict(cuda_attention.PIPELINED, STAGES=3, BLOCK_M=128))
    assert "cp.async 2 key blocks ahead; BLOCK_M = 128 queries" in joined(attention.attention_kv_ring())


def test_attention_search_marks_the_recorded_winner():
    for backend in ("cuda", "triton"):
        reports = [r for r in autotune.recorded_reports() if r.tuner == f"{backend}:6_autotuned"
                   and r.problem == "attention" and not r.shape[4]]
        fig = attention.attention_search(backend)
        for r in reports:
            assert any(ax.get_title().startswith(f"D = {r.shape[3]}: ★ {autotune.format_config(r.best)}")
                       for ax in fig.axes)
        assert texts(fig).count("★") == len(reports)


# ------------------------------------------------------------- the L2 roof (ladder.ceilings.l2_TBps, ladder.roofline)

def test_l2_read_kernel_reads_every_block_each_pass():
    import torch
    from ladder import ceilings
    x = torch.rand(3 * ceilings.L2_BLOCK)
    for passes, programs in ((1, 1), (2, 2), (3, 4)):
        out = ceilings.l2_read(x, passes, programs)
        assert out.shape == (programs,) and torch.isclose(out.sum(), passes * x.sum(), rtol=1e-4)


def test_l2_roof_only_when_measured():
    import matplotlib.pyplot as plt
    from ladder import roofline
    pts = [roofline.Point("cuda:5_pipelined", 300.0, 400.0, "cuda", 40.0)]
    measured = {"copy_TBps": 3.0, "fp32_TFLOPs": 58.0, "fp16_tc_TFLOPs": 700.0}
    for ceilings, l2 in ((measured, False), (dict(measured, l2_TBps=10.5), True)):
        ax = roofline.plot(pts, ceilings)
        roofs = [line.get_gid() for line in ax.get_lines() if line.get_gid()]
        assert any(r.startswith("L2 read 10.50 TB/s") for r in roofs) == l2
        key = [t.get_text() for legend in ax.figure.legends for t in legend.get_texts()]
        assert ("no L2 roof: these ceilings have no measured L2 bandwidth" in key) != l2
        assert figcheck.collisions(ax.figure) == []
        plt.close(ax.figure)


def test_tma_store_epilogue_overlaps_the_next_tile_only_in_rung_11():
    rung10 = matmul_hopper.epilogue_schedule(k_tiles=5, store_steps=2, by_tma=False)
    rung11 = matmul_hopper.epilogue_schedule(k_tiles=5, store_steps=2, by_tma=True)
    assert len(rung10) == 2 * (5 + 2) and len(rung11) == 2 * (5 + 1)   # rung 11's epilogue: one step of staging
    assert not any("wgmma" in s and "stores" in s for s in rung10)    # rung 10: no wgmma while it stores
    assert [s.get("stores") for s in rung11[6:8]] == [("C0", "copy")] * 2 and "wgmma" in rung11[6]
    fig = matmul_hopper.matmul_tma_store_epilogue()
    assert figcheck.collisions(fig) == []
    assert "the TMA stores C" in texts(fig)


def test_attention_rung_7s_ring_follows_its_constants(monkeypatch):
    """Rung 7's ring: its STAGES (kernels/cuda/attention.py WGMMA_TMA at D = 128), its producer warp(s) and consumer
    warpgroups (7_wgmma_tma.cu's PRODUCER_THREADS and CONSUMERS defaults)."""
    fig = attention_hopper.attention_wgmma_tma_ring()
    assert figcheck.collisions(fig) == []
    assert f"{cuda_attention.WGMMA_TMA[128]['STAGES']} stages, 1 producer warp issuing TMA" in joined(fig)
    assert "1 consumer warpgroup on wgmma" in joined(fig)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][-1] == "consumer 0"
    monkeypatch.setitem(cuda_attention.WGMMA_TMA, 128, dict(cuda_attention.WGMMA_TMA[128], STAGES=3))
    edited_source(monkeypatch, attention_hopper.WGMMA_TMA_RUNG, "#define PRODUCER_THREADS 32",
                  "#define PRODUCER_THREADS 64")
    assert "3 stages, 2 producer warps issuing TMA 2 K/V tiles ahead" in \
        joined(attention_hopper.attention_wgmma_tma_ring())


def test_attention_hopper_pictures_follow_rung_8s_constants(monkeypatch):
    """Rung 8's ring: its STAGES (kernels/cuda/attention.py) and consumer warpgroups (8_warp_specialized.cu); rung 9's
    timeline: five units a tile in step, four with turns, the tensor cores busy every unit of the latter."""
    fig = attention_hopper.attention_warp_specialized_ring()
    stages = cuda_attention.WARP_SPECIALIZED[128]["STAGES"]
    assert "2 consumer warpgroups" in joined(fig) and f"{stages} stages" in joined(fig)
    monkeypatch.setitem(cuda_attention.WARP_SPECIALIZED, 128, dict(cuda_attention.WARP_SPECIALIZED[128], STAGES=3))
    assert "3 stages" in joined(attention_hopper.attention_warp_specialized_ring())
    plain, turns = attention_hopper.pingpong_timeline(3, False), attention_hopper.pingpong_timeline(3, True)
    assert (len(plain), len(turns)) == (15, 12)
    assert all("tensor cores" in step for step in turns) and sum("tensor cores" not in s for s in plain) == 3


def test_intra_overlap_timeline_plays_the_kernels_loops(monkeypatch):
    """Rung 10's picture: the loop consumer_programs writes down is 7_wgmma_tma.cu's under INTRA_OVERLAP (S of tile
    t and P·V of tile t-1 in one turn, the wait for S alone, the softmax, the wait for P·V, the rescale); played,
    the tensor cores run one product at a time, rung 9 starts a tile every max(4, 2 + softmax) units, rung 10 every
    max(4, 1 + softmax + rescale), each softmax of rung 10 under its own P·V; the figure follows CONSUMERS."""
    rung10 = "\n".join(compiled_lines(cuda.source(attention_hopper.INTRA_OVERLAP_RUNG).splitlines(),
                                      {"SHORT_PATH"}))
    loop = rung10[rung10.index("for (int t = 1; t < tiles; ++t)"):]   # rung 10's: rung 14's moved rescale left out
    order = ["wait_turn(group);", "issue_scores(scores, Qg, Ks + s * KV_TILE);",
             "issue_pv(warp.acc, p, Vs + (t0 + t - 1) % STAGES * KV_TILE);", "pass_turn(group);", "wgmma_wait<1>();",
             "softmax_of(t);", "wgmma_wait<0>();", "warp.rescale(alpha);"]
    found = [loop.index(line) for line in order]
    assert found == sorted(found)
    assert attention_hopper.consumer_programs(3, True)[3:8] == [("turn", ("S1", "PV0")), ("wait", "S1"),
                                                                ("exp", 1), ("wait", "PV0"), ("rescale", 1)]
    assert attention_hopper.consumer_programs(2, False)[:5] == [("turn", ("S0",)), ("wait", "S0"), ("exp", 0),
                                                                ("issue", ("PV0",)), ("wait", "PV0")]
    for softmax in (1, 2, 2.5, 3, 4):
        for overlap, period in ((False, max(4, 2 + softmax)), (True, max(4, 1 + softmax + 0.25))):
            programs = [attention_hopper.consumer_programs(6, overlap, softmax)] * 2
            boxes = attention_hopper.play_consumers(programs, softmax)
            assert attention_hopper.tile_period(boxes) == period
            products = sorted((start, stop) for row, start, stop, _, _ in boxes if row == "tensor cores")
            assert len(products) == 2 * 2 * 6 and all(a[1] <= b[0] for a, b in zip(products, products[1:]))
            if overlap:
                for g in (0, 1):
                    for t in range(1, 6):
                        exp = next(b for b in boxes if b[0] == f"warpgroup {g}" and b[3] == f"exp{t}")
                        pv = next(b for b in boxes if b[0] == "tensor cores" and b[3] == f"g{g} PV{t - 1}")
                        assert exp[1] < pv[2] and pv[1] < exp[2]   # the softmax of t under P·V of t - 1
    fig = attention_hopper.attention_intra_overlap()
    assert figcheck.collisions(fig) == []
    text = joined(fig)
    assert "a tile every 4.5 units, the tensor cores idle 0.5" in text
    assert "a tile every 4 units, the tensor cores idle 0" in text and "a softmax 2.5" in text
    edited_source(monkeypatch, attention_hopper.INTRA_OVERLAP_RUNG, "#define CONSUMERS 2", "#define CONSUMERS 3")
    fig = attention_hopper.attention_intra_overlap()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["tensor cores"] + [f"warpgroup {g}" for g in range(3)]
    assert "3 consumer warpgroups" in joined(fig) and figcheck.collisions(fig) == []


def test_three_consumers_picture_keeps_the_tensor_cores_busy_through_a_long_softmax():
    """Rung 12's picture plays rung 10's loop for the consumer warpgroups rungs 11 and 12 run at D64 (2 and 3, from
    their files): with a softmax of 4 units, two leave the tensor cores idle part of each period, three do not."""
    fig = attention_hopper.attention_three_consumers()
    text = joined(fig)
    assert "rung 11: 2 consumer warpgroups" in text and "2 tiles of 64 queries every 5.25 units" in text
    assert "rung 12: 3 consumer warpgroups" in text and "3 tiles of 64 queries every 6 units" in text
    assert "busy 76%" in text and "busy 100%" in text and figcheck.collisions(fig) == []


def test_persistent_picture_counts_the_launchers_blocks_and_waits_once():
    """Rung 13's picture: the block counts are the launchers' (4,096 blocks of 128 queries at B4 H32 S4096 D128; one
    an SM on 132 SMs); rung 12 waits for its copies once an item, rung 13 once, then only where a copy outlasts
    the store before it."""
    fig = attention_hopper.attention_persistent(items=3, tiles=5, copy_in=1.5, tail=1.0)
    text = joined(fig)
    assert "rung 12 launches 4,096 blocks of one item, rung 13 132 (one an SM), each walking about 31" in text
    assert "rung 12 22.5 units, rung 13 20.5" in text and figcheck.collisions(fig) == []
    assert "rung 13 19," in joined(attention_hopper.attention_persistent(items=3, tiles=5, copy_in=1.0, tail=1.0))
    assert "rung 13 132 (one an SM), each walking about 21" in joined(attention_hopper.attention_persistent(shape=(4, 32, 4096, 64, 0)))


def test_critical_path_picture_counts_the_rungs_sass():
    """Rung 14's picture: the instructions of l04f's path_to_next_issue for rungs 13 and 14 (their SASS), fewer
    for rung 14 and fewer of them FMUL."""
    fig = attention_hopper.attention_critical_path(128)
    text = joined(fig)
    counts = {}
    for name in ("13_persistent", "14_critical_path"):
        path = path_to_next_issue(attention_sass(at.PROBLEM.rung("cuda", name), "sm_90a", 128).text)
        counts[name] = (len(path), path.count("FMUL"))
        assert f"{len(path)} instructions, {path.count('FMUL')} FMUL" in text
    assert counts["14_critical_path"] < counts["13_persistent"] and figcheck.collisions(fig) == []


def test_query_blocks_picture_counts_the_scores_the_model_counts():
    """Rung 15's picture: GPT-2's causal S 1024 in blocks of 192 and 128 queries, its numbers those of
    kernels.attention.scores_computed (a head: 6 blocks x 192 rows over 4,096 keys in all, 8 x 128 over 4,608)."""
    assert at.scores_computed((1, 1, 1024, 64, 1), 192, 128) == 192 * (256 + 384 + 640 + 768 + 1024 + 1024)
    assert at.scores_computed((1, 1, 1024, 64, 1), 128, 128) == 128 * 128 * 36
    assert at.scores_computed((2, 3, 1024, 64, 0), 192, 128) == 2 * 3 * 6 * 192 * 1024
    assert at.scores_needed((1, 1, 1024, 64, 1)) == 1024 * 1025 // 2
    fig = attention_hopper.attention_query_blocks()
    text = joined(fig)
    assert "6 blocks,\n1.50x the scores needed" in text and "8 blocks,\n1.12x the scores needed" in text
    assert figcheck.collisions(fig) == []
