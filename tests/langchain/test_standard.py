"""LangChain's official conformance suites (``langchain-tests``), unmodified, on a tiny and a real model.

Every standard test is inherited as is: none is overridden or skipped (``test_guard_*`` below checks it).
The async standard tests are plain ``async def`` functions; ``conftest.py`` marks them for
pytest-asyncio (strict mode) at collection, without touching the tests themselves.
"""

from __future__ import annotations

import pytest
from langchain_tests.base import BaseStandardTests
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from langchain_valuelens import ValueLensEmbeddings

REAL_MODEL = "smollm2-135m"


class _TinyModel:
    """Points the suite at the session's tiny model folder (an autouse fixture runs before ``model``)."""

    model_dir: str

    @pytest.fixture(autouse=True)
    def _tiny_model_dir(self, tiny_model_dir: str) -> None:
        self.model_dir = tiny_model_dir

    @property
    def embeddings_class(self) -> type[ValueLensEmbeddings]:
        return ValueLensEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"model": self.model_dir}


class _RealModel:
    @property
    def embeddings_class(self) -> type[ValueLensEmbeddings]:
        return ValueLensEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"model": REAL_MODEL}


class TestValueLensEmbeddingsUnitTiny(_TinyModel, EmbeddingsUnitTests):
    pass


class TestValueLensEmbeddingsIntegrationTiny(_TinyModel, EmbeddingsIntegrationTests):
    pass


@pytest.mark.slow
class TestValueLensEmbeddingsUnitReal(_RealModel, EmbeddingsUnitTests):
    pass


@pytest.mark.slow
class TestValueLensEmbeddingsIntegrationReal(_RealModel, EmbeddingsIntegrationTests):
    pass


SUITES = [
    TestValueLensEmbeddingsUnitTiny,
    TestValueLensEmbeddingsIntegrationTiny,
    TestValueLensEmbeddingsUnitReal,
    TestValueLensEmbeddingsIntegrationReal,
]


@pytest.mark.parametrize("suite", SUITES, ids=lambda cls: cls.__name__)
def test_guard_no_standard_test_overridden(suite: type[BaseStandardTests]) -> None:
    """Fails if a standard test is overridden without ``@pytest.mark.xfail(reason=...)`` or deleted.

    Runs langchain-tests' own guard outside the suite too, so that overriding the guard itself
    cannot silence it.
    """
    assert suite.test_no_overrides_DO_NOT_OVERRIDE is BaseStandardTests.test_no_overrides_DO_NOT_OVERRIDE
    BaseStandardTests.test_no_overrides_DO_NOT_OVERRIDE(suite())


@pytest.mark.parametrize("suite", SUITES, ids=lambda cls: cls.__name__)
def test_guard_suite_runs_every_standard_test(suite: type[BaseStandardTests]) -> None:
    """No standard test is skipped by a mark on the class or a method."""
    marks = [mark.name for mark in getattr(suite, "pytestmark", [])]
    assert not {"skip", "skipif", "xfail"} & set(marks)
    base = next(
        b for b in suite.__mro__ if b.__module__.startswith("langchain_tests.") and b is not BaseStandardTests
    )
    for name in dir(base):
        if name.startswith("test_"):
            method = getattr(suite, name)
            assert method is getattr(base, name), name
            assert not getattr(method, "pytestmark", []), name


def test_guard_catches_an_override() -> None:
    """The guard bites: an override without an xfail reason fails it, one with a reason passes."""

    class Overriding(_RealModel, EmbeddingsIntegrationTests):
        def test_embed_query(self, model) -> None:
            pass

    class Excused(_RealModel, EmbeddingsIntegrationTests):
        @pytest.mark.xfail(reason="documented limitation")
        def test_embed_query(self, model) -> None:
            pass

    with pytest.raises(AssertionError, match="test_embed_query"):
        BaseStandardTests.test_no_overrides_DO_NOT_OVERRIDE(Overriding())
    BaseStandardTests.test_no_overrides_DO_NOT_OVERRIDE(Excused())
