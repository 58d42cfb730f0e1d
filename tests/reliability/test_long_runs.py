"""Long runs: 20 000 short texts through ``Encoder.encode`` and each adapter, in calls of 500.

Resident memory (``/proc/self/statm``) must stay flat after a warm-up of 2 000 texts, and the
model's hook count must be zero between calls. Marked ``slow`` (about 10 s per surface); CI runs it.
Run with ``-s`` to see the figures quoted in docs/reliability.md.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from reliability.support import Surface, hook_count, rss_mib
from tiny_models import CORPUS

CALL = 500
WARMUP = 2_000
TOTAL = 20_000
GROWTH_MIB = 24.0  # allowed drift after warm-up: allocator noise, far below a leak of one call's output


@pytest.mark.slow
def test_twenty_thousand_texts_memory_flat(surface: Surface):
    texts = [f"{CORPUS[i % len(CORPUS)][: 10 + i % 30]} {i}" for i in range(TOTAL + WARMUP)]
    for start in range(0, WARMUP, CALL):
        surface.embed(texts[start : start + CALL])
    gc.collect()
    before = rss_mib()
    samples = []
    hooks = set()
    for start in range(WARMUP, WARMUP + TOTAL, CALL):
        out = surface.embed(texts[start : start + CALL])
        assert out.shape[0] == CALL and np.isfinite(out).all()
        hooks.add(hook_count(surface.module))
        samples.append(rss_mib())
    gc.collect()
    after = rss_mib()
    first, last = np.mean(samples[:5]), np.mean(samples[-5:])
    print(
        f"\n{surface.name}: {TOTAL} texts in {TOTAL // CALL} calls; RSS after warm-up {before:.1f} MiB, "
        f"after the run {after:.1f} MiB (first 5 calls {first:.1f}, last 5 {last:.1f}); hooks {sorted(hooks)}"
    )
    assert hooks == {0} and surface.clean()
    assert after - before < GROWTH_MIB
    assert last - first < GROWTH_MIB / 2
