"""The ``valuelens serve`` command (registered by :mod:`valuelens.cli`).

Startup: the spec and the limits are checked, the port is bound, the model is loaded, then uvicorn
serves (``/ready`` turns 200 after one warm-up encode). Every startup failure is one ``error:`` line
on stderr and exit 2. SIGTERM / SIGINT: uvicorn stops accepting, the accepted requests finish, the
batcher's queue drains, exit 0. With ``--workers N`` the bound socket is shared by N forked processes,
each loading its own model with ``--threads`` threads (the kernel spreads connections among them); the
parent forwards SIGTERM / SIGINT to every worker, waits for all to drain and exits with the worst exit
code. FastAPI and uvicorn (the ``serve`` extra) are imported only here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from valuelens.errors import ValueLensError
from valuelens.extras import hint
from valuelens.io import unlabeled_texts
from valuelens.options import (
    ConfigFileOpt,
    DeviceOpt,
    DTypeOpt,
    ModelOpt,
    PresetOpt,
    SpecFields,
    ThreadsOpt,
    command_spec,
    fail,
    spec_options,
)

__all__ = ["serve"]

EXTRA_HINT = hint("serve", "valuelens serve")
#: At most this many texts of ``--warm-up`` are encoded before the server says it is ready.
WARM_UP_TEXTS = 64


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (before the model loads, so a taken port fails at once)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


@spec_options()
def serve(
    model: ModelOpt = None,
    preset: PresetOpt = None,
    config_file: ConfigFileOpt = None,
    served_name: Annotated[
        str | None, typer.Option(help="The model name clients send (default: the --model string).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="VALUELENS_API_KEY", help="Require 'Authorization: Bearer KEY' on /v1/ routes."),
    ] = None,
    max_batch_tokens: Annotated[int, typer.Option(min=1, help="Token budget of one packed batch.")] = 4096,
    max_wait_ms: Annotated[float, typer.Option(min=0, help="Wait for more requests before a batch.")] = 5.0,
    max_queue: Annotated[int, typer.Option(min=1, help="Unfinished requests; more get 503.")] = 256,
    batching: Annotated[
        bool,
        typer.Option(
            "--batching/--no-batching", help="Pack several requests into one batch (else one each)."
        ),
    ] = True,
    max_inputs: Annotated[int, typer.Option(min=1, help="Inputs per request.")] = 2048,
    max_input_tokens: Annotated[
        int | None, typer.Option(min=1, help="Tokens per input (default: the encoder's max length).")
    ] = None,
    truncate: Annotated[
        bool, typer.Option("--truncate/--no-truncate", help="Cut inputs over --max-input-tokens (else 400).")
    ] = False,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Request body size limit.")] = 16 * 1024 * 1024,
    request_timeout: Annotated[float, typer.Option(min=0.001, help="Seconds per request; then 504.")] = 60.0,
    allow_token_ids: Annotated[
        bool,
        typer.Option("--allow-token-ids", help="Accept token arrays (decoded with the model's tokenizer)."),
    ] = False,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", help="Allow this browser origin (repeatable; default: none)."),
    ] = None,
    normalize: Annotated[bool, typer.Option("--normalize/--no-normalize", help="L2-normalize.")] = True,
    device: DeviceOpt = None,
    dtype: DTypeOpt = None,
    threads: ThreadsOpt = "auto",
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Server processes sharing the port, each with its own model and --threads threads: "
            "for machines with more cores than one forward uses (workers x threads <= cores).",
        ),
    ] = 1,
    warm_up: Annotated[
        Path | None,
        typer.Option(
            "--warm-up",
            help="Texts like the ones to serve (a file or folder, as `valuelens embed` reads them): the "
            f"warm-up before /ready encodes up to {WARM_UP_TEXTS} of them (default: one short sentence).",
        ),
    ] = None,
    *,
    spec: SpecFields,
) -> None:
    """Serve the encoder over HTTP as an OpenAI-compatible embeddings API (POST /v1/embeddings)."""
    from valuelens.cpu import parse_threads
    from valuelens.server.limits import Limits

    try:
        count = parse_threads(threads)
        config = command_spec(model, preset, config_file, spec)
        warm_texts = [] if warm_up is None else unlabeled_texts(warm_up, limit=WARM_UP_TEXTS)
        limits = Limits(
            max_batch_tokens=max_batch_tokens,
            max_wait_ms=max_wait_ms,
            max_queue=max_queue,
            max_inputs=max_inputs,
            max_input_tokens=max_input_tokens,
            truncate=truncate,
            max_body_bytes=max_body_bytes,
            request_timeout=request_timeout,
            allow_token_ids=allow_token_ids,
            batching=batching,
        )
    except (ValueLensError, ValueError, OSError) as exc:  # json's errors are ValueErrors
        where = f"{config_file}: " if config_file is not None and not isinstance(exc, ValueLensError) else ""
        raise fail(f"{where}{exc}") from exc
    try:
        import uvicorn

        from valuelens.server.app import create_app
    except ImportError as exc:
        raise fail(f"{EXTRA_HINT} ({exc})") from exc
    if workers > 1 and not hasattr(os, "fork"):
        raise fail("--workers above 1 needs fork (Linux, macOS): run one server per process instead")
    try:
        sock = _bind(host, port)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    serve_here = functools.partial(
        _serve_on,
        sock,
        uvicorn=uvicorn,
        create_app=create_app,
        model=model,
        device=device,
        dtype=dtype,
        config=config,
        count=count,
        served_name=served_name,
        limits=limits,
        api_key=api_key,
        cors_origin=cors_origin,
        normalize=normalize,
        warm_texts=warm_texts,
    )
    if workers == 1:
        serve_here()
        return
    code = _supervise(workers, serve_here)
    sock.close()
    if code:
        raise typer.Exit(code=code)


def _serve_on(
    sock: socket.socket,
    *,
    uvicorn: Any,
    create_app: Any,
    model: str | None,
    device: str | None,
    dtype: str | None,
    config: Any,
    count: int | None,
    served_name: str | None,
    limits: Any,
    api_key: str | None,
    cors_origin: list[str] | None,
    normalize: bool,
    warm_texts: list[str],
) -> None:
    """Load the model and serve on ``sock`` in this process until a signal stops it."""
    try:
        if count is not None:
            import torch

            torch.set_num_threads(count)
        from valuelens import models
        from valuelens.encoder import Encoder

        encoder = Encoder.from_pretrained(model, device=device, dtype=dtype, **config.to_dict())
        name = served_name or model or models.DEFAULT_MODEL
        app = create_app(
            encoder,
            served_name=name,
            limits=limits,
            api_key=api_key or None,
            cors_origins=cors_origin or (),
            normalize=normalize,
            **({"warm_up": warm_texts} if warm_texts else {}),
        )
    except (ValueLensError, ValueError, TypeError, OSError) as exc:
        sock.close()
        raise fail(exc) from exc
    bound_host, bound_port = sock.getsockname()[:2]
    settings = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False)
    server = _server_class(uvicorn)(settings)
    typer.echo(
        f"valuelens serve: {name!r} ({encoder.dimension} dims) on http://{bound_host}:{bound_port} "
        f"(pid {os.getpid()})",
        err=True,
    )
    server.run(sockets=[sock])
    if not server.started:
        raise typer.Exit(code=1)
    sys.stderr.flush()


def _supervise(workers: int, serve: Callable[[], None]) -> int:
    """Fork ``workers`` processes that each run ``serve``; forward SIGTERM / SIGINT to them; return the
    worst exit code once all have exited (0: every worker drained and stopped cleanly)."""
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: its own model, its own uvicorn (which installs its own signal handlers)
            code = 0
            try:
                serve()
            except typer.Exit as exc:
                code = exc.exit_code
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)

    def forward(sig: int, frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    for pid in children:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, abs(code))
    return worst


def _server_class(uvicorn: Any) -> Any:
    """uvicorn's Server, minus re-raising the stopping signal after its graceful shutdown (exit 0)."""

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    return Server
