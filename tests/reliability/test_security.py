"""Loading never runs code from a model folder: safetensors (or weights-only) state, no implicit
``trust_remote_code``, no network for local folders, and tampered sentence-transformers configs refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tiny_models import CORPUS, build_tiny_model, build_tokenizer
from valuelens import Encoder
from valuelens.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "shared_core" / "src", *sorted((ROOT / "packages").glob("*/src"))]

# (pattern, why it is dangerous, what makes a match on the same call safe)
RISKY = [
    (r"\btorch\.load\(", "torch.load unpickles", r"weights_only\s*=\s*True"),
    (r"\b(c?pickle|dill|joblib|cloudpickle)\.loads?\(", "unpickling runs code", None),
    (r"\b(np|numpy)\.load\(", "np.load unpickles object arrays", r"allow_pickle\s*=\s*False"),
    (r"trust_remote_code\s*=\s*True", "runs a model folder's Python code", None),
    (r"(?<![.\w])(eval|exec)\(", "evaluates strings as code", None),
]
# "relative/path.py:pattern" -> why this one is safe; every entry must still match something
ALLOWED: dict[str, str] = {}


def _calls(text: str, start: int) -> str:
    """The source of the call that opens at ``start`` (up to its closing parenthesis)."""
    depth, i = 0, text.index("(", start)
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return text[start : j + 1]
    return text[start:]


def test_no_source_file_unpickles_or_trusts_remote_code():
    files = [p for src in SOURCES for p in src.rglob("*.py")]
    assert len(files) > 20 and any("valuelens_sentence_transformers" in str(p) for p in files)
    found, used = [], set()
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        for pattern, why, safe in RISKY:
            for match in re.finditer(pattern, text):
                line = text[: match.start()].count("\n") + 1
                if text[text.rfind("\n", 0, match.start()) + 1 : match.start()].lstrip().startswith("#"):
                    continue  # a comment
                if safe and re.search(safe, _calls(text, match.start())):
                    continue
                key = f"{rel}:{pattern}"
                if key in ALLOWED:
                    used.add(key)
                    continue
                found.append(f"{rel}:{line}: {match.group(0)!r} ({why})")
    assert not found, "load with safetensors / weights_only=True / allow_pickle=False:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"stale exceptions: {sorted(set(ALLOWED) - used)}"


def _copy(tiny_checkpoint: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(tiny_checkpoint, to)
    return to


# ------------------------------------------------------------------------------------ network
GUARD = textwrap.dedent(
    """
    import socket, sys
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(args[1:] or args)
        raise OSError("network access during a local load: " + repr(args[1:]))
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    from valuelens import Encoder
    for spec in ({"recipe": "va"}, {"recipe": "aligned-wva", "prompt": "futureeol", "embed_filter": 2}):
        enc = Encoder.from_pretrained(sys.argv[1], device="cpu", **spec)
        vectors = enc.encode(["A cat sits.", "Dogs run."], normalize=True)
        assert vectors.shape[0] == 2
    print("attempts", attempts)
    """
)


def test_a_local_folder_loads_and_encodes_without_the_network(tiny_checkpoint):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}  # HF_HUB_OFFLINE unset
    done = subprocess.run(
        [sys.executable, "-c", GUARD, str(tiny_checkpoint)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "attempts []" in done.stdout


# ------------------------------------------------------------------------------ remote code
def _with_custom_code(tiny_checkpoint: Path, to: Path) -> Path:
    """A copy whose config and tokenizer config point at Python files that leave a mark when run."""
    folder = _copy(tiny_checkpoint, to)
    mark = folder / "EXECUTED"
    code = f"open({str(mark)!r}, 'w').write('ran')\n"
    for name in ("evil_config", "evil_model", "evil_tokenizer"):
        (folder / f"{name}.py").write_text(code + "class Evil:\n    pass\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil_config.Evil", "AutoModel": "evil_model.Evil"}
    (folder / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = {"AutoTokenizer": ["evil_tokenizer.Evil", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return folder


def test_custom_code_in_a_model_folder_is_never_run(tiny_checkpoint, tmp_path, monkeypatch):
    import transformers

    folder = _with_custom_code(tiny_checkpoint, tmp_path / "custom")
    seen: list[tuple[str, object]] = []
    for name in ("AutoConfig", "AutoModel", "AutoTokenizer"):
        auto = getattr(transformers, name)
        real = auto.from_pretrained.__func__

        def spy(cls, *args, _real=real, _name=name, **kwargs):
            seen.append((_name, kwargs.get("trust_remote_code", "unset")))
            return _real(cls, *args, **kwargs)

        monkeypatch.setattr(auto, "from_pretrained", classmethod(spy))
    try:
        enc = Encoder.from_pretrained(str(folder), recipe="va", device="cpu")
    except (ValueError, OSError) as exc:  # refusing is as good as ignoring, if it says why
        assert "trust_remote_code" in str(exc) or "custom code" in str(exc)
    else:
        assert type(enc.model).__name__ == "LlamaModel" and enc.encode(CORPUS[:2]).shape == (2, 32)
    assert not (folder / "EXECUTED").exists()
    # never turned on; the config, read first, is asked with an explicit False (so a folder whose model
    # type only its own code knows is refused there), the weights and tokenizer with transformers'
    # default, which does not run the folder's code when transformers knows the model type
    assert seen and all(value is not True for _, value in seen), seen
    assert seen[0] == ("AutoConfig", False)


def test_pickled_weights_are_not_unpickled(tiny_checkpoint, tmp_path):
    """A folder with only ``pytorch_model.bin`` whose pickle would run code: refused, nothing runs."""
    folder = _copy(tiny_checkpoint, tmp_path / "pickled")
    mark = folder / "EXECUTED"
    state = {k: v.clone() for k, v in build_tiny_model("llama", len(build_tokenizer())).state_dict().items()}
    torch.save({**state, "payload": _Payload(str(mark))}, folder / "pytorch_model.bin")
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(Exception) as caught:  # whatever transformers raises, it must raise
        Encoder.from_pretrained(str(folder), recipe="va", device="cpu")
    assert not mark.exists(), f"the pickle ran: {caught.value!r}"


class _Payload:
    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (Path(self.mark),))


# --------------------------------------------------------------- tampered sentence-transformers model
@pytest.fixture(scope="module")
def saved_st(tiny_checkpoint, tmp_path_factory):
    from sentence_transformers.base.modules import Transformer

    from sentence_transformers import SentenceTransformer
    from valuelens_sentence_transformers import ValuePooling

    path = tmp_path_factory.mktemp("st") / "saved"
    model = SentenceTransformer(
        modules=[Transformer(str(tiny_checkpoint)), ValuePooling(recipe="va")], device="cpu"
    )
    model.save(str(path))
    return path


def _pooling_config(folder: Path) -> Path:
    return next(p for p in folder.rglob("config.json") if '"recipe"' in p.read_text())


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("recipe", "__import__('os')", "unknown recipe"),
        ("layers", "__import__('os').system('touch EXECUTED')", "layers"),
        ("max_length", "os.system", "max_length"),
        ("embed_filter", "__import__('os')", "tau must be a number"),
    ],
)
def test_tampered_pooling_values_are_refused(saved_st, tmp_path, key, value, message):
    from sentence_transformers import SentenceTransformer

    folder = _copy(saved_st, tmp_path / "saved")
    config_file = _pooling_config(folder)
    config = json.loads(config_file.read_text())
    config[key] = value
    config_file.write_text(json.dumps(config))
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ConfigError, match=message):
            SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "EXECUTED").exists()


@pytest.mark.parametrize("class_ref", ["evil_module.Evil", "os.system", "builtins.exec"])
def test_a_tampered_module_class_path_runs_nothing(saved_st, tmp_path, class_ref):
    from sentence_transformers import SentenceTransformer

    folder = _copy(saved_st, tmp_path / "saved")
    mark = tmp_path / "EXECUTED"
    (folder / "evil_module.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\nclass Evil:\n    pass\n")
    modules = json.loads((folder / "modules.json").read_text())
    entry = next(m for m in modules if "ValuePooling" in m["type"])
    entry["type"] = class_ref
    (folder / "modules.json").write_text(json.dumps(modules))
    # without trust_remote_code, sentence-transformers 6 refuses every class outside its namespace,
    # starting with valuelens' own ValueTransformer: nothing from the folder is imported
    with pytest.raises(ValueError, match="which is not part of Sentence Transformers"):
        SentenceTransformer(str(folder), device="cpu")
    assert not mark.exists()
    if class_ref == "evil_module.Evil":
        return  # with trust_remote_code=True the folder's own modules are trusted: the caller's choice
    # trusted, a class path that names a function instead of a module class fails before calling it
    with pytest.raises((AttributeError, TypeError, ImportError, ValueError)) as caught:
        SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    assert class_ref.split(".")[-1] in str(caught.value) or "load" in str(caught.value), caught.value
    assert not mark.exists()
