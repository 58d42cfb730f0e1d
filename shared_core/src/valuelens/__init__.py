"""valuelens: training-free sentence embeddings from decoder LLMs.

Usage::

    import valuelens
    enc = valuelens.Encoder.from_pretrained(recipe="va")          # embedded default model
    vectors = enc.encode(["A man plays guitar.", "Someone makes music."], normalize=True)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from valuelens.batching import SharedEncoding, TruncationWarning, encode_many
from valuelens.capture import CapturePlan, StopForward, capturing, start_capture
from valuelens.config import EncoderConfig, FusionPart
from valuelens.embed_filter import EmbedFilter
from valuelens.encoder import Encoder
from valuelens.errors import (
    ConfigError,
    EncodeOutOfMemoryError,
    ModelProvisioningError,
    SpaceMismatchError,
    UnsupportedModelError,
    ValueLensError,
)
from valuelens.fitting import fit_texts
from valuelens.inputs import check_texts
from valuelens.io import unlabeled_texts
from valuelens.postprocess import Postprocess, PostprocessKind
from valuelens.presets.resolution import preset_config
from valuelens.prompts import NAMED_PROMPTS, Prompt
from valuelens.recipes import RECIPES, Recipe

try:
    __version__ = version("valuelens")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "NAMED_PROMPTS",
    "RECIPES",
    "CapturePlan",
    "ConfigError",
    "EmbedFilter",
    "EncodeOutOfMemoryError",
    "Encoder",
    "EncoderConfig",
    "FusionPart",
    "ModelProvisioningError",
    "Postprocess",
    "PostprocessKind",
    "Prompt",
    "Recipe",
    "SharedEncoding",
    "SpaceMismatchError",
    "StopForward",
    "TruncationWarning",
    "UnsupportedModelError",
    "ValueLensError",
    "__version__",
    "capturing",
    "check_texts",
    "encode_many",
    "fit_texts",
    "preset_config",
    "start_capture",
    "unlabeled_texts",
]
