"""Look at `./run lab` as a student would: start the lab server, open notebooks through headless Chromium,
save screenshots. Not a pytest test (tests/test_lab.py checks the server); run it by hand after changing the lab:

    apt-get install chromium        # Debian's package, once
    python tests/look_at_lab.py OUT_DIR [notebooks/02_matmul_cuda.ipynb exercises/02_matmul_coalescing.ipynb ...]
"""
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TOKEN = "look-at-lab"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,900", "--virtual-time-budget=30000", "--hide-scrollbars"]


def main(out: Path, paths: list[str]) -> None:
    browser = shutil.which("chromium") or sys.exit("no chromium on PATH (apt-get install chromium)")
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "ladder", "lab", "--no-browser", f"--port={port}",
                               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}"])
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        for path in paths or ["notebooks/00_roofline.ipynb"]:
            shot = out / (path.replace("/", "_").removesuffix(".ipynb") + ".png")
            with tempfile.TemporaryDirectory() as profile:
                subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                                f"{base}/lab/tree/{path}?token={TOKEN}"], check=True, capture_output=True, timeout=180)
            print(shot)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2:])
