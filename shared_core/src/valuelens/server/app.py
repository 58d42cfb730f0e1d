"""The routes: ``POST /v1/embeddings``, ``GET /v1/models``, ``/health``, ``/ready``, ``/metrics``.

:func:`create_app` builds the FastAPI app around a loaded encoder; nothing a request sends loads a
model or reads a file. Requests are validated here (OpenAI's schema, the :class:`Limits`), their texts
counted with a copy of the model's tokenizer, then embedded by the :class:`Batcher`'s worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hmac
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import numpy as np
import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from valuelens.server.batcher import Batcher, QueueFull, Side
from valuelens.server.errors import APIError
from valuelens.server.limits import Limits
from valuelens.server.metrics import CONTENT_TYPE, Metrics

__all__ = ["EncoderLike", "State", "create_app"]

#: the routes metrics are labelled with (anything else is "other")
ROUTES = ("/v1/embeddings", "/v1/models", "/health", "/ready", "/metrics")
TOKEN_IDS_HINT = (
    "input holds token ids; this server embeds strings (start it with --allow-token-ids to accept token ids). "
    "LangChain's OpenAIEmbeddings sends token ids unless check_embedding_ctx_length=False"
)
WARM_UP = "A short sentence to warm up the model."


class EncoderLike(Protocol):
    """What the server needs of a :class:`valuelens.Encoder`."""

    @property
    def tokenizer(self) -> Any: ...

    @property
    def dimension(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    def encode(
        self, texts: Sequence[str], batch_size: int = ..., normalize: bool = ..., *args: Any, **kwargs: Any
    ) -> Any: ...


class State:
    """One server's encoder, limits, counting tokenizer, batcher, metrics and readiness."""

    def __init__(
        self,
        encoder: EncoderLike,
        *,
        served_name: str,
        limits: Limits,
        api_key: str | None = None,
        normalize: bool = True,
        warm_up: Sequence[str] = (WARM_UP,),
    ) -> None:
        self.encoder = encoder
        self.warm_up_texts = list(warm_up) or [WARM_UP]
        self.served_name = served_name
        self.limits = limits
        self.api_key = api_key
        self.max_input_tokens = limits.max_input_tokens or encoder.max_length
        self.dimension = encoder.dimension
        self.created = int(time.time())
        self.metrics = Metrics()
        # a copy for counting on the request threads: the worker's tokenizer is never shared
        self._tokenizer = copy.deepcopy(encoder.tokenizer)
        self._tokenizer_lock = threading.Lock()
        self.ready = False

        def embedder(method: Callable[..., Any]) -> Callable[[list[str]], np.ndarray]:
            def encode(texts: list[str]) -> np.ndarray:
                out = method(
                    texts,
                    batch_size=max(len(texts), 1),
                    normalize=normalize,
                    max_tokens_per_batch=limits.max_batch_tokens,
                )
                return np.asarray(out, dtype=np.float32)

            return encode

        # the spec's query side (query_template, lexical_query), for requests with input_type "query"
        queries = getattr(encoder, "encode_query", None)
        self.batcher = Batcher(
            embedder(encoder.encode),
            limits,
            self.metrics,
            encode_query=embedder(queries) if queries is not None else None,
        )

    # ------------------------------------------------------------------ tokens
    def token_ids(self, texts: list[str]) -> list[list[int]]:
        with self._tokenizer_lock:
            return [list(ids) for ids in self._tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return str(self._tokenizer.decode(ids))

    def prepare(self, texts: list[str]) -> tuple[list[str], list[int], int]:
        """Check the inputs' lengths: ``(texts, token counts, how many were truncated)``."""
        limit = self.max_input_tokens
        out, counts, truncated = list(texts), [], 0
        for i, ids in enumerate(self.token_ids(texts)):
            if len(ids) > limit:
                if not self.limits.truncate:
                    msg = (
                        f"input[{i}] has {len(ids)} tokens, over this server's limit of {limit} "
                        "(max-input-tokens); shorten it or start the server with --truncate"
                    )
                    raise APIError(400, msg, param="input", code="context_length_exceeded")
                out[i] = self.decode(ids[:limit])
                ids = ids[:limit]
                truncated += 1
            counts.append(len(ids))
        return out, counts, truncated

    # ------------------------------------------------------------------ checks
    def check_auth(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if not header:
            msg = "missing API key: send the header 'Authorization: Bearer YOUR_KEY'"
            raise APIError(401, msg, code="invalid_api_key")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            key.strip().encode("utf-8"), self.api_key.encode("utf-8")
        ):
            raise APIError(401, "incorrect API key provided", code="invalid_api_key")

    def parse_input(self, raw: Any) -> tuple[list[str] | None, list[list[int]] | None]:
        """``(texts, None)`` for strings, ``(None, token id lists)`` for token arrays."""
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list):
            msg = f"input must be a string or a list of strings, got {type(raw).__name__}"
            raise APIError(400, msg, param="input", code="invalid_input")
        if not raw:
            raise APIError(
                400, "input is an empty list: send at least one string", param="input", code="invalid_input"
            )
        if len(raw) > self.limits.max_inputs:
            msg = f"input holds {len(raw)} items, over this server's limit of {self.limits.max_inputs} (max-inputs)"
            raise APIError(413, msg, param="input", code="too_many_inputs")
        if all(_is_int(x) for x in raw):
            return None, [list(raw)]
        if all(isinstance(x, list) for x in raw):
            for i, item in enumerate(raw):
                if not item or not all(_is_int(x) for x in item):
                    msg = f"input[{i}] is not a non-empty list of token ids (integers)"
                    raise APIError(400, msg, param="input", code="invalid_input")
            return None, list(raw)
        for i, item in enumerate(raw):
            if not isinstance(item, str):
                msg = f"input[{i}] must be a string, got {type(item).__name__}"
                raise APIError(400, msg, param="input", code="invalid_input")
            if item == "":
                msg = f"input[{i}] is an empty string: every input needs text"
                raise APIError(400, msg, param="input", code="invalid_input")
            if not _is_unicode(item):
                msg = f"input[{i}] is not valid Unicode (it holds a lone surrogate such as \\ud800)"
                raise APIError(400, msg, param="input", code="invalid_input")
        return list(raw), None

    def texts_from_ids(self, arrays: list[list[int]]) -> list[str]:
        if not self.limits.allow_token_ids:
            raise APIError(400, TOKEN_IDS_HINT, param="input", code="token_ids_not_supported")
        vocab = len(self._tokenizer)
        texts = []
        for i, ids in enumerate(arrays):
            bad = [x for x in ids if not 0 <= x < vocab]
            if bad:
                msg = f"input[{i}] holds token id {bad[0]}, outside this model's vocabulary (0..{vocab - 1})"
                raise APIError(400, msg, param="input", code="invalid_input")
            text = self.decode(ids)
            if not text:
                raise APIError(
                    400, f"input[{i}] decodes to an empty string", param="input", code="invalid_input"
                )
            texts.append(text)
        return texts

    # ------------------------------------------------------------------ the route
    async def embeddings(self, request: Request) -> Response:
        began = time.monotonic()
        self.check_auth(request)
        payload = await _read_json(request, self.limits.max_body_bytes)
        if not isinstance(payload, dict):
            raise APIError(400, "the request body must be a JSON object", code="invalid_request")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            raise APIError(
                400,
                "model is required (a string): " + repr(self.served_name),
                param="model",
                code="invalid_request",
            )
        if model != self.served_name:
            msg = f"the model {model!r} does not exist: this server serves {self.served_name!r}"
            raise APIError(404, msg, param="model", code="model_not_found")
        if "input" not in payload:
            raise APIError(
                400, "input is required: a string or a list of strings", param="input", code="invalid_request"
            )
        fmt = payload.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            msg = f"encoding_format must be 'float' or 'base64', got {fmt!r}"
            raise APIError(400, msg, param="encoding_format", code="invalid_encoding_format")
        dimensions = payload.get("dimensions")
        if dimensions is not None and (not _is_int(dimensions) or dimensions != self.dimension):
            msg = f"dimensions={dimensions!r} is not supported: this model's embeddings have {self.dimension} dimensions"
            raise APIError(400, msg, param="dimensions", code="invalid_dimensions")
        side = _input_type(payload.get("input_type"))
        texts, arrays = self.parse_input(payload["input"])
        if arrays is not None:
            texts = self.texts_from_ids(arrays)
        assert texts is not None
        texts_in: list[str] = texts
        prepared, counts, truncated = await run_in_threadpool(self.prepare, texts_in)
        if truncated:
            self.metrics.truncated.inc(truncated)
        try:
            job = self.batcher.submit(prepared, counts, side)
        except QueueFull as exc:
            raise APIError(
                503,
                f"{exc}; retry later",
                code="queue_full",
                headers={"Retry-After": str(self.limits.retry_after_s)},
            ) from exc
        except RuntimeError as exc:
            raise APIError(503, str(exc), code="shutting_down", headers={"Retry-After": "1"}) from exc
        left = self.limits.request_timeout - (time.monotonic() - began)
        try:
            rows = await asyncio.wait_for(asyncio.wrap_future(job.future), timeout=max(left, 0.001))
        except asyncio.TimeoutError as exc:
            job.abandon()
            msg = f"the request took longer than this server's timeout of {self.limits.request_timeout:g} s (request-timeout)"
            raise APIError(504, msg, code="timeout") from exc
        except asyncio.CancelledError:
            job.abandon()
            raise
        except Exception as exc:
            raise APIError(
                500, f"embedding failed: {type(exc).__name__}: {exc}", code="encode_failed"
            ) from exc
        data = [
            {"object": "embedding", "index": i, "embedding": _encode_row(row, fmt)}
            for i, row in enumerate(rows)
        ]
        tokens = sum(counts)
        body = {
            "object": "list",
            "data": data,
            "model": self.served_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        headers = {"X-Truncated-Inputs": str(truncated)} if truncated else None
        return Response(_dumps(body), media_type="application/json", headers=headers)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self.model_card()]}

    def model_card(self) -> dict[str, Any]:
        return {"id": self.served_name, "object": "model", "created": self.created, "owned_by": "valuelens"}

    async def warm_up(self) -> None:
        texts = self.warm_up_texts
        counts = [min(len(ids), self.max_input_tokens) for ids in self.token_ids(texts)]
        job = self.batcher.submit(texts, counts)
        try:
            await asyncio.wrap_future(job.future)
        except Exception as exc:  # /ready stays 503; the reason goes to the log once
            print(
                f"error: the warm-up encode failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True
            )
            return
        self.ready = True


#: ``input_type`` values (other embedding APIs' spellings included) and the side each embeds.
INPUT_TYPES: dict[str, Side] = {
    "query": "query",
    "search_query": "query",
    "document": "document",
    "passage": "document",
    "search_document": "document",
}


def _input_type(value: Any) -> Side:
    """The side a request's ``input_type`` asks for (absent: documents)."""
    if value is None:
        return "document"
    if not isinstance(value, str) or value not in INPUT_TYPES:
        msg = (
            f"input_type must be one of {', '.join(map(repr, INPUT_TYPES))} (search queries or the texts "
            f"searched), got {value!r}"
        )
        raise APIError(400, msg, param="input_type", code="invalid_input_type")
    return INPUT_TYPES[value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_unicode(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (JSON's ``"\\ud800"`` escapes decode to lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type (parameters such as ``charset`` ignored)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _encode_row(row: np.ndarray, fmt: str) -> Any:
    """A row as the response carries it: base64 of little-endian float32, or the array itself (which
    :func:`_dumps` writes as numbers without a Python float per value)."""
    if fmt == "base64":
        return base64.b64encode(np.ascontiguousarray(row, dtype="<f4").tobytes()).decode("ascii")
    return np.ascontiguousarray(row, dtype=np.float32)


def _dumps(body: Any) -> bytes:
    """The response body: orjson writes numpy rows directly (float32 at their shortest round-tripping
    digits), several times faster than ``json.dumps`` of ``tolist()``, on the event loop, never on
    the model's thread."""
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


async def _read_json(request: Request, limit: int) -> Any:
    too_large = f"the request body is over this server's limit of {limit} bytes (max-body-bytes)"
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        msg = f"the request body must be JSON (Content-Type: application/json), got Content-Type {content_type!r}"
        raise APIError(415, msg, code="unsupported_media_type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise APIError(413, too_large, code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, too_large, code="request_too_large")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        msg = "the request body is not valid JSON for this server: it is nested too deeply"
        raise APIError(400, msg, code="invalid_json") from exc


def create_app(
    encoder: EncoderLike,
    *,
    served_name: str,
    limits: Limits | None = None,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    normalize: bool = True,
    warm_up: Sequence[str] = (WARM_UP,),
) -> FastAPI:
    """The FastAPI app serving ``encoder`` as ``served_name``; its lifespan runs the batcher and a warm-up
    (an encode of ``warm_up``: a sentence of its own, or texts like the ones to serve)."""
    state = State(
        encoder,
        served_name=served_name,
        limits=limits or Limits(),
        api_key=api_key,
        normalize=normalize,
        warm_up=warm_up,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.batcher.start()
        warm = asyncio.ensure_future(state.warm_up())
        try:
            yield
        finally:
            state.ready = False
            warm.cancel()
            await run_in_threadpool(state.batcher.close)

    app = FastAPI(title="valuelens", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.valuelens = state
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )

    def error_response(exc: APIError) -> JSONResponse:
        state.metrics.errors.labels(kind=exc.code or str(exc.status)).inc()
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = f"{where or 'request'}: {first.get('msg', 'invalid request')}"
        return error_response(APIError(400, message, param=where or None, code="invalid_request"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        message = f"internal error: {type(exc).__name__}: {exc}"
        return error_response(APIError(500, message, code="internal_error"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(APIError(exc.status_code, message, code=f"http_{exc.status_code}"))

    @app.middleware("http")
    async def _count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        route = request.url.path if request.url.path in ROUTES else "other"
        began = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            state.metrics.requests.labels(route=route, status="500").inc()
            raise
        state.metrics.requests.labels(route=route, status=str(response.status_code)).inc()
        state.metrics.latency.labels(route=route).observe(time.perf_counter() - began)
        return response

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        return await state.embeddings(request)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        state.check_auth(request)
        return state.models()

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> dict[str, Any]:
        state.check_auth(request)
        if model_id != served_name:
            msg = f"the model {model_id!r} does not exist: this server serves {served_name!r}"
            raise APIError(404, msg, param="model", code="model_not_found")
        return state.model_card()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if state.ready:
            return JSONResponse({"status": "ready", "model": served_name})
        return JSONResponse({"status": "loading", "model": served_name}, status_code=503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    return app
