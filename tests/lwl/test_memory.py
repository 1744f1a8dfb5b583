import sys

import numpy as np

from lwl.memory import release_freed_memory


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def test_freed_heap_memory_goes_back_to_the_os():
    if not sys.platform.startswith("linux"):
        assert release_freed_memory() in (True, False)
        return
    # many mid-sized blocks below glibc's mmap threshold, then all but the last freed: the heap
    # keeps the pages until malloc_trim
    blocks = [np.ones(16_000) for _ in range(8_000)]  # 128 KB each, about 1 GiB
    keep = blocks[-1]
    del blocks
    before = _rss_mib()
    assert release_freed_memory() is True
    assert _rss_mib() < before - 300, (before, _rss_mib())
    assert keep.sum() == 16_000
