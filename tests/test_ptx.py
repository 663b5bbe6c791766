"""ladder.ptx's rules on small PTX loops shaped as Triton 3.6 and 3.9 write rung 7's: which CTA barriers it drops, which it
keeps, how it splits the refill barrier, and that PTX of another shape comes back unchanged; its hook into Triton,
chained after one installed before it, and what it writes into a kernel's metadata. (Triton attention's rung 8
compiled through it: tests/test_attention_triton.py.)"""
import types

import pytest
import triton

from ladder import ptx

WAIT = """	// begin inline asm
	{{
	.reg .pred complete;
	waitLoop:
	mbarrier.try_wait.parity.shared.b64 complete, [{bar}], %r9;
	@!complete bra.uni waitLoop;
	}}
	// end inline asm
"""
COPY = """	// begin inline asm
	@%p2 mbarrier.arrive.expect_tx.shared.b64 _, [{bar}], 16384;
	// end inline asm
	bar.sync 	0;
	elect.sync 	%r8|%p4, -1;
	and.pred 	%p5, %p3, %p4;
	and.pred 	%p6, %p1, %p5;
	// begin inline asm
	@%p6 cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%r6], [%rd1, {{%r5, %r5, %r5, %r5}}], [{bar}];
	// end inline asm
"""


def kernel(loop_body: str, threads: int = 256, after_loop: str = "\tbar.sync \t0;\n") -> str:
    """A kernel whose key loop waits for K and V, reads them (the wgmma), then refills both slots; after the loop a
    barrier, as Triton writes one before it invalidates the mbarriers (a path to the exit without one keeps a
    barrier: the pass is conservative there)."""
    return f""".visible .entry k(
	.param .u64 k_param_0
)
.reqntid {threads}
{{
	.reg .pred 	%p<8>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<2>;
$L__func_begin0:
	mov.u32 	%r1, %tid.x;
	and.b32 	%r2, %r1, 255;
	setp.eq.b32 	%p2, %r2, 0;
	setp.lt.u32 	%p1, %r2, 64;
	@%p2 mbarrier.init.shared::cta.b64 [%r3], 1;
	bar.sync 	0;
	@%p2 mbarrier.init.shared::cta.b64 [%r4], 1;
	bar.sync 	0;
$L__BB0_2:
{loop_body}	setp.lt.s32 	%p7, %r10, %r11;
	@%p7 bra 	$L__BB0_2;
{after_loop}	ret;
}}
"""


LOOP = (WAIT.format(bar="%r3") + "\tbar.sync \t0;\n" + WAIT.format(bar="%r4")
        + "\twgmma.fence.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n"
        + COPY.format(bar="%r3") + COPY.format(bar="%r4"))


def barriers(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(("bar.", "@%refill"))]


def test_the_barriers_between_waits_and_between_copies_go_and_the_refill_barrier_splits():
    out, changed = ptx.split_refill_barriers(kernel(LOOP))
    assert changed == ptx.Changes(dropped=2, split=1)   # between the two waits and between the two copies; one split
    body = out[out.index("$L__BB0_2:"):out.index("@%p7 bra")]
    assert barriers(body) == ["@%refill_sync1 bar.sync \t1, 256;", "@%refill_sync2 bar.sync \t2, 256;",
                              "@%refill_arrive1 bar.arrive \t1, 256;", "@%refill_arrive2 bar.arrive \t2, 256;"]
    assert "and.pred \t%refill_sync1, %p1, %refill_odd;" in out   # the issuers: tid < 64, the copies' predicate
    assert out.count("bar.sync \t0;") == 3   # the two after the mbarrier inits and the one after the loop stay
    assert ".reg .b32 \t%refill_turn;" in out and "mov.b32 \t%refill_turn, 2;" in out


def test_a_barrier_kept_where_it_orders_something():
    # shared memory written before it: the barrier orders that store against the loads after it
    stored = LOOP.replace("\tbar.sync \t0;\n", "\tst.shared.b32 \t[%r7], %r8;\n\tbar.sync \t0;\n", 1)
    assert ptx.drop_redundant_barriers(kernel(stored))[0].count("bar.sync \t0;") \
        > ptx.drop_redundant_barriers(kernel(LOOP))[0].count("bar.sync \t0;")
    # a wait before it and an mbarrier invalidated after it: every thread must be done waiting first
    tail = WAIT.format(bar="%r3") + "\tbar.sync \t0;\n\t@%p2 mbarrier.inval.shared::cta.b64 [%r3];\n"
    out, _ = ptx.drop_redundant_barriers(kernel(LOOP, after_loop=tail))
    assert "\tbar.sync \t0;\n\t@%p2 mbarrier.inval" in out
    # a wait before it and a copy after it: the copy could complete the phase after the one a late warp waits for
    late = WAIT.format(bar="%r3") + COPY.format(bar="%r3").replace("\tbar.sync \t0;\n", "")
    late = late.replace("\t// begin inline asm\n\t@%p6 cp", "\tbar.sync \t0;\n\t// begin inline asm\n\t@%p6 cp")
    out, dropped = ptx.drop_redundant_barriers(kernel(late))
    assert dropped == 0 and "\tbar.sync \t0;\n\t// begin inline asm\n\t@%p6 cp" in out


def test_ptx_of_another_shape_comes_back_unchanged():
    one_warpgroup = kernel(LOOP, threads=128)
    unchanged = ptx.Changes(0, 0)
    assert ptx.split_refill_barriers(kernel(LOOP), stages=3)[1] == (2, 1)
    deep = kernel(LOOP)   # a ring of 4: three refills in flight, more than two named barriers in turn keep apart
    assert ptx.split_refill_barriers(deep, stages=ptx.MAX_STAGES + 1) == (deep, unchanged)
    assert ptx.split_refill_barriers(one_warpgroup) == (one_warpgroup, unchanged)
    named = kernel(LOOP.replace("wgmma.fence", "bar.arrive \t3, 256;\n\twgmma.fence"))
    assert ptx.split_refill_barriers(named) == (named, unchanged)   # named barriers in use already
    two_left = kernel(LOOP.replace("\twgmma.wait_group", "\tld.shared.b32 \t%r7, [%r6];\n\tbar.sync \t0;\n"
                                                        "\twgmma.wait_group"))
    assert ptx.split_refill_barriers(two_left) == (two_left, unchanged)   # two barriers left in the loop


# Triton 3.9's loop: Q·Kᵀ waited for, then a barrier (the refill's: every warp's reads of the slot it refills are
# done), the softmax, P·V issued and left in flight, a barrier, the copies.
QK_THEN_PV = (WAIT.format(bar="%r3") + WAIT.format(bar="%r4")
              + "\twgmma.fence.sync.aligned;\n\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%r1}, %rd1, %rd1, "
                "%p1, 1, 1, 0, 0;\n\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n"
              + "\tbar.sync \t0;\n\tex2.approx.f32 \t%r7, %r8;\n"
              + "\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%r1}, {%r7}, %rd1, %p1, 1, 1, 1;\n"
                "\twgmma.commit_group.sync.aligned;\n"
              + "\tbar.sync \t0;\n" + COPY.format(bar="%r3") + COPY.format(bar="%r4"))


def test_a_barrier_after_a_wgmma_in_flight_goes_and_the_one_after_its_wait_splits():
    out, changed = ptx.split_refill_barriers(kernel(QK_THEN_PV))
    assert changed == (3, 1)   # after P·V's issue and between the copies dropped; the one after the wait split
    body = out[out.index("$L__BB0_2:"):out.index("@%p7 bra")]
    assert barriers(body)[0] == "@%refill_sync1 bar.sync \t1, 256;" and "bar.sync \t0;" not in body
    assert body.index("bar.arrive") < body.index("ex2.approx")   # split where the wait left it
    # P·V waited for before the second barrier: that barrier orders its reads and stays, and with two barriers
    # left in the loop the PTX comes back unchanged
    waited = kernel(QK_THEN_PV.replace("\twgmma.commit_group.sync.aligned;\n\tbar.sync",
                                       "\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n"
                                       "\tbar.sync"))
    assert ptx.split_refill_barriers(waited) == (waited, ptx.Changes(0, 0))


class _Previous:
    """A stages hook installed before ours (a profiler's, say): it wraps the PTX stage and has a key of its own."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        if not args:
            return "previous-hook", "previous-digest"
        self.calls.append(args)
        make_ptx = args[1]["ptx"]
        args[1]["ptx"] = lambda src, metadata: make_ptx(src, metadata) + "// seen by the previous hook\n"


def _ptx_stage(text: str, require: bool = False, previous=None, ring: int = 3):
    """The PTX stage as Triton would run it with the pass's hook installed (over `previous`): Triton's own stage
    returns `text`, the compile's num_stages is `ring`; (the stage's output, the kernel's metadata, the key the hook
    gives)."""
    knobs = triton.knobs.runtime
    saved, knobs.add_stages_inspection_hook = knobs.add_stages_inspection_hook, previous
    try:
        with ptx.refill_barriers_split(require):
            hook = knobs.add_stages_inspection_hook
            stages = {"ptx": lambda src, metadata: text}
            hook(None, stages, types.SimpleNamespace(num_stages=ring), None, 90)   # (backend, stages, options, ...)
            metadata = {"name": "k"}
            try:
                return stages["ptx"](None, metadata), metadata, hook()
            finally:
                assert knobs.add_stages_inspection_hook is hook
    finally:
        assert knobs.add_stages_inspection_hook is previous   # the one installed before is back
        knobs.add_stages_inspection_hook = saved


@pytest.mark.triton_api
def test_the_hook_rewrites_the_ptx_stage_and_says_what_it_changed():
    out, metadata, (key, digest) = _ptx_stage(kernel(LOOP))
    assert out == ptx.split_refill_barriers(kernel(LOOP))[0]
    assert metadata["ptx_pass"] == {"name": "split_refill_barriers", "sha256": ptx.version(), "dropped": 2, "split": 1}
    assert key == ptx.tag() == f"split_refill_barriers-{ptx.version()}" and digest == ptx.version()   # Triton 3.9's key
    one_warpgroup = kernel(LOOP, threads=128)
    out, metadata, _ = _ptx_stage(one_warpgroup)   # left as compiled, and said so
    assert out == one_warpgroup and metadata["ptx_pass"]["split"] == metadata["ptx_pass"]["dropped"] == 0
    with pytest.raises(ptx.PassDidNotApply, match="left its PTX as compiled"):
        _ptx_stage(one_warpgroup, require=True)   # rung 8's: a kernel the pass leaves as compiled does not build
    out, metadata, _ = _ptx_stage(kernel(LOOP), ring=4)   # a compile in 4 stages: the split is not safe there
    assert out == kernel(LOOP) and metadata["ptx_pass"]["split"] == 0


@pytest.mark.triton_api
def test_the_hook_is_chained_after_one_installed_before():
    previous = _Previous()
    out, metadata, (key, digest) = _ptx_stage(kernel(LOOP), previous=previous)
    assert len(previous.calls) == 1 and previous.calls[0][4] == 90   # it saw the stages, as Triton calls it
    # its PTX stage ran (it appends a comment), then the pass on what it returned
    assert out == ptx.split_refill_barriers(kernel(LOOP) + "// seen by the previous hook\n")[0]
    assert out.endswith("// seen by the previous hook\n") and metadata["ptx_pass"]["split"] == 1
    assert key == "previous-hook" + ptx.tag() and digest not in ("previous-digest", ptx.version())   # both keys in it
    # nested: ours is not applied twice (the second pass would find named barriers in use and change nothing)
    knobs = triton.knobs.runtime
    saved = knobs.add_stages_inspection_hook
    try:
        knobs.add_stages_inspection_hook = None
        with ptx.refill_barriers_split(), ptx.refill_barriers_split(require=True):
            stages = {"ptx": lambda src, metadata: kernel(LOOP)}
            knobs.add_stages_inspection_hook(None, stages, None, None, 90)
            metadata = {}
            assert stages["ptx"](None, metadata) == ptx.split_refill_barriers(kernel(LOOP))[0]
            assert metadata["ptx_pass"]["split"] == 1
        assert knobs.add_stages_inspection_hook is None
    finally:
        knobs.add_stages_inspection_hook = saved


@pytest.mark.triton_api
def test_an_edited_pass_has_another_key(monkeypatch):
    """The pass's key (Triton 3.9's hook key; rung 8's PTX_PASS constexpr on every Triton) is its file's content."""
    before = ptx.tag()
    monkeypatch.setattr(ptx, "version", lambda: "0123456789abcdef")
    assert ptx.tag() == "split_refill_barriers-0123456789abcdef" != before
    assert _ptx_stage(kernel(LOOP))[2] == (ptx.tag(), "0123456789abcdef")
