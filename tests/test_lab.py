"""`./run lab` (= `python -m ladder lab`): a JupyterLab server whose root is the repository, so a student can
open every lesson, exercise and solution, and the lessons' links to ../exercises/ lead somewhere."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "kernel-ladder-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.status, reply.read()


def test_lab_serves_the_repository_root(tmp_path):
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    server = subprocess.Popen(
        [sys.executable, "-m", "ladder", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                _get(f"{base}/api/status?token={TOKEN}")
                break
            except OSError:
                assert server.poll() is None, f"JupyterLab exited: {server.stdout.read()}"
                assert time.time() < deadline, "JupyterLab did not answer within 120 s"
                time.sleep(0.5)
        status, body = _get(f"{base}/api/contents/?token={TOKEN}")
        assert {"README.md", "notebooks", "exercises", "solutions"} <= {i["name"] for i in json.loads(body)["content"]}
        for folder in ("notebooks", "exercises", "solutions"):
            status, body = _get(f"{base}/api/contents/{folder}?token={TOKEN}")
            names = {item["name"] for item in json.loads(body)["content"]}
            assert names >= {p.name for p in (ROOT / folder).glob("*.ipynb")}, folder
        # the address a lesson's link to an exercise resolves to, and the lesson the lab opens at
        assert _get(f"{base}/api/contents/exercises/02_matmul_coalescing.ipynb?token={TOKEN}&content=0")[0] == 200
        assert _get(f"{base}/lab/tree/notebooks/00_roofline.ipynb?token={TOKEN}")[0] == 200
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    said_root = "starting JupyterLab with --allow-root" in log
    assert said_root == (os.geteuid() == 0), log
