"""Timing and peak memory of one benchmark row.

Usage::

    meter = MemoryMeter(device)          # after loading: records the resident / allocated baseline
    seconds = timed(run, texts, warmup=texts[:32], device=device, repeats=1)
    memory = meter.read()                # {"peak_mib", "extra_mib", "loaded_mib", "peak_source", ...}

CPU: the peak is the resident-set high-water mark (``VmHWM``) of this process since the meter reset
it after loading (Linux ``/proc/self/clear_refs``; where that is refused, ``ru_maxrss``, which also
counts the loading); run each row in a fresh process for a clean mark. CUDA:
``torch.cuda.max_memory_allocated`` since the meter reset it.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

MIB = 2**20


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mib() -> float | None:
    """This process's resident set now (MiB), or ``None`` off Linux."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib / 1024


def max_rss_mib() -> float:
    """The resident-set high-water mark of this process's whole life (``ru_maxrss``) in MiB."""
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value / MIB if sys.platform == "darwin" else value / 1024  # bytes on macOS, KiB on Linux


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux ``clear_refs``); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class MemoryMeter:
    """Peak memory from now on (see the module docstring); ``read()`` after the measured work."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        if device.type == "cuda":
            synchronize(device)
            self.loaded = torch.cuda.memory_allocated(device) / MIB
            torch.cuda.reset_peak_memory_stats(device)
            self.source = "cuda max_memory_allocated"
        else:
            self.loaded = rss_mib() or max_rss_mib()
            self.source = "VmHWM after reset" if reset_peak_rss() else "ru_maxrss (includes loading)"

    def read(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) / MIB
        else:
            hwm = _status_kib("VmHWM")
            peak = hwm / 1024 if hwm is not None and self.source.startswith("VmHWM") else max_rss_mib()
        return {
            "peak_mib": round(peak, 1),
            "loaded_mib": round(self.loaded, 1),
            "extra_mib": round(max(peak - self.loaded, 0.0), 1),
            "peak_source": self.source,
            "max_rss_mib": round(max_rss_mib(), 1),
        }


def timed(
    run: Callable[[Sequence[str]], Any],
    texts: Sequence[str],
    *,
    warmup: Sequence[str],
    device: torch.device,
    repeats: int = 1,
) -> float:
    """Seconds of ``run(texts)`` after one ``run(warmup)``: the best of ``repeats`` runs."""
    if warmup:
        run(warmup)
    synchronize(device)
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run(texts)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best
