"""Helpers of the server tests (imported as ``server.serving``): a tiny random llama saved to a folder, real ``valuelens serve``
processes on free ports of 127.0.0.1 (polled on /ready, always killed), and in-process references."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

API_KEY = "test-key-123"
#: the spec every server test serves (and the in-process reference uses)
SPEC = {"recipe": "va", "layers": "2-3"}
READY_TIMEOUT_S = 60


def valuelens_command() -> list[str]:
    """``python -m valuelens`` when the package has a ``__main__``, else the console script beside python."""
    import importlib.util

    if importlib.util.find_spec("valuelens.__main__") is not None:
        return [sys.executable, "-m", "valuelens"]
    script = Path(sys.executable).with_name("valuelens")
    if script.exists():
        return [str(script)]
    found = shutil.which("valuelens")
    assert found, "no valuelens console script"
    return [found]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("VALUELENS_API_KEY", None)
    return env


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def post(
    url: str, body: object, headers: dict[str, str] | None = None, *, raw: bytes | None = None
) -> tuple[int, dict, dict[str, str]]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return (
                response.status,
                json.loads(response.read()),
                {k.lower(): v for k, v in response.headers.items()},
            )
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), {k.lower(): v for k, v in exc.headers.items()}


class Server:
    """A ``valuelens serve`` process on 127.0.0.1 (``url`` is its root)."""

    def __init__(self, args: list[str], tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr_path = tmp / f"server-{self.port}.err"
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            [*valuelens_command(), "serve", "--port", str(self.port), "--threads", "1", *args],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=server_env(),
        )

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}: {self.stderr()}")
            try:
                status, _, _ = get(self.url + "/ready")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server was not ready after {timeout} s: {self.stderr()}")

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._stderr.close()


def spec_args(model_dir: Path) -> list[str]:
    return ["--model", str(model_dir), "--recipe", SPEC["recipe"], "--layers", SPEC["layers"]]


def start(args: list[str], tmp: Path) -> Server:
    server = Server(args, tmp)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server
