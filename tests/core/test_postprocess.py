"""Fitted post-processing: every kind against a direct numpy computation, persistence, errors, the CLI."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from tiny_models import CORPUS
from valuelens import Encoder
from valuelens.cli import app
from valuelens.errors import ConfigError, ValueLensError
from valuelens.evaluation.tasks import find_set
from valuelens.fitting import fit_texts
from valuelens.io import unlabeled_texts
from valuelens.postprocess import KINDS, Postprocess

runner = CliRunner()
D = 12


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    """Correlated, anisotropic, off-center rows (like LLM embeddings: one large coordinate)."""
    rng = np.random.default_rng(7)
    mixing = rng.normal(size=(D, D))
    x = rng.normal(size=(300, D)) @ mixing * np.linspace(0.5, 3, D) + rng.normal(size=D) * 4
    x[:, 3] += 40 * rng.normal(size=300)
    return x


def _pca(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centered data, principal directions (rows) and population variances, from numpy's SVD."""
    centered = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    return centered, vt, s**2 / len(x)


def _out(pp: Postprocess, x: np.ndarray) -> np.ndarray:
    return pp.transform(torch.from_numpy(x)).double().numpy()


# ---------------------------------------------------------------------------------------- the maths
def test_center_subtracts_the_mean(data):
    pp = Postprocess.fit(data, "center")
    y = _out(pp, data)
    centered = data - data.mean(axis=0)
    rms = np.sqrt((centered**2).mean())  # one number: the root-mean-square centered coordinate
    np.testing.assert_allclose(pp.rms, rms, rtol=1e-5)
    np.testing.assert_allclose(y, centered / rms, atol=1e-4)
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose((y**2).mean(), 1, rtol=1e-4)  # unit average variance per coordinate
    assert (pp.kind, pp.input_dim, pp.output_dim, pp.k, pp.dim) == ("center", D, D, None, None)


@pytest.mark.parametrize("k", [1, 3])
def test_abtt_removes_the_top_principal_components(data, k):
    pp = Postprocess.fit(data, "abtt", k=k)
    centered, vt, _ = _pca(data)
    top = vt[:k]
    y = _out(pp, data)
    kept = centered - centered @ top.T @ top
    rms = np.sqrt((kept**2).mean())
    np.testing.assert_allclose(pp.rms, rms, rtol=1e-4)
    np.testing.assert_allclose(y, kept / rms, atol=2e-3)
    np.testing.assert_allclose((y**2).mean(), 1, rtol=1e-3)
    assert np.abs(y @ top.T).max() < 1e-3 * np.abs(centered @ top.T).max()  # orthogonal to the removed PCs
    # the stored components are numpy's principal directions up to sign
    np.testing.assert_allclose(np.abs(pp.components.double().numpy() @ top.T), np.eye(k), atol=1e-5)
    assert pp.k == k and pp.output_dim == D
    # new points too: the map is affine, fitted once
    fresh = np.random.default_rng(1).normal(size=(5, D)) * 10
    c = fresh - data.mean(axis=0)
    np.testing.assert_allclose(_out(pp, fresh), (c - c @ top.T @ top) / rms, atol=2e-3)


def test_standardize_gives_unit_std(data):
    pp = Postprocess.fit(data, "standardize")
    y = _out(pp, data)
    np.testing.assert_allclose(y, (data - data.mean(axis=0)) / data.std(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y.std(axis=0), 1, atol=1e-4)


def test_standardize_guards_a_constant_dimension(data):
    x = data.copy()
    x[:, 5] = 2.5
    pp = Postprocess.fit(x, "standardize")
    assert pp.scale[5] > 0
    y = _out(pp, x)
    assert np.isfinite(y).all() and np.abs(y[:, 5]).max() == 0
    np.testing.assert_allclose(np.delete(y.std(axis=0), 5), 1, atol=1e-4)


@pytest.mark.parametrize("dim", [None, 4])
def test_whiten_gives_identity_covariance(data, dim):
    pp = Postprocess.fit(data, "whiten", dim=dim)
    m = D if dim is None else dim
    y = _out(pp, data)
    assert y.shape == (len(data), m) and (pp.output_dim, pp.dim) == (m, m)
    np.testing.assert_allclose(np.cov(y.T, bias=True), np.eye(m), atol=1e-3)
    centered, vt, variances = _pca(data)
    expected = centered @ vt[:m].T / np.sqrt(variances[:m])  # PCA whitening, columns up to sign
    np.testing.assert_allclose(np.abs(y), np.abs(expected), atol=2e-3)


def test_whiten_guards_a_rank_deficient_covariance(data):
    x = np.concatenate([data, data[:, :2] + data[:, 2:4]], axis=1)  # two exactly dependent columns
    pp = Postprocess.fit(x, "whiten")
    y = _out(pp, x)
    assert np.isfinite(pp.matrix.numpy()).all() and np.isfinite(y).all()
    np.testing.assert_allclose(np.cov(y[:, :D].T, bias=True), np.eye(D), atol=1e-3)


def test_fit_is_deterministic_and_takes_any_input_type(data):
    a = Postprocess.fit(data, "whiten", dim=5)
    for given in (data.astype(np.float32), torch.from_numpy(data), torch.from_numpy(data).half()):
        b = Postprocess.fit(given, "whiten", dim=5)
        assert torch.allclose(a.matrix, b.matrix, atol=0.05 if given.dtype == torch.float16 else 1e-4)
    assert torch.equal(a.matrix, Postprocess.fit(data, "whiten", dim=5).matrix)


@pytest.mark.parametrize("kind", KINDS)
def test_transform_is_pure_batchwise_and_fp32(data, kind):
    pp = Postprocess.fit(data, kind)
    x = torch.from_numpy(data[:10]).to(torch.bfloat16)
    before = x.clone()
    y = pp.transform(x)
    assert torch.equal(x, before) and y.dtype == torch.float32 and y.device == x.device
    halves = torch.cat([pp.transform(x[:3]), pp.transform(x[3:])])
    torch.testing.assert_close(halves, y)
    torch.testing.assert_close(pp.transform(x[4]), y[4])  # one vector [d] -> [out]
    torch.testing.assert_close(pp.transform(x.reshape(2, 5, D)), y.reshape(2, 5, -1))
    np.testing.assert_allclose(pp.transform(data[:10]), pp.transform(torch.from_numpy(data[:10])).numpy())
    with torch.inference_mode():
        torch.testing.assert_close(pp.transform(x), y)
    grad_in = torch.from_numpy(data[:4]).float().requires_grad_()  # the cached copies work with autograd
    pp.transform(grad_in).sum().backward()
    assert grad_in.grad is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_transform_on_cuda(data):
    pp = Postprocess.fit(torch.from_numpy(data).cuda(), "whiten", dim=4)
    x = torch.from_numpy(data[:6]).cuda().half()
    y = pp.transform(x)
    assert y.device == x.device and y.dtype == torch.float32
    torch.testing.assert_close(
        y.cpu(), Postprocess.fit(data, "whiten", dim=4).transform(x.cpu()), atol=1e-2, rtol=1e-3
    )


# ---------------------------------------------------------------------------------------- persistence
@pytest.mark.parametrize(
    ("kind", "params"), [("center", {}), ("abtt", {"k": 2}), ("standardize", {}), ("whiten", {"dim": 3})]
)
def test_save_load_round_trip(data, tmp_path, kind, params):
    config = {"recipe": "va", "layers": [1, 2], "prompt": None}
    pp = Postprocess.fit(
        data, kind, **params, fitted_on="300 synthetic rows", model="tiny", encoder_config=config
    )
    path = pp.save(tmp_path / "state.safetensors")
    loaded = Postprocess.load(path)
    assert (loaded.kind, loaded.k, loaded.dim, loaded.n_fitted) == (kind, pp.k, pp.dim, 300)
    assert (loaded.fitted_on, loaded.model, loaded.encoder_config) == ("300 synthetic rows", "tiny", config)
    assert loaded.config() == pp.config() and repr(loaded) == repr(pp)
    x = torch.from_numpy(data[:20]).float()
    torch.testing.assert_close(loaded.transform(x), pp.transform(x))
    assert list(tmp_path.iterdir()) == [path]  # written aside and renamed: no temporary left
    mask = os.umask(0o022)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # a plain file's mode, not safetensors' 0600


def test_a_version_1_state_loads_without_the_rms_divisor(data, tmp_path):
    # states saved before rms existed (format version 1) keep their old output: x - μ, unscaled
    good = Postprocess.fit(data, "center")
    params = {k: v for k, v in good.config().items() if k != "rms"}
    old = Postprocess.load(_tamper(tmp_path, {"mean": good.mean}, kind="center", params=json.dumps(params)))
    assert old.rms == 1.0 and good.rms != 1.0
    np.testing.assert_allclose(_out(old, data), data - data.mean(axis=0), atol=1e-4)


def test_rms_is_checked(data):
    good = Postprocess.fit(data, "center")
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ConfigError, match="rms must be a positive finite number"):
            Postprocess("center", good.mean, rms=bad)
    with pytest.raises(ConfigError, match="'center' and 'abtt' only"):
        Postprocess("standardize", good.mean, scale=torch.ones(D), rms=2.0)
    assert Postprocess.fit(np.ones((4, D)), "center").rms == 1.0  # identical rows: nothing to divide by


def test_pickles_without_device_copies(data):
    import copy
    import pickle

    pp = Postprocess.fit(data, "abtt", k=2, encoder_config={"recipe": "va"})
    pp.transform(torch.zeros(1, D))
    assert pp._placed
    for clone in (pickle.loads(pickle.dumps(pp)), copy.deepcopy(pp)):
        assert not clone._placed and clone.encoder_config == {"recipe": "va"}
        torch.testing.assert_close(clone.transform(torch.ones(2, D)), pp.transform(torch.ones(2, D)))


def test_repr_names_kind_and_shape(data):
    assert repr(Postprocess.fit(data, "whiten", dim=4, fitted_on="x")) == (
        "Postprocess(kind='whiten', dim=4, 12 -> 4, fitted_on='x')"
    )
    assert repr(Postprocess.fit(data, "abtt")) == "Postprocess(kind='abtt', k=1, 12 -> 12)"


def _tamper(tmp_path, tensors, **metadata):
    path = tmp_path / "bad.safetensors"
    meta = {"format": "valuelens.postprocess", "format_version": "1", "kind": "abtt"}
    meta.update(metadata)
    save_file(tensors, str(path), metadata={k: v for k, v in meta.items() if v is not None})
    return path


def test_load_rejects_bad_files(data, tmp_path):
    good = Postprocess.fit(data, "abtt", k=2)
    params = json.dumps(good.config())
    with pytest.raises(ConfigError, match="does not exist"):
        Postprocess.load(tmp_path / "missing.safetensors")
    with pytest.raises(ConfigError, match="is a folder"):
        Postprocess.load(tmp_path)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ConfigError, match="not a readable safetensors file"):
        Postprocess.load(garbage)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.save(tmp_path / "good.safetensors").read_bytes()[:-20])
    with pytest.raises(ConfigError, match="not a readable safetensors file"):
        Postprocess.load(truncated)
    other = tmp_path / "other.safetensors"
    save_file({"projection": torch.zeros(2, 2)}, str(other))
    with pytest.raises(ConfigError, match="not a saved valuelens Postprocess"):
        Postprocess.load(other)
    tensors = {"mean": good.mean, "components": good.components}
    with pytest.raises(ConfigError, match="kind must be one of 'center', 'abtt'"):
        Postprocess.load(_tamper(tmp_path, tensors, kind="pca", params=params))
    with pytest.raises(ConfigError, match="format version '3'"):
        Postprocess.load(_tamper(tmp_path, tensors, format_version="3", params=params))
    with pytest.raises(ConfigError, match="corrupt Postprocess metadata"):
        Postprocess.load(_tamper(tmp_path, tensors, params="{oops"))
    with pytest.raises(ConfigError, match=r"holds the tensors \['mean'\], but a 'abtt'"):
        Postprocess.load(_tamper(tmp_path, {"mean": good.mean}, params=params))
    with pytest.raises(ConfigError, match=r"components must be \[k, d\]"):
        Postprocess.load(
            _tamper(tmp_path, {"mean": good.mean, "components": torch.zeros(2, D + 1)}, params=params)
        )
    with pytest.raises(ConfigError, match="finite"):
        bad = good.components.clone()
        bad[0, 0] = float("nan")
        Postprocess.load(_tamper(tmp_path, {"mean": good.mean, "components": bad}, params=params))
    with pytest.raises(ConfigError, match="inconsistent"):
        Postprocess.load(
            _tamper(tmp_path, {"mean": good.mean, "components": good.components[:1].clone()}, params=params)
        )


def test_save_refuses_a_folder(data, tmp_path):
    with pytest.raises(ConfigError, match="writes one file"):
        Postprocess.fit(data, "center").save(tmp_path)


# ---------------------------------------------------------------------------------------- errors
def test_transform_rejects_other_dimensions(data):
    pp = Postprocess.fit(data, "abtt", model="tiny")
    with pytest.raises(ConfigError, match="fitted on 12-dim embeddings of 'tiny', got 7-dim"):
        pp.transform(torch.zeros(3, 7))
    with pytest.raises(TypeError, match="torch tensor or a numpy array"):
        pp.transform([[0.0] * D])  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("n", "kind", "params", "message"),
    [
        (
            3,
            "abtt",
            {"k": 3},
            "abtt' with k=3 needs more than 3 embeddings.*got 3: pass at least 4 or a smaller k",
        ),
        (12, "whiten", {}, r"all 12 dimensions \(dim=None\) needs more than 12 embeddings.*got 12"),
        (5, "whiten", {"dim": 5}, "dim=5 needs more than 5 embeddings"),
        (1, "center", {}, "needs at least 2 embeddings"),
        (1, "standardize", {}, "needs at least 2 embeddings"),
    ],
)
def test_too_few_rows(data, n, kind, params, message):
    with pytest.raises(ConfigError, match=message):
        Postprocess.fit(data[:n], kind, **params)
    Postprocess.fit(data[: n + 1], kind, **params)  # one more is enough


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("pca", {}, "kind must be one of 'center', 'abtt', 'standardize', 'whiten', got 'pca'"),
        ("abtt", {"k": 0}, "must be an int >= 1.*kind='center' removes none"),
        ("abtt", {"k": D}, "would remove every direction of a 12-dim embedding"),
        ("whiten", {"dim": D + 1}, "dim=13 exceeds the 12 dimensions"),
        ("whiten", {"dim": 0}, "dim must be a positive int"),
        ("abtt", {"dim": 3}, "cuts the dimensions of kind='whiten' only"),
        ("center", {"eps": 0.0}, r"eps .* must be in \(0, 1\)"),
    ],
)
def test_bad_settings(data, kind, params, message):
    with pytest.raises(ConfigError, match=message):
        Postprocess.fit(data, kind, **params)


def test_non_finite_and_malformed_inputs(data):
    x = data.copy()
    x[4, 2], x[9, 0] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"NaN or inf in 2 of 300 rows \(rows 4, 9\).*float32 or bfloat16"):
        Postprocess.fit(x, "center")
    with pytest.raises(ValueError, match="must be 2-D"):
        Postprocess.fit(data[0], "center")
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        Postprocess.fit(data.tolist(), "center")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="all identical"):
        Postprocess.fit(np.ones((10, D)), "whiten", dim=3)


def test_constructor_validates(data):
    mean = torch.zeros(D)
    with pytest.raises(ConfigError, match="needs the tensor 'components'"):
        Postprocess("abtt", mean)
    with pytest.raises(ConfigError, match="holds mean, not 'scale'"):
        Postprocess("center", mean, scale=torch.ones(D))
    with pytest.raises(ConfigError, match=r"scale .* must be positive"):
        Postprocess("standardize", mean, scale=torch.zeros(D))
    with pytest.raises(ConfigError, match=r"matrix must be \[d, dim\]"):
        Postprocess("whiten", mean, matrix=torch.zeros(D, D + 1))
    with pytest.raises(ConfigError, match="fitted_on must be a str"):
        Postprocess("center", mean, fitted_on=3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- encoders
@pytest.fixture
def encoder(tiny_llama, tiny_tokenizer):
    return Encoder(tiny_llama, tiny_tokenizer, recipe="va", layers="all", name_or_path="tiny-llama")


def test_fit_texts_embeds_unnormalized_and_records_the_encoder(encoder):
    pp = fit_texts(encoder, CORPUS, kind="whiten", dim=4, batch_size=3)
    reference = Postprocess.fit(encoder.encode(CORPUS), "whiten", dim=4)
    torch.testing.assert_close(pp.matrix, reference.matrix, atol=1e-4, rtol=1e-3)
    assert (pp.fitted_on, pp.model, pp.n_fitted) == ("8 texts", "tiny-llama", 8)
    assert pp.encoder_config == encoder.config.to_dict()
    y = pp.transform(encoder.encode(CORPUS, convert_to_tensor=True))
    np.testing.assert_allclose(np.cov(y.numpy().T, bias=True), np.eye(4), atol=1e-3)


def test_fit_texts_checks_the_count_before_embedding(encoder, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("encode must not run")

    monkeypatch.setattr(encoder, "encode_raw", forbidden)
    d = encoder.dimension
    with pytest.raises(ConfigError, match=f"all {d} dimensions .* needs more than {d} texts.*got 8"):
        fit_texts(encoder, CORPUS, kind="whiten")
    with pytest.raises(ConfigError, match="k=8 needs more than 8 texts"):
        fit_texts(encoder, CORPUS, kind="abtt", k=8)
    with pytest.raises(TypeError, match="got a single str"):
        fit_texts(encoder, "one text", kind="center")  # type: ignore[arg-type]
    fitted = Encoder(encoder.model, encoder.tokenizer, encoder.config.replace(postprocess="fit:center"))
    with pytest.raises(ConfigError, match="already applies a post-processing"):
        fit_texts(fitted, CORPUS, kind="center")


def test_unlabeled_texts_reads_pairs_dedupes_and_samples(tmp_path):
    rows = [{"sentence1": a, "sentence2": b, "score": 1.0} for a, b in itertools.pairwise(CORPUS)]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert unlabeled_texts(path, ("sentence1", "sentence2")) == CORPUS
    sample = unlabeled_texts(path, ["sentence1", "sentence2"], limit=5)
    assert len(sample) == 5 and sample == [t for t in CORPUS if t in sample]  # file order
    assert sample == unlabeled_texts(path, ["sentence1", "sentence2"], limit=5)  # seeded
    assert unlabeled_texts(path, "sentence2", limit=100) == CORPUS[1:]
    with pytest.raises(ValueLensError, match="no field 'text'"):
        unlabeled_texts(path)


def test_stsb_train_has_the_pair_fields():
    path = find_set("stsb") / "train.jsonl"
    texts = unlabeled_texts(path, ("sentence1", "sentence2"), limit=50)
    assert len(texts) == 50 and all(isinstance(t, str) and t for t in texts)


# ---------------------------------------------------------------------------------------- CLI
def test_cli_fit_writes_a_loadable_state(tiny_checkpoint, tmp_path):
    source = tmp_path / "train.txt"
    source.write_text("\n".join(CORPUS + CORPUS[:2]) + "\n")  # duplicates are fitted once
    out = tmp_path / "state.safetensors"
    args = [
        "fit",
        str(source),
        "--out",
        str(out),
        "--model",
        tiny_checkpoint,
        "--recipe",
        "hs",
        "--layers",
        "1-2",
    ]
    result = runner.invoke(app, [*args, "--kind", "whiten", "--dim", "3", "-b", "4"])
    assert result.exit_code == 0, result.output
    assert "Postprocess(kind='whiten', dim=3, 64 -> 3, fitted_on='8 texts of train.txt')" in result.output
    pp = Postprocess.load(out)
    assert pp.n_fitted == 8 and pp.model == tiny_checkpoint
    assert pp.encoder_config is not None and pp.encoder_config["recipe"] == "hs"
    assert pp.encoder_config["layers"] == [1, 2]
    encoder = Encoder.from_pretrained(tiny_checkpoint, recipe="hs", layers="1-2")
    y = pp.transform(encoder.encode(CORPUS, convert_to_tensor=True))
    np.testing.assert_allclose(np.cov(y.numpy().T, bias=True), np.eye(3), atol=1e-3)


def test_cli_fit_reads_pair_fields_with_a_limit(tiny_checkpoint, tmp_path):
    source = tmp_path / "pairs.jsonl"
    source.write_text(
        "\n".join(
            json.dumps({"sentence1": a, "sentence2": b}) for a, b in zip(CORPUS, CORPUS[::-1], strict=True)
        )
    )
    out = tmp_path / "abtt.safetensors"
    result = runner.invoke(
        app,
        [
            "fit",
            str(source),
            "-o",
            str(out),
            "--model",
            tiny_checkpoint,
            "--field",
            "sentence1,sentence2",
            "--limit",
            "6",
            "-k",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    pp = Postprocess.load(out)
    assert (pp.kind, pp.k, pp.n_fitted, pp.fitted_on) == ("abtt", 2, 6, "6 texts of pairs.jsonl")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kind", "whiten"], "needs more than 32 texts"),
        (["--kind", "pca"], "kind must be one of"),
        (["--kind", "center", "--dim", "2"], "kind='whiten' only"),
    ],
)
def test_cli_fit_errors_are_clear(tiny_checkpoint, tmp_path, extra, message):
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(CORPUS) + "\n")
    out = tmp_path / "state.safetensors"
    result = runner.invoke(app, ["fit", str(source), "--out", str(out), "--model", tiny_checkpoint, *extra])
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()
