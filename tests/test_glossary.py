"""The glossary the lessons link to (notebooks/glossary.md) covers what they print: every SASS opcode named in a
committed notebook output has a row saying what it does and the PTX it comes from, every stall reason and counter
has its ncu metric (on its own row), and the words the lessons link to (SM, warp, CTA, occupancy, wave, the stall
tables' unit) have their anchors. Reads files only: no Triton, no subprocess."""
import json
import re
from pathlib import Path

import pytest

from ladder import profile, verdicts

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = (ROOT / "notebooks" / "glossary.md").read_text()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# Every SASS opcode NVIDIA documents (CUDA Binary Utilities, "Instruction Set Reference": the Turing, Ampere/Ada,
# Hopper and Blackwell tables; the older ones' too), plus F2FP, which cuobjdump prints for sm_80+ though the tables
# leave it out, and ARRIVES (cp.async.mbarrier.arrive). A token of a notebook output that is one of these, alone or
# with modifiers (LDG.E.128), counts as an opcode the lesson printed.
SASS_OPCODES = frozenset("""
ACQBULK ACQSHMINIT ARRIVES ATOM ATOMG ATOMS B2R BAR BFE BFI BGMMA BMMA BMOV BMSK BPT BRA BREAK BREV BRK BRX BRXU
BSSY BSYNC CAL CALL CCTL CCTLL CCTLT CGAERRBAR CONT CREDUX CS2R CS2UR CSET CSETP DADD DEPBAR DFMA DMMA DMNMX DMUL
DSET DSETP ELECT ENDCOLLECTIVE ERRBAR EXIT F2F F2FP F2I F2IP FADD FADD2 FADD32I FCHK FCMP FENCE FFMA FFMA2 FFMA32I
FHADD FHFMA FLO FMNMX FMNMX3 FMUL FMUL2 FMUL32I FRND FSEL FSET FSETP FSWZADD GETLMEMBASE HADD2 HADD2_32I HFMA2
HFMA2_32I HGMMA HMMA HMNMX2 HMUL2 HMUL2_32I HSET2 HSETP2 I2F I2FP I2I I2IP IABS IADD IADD3 IADD32I ICMP IDP IDP4A
IGMMA IMAD IMADSP IMMA IMNMX IMUL IMUL32I ISCADD ISCADD32I ISET ISETP JCAL JMP JMX JMXU KILL LD LDC LDCU LDG
LDGDEPBAR LDGMC LDGSTS LDL LDS LDSM LDT LDTM LEA LEPC LOP LOP3 LOP32I MATCH MEMBAR MOV MOV32I MOVM MUFU NANOSLEEP
NOP OMMA P2R PBK PCNT PEXIT PLOP3 PMTRIG POPC PREEXIT PRET PRMT PSET PSETP QADD4 QFMA4 QGMMA QMMA QMUL4 QSPC R2B
R2P R2UR RED REDAS REDG REDUX RET RPCMOV RRO RTT S2R S2UR SEL SETCTAID SETLMEMBASE SGXT SHF SHFL SHL SHR SSY ST
STAS STG STL STS STSM STT STTM SUATOM SULD SURED SUST SYNC SYNCS TEX TEXS TLD TLD4 TLD4S TLDS TMML TXD TXQ UBLKCP
UBLKPF UBLKRED UBMSK UBREV UCGABAR_ARV UCGABAR_WAIT UCLEA UF2F UF2FP UF2I UF2IP UFADD UFFMA UFLO UFMNMX UFMUL
UFRND UFSEL UFSET UFSETP UGETNEXTWORKID UI2F UI2FP UI2I UI2IP UIABS UIADD3 UIMAD UIMNMX UISETP ULDC ULEA ULEPC
ULOP ULOP3 ULOP32I UMEMSETS UMOV UP2UR UPLOP3 UPOPC UPRMT UPSETP UR2UP UREDGR USEL USETMAXREG USGXT USHF USHL
USHR USTGR UTCATOMSWS UTCBAR UTCCP UTCHMMA UTCIMMA UTCOMMA UTCQMMA UTCSHIFT UTMACCTL UTMACMDFLUSH UTMALDG UTMAPF
UTMAREDG UTMASTG UVIADD UVIMNMX UVIRTCOUNT VABSDIFF VABSDIFF4 VHMNMX VIADD VIADDMNMX VIMNMX VIMNMX3 VOTE VOTEU
WARPGROUP WARPGROUPSET WARPSYNC XMAD YIELD
""".split())

# Where an output uses an opcode's spelling for something else: each context is blanked out before the opcodes are
# read, so the same word anywhere else still counts.
NOT_OPCODES = {
    "ncu's name for the SM's L1 data cache and texture unit": re.compile(r"\bL1/TEX\b"),
    "LD, a C++ constant (a shared-memory row's stride) in printed CUDA source": re.compile(
        r"(?<=[-+*/=(,\[])\s*LD\b|\bLD\b(?=\s*[-+*/=,;)\]])"),
}
# an uppercase word not inside another word, a number or a modifier chain: the opcode in "LDG.E.128", "UCGABAR_ARV"
_TOKEN = re.compile(r"(?<![\w.$])([A-Z][A-Z0-9_]*)(?!\w)")


def output_texts(path: Path) -> list[str]:
    """The committed outputs of a notebook, as a student reads them: stream text and text/plain results."""
    texts = []
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append("".join(out["text"]))
            if "text/plain" in out.get("data", {}):
                texts.append("".join(out["data"]["text/plain"]))
    return texts


def printed_opcodes(text: str) -> set[str]:
    """The SASS opcodes (without modifiers) that `text` names."""
    for context in NOT_OPCODES.values():
        text = context.sub(" ", text)
    return {m.group(1) for m in _TOKEN.finditer(text) if m.group(1) in SASS_OPCODES}


def section(heading_id: str) -> str:
    """The glossary's text from the heading with anchor `heading_id` to the next heading of its level or above."""
    start = GLOSSARY.index(f'<a id="{heading_id}"></a>')
    level = GLOSSARY.rindex("\n", 0, start) + 1
    hashes = GLOSSARY[level:start].strip()
    after = re.search(rf"^#{{1,{len(hashes)}}} ", GLOSSARY[start:], re.M)
    return GLOSSARY[start:start + after.start()] if after else GLOSSARY[start:]


def rows(text: str) -> list[list[str]]:
    """The body rows of the markdown tables in `text`, as lists of stripped cells."""
    found = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line):
            found.append([c.strip() for c in line.strip().strip("|").split("|")])
    return [r for r in found if r[0] not in ("name", "opcode", "printed as")]


def sass_rows() -> dict[str, list[str]]:
    """The glossary's SASS table: each base opcode its row's first cell names -> the row."""
    table = {}
    for row in rows(section("sass-instructions")):
        for code in re.findall(r"`([^`]+)`", row[0]):
            table[re.match(r"[A-Z][A-Z0-9_]*", code).group(0)] = row
    return table


PRINTED = {path.name: set().union(*map(printed_opcodes, output_texts(path))) for path in NOTEBOOKS}


def test_the_opcode_finder_sees_what_a_student_sees():
    """Opcodes alone, with modifiers or in a count table are found; table headers, names and the blanked-out
    contexts are not; an opcode no lesson prints yet is found too (so a new one fails the test below)."""
    text = ("rung   LDG    LDS  HMMA.16816.F32  MUFU.EX2  BLOCK_M  H100  TMA  FMA\n"
            "  N = 50257  LDG.E.U16 64, REDG.F32x4 2, UCGABAR_WAIT 0\n"
            "constexpr int LD = HEAD_DIM + PAD;  half *Ks = Qs + BLOCK_M * LD;\n"
            "    L1/TEX Hit Rate   %   86.18\n"
            "GFLOPs, FLOP/s and 67 TFLOP/s name no opcode; a new one: UTMAPF 3, and LD 4")
    assert printed_opcodes(text) == {"LDG", "LDS", "HMMA", "MUFU", "REDG", "UCGABAR_WAIT", "UTMAPF", "LD"}


def test_the_notebooks_print_opcodes():
    """The scan reads real outputs: the lessons' SASS tables are there to be checked."""
    found = set().union(*PRINTED.values())
    assert {"LDG", "HMMA", "HGMMA", "LDGSTS", "UTMALDG", "SYNCS", "MUFU", "LDL", "STL"} <= found, found


@pytest.mark.parametrize("notebook", sorted(PRINTED))
def test_every_printed_opcode_has_a_glossary_row(notebook):
    missing = PRINTED[notebook] - set(sass_rows())
    assert not missing, f"{notebook} prints {sorted(missing)}: add a row to the glossary's SASS table"


def test_every_sass_row_says_what_it_does_and_its_ptx():
    table = sass_rows()
    assert set(table) <= SASS_OPCODES, set(table) - SASS_OPCODES  # no misspelt opcode
    for opcode, row in table.items():
        assert len(row) == 3 and row[1], opcode
        # the PTX column names a PTX instruction (lowercase, in backticks), or says the opcode has none of its own
        assert re.search(r"`[a-z][a-z0-9_]*[.\s]", row[2]) or row[2].startswith("none"), opcode


def _row(name: str) -> list[str]:
    found = [r for r in rows(GLOSSARY) if r[0] == f"`{name}`"]
    assert len(found) == 1, f"{name}: {len(found)} glossary rows"
    return found[0]


@pytest.mark.parametrize("reason", profile.STALL_REASONS)
def test_every_stall_reason_has_its_row(reason):
    """Its name, the name the lessons print, its ncu metric and what the warp waited for, on one row."""
    assert profile.WARP_STATE[f"stall_{reason}"] == \
        f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
    assert "`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`" in GLOSSARY
    name, printed, metric, meaning = _row(f"stall_{reason}")
    assert (printed, metric) == (verdicts.STALL_NAMES[reason], f"`{reason}`") and meaning


@pytest.mark.parametrize("name", sorted({**profile.METRICS, **profile.WARP_STATE}.keys() -
                                        {f"stall_{r}" for r in profile.STALL_REASONS}))
def test_every_counter_has_its_metric_on_its_row(name):
    row = _row(name)
    assert f"`{({**profile.METRICS, **profile.WARP_STATE})[name]}`" in row and row[-1], name


@pytest.mark.parametrize("header", sorted(verdicts.COUNTERS))
def test_every_column_header_the_lessons_print_is_explained(header):
    assert any(f"`{header}`" in r[0] for r in rows(GLOSSARY)), header


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, tags dropped, lowercased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


ANCHORS = set(re.findall(r'<a id="([^"]+)"></a>', GLOSSARY)) | \
    {_slug(h) for h in re.findall(r"^#+ (.*)$", GLOSSARY, re.M)}


def test_the_words_the_lessons_link_to_have_anchors():
    assert {"sm", "warp", "cta", "occupancy", "wave", "warps-per-issued-instruction", "sass-instructions"} <= ANCHORS
    unit = section("warps-per-issued-instruction")
    assert "smsp__average_warps_issue_stalled_X_per_issue_active.ratio" in unit and "`cycles_per_issue`" in unit


def test_every_link_into_the_glossary_lands():
    """Links from the glossary to itself and from the notebooks' markdown to glossary.md#... name an anchor."""
    links = [("glossary.md", a) for a in re.findall(r"\]\(#([^)]+)\)", GLOSSARY)]
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            links += [(path.name, a) for a in re.findall(r"glossary\.md#([^)\s\"']+)", "".join(cell["source"]))]
    broken = sorted({(where, a) for where, a in links if a not in ANCHORS})
    assert links and not broken, f"links to no glossary anchor: {broken}"
