"""CPU threads: the CPU share (affinity, cgroup quota), the busy CPUs, ``auto``, and the CLI's ``--threads``."""

from __future__ import annotations

import os

import pytest
import torch
from typer.testing import CliRunner

from valuelens import cpu
from valuelens.cli import app

runner = CliRunner()


def _affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("max 100000", None), ("100000 100000", 1), ("150000 100000", 2), ("garbage", None)],
)
def test_the_share_is_the_affinity_capped_by_a_cgroup_quota(tmp_path, monkeypatch, cpu_max, expected):
    quota = tmp_path / "cpu.max"
    quota.write_text(cpu_max + "\n")
    monkeypatch.setattr(cpu, "_CGROUP_CPU_MAX", quota)
    assert cpu.cpu_share() == (_affinity() if expected is None else min(_affinity(), expected))
    monkeypatch.setattr(cpu, "_CGROUP_CPU_MAX", tmp_path / "missing")
    assert cpu.cpu_share() == _affinity()


def test_busy_cpus_are_read_from_proc_stat(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    samples = iter(["cpu  100 0 100 800 0 0 0 0\n", "cpu  250 0 150 1000 0 0 0 0\n"])

    def read_text(self):
        return next(samples)

    monkeypatch.setattr(cpu, "_PROC_STAT", stat)
    monkeypatch.setattr(type(stat), "read_text", read_text)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    # 200 busy jiffies of 400 over all CPUs: half of 4 CPUs
    assert cpu.busy_cpus(interval=0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("share", "busy", "expected"), [(4, 0.0, 4), (4, 1.4, 3), (4, 2.6, 1), (2, 2.0, 1), (2, 9.0, 1)]
)
def test_auto_is_the_idle_part_of_the_share_and_at_least_one(monkeypatch, share, busy, expected):
    monkeypatch.setattr(cpu, "cpu_share", lambda: share)
    monkeypatch.setattr(cpu, "busy_cpus", lambda interval=0.2: busy)
    assert cpu.auto_threads() == expected


def test_parse_threads(monkeypatch):
    monkeypatch.setattr(cpu, "auto_threads", lambda: 3)
    assert cpu.parse_threads("auto") == 3
    assert cpu.parse_threads("torch") is None
    assert cpu.parse_threads("2") == 2
    for bad in ("0", "-1", "many", "1.5"):
        with pytest.raises(ValueError, match="'auto', 'torch' or a positive integer"):
            cpu.parse_threads(bad)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_cli_sets_threads_and_refuses_a_bad_value_before_loading(
    tmp_path, tiny_checkpoint, restore_threads
):
    source = tmp_path / "in.txt"
    source.write_text("a cat\na dog\n")
    model_dir = tiny_checkpoint
    result = runner.invoke(
        app, ["embed", str(source), "-o", str(tmp_path / "x.npy"), "-m", model_dir, "--threads", "1"]
    )
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1
    result = runner.invoke(
        app, ["embed", str(source), "-o", str(tmp_path / "y.npy"), "-m", "/no/such/model", "--threads", "0"]
    )
    assert result.exit_code == 2
    assert "threads must be" in result.output and "Traceback" not in result.output
    for command in (
        ["eval", "stsb"],
        ["sweep", "stsb"],
        ["fit", str(source), "-o", str(tmp_path / "s.safetensors")],
    ):
        result = runner.invoke(app, [*command, "-m", "/no/such/model", "--threads", "lots"])
        assert result.exit_code == 2, (command, result.output)
        assert "threads must be" in result.output, (command, result.output)
