"""Upstream's random draws, reproduced from numpy's legacy seeded generator (RandomState / MT19937).

Upstream's ARC builder seeds numpy's global legacy generator once and makes every random choice from it in
one sequential pass (upstream: dataset/build_arc_dataset.py): a shuffle of each subset's tasks; per task, augmentation tries (a
dihedral id, then a permutation of colours 1..9) until enough distinct variants exist; then, split by split
and puzzle by puzzle, an anchor example and a top-left offset for every other train-split example.

Every one of those draws is a bounded integer, which the legacy generator makes from its 32-bit words by
masked rejection: take the next word, keep the low bits under the smallest all-ones mask covering the
largest allowed value, and take another word while the result is too large; a range of one value takes no
word. `LegacyWords` reads the generator's raw words and applies that rule, which gives the values of the
numpy calls (the tests compare them call by call) at a fraction of their per-call cost, so the builder makes
all draws in upstream's order in one process and leaves rendering and writing to workers.
"""

from __future__ import annotations

import numpy as np

from .augment import RETRIES_FACTOR, _content_keys, _pair_classes, transformed_extent
from .encoding import GRID_SIZE

_CHUNK = 1 << 16  # words read from the generator at a time
_MASKS = [0] + [(1 << r.bit_length()) - 1 for r in range(1, 64)]  # mask for largest allowed value r
# Rejection rules (mask, largest) of a colour permutation's draws: `shuffle` of 9 items draws in [0, i]
# for i = 8..1.
_SHUFFLE_RULES = [(_MASKS[i], i) for i in range(8, 0, -1)]


def _mask(largest: int) -> int:
    return _MASKS[largest] if largest < len(_MASKS) else (1 << largest.bit_length()) - 1


class LegacyWords:
    """The word stream of `numpy.random.seed(seed)`'s generator, with the legacy bounded draws.

    Positions are absolute word indices; `pos` is the next unread word.
    """

    def __init__(self, seed: int) -> None:
        state = np.random.RandomState(seed).get_state(legacy=False)
        self._bitgen = np.random.MT19937()
        self._bitgen.state = {"bit_generator": "MT19937", "state": state["state"]}
        self._buf = np.zeros(0, dtype=np.int64)
        self._base = 0  # absolute position of _buf[0]
        self.pos = 0

    def window(self, start: int, size: int) -> np.ndarray:
        """Words [start, start + size) (start >= pos), reading more from the generator as needed."""
        if start - self._base > 4 * _CHUNK and self.pos - self._base > 4 * _CHUNK:
            drop = self.pos - self._base  # consumed words are never read again
            self._buf, self._base = self._buf[drop:], self.pos
        missing = start + size - (self._base + len(self._buf))
        if missing > 0:
            fresh = self._bitgen.random_raw(max(missing, _CHUNK)).astype(np.int64)
            self._buf = np.concatenate([self._buf, fresh])
        return self._buf[start - self._base : start - self._base + size]

    def draws(self, largest: list[int]) -> list[int]:
        """Consecutive `randint(0, l + 1)` for each l in `largest` (a range of one value takes no word)."""
        size = 2 * len(largest) + 64
        while True:
            words = self.window(self.pos, size).tolist()
            pos, out = 0, []
            try:
                for top in largest:
                    if top == 0:
                        out.append(0)
                        continue
                    mask = _mask(top)
                    value = words[pos] & mask
                    pos += 1
                    while value > top:
                        value = words[pos] & mask
                        pos += 1
                    out.append(value)
            except IndexError:  # more rejections than the window allowed for: retry with a larger one
                size *= 2
                continue
            self.pos += pos
            return out

    def below(self, high: int) -> int:
        """`randint(0, high)`: uniform in [0, high)."""
        return self.draws([high - 1])[0]

    def shuffled(self, n: int) -> list[int]:
        """The order of `n` items after `shuffle` of a list: item at each position, as original indices."""
        order = list(range(n))
        for i, j in zip(range(n - 1, 0, -1), self.draws(list(range(n - 1, 0, -1))), strict=True):
            order[i], order[j] = order[j], order[i]
        return order

    def tries(self, n: int, start: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read `n` augmentation tries (`randint(0, 8)`, then `permutation` of colours 1..9) from word
        position `start` (default: `pos`) without consuming them: (tids [n], colour maps [n, 10] with 0
        fixed, word position after each try). `seek` to one of those positions to consume up to it.

        Vectorized: for every word of a window, where a try starting there ends, then a short chase
        from try to try."""
        start = self.pos if start is None else start
        size = 12 * n + 64  # a try takes 11.2 words on average
        while True:
            words = self.window(start, size)
            at = self._try_words(words)  # [9, size]: the word used by each draw of a try starting there
            chain = np.append(at[-1] + 1, size + 1).tolist()  # where the next try starts (> size: ran out)
            starts, q = [0] * n, 0
            try:
                for k in range(n):
                    starts[k] = q
                    q = chain[q]
            except IndexError:  # a start past the window
                pass
            else:
                if n == 0 or q <= size:  # every try complete inside the window
                    break
            size *= 2
        starts = np.array(starts, dtype=np.int64)
        tids = words[starts] & 7
        colours = np.tile(np.arange(1, 10, dtype=np.int64), (n, 1))
        rows = np.arange(n)
        for r, (mask, i) in enumerate(_SHUFFLE_RULES, start=1):
            j = words[at[r, starts]] & mask
            swap = colours[rows, i].copy()
            colours[rows, i] = colours[rows, j]
            colours[rows, j] = swap
        cmaps = np.zeros((n, 10), dtype=np.int64)
        cmaps[:, 1:] = colours
        return tids, cmaps, start + at[-1, starts] + 1

    @staticmethod
    def _try_words(words: np.ndarray) -> np.ndarray:
        """[9, len(words)]: for a try starting at each word, the word its dihedral draw and each of its 8
        shuffle draws use (len(words) where the window runs out)."""
        size = len(words)
        at = np.empty((9, size), dtype=np.int64)
        at[0] = np.arange(size)
        p = at[0] + 1
        positions = np.arange(size + 1)
        for r, (mask, largest) in enumerate(_SHUFFLE_RULES, start=1):
            p = np.minimum(p, size)
            if mask != largest:  # first accepted word at or after each position (size if none)
                accepted = np.append((words & mask) <= largest, True)
                first = np.where(accepted, positions, size)
                nxt = np.minimum.accumulate(first[::-1])[::-1]
                p = nxt[p]
            at[r] = p
            p = p + 1
        return at

    def seek(self, pos: int) -> None:
        """Continue reading at word position `pos` (one returned by `tries`)."""
        self.pos = pos


def draw_variants(
    words: LegacyWords, pairs: list[tuple[np.ndarray, np.ndarray]], num_aug: int
) -> tuple[np.ndarray, np.ndarray]:
    """Upstream's variants of one task: the original, then tries kept when their content is new, until
    `num_aug` variants are kept or 5·num_aug tries are spent; consumes exactly the tries upstream makes.

    Content is the multiset of all transformed (input, output) pairs with shapes, the same equality as
    upstream's SHA-256 over them, compared as integer keys (`augment._content_keys`).
    Returns (tids uint8 [n], colour maps uint8 [n, 10]).
    """
    tids, cmaps = np.zeros(1, dtype=np.int64), np.arange(10, dtype=np.int64)[None, :]
    if num_aug > 0:
        classes = _pair_classes(pairs)
        budget = RETRIES_FACTOR * num_aug
        ends = np.zeros(0, dtype=np.int64)
        want = min(budget, num_aug + num_aug // 16 + 8)  # most tasks finish within this many tries
        while True:
            more_t, more_c, more_ends = words.tries(want - len(ends), int(ends[-1]) if len(ends) else None)
            tids, cmaps = np.concatenate([tids, more_t]), np.concatenate([cmaps, more_c])
            ends = np.concatenate([ends, more_ends])
            _, first_seen = np.unique(_content_keys(tids, cmaps, *classes), return_index=True)
            if len(first_seen) >= num_aug + 1 or want == budget:
                break
            want = min(budget, 2 * want)
        keep = np.sort(first_seen)[: num_aug + 1]
        # Row r >= 1 is try r - 1; upstream stops right after the try that completes the set.
        words.seek(int(ends[keep[-1] - 1] if len(keep) == num_aug + 1 else ends[budget - 1]))
        tids, cmaps = tids[keep], cmaps[keep]
    return tids.astype(np.uint8), cmaps.astype(np.uint8)


def draw_offsets(
    words: LegacyWords, pairs: list[tuple[np.ndarray, np.ndarray]], tids: np.ndarray
) -> np.ndarray:
    """Train-split offsets of one task's variants, as upstream draws them: per variant an anchor example
    (`randint(0, n_pairs)`) that stays at (0, 0), then for each other example the row offset in
    [0, 30 - max height] and the column offset in [0, 30 - max width] of its transformed input and output.
    Returns uint8 [n_variants, n_pairs, 2]."""
    n, p = len(tids), len(pairs)
    if p == 0 or n == 0:
        return np.zeros((n, p, 2), dtype=np.uint8)
    # Per dihedral id and anchor: the draws made, as (index in the variant's row, largest value, mask); the
    # anchor's pair and ranges of one value take no word.
    largest = (GRID_SIZE - transformed_extent(pairs)).reshape(8, 2 * p).tolist()
    schedule = [
        [
            [(d, top, _mask(top)) for d, top in enumerate(row) if top and d // 2 != anchor]
            for anchor in range(p)
        ]
        for row in largest
    ]
    anchor_largest, anchor_mask = p - 1, _mask(p - 1)
    tid_list = tids.tolist()
    size = n * (3 * p) + 64  # ~1.3 words per draw, 2p - 1 draws per variant
    while True:  # the bounded draws of `LegacyWords.draws`, inlined (faster here than a vectorized form)
        w = words.window(words.pos, size).tolist()
        pos, drawn = 0, [0] * (n * 2 * p)
        try:
            for k, tid in enumerate(tid_list):
                anchor = 0
                if anchor_largest:
                    anchor = w[pos] & anchor_mask
                    pos += 1
                    while anchor > anchor_largest:
                        anchor = w[pos] & anchor_mask
                        pos += 1
                base = 2 * p * k
                for d, top, mask in schedule[tid][anchor]:
                    value = w[pos] & mask
                    pos += 1
                    while value > top:
                        value = w[pos] & mask
                        pos += 1
                    drawn[base + d] = value
        except IndexError:  # more rejections than the window allowed for: retry with a larger one
            size *= 2
            continue
        words.pos += pos
        return np.array(drawn, dtype=np.uint8).reshape(n, p, 2)


def skip_anchors(words: LegacyWords, n_pairs: int, n_variants: int) -> None:
    """Test-split puzzles: upstream draws an anchor for each but never translates them."""
    words.draws([n_pairs - 1] * n_variants)
