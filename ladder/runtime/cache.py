"""Where the package keeps what it measures or compiles on this machine: ceilings, search winners, dispatch tables
and compiled CUDA binaries, under ~/.cache/kernel-ladder or $KERNEL_LADDER_CACHE.

KERNEL_LADDER_FRESH_GPU=1 makes this GPU a fresh one, for testing what a newcomer's GPU gets: the cache is a new
empty folder (handed to child processes through KERNEL_LADDER_CACHE, so a lesson's compile-ahead workers share it),
and this GPU's own recording in results/ is ignored (ladder.results.load); other GPUs' recordings stay readable."""
import os
import tempfile
from pathlib import Path

FRESH_GPU_ENV = "KERNEL_LADDER_FRESH_GPU"
FRESH_GPU = os.environ.get(FRESH_GPU_ENV) == "1"
if FRESH_GPU and not os.environ.get("KERNEL_LADDER_CACHE", "").startswith(tempfile.gettempdir()):
    os.environ["KERNEL_LADDER_CACHE"] = tempfile.mkdtemp(prefix="kernel-ladder-fresh-")
CACHE_DIR = Path(os.environ.get("KERNEL_LADDER_CACHE", Path.home() / ".cache" / "kernel-ladder"))
