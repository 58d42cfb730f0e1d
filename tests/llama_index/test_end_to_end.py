"""End to end with real LlamaIndex machinery and the real embedded default model (SmolLM2-135M).

One model instance is loaded per module and shared by every test (``encoder=``). No LLM is needed
anywhere: a guard makes any access to ``Settings.llm`` fail the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np
import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.embeddings.utils import resolve_embed_model
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode
from tests.llama_index.conformance import BaseEmbeddingConformance

from llama_index.embeddings.valuelens import ValueLensEmbedding

pytestmark = pytest.mark.slow

#: Eight documents on distinct topics; the id is the topic, asserted as the top-1 hit.
CORPUS = {
    "paris": "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889.",
    "plants": "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
    "markets": "The stock market fell sharply as investors worried about rising interest rates and inflation.",
    "baking": "To bake bread, mix flour, water, yeast and salt, let the dough rise, then bake it in a hot oven.",
    "football": "Lionel Messi scored twice as Argentina won the football World Cup final against France.",
    "python": "Python is a popular programming language known for its readable syntax and large library ecosystem.",
    "heart": "The human heart pumps blood through the body, delivering oxygen to the organs.",
    "jupiter": "Jupiter is the largest planet in the solar system, a gas giant with a great red storm.",
}
QUERIES = {
    "Which famous landmark stands in Paris?": "paris",
    "How do plants make their food from sunlight?": "plants",
    "Why did share prices drop?": "markets",
    "How do I make a loaf of bread?": "baking",
    "Who won the soccer world cup?": "football",
    "What coding language has readable syntax?": "python",
    "What organ pumps blood?": "heart",
    "What is the biggest planet?": "jupiter",
}


def documents() -> list[Document]:
    return [Document(text=text, id_=topic) for topic, text in CORPUS.items()]


@pytest.fixture(scope="module")
def real_embedding() -> ValueLensEmbedding:
    """The embedded default model, loaded by name once for the module (the model users get)."""
    return ValueLensEmbedding(model_name="smollm2-135m", recipe="aligned-wva", prompt="futureeol")


@pytest.fixture
def settings_guard(monkeypatch: pytest.MonkeyPatch):
    """Restore the global ``Settings`` after the test, and fail on any use of its LLM."""

    def no_llm(self: Any) -> Any:
        raise AssertionError("Settings.llm was accessed: embedding/retrieval must not need an LLM")

    monkeypatch.setattr(type(Settings), "llm", property(no_llm))
    saved = {f.name: getattr(Settings, f.name) for f in dataclasses.fields(Settings)}  # the private slots
    yield Settings
    for name, value in saved.items():
        setattr(Settings, name, value)


def assert_top1(index: VectorStoreIndex) -> None:
    retriever = index.as_retriever(similarity_top_k=3)
    for query, topic in QUERIES.items():
        hits = retriever.retrieve(query)
        assert len(hits) == 3
        assert hits[0].node.ref_doc_id == topic, (
            f"{query!r}: top hit {hits[0].node.ref_doc_id!r}, expected {topic!r}"
        )
        scores = [hit.score for hit in hits]
        assert scores == sorted(scores, reverse=True)


def test_vector_store_index_retrieves_the_expected_documents(settings_guard, real_embedding) -> None:
    index = VectorStoreIndex.from_documents(documents(), embed_model=real_embedding)
    assert_top1(index)
    hits = asyncio.run(index.as_retriever(similarity_top_k=1).aretrieve("What is the biggest planet?"))
    assert hits[0].node.ref_doc_id == "jupiter"


def test_settings_embed_model(settings_guard, real_embedding) -> None:
    Settings.embed_model = real_embedding
    assert Settings.embed_model is real_embedding
    assert resolve_embed_model(real_embedding) is real_embedding
    index = VectorStoreIndex.from_documents(documents())  # no embed_model: taken from Settings
    assert_top1(index)


def test_ingestion_pipeline_embeds_every_node(settings_guard, real_embedding) -> None:
    texts = list(CORPUS.values())
    docs = [Document(text=" ".join(texts[:4])), Document(text=" ".join(texts[4:]))]  # ~85 tokens each
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=60, chunk_overlap=0), real_embedding]
    )
    nodes = pipeline.run(documents=docs)
    assert len(nodes) > len(docs), "the splitter should have cut the documents into several nodes"
    for node in nodes:
        assert node.embedding is not None and len(node.embedding) == real_embedding.dimension
        assert np.linalg.norm(node.embedding) == pytest.approx(1.0, abs=1e-4)
    first = nodes[0]
    expected = real_embedding.get_text_embedding(first.get_content(metadata_mode=MetadataMode.EMBED))
    np.testing.assert_allclose(first.embedding, expected, atol=1e-4)


class TestRealModelConformance(BaseEmbeddingConformance):
    """The conformance suite on SmolLM2-135M in bf16.

    Batch composition may move bf16 results slightly (measured here: at most 5e-8 on CPU), hence a
    looser tolerance than the tiny fp32 model's.
    """

    atol = 1e-4

    @pytest.fixture
    def embedding_factory(self, real_embedding: ValueLensEmbedding):
        def make(**fields: Any) -> ValueLensEmbedding:
            return ValueLensEmbedding(
                encoder=real_embedding.encoder, model_name=real_embedding.model_name, **fields
            )

        return make
