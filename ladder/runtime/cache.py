"""Where the package keeps what it measures or compiles on this machine: ceilings, search winners, dispatch tables
and compiled CUDA binaries, under ~/.cache/kernel-ladder or $KERNEL_LADDER_CACHE."""
import os
from pathlib import Path

CACHE_DIR = Path(os.environ.get("KERNEL_LADDER_CACHE", Path.home() / ".cache" / "kernel-ladder"))
