"""ladder.dispatch on the CPU: the shapes, the table's key and its invalidation, its file and its lock, lookups by
case, the pick and its tie rule, ladder.ops.matmul running the table's pick (in the interpreter), and the sweep's
logic with its timer and GPU faked: the rows it records, the table it writes, the recording it merges into.
First-use tuning's own tests are tests/test_first_use.py."""
import json

import pytest
import torch

import kernels.matmul as km
from kernels.triton import matmul as tm
from ladder import cli, dispatch, ops, results
from ladder import sweep as shape_sweep
from ladder.capstone import costs
from ladder.capstone.model import PRESETS
from ladder.check import compare
from ladder.runtime.errors import NotAvailable
from ladder.dispatch import CUBLAS, RUNG6, RUNG7, RUNG12, Case, DispatchTable, Entry, Timed
from ladder.sweep import Candidate
from ladder.timing import Timing
from ops_helpers import reference
from test_ops import H100, T4, gpu

A100 = gpu("NVIDIA A100-SXM4-80GB", (8, 0))
SMALLEST = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4, num_stages=1)   # the interpreter's rule
TALLER = dict(SMALLEST, BLOCK_M=32)                                               # another of its configurations
GEN = torch.Generator().manual_seed(7)


def randn(*shape):
    return torch.randn(*shape, generator=GEN).half()


def entry(shape, layout="row", epilogue=None, **ms) -> Entry:
    """An entry with these medians ({"cublas": 1.0, "rung6": 2.0, ...}) in the case; rung 6 timed in TALLER."""
    labels = {"cublas": CUBLAS, "rung6": RUNG6, "rung7": RUNG7, "rung12": RUNG12}
    return Entry(Case(*shape, layout, epilogue), {labels[k]: Timed(TALLER if k == "rung6" else None, v) for k, v in ms.items()})


def table(*entries: Entry) -> DispatchTable:
    """A table of these entries, swept (as far as its key says) by this process on an H100."""
    return DispatchTable.of(dispatch.process_key(H100.slug), entries)


@pytest.fixture(autouse=True)
def scratch_recordings_and_cache(tmp_path, monkeypatch):
    """Recordings and the cache in a temporary folder: a sweep here must never touch results/ or ~/.cache."""
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(dispatch, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture
def in_effect(monkeypatch):
    """install(table): the table ladder.ops consults, as if read from this GPU's cache; the op's choices are
    forgotten before and after."""
    def install(t):
        monkeypatch.setattr(dispatch, "_loaded", dispatch.Loaded(t, "installed by the test"))
        ops.forget_choices()
    yield install
    ops.forget_choices()


# ------------------------------------------------------------- the shapes

def test_model_shapes_are_the_capstone_models_matmuls():
    assert list(dispatch.MODEL_SHAPES.values()) == [(8192, 2304, 768), (8192, 768, 768), (8192, 3072, 768),
                                                    (8192, 768, 3072), (8192, 50257, 768)]
    matmuls = [op for op in costs.ops(PRESETS["gpt2-small"]) if op.family == "matmul"]
    assert {op.name: op.flops for op in matmuls} == {n: 2 * M * N * K for n, (M, N, K) in dispatch.MODEL_SHAPES.items()}
    assert dispatch.MODEL_SHAPES["MLP down (4d -> d)"] == km.MLP_DOWN
    assert dispatch.GOAL_SHAPES["square 2048"] == (2048,) * 3


def test_the_grid_is_log_spaced_from_256_to_8192_with_odd_sizes():
    assert dispatch.GRID_SIZES == (256, 1449, 8192) and 1449 ** 2 == pytest.approx(256 * 8192, rel=2e-3)
    assert len(set(dispatch.GRID)) == 27 and {s for shape in dispatch.GRID for s in shape} == set(dispatch.GRID_SIZES)
    assert sum(any(d % 2 for d in s) for s in dispatch.GRID) == 27 - 8   # all but the 8 corners have an odd size
    assert len(dispatch.shapes_to_sweep(model=True, grid=False)) == 6
    assert set(dispatch.shapes_to_sweep(model=False, grid=True).values()) == {dispatch.GRID_NAME}
    assert len(dispatch.shapes_to_sweep(model=False, grid=False)) == 6 + 27
    given = dispatch.shapes_to_sweep(model=False, grid=False, given=[km.MLP_DOWN, (256, 256, 1449), (64, 64, 64)])
    assert given == {km.MLP_DOWN: "MLP down (4d -> d)", (256, 256, 1449): "grid", (64, 64, 64): "given"}


# ------------------------------------------------------------- the key, the file

def test_the_key_changes_with_each_version_and_a_table_under_other_versions_is_ignored(monkeypatch):
    key = dispatch.process_key(H100.slug)
    assert set(key) == {"gpu", "driver", "cuda", "triton", "torch"} and key["gpu"] == H100.slug
    assert (key["cuda"], key["torch"]) == (torch.version.cuda, torch.__version__) and key["driver"] is None  # no GPU
    assert dispatch.process_key(A100.slug) != key
    swept = table(entry((4096,) * 3, cublas=1.0, rung6=0.9))
    swept.write(dispatch.cache_path(H100.slug))
    assert dispatch.load(H100).table == swept
    for name in dispatch.VERSION_READERS:
        with monkeypatch.context() as m:
            m.setitem(dispatch.VERSION_READERS, name, lambda: "9.9.9")
            changed = dispatch.process_key(H100.slug)
            assert {k for k in key if changed[k] != key[k]} == {name}
            loaded = dispatch.load(H100)
            assert loaded.table is None and f"{name} {key[name]} -> 9.9.9" in loaded.reason
            assert "\n" not in loaded.reason
    assert dispatch.load(H100).table == swept   # the same versions again: valid again


def test_a_missing_or_unreadable_table_is_absent_with_its_reason():
    assert "`python -m ladder sweep` fills it" in dispatch.load(H100).reason
    dispatch.CACHE_DIR.mkdir()
    dispatch.cache_path(H100.slug).write_text("{not json")
    assert dispatch.load(H100).table is None and "unreadable" in dispatch.load(H100).reason
    assert dispatch.load(None).reason.startswith("no GPU")


def test_round_trip_through_the_file(tmp_path):
    swept = table(entry((8192, 768, 3072), cublas=0.2, rung6=0.21, rung12=0.19), entry((1449, 256, 8192), cublas=0.05),
                  entry((8192, 768, 3072), "weight_t", "bias_gelu", cublas=0.3))
    path = swept.write(tmp_path / "deep" / "dispatch.json")
    assert DispatchTable.from_dict(json.loads(path.read_text())) == swept
    assert [p.name for p in path.parent.iterdir()] == ["dispatch.json"]   # written whole, then renamed: no leftovers


def test_update_adds_entries_under_the_lock_and_keeps_the_others():
    old = entry((4096,) * 3, cublas=1.0)
    table(old).write(dispatch.cache_path(H100.slug))
    added = dispatch.update(H100, [entry((37, 45, 29), "weight_t", "bias", cublas=2.0, rung6=1.0)])
    assert set(added.entries) == {Case(4096, 4096, 4096), Case(37, 45, 29, "weight_t", "bias")}
    assert dispatch.load(H100).table == added and dispatch.current().table == added   # in effect at once
    with dispatch.locked(H100):   # reentrant in one process: first use holds it while it measures and updates
        dispatch.update(H100, [entry((1, 1, 1), cublas=1.0)])
    assert len(dispatch.load(H100).table.entries) == 3


# ------------------------------------------------------------- lookups and picks

def test_lookup_finds_the_case_itself_only():
    swept = table(entry((4096,) * 3, cublas=1.0), entry(km.MLP_DOWN, "weight_t", "bias_gelu", cublas=1.0))
    assert swept.lookup(Case(4096, 4096, 4096)).shape == (4096,) * 3
    assert swept.lookup(Case(*km.MLP_DOWN, "weight_t", "bias_gelu")).case.epilogue == "bias_gelu"
    assert swept.lookup(Case(*km.MLP_DOWN)) is None                    # another layout and epilogue
    assert swept.lookup(Case(4000, 4096, 4096)) is None                # a near shape: tiles, masks and loads differ
    assert str(Case(*km.MLP_DOWN, "weight_t", "bias_gelu")) == "8192x768x3072 B weight_t + bias_gelu"
    bf16 = Case(*km.MLP_DOWN, "weight_t", "bias_gelu", "bfloat16")
    assert swept.lookup(bf16) is None and str(bf16) == "8192x768x3072 B weight_t + bias_gelu bfloat16"


def test_a_bf16_case_is_kept_apart_and_fp16_entries_are_written_as_before():
    fp16 = entry((64, 64, 64), cublas=1.0)
    bf16 = dispatch.Entry(Case(64, 64, 64, "row", None, "bfloat16"), fp16.timings)
    assert "dtype" not in fp16.as_dict() and bf16.as_dict()["dtype"] == "bfloat16"
    assert dispatch.Entry.from_dict(bf16.as_dict()) == bf16 and dispatch.Entry.from_dict(fp16.as_dict()) == fp16
    assert len(table(fp16, bf16).entries) == 2


def test_a_transposed_a_is_a_case_of_its_own():
    """A weight's gradient reads the activations as a.mT: a speed measured with a row-major A says nothing of it."""
    row = entry((768, 3072, 8192), cublas=1.0)
    transposed = dispatch.Entry(Case(768, 3072, 8192, "row", None, "float16", "transposed"), row.timings)
    assert "a_layout" not in row.as_dict() and dispatch.Entry.from_dict(transposed.as_dict()) == transposed
    assert table(row).lookup(transposed.case) is None and str(transposed.case) == "768x3072x8192 A transposed"


def test_the_pick_rung_6_only_when_it_beats_cublas_by_more_than_the_tie():
    assert entry((1, 1, 1), cublas=1.02, rung6=1.0).pick(dispatch.OP_CANDIDATES) == RUNG6
    assert entry((1, 1, 1), cublas=1.005, rung6=1.0).pick(dispatch.OP_CANDIDATES) == CUBLAS
    faster12 = entry((1, 1, 1), cublas=1.0, rung6=1.1, rung12=0.8)
    assert faster12.pick(dispatch.OP_CANDIDATES) == CUBLAS and faster12.pick() == RUNG12   # the op cannot run 12
    assert entry((1, 1, 1), cublas=1.0).pick(dispatch.OP_CANDIDATES) == CUBLAS   # rung 6 wrong or failed there
    assert entry((1, 1, 1), rung6=1.0).pick(dispatch.OP_CANDIDATES) == RUNG6
    assert entry((1, 1, 1), rung7=1.0, rung12=1.0).pick() == RUNG7              # ties among ours: the first swept
    assert entry((1, 1, 1), rung7=1.0).pick(dispatch.OP_CANDIDATES) is None


# ------------------------------------------------------------- the op

class Refused:
    """Stands in for ops._MATMUL_LAUNCHES where the test expects no Triton launch."""
    compiled: dict = {}

    def __call__(self, *args):
        raise AssertionError("rung 6 launched where the table picked torch.matmul")


def test_the_op_runs_torch_matmul_where_the_table_picks_cublas(in_effect, monkeypatch):
    in_effect(table(entry((37, 45, 29), cublas=1.0, rung6=2.0), entry((37, 45, 29), "row", "bias", cublas=1.0)))
    a, b, bias = randn(37, 29), randn(29, 45), randn(45)
    choice = ops.matmul_choice(37, 45, 29)
    assert choice.kernel == CUBLAS and choice.config == TALLER and choice.why.startswith("measured in this case")
    with monkeypatch.context() as m:
        m.setattr(ops, "_MATMUL_LAUNCHES", Refused())
        assert compare(ops.matmul(a, b), reference(a, b)).ok
        assert compare(torch.ops.ladder.matmul(a, b, bias), reference(a, b, bias)).ok   # through the dispatcher
    # a case the table has not measured: in the interpreter, rung 6 by the op's own rule (on a GPU: first use)
    assert compare(ops.matmul(a, b, bias, "relu"), reference(a, b, bias, "relu")).ok
    own = ops.matmul_choice(37, 45, 29, "row", "bias_relu")
    assert own.kernel == RUNG6 and own.config == SMALLEST and ops.matmul_plan(37, 45, 29, "row", "bias_relu").config == SMALLEST
    assert ops.matmul_choice(37, 45, 2 * 29 + 1).kernel == RUNG6   # a shape near a measured one: its own rule


def test_the_op_runs_rung_6_in_the_tables_configuration_and_asks_once_per_case(in_effect, monkeypatch):
    in_effect(table(entry((37, 45, 29), cublas=2.0, rung6=1.0)))
    asked = []
    lookup = dispatch.lookup
    monkeypatch.setattr(dispatch, "lookup", lambda case: asked.append(case) or lookup(case))
    a, b = randn(37, 29), randn(29, 45)
    for _ in range(3):
        assert compare(ops.matmul(a, b), reference(a, b)).ok
    assert ops.matmul_choice(37, 45, 29, "row", None, "float16", "row").kernel == RUNG6   # as the op asks: cached
    assert ops.matmul_plan(37, 45, 29).config == TALLER
    assert asked == [Case(37, 45, 29)]   # then a dict hit
    in_effect(None)                      # no table: the op's own rule again
    own = ops.matmul_choice(37, 45, 29)
    assert own.config == SMALLEST and own.why == "rung 6 by the op's own rule: Triton's interpreter"


def test_an_eager_call_runs_rung_7_where_the_table_picks_it_and_compile_runs_the_pick_without_it(in_effect,
                                                                                                   monkeypatch):
    in_effect(table(entry((37, 45, 29), "weight_t", cublas=2.0, rung6=1.5, rung7=1.0),
                    entry((37, 45, 29), "row", "bias", cublas=2.0, rung6=1.5, rung7=1.0),
                    entry((37, 45, 29), "weight_t", "bias_gelu", cublas=2.0, rung6=1.5, rung7=1.0)))
    monkeypatch.setattr(ops, "_has_rung7", lambda: True)   # a GPU with the TMA; here rung 7 runs interpreted
    choice = ops.matmul_choice(37, 45, 29, "weight_t")
    assert (choice.eager, choice.kernel) == (RUNG7, RUNG6)
    ran = []
    tma = tm.tma_persistent
    monkeypatch.setattr(tm, "tma_persistent", lambda a, b: ran.append((a.stride(), b.stride())) or tma(a, b))
    a, w, bias = randn(37, 29), randn(45, 29), randn(45)
    assert compare(ops.matmul(a, w.t()), reference(a, w.t())).ok     # nn.Linear's weight, read as stored
    assert compare(ops.matmul(a, w.t().contiguous(), bias), reference(a, w.t(), bias)).ok   # bias: a torch op after
    assert compare(ops.matmul(a, w.t(), bias, "gelu"), reference(a, w.t(), bias, "gelu")).ok   # and the activation
    assert ran == [((29, 1), (1, 29)), ((29, 1), (45, 1)), ((29, 1), (1, 29))]
    with monkeypatch.context() as m:   # an A rung 7's descriptors do not take: the pick without rung 7
        m.setattr(tm, "tma_persistent", lambda a, b: pytest.fail("rung 7 launched on a layout it does not take"))
        assert compare(ops.matmul(a.t().contiguous().t(), w.t()), reference(a, w.t())).ok
    monkeypatch.setattr(ops, "_has_rung7", lambda: False)   # no TMA (an A100, a T4, the CPU): the pick without it
    ops.forget_choices()
    assert ops.matmul_choice(37, 45, 29, "weight_t").eager == RUNG6


def test_describe_says_where_the_pick_comes_from(in_effect):
    in_effect(table(entry((1, 1, 1), cublas=1.0)))
    assert dispatch.describe() == "per case, the candidate measured fastest on this GPU: installed by the test"


# ------------------------------------------------------------- the sweep, its timer and GPU faked

def test_the_candidates_on_each_gpu():
    assert [c.label for c in shape_sweep.candidates(H100)] == [CUBLAS, RUNG6, RUNG7, RUNG12]
    assert [c.label for c in shape_sweep.candidates(A100)] == [CUBLAS, RUNG6]
    assert [c.label for c in shape_sweep.candidates(T4)] == [CUBLAS]


def test_the_sweep_refuses_a_gpu_where_the_op_has_nothing_to_choose(monkeypatch):
    monkeypatch.setattr(shape_sweep, "_gpu_for_sweep", lambda: T4)
    with pytest.raises(NotAvailable, match="runs torch.matmul at every shape: nothing to choose"):
        shape_sweep.sweep({(256,) * 3: "grid"})


def test_the_sweep_records_rows_writes_the_table_and_merges_the_recording(monkeypatch, in_effect):
    monkeypatch.setattr(shape_sweep, "_gpu_for_sweep", lambda: H100)
    first, second, elsewhere = (37, 45, 29), (16, 32, 48), (4096,) * 3
    # an earlier table (same versions) at another shape, kept; one in effect that picks cuBLAS at the first shape
    table(entry(elsewhere, cublas=1.0, rung6=0.5)).write(dispatch.cache_path(H100.slug))
    in_effect(table(entry(first, cublas=1.0, rung6=9.0)))
    old_row = dict(problem="matmul", backend="triton", rung="6_autotuned", recorded="then")
    results.save({"provenance": {"slug": H100.slug, "date": "then"}, "ceilings": {"copy_TBps": 3.0},
                  "runs": [dict(old_row, shape=[4096] * 3, ms=1.0)], "sessions": [{"date": "then"}],
                  "shape_sweep": [dict(old_row, shape=list(first), ms=5.0),
                                  dict(old_row, shape=list(elsewhere), ms=0.5)]})

    real = {c.label: c for c in shape_sweep.candidates(H100)}
    launches = []

    class Counted(ops.Launches):   # rung 6's launches while the sweep times it
        def __call__(self, *args):
            launches.append(args[0])
            return super().__call__(*args)
    monkeypatch.setattr(ops, "_MATMUL_LAUNCHES", Counted(ops._MATMUL_JIT))

    def broken(a, b):
        raise RuntimeError("no TMA in the interpreter today\nsecond line")
    chosen = [real[CUBLAS], real[RUNG6], Candidate(RUNG7, broken, lambda shape: {"BLOCK_M": 128}),
              Candidate(RUNG12, lambda a, b: torch.zeros(a.shape[0], b.shape[1]).half(), lambda shape: {"BM": 128})]
    medians = iter([2.0, 1.0,      # first shape: cuBLAS, rung 6 (7 fails, 12 is wrong: neither timed)
                    1.0, 1.005])   # second: rung 6 within the tie
    timed = []

    def fake_bench(fn, warmed):
        assert warmed
        timed.append(fn())
        ms = next(medians)
        return Timing(ms, 0.9 * ms, 1.1 * ms)
    monkeypatch.setattr(shape_sweep, "bench", fake_bench)
    said = []
    swept = shape_sweep.sweep({first: "grid", second: "given"}, chosen=chosen, say=said.append)

    assert said[0].startswith("2 shapes x 4 candidates (torch:cublas, triton:6_autotuned, triton:7_tma_persistent, "
                              "cuda:12_autotuned) on NVIDIA H100")
    assert said[1].split() == ["grid", "37x45x29", "torch:cublas", "2.000", "ms", "triton:6_autotuned", "1.000", "ms",
                               "triton:7_tma_persistent", "failed", "cuda:12_autotuned", "WRONG"]
    rows = {(tuple(r["shape"]), f"{r['backend']}:{r['rung']}"): r for r in swept.rows}
    assert len(swept.rows) == 8 and len(timed) == 4
    assert rows[first, RUNG6]["config"] == SMALLEST   # the op's own rule, not the table in effect then
    assert len(launches) >= 2                          # and rung 6 itself ran: its check and its timing
    assert rows[first, RUNG6]["ms"] == 1.0 and rows[first, RUNG6]["ms_p80"] == 1.1 and rows[first, CUBLAS]["correct"]
    assert rows[first, RUNG6]["tflops"] == pytest.approx(2 * 37 * 45 * 29 / 1e-3 / 1e12)
    assert rows[first, RUNG7] == {"problem": "matmul", "backend": "triton", "rung": "7_tma_persistent",
                                  "shape": list(first), "name": "grid", "config": {"BLOCK_M": 128}, "correct": False,
                                  "error": "RuntimeError: no TMA in the interpreter today"}
    wrong = rows[first, RUNG12]
    assert not wrong["correct"] and wrong["rel_error"] == 1.0 and "ms" not in wrong

    written = dispatch.load(H100).table
    assert swept.table == dispatch.cache_path(H100.slug)
    assert set(written.entries) == {Case(*first), Case(*second), Case(*elsewhere)}
    assert written.entries[Case(*first)].timings == {CUBLAS: Timed(None, 2.0), RUNG6: Timed(SMALLEST, 1.0)}
    picks = [written.entries[Case(*s)].pick(dispatch.OP_CANDIDATES) for s in (first, second, elsewhere)]
    assert picks == [RUNG6, CUBLAS, RUNG6]
    assert dispatch._loaded is None   # read again at the op's next call, which chooses again
    assert ops.matmul_choice.cache_info().currsize == 0

    merged = results.load(H100.slug).data
    assert swept.recording == results.path_for(H100.slug)
    assert merged["runs"] == [dict(old_row, shape=[4096] * 3, ms=1.0)] and merged["ceilings"] == {"copy_TBps": 3.0}
    kept = [r for r in merged["shape_sweep"] if r.get("recorded") == "then"]
    assert kept == [dict(old_row, shape=list(elsewhere), ms=0.5)]   # the old row at the first shape: replaced
    assert len(merged["shape_sweep"]) == 9 and all(r["recorded"] == merged["provenance"]["date"]
                                                   for r in merged["shape_sweep"] if r not in kept)


def test_warp_states_of_cublas_and_our_fastest_rung_join_the_recording_at_each_swept_shape(monkeypatch):
    from ladder import profile
    monkeypatch.setattr(shape_sweep, "_gpu_for_sweep", lambda: H100)
    swept, unswept = (8192, 768, 768), (512, 512, 512)
    row = dict(problem="matmul", shape=list(swept), config=None, recorded="then")
    kept = dict(problem="matmul", backend="torch", rung="cublas", shape=[4096] * 3, metrics={}, recorded="then")
    results.save({"provenance": {"slug": H100.slug, "date": "then"}, "ceilings": {}, "runs": [],
                  "sessions": [{"date": "then"}], "warp_states": [kept],
                  "shape_sweep": [dict(row, backend="torch", rung="cublas", ms=1.0),
                                  dict(row, backend="triton", rung="7_tma_persistent", ms=1.2),
                                  dict(row, backend="cuda", rung="12_autotuned", ms=1.1)]})
    asked = []
    monkeypatch.setattr(profile, "warp_states", lambda *a: asked.append(a) or {"stall_barrier": 2.0})
    said = []
    shape_sweep.record_warp_states({swept: "attention output proj.", unswept: "given"}, say=said.append)
    assert asked == [("matmul", "torch", "cublas", swept), ("matmul", "cuda", "12_autotuned", swept)]
    assert said[0] == "attention output proj. 8192x768x768 torch:cublas: barrier 2"
    assert said[2].startswith("given 512x512x512: not swept on this GPU")
    states = results.load(H100.slug).warp_states("matmul")
    assert [(w["rung"], w["shape"]) for w in states] == [("cublas", [4096] * 3), ("cublas", list(swept)),
                                                         ("12_autotuned", list(swept))]


def test_a_sweep_cut_short_keeps_the_shapes_it_finished(monkeypatch):
    monkeypatch.setattr(shape_sweep, "_gpu_for_sweep", lambda: H100)
    timed = []

    def bench_until_the_limit(fn, warmed):   # the device's time limit arrives during the second shape
        if len(timed) == 2:
            raise KeyboardInterrupt
        timed.append(fn())
        return Timing(1.0, 1.0, 1.0)
    monkeypatch.setattr(shape_sweep, "bench", bench_until_the_limit)
    chosen = [shape_sweep.candidates(H100)[0], Candidate(RUNG6, torch.matmul, lambda shape: SMALLEST)]
    with pytest.raises(KeyboardInterrupt):
        shape_sweep.sweep({(37, 45, 29): "grid", (16, 32, 48): "grid"}, chosen=chosen, say=lambda line: None)
    assert set(dispatch.load(H100).table.entries) == {Case(37, 45, 29)} and dispatch._loaded is None


def test_the_sweep_leaves_the_recording_alone_where_this_gpu_has_none():
    assert shape_sweep.record([{"shape": [1, 1, 1]}], H100) is None and not results.RESULTS_DIR.exists()


def test_goals_against_the_rows():
    def timed(shape, name, ours_ms):   # cuBLAS at 1 ms
        return [dict(problem="matmul", backend="torch", rung="cublas", shape=list(shape), name=name, config=None,
                     ms=1.0),
                dict(problem="matmul", backend="cuda", rung="12_autotuned", shape=list(shape), name=name, config={},
                     ms=ours_ms)]
    rows = (timed(km.MLP_DOWN, "MLP down (4d -> d)", 1.0 / 0.96)
            + timed(dispatch.VOCABULARY, "vocabulary projection", 1.0)
            + timed((2048,) * 3, "square 2048", 1.0 / 0.9)
            + [r for i, s in enumerate(dispatch.GRID[:5]) for r in timed(s, "grid", 1.0 / (0.9 + 0.05 * i))])
    assert dispatch.times_cublas(rows)[km.MLP_DOWN] == (RUNG12, pytest.approx(0.96))
    lines = dispatch.goals(rows)   # in GOAL_SHAPES' order, those swept
    assert lines[0].startswith("MLP down (4d -> d)")
    assert lines[0].endswith("cuda:12_autotuned 0.960x cuBLAS  met (>= 0.95x)")
    assert lines[1].startswith("vocabulary projection") and lines[1].endswith("NOT met (beat cuBLAS)")   # a tie
    assert lines[2].startswith("square 2048") and lines[2].endswith("0.900x cuBLAS  NOT met (>= 0.95x)")
    assert lines[3] == "grid median over 5 shapes: 1.000x cuBLAS  met (>= 0.95x)"


@pytest.mark.parametrize("argv", [["sweep"], ["sweep", "--model", "--search"], ["sweep", "--shape", "8192x768x3072"]])
def test_the_cli_says_in_one_line_that_the_sweep_needs_a_gpu(capsys, argv):
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "`sweep` (it times every candidate kernel at each shape) needs a CUDA GPU" in lines[0]


def test_the_cli_reads_a_shape_as_m_x_n_x_k(capsys):
    assert cli._shape("8192x768x3072") == km.MLP_DOWN
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--shape", "8192x768"])
    assert "'8192x768' is no MxNxK shape" in capsys.readouterr().err


def test_an_eager_call_that_wants_a_gradient_runs_our_kernel_only_where_it_won_by_the_training_margin(in_effect):
    margin = dispatch.TRAINING_MARGIN_MS
    in_effect(table(entry((37, 45, 29), "weight_t", cublas=1.0, rung6=1.0 - margin / 2),
                    entry((37, 45, 31), "weight_t", cublas=1.0 + 2 * margin, rung6=1.0)))
    near, far = ops.matmul_choice(37, 45, 29, "weight_t"), ops.matmul_choice(37, 45, 31, "weight_t")
    assert (near.eager, near.training) == (RUNG6, CUBLAS) and (far.eager, far.training) == (RUNG6, RUNG6)
    a, w = randn(37, 29).requires_grad_(), randn(45, 29).requires_grad_()
    assert ops.matmul(a, w.t()).grad_fn.name() == "MmBackward0"   # torch's own op and its C++ node, not ours
    a, w = randn(37, 31).requires_grad_(), randn(45, 31).requires_grad_()
    assert ops.matmul(a, w.t()).grad_fn.name() == "_EagerMatmulBackward"   # ours
