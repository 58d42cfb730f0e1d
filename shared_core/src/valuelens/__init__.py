"""valuelens: training-free sentence embeddings from decoder LLMs.

Usage::

    import valuelens
    enc = valuelens.Encoder.from_pretrained(recipe="va")          # embedded default model
    vectors = enc.encode(["A man plays guitar.", "Someone makes music."], normalize=True)

The names below load on first use (PEP 562), so ``import valuelens`` and the command line's ``--help``
import neither torch nor transformers; ``from valuelens import Encoder`` loads the model code.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from valuelens.lazy import lazy_exports

try:
    __version__ = version("valuelens")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

#: Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "NAMED_PROMPTS": "valuelens.prompts",
    "RECIPES": "valuelens.recipes",
    "CapturePlan": "valuelens.capture",
    "ConfigError": "valuelens.errors",
    "EmbedFilter": "valuelens.embed_filter",
    "EncodeOutOfMemoryError": "valuelens.batching",
    "Encoder": "valuelens.encoder",
    "EncoderConfig": "valuelens.config",
    "FusionPart": "valuelens.config",
    "ModelProvisioningError": "valuelens.errors",
    "Postprocess": "valuelens.postprocess",
    "PostprocessKind": "valuelens.postprocess",
    "Prompt": "valuelens.prompts",
    "Recipe": "valuelens.recipes",
    "SharedEncoding": "valuelens.batching",
    "SpaceMismatchError": "valuelens.errors",
    "StopForward": "valuelens.capture",
    "TruncationWarning": "valuelens.batching",
    "UnsupportedModelError": "valuelens.errors",
    "ValueLensError": "valuelens.errors",
    "capturing": "valuelens.capture",
    "check_texts": "valuelens.inputs",
    "encode_many": "valuelens.batching",
    "fit_texts": "valuelens.fitting",
    "preset_config": "valuelens.presets.resolution",
    "start_capture": "valuelens.capture",
    "unlabeled_texts": "valuelens.io",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from valuelens.batching import (
        EncodeOutOfMemoryError as EncodeOutOfMemoryError,
        SharedEncoding as SharedEncoding,
        TruncationWarning as TruncationWarning,
        encode_many as encode_many,
    )
    from valuelens.capture import (
        CapturePlan as CapturePlan,
        StopForward as StopForward,
        capturing as capturing,
        start_capture as start_capture,
    )
    from valuelens.config import EncoderConfig as EncoderConfig, FusionPart as FusionPart
    from valuelens.embed_filter import EmbedFilter as EmbedFilter
    from valuelens.encoder import Encoder as Encoder
    from valuelens.errors import (
        ConfigError as ConfigError,
        ModelProvisioningError as ModelProvisioningError,
        SpaceMismatchError as SpaceMismatchError,
        UnsupportedModelError as UnsupportedModelError,
        ValueLensError as ValueLensError,
    )
    from valuelens.fitting import fit_texts as fit_texts
    from valuelens.inputs import check_texts as check_texts
    from valuelens.io import unlabeled_texts as unlabeled_texts
    from valuelens.postprocess import Postprocess as Postprocess, PostprocessKind as PostprocessKind
    from valuelens.presets.resolution import preset_config as preset_config
    from valuelens.prompts import NAMED_PROMPTS as NAMED_PROMPTS, Prompt as Prompt
    from valuelens.recipes import RECIPES as RECIPES, Recipe as Recipe
