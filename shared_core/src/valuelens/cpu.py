"""CPU threads: the share of CPUs this process may use, and a thread count that does not collapse when
other jobs keep those CPUs busy (docs/performance.md#cpu-threads measures why).

The library never sets torch's threads itself (that is process state, the caller's to choose); the
command line does, with ``--threads`` (default ``auto``).

Usage::

    torch.set_num_threads(cpu.auto_threads())   # the idle part of this process's CPU share, at least 1
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

__all__ = ["auto_threads", "busy_cpus", "cpu_share", "parse_threads"]

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
_PROC_STAT = Path("/proc/stat")


def cpu_share() -> int:
    """How many CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota.

    Usage: ``cpu.cpu_share()`` → ``2`` in a container limited to two CPUs on a 64-core host."""
    try:
        share = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        share = os.cpu_count() or 1
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            share = min(share, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, share)


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat, or None where there is none."""
    try:
        fields = [int(v) for v in _PROC_STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cpus(interval: float = 0.2) -> float:
    """How many of the machine's CPUs other work keeps busy now: sampled from /proc/stat over
    ``interval`` seconds; the 1-minute load average where there is no /proc/stat; 0 where neither is."""
    first = _cpu_times()
    if first is not None:
        time.sleep(interval)
        second = _cpu_times()
        if second is not None and second[1] > first[1]:
            return (second[0] - first[0]) / (second[1] - first[1]) * (os.cpu_count() or 1)
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def auto_threads() -> int:
    """Threads for a long CPU job now: the CPU share minus the CPUs other work keeps busy, at least 1.

    torch's default (one thread per core) collapses when another job holds those cores: its threads
    wait on each other at every operation (8-15× slower measured on two shared cores), while fewer
    threads than idle cores costs at most the unused cores. Usage: ``torch.set_num_threads(auto_threads())``.
    """
    share = cpu_share()
    return max(1, min(share, share - math.floor(busy_cpus() + 0.5)))


def parse_threads(value: str | int | None) -> int | None:
    """A ``--threads`` value: ``"auto"`` → :func:`auto_threads`, ``"torch"`` → ``None`` (torch's own
    default, untouched), a positive integer → itself. Raises ``ValueError`` naming the choices."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return auto_threads()
    if text == "torch":
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        msg = f"threads must be 'auto', 'torch' or a positive integer, not {value!r}"
        raise ValueError(msg)
    return number
