"""Stream a split's encoded examples (upstream's all__inputs / all__labels) to disk in constant memory."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import formats
from .encoding import SEQ_LEN
from .layout import SplitLayout
from .render import render_pairs


def rendered_blocks(layout: SplitLayout, workers: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(inputs, labels) rows of each group in order, rendered by a thread pool a few groups ahead.

    numpy releases the GIL inside its scatter/gather kernels, so the threads overlap with each other and
    with the caller's hashing and file writes (which release it too).
    """

    def render(i: int) -> tuple[np.ndarray, np.ndarray]:
        item = layout.variants[i]
        offsets = item.offsets if layout.translated else None
        inputs, labels = render_pairs(layout.pairs[i], item.tids, item.cmaps, offsets)
        return inputs.reshape(-1, SEQ_LEN), labels.reshape(-1, SEQ_LEN)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque = deque()
        for i in range(len(layout.variants)):
            pending.append(pool.submit(render, i))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def write_examples(
    root: Path, layout: SplitLayout, total: int, workers: int, progress: bool
) -> dict[str, str]:
    """Write `<root>/<split>/all__{inputs,labels}.npy`; returns their sha256 keyed by relative path."""
    writers = [
        formats.NpyStreamWriter(formats.array_path(root, layout.name, name), (total, SEQ_LEN), np.uint8)
        for name in formats.MATERIALIZED_FIELDS
    ]
    blocks = rendered_blocks(layout, max(workers, 1))
    desc = f"write {layout.name}"
    for inputs, labels in tqdm(
        blocks, total=len(layout.variants), desc=desc, unit="task", disable=not progress, file=sys.stderr
    ):
        writers[0].write(inputs)
        writers[1].write(labels)
    return {f"{layout.name}/{w.path.name}": w.close() for w in writers}
