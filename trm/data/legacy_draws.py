"""Upstream's random draws, reproduced from numpy's legacy seeded generator (RandomState / MT19937).

Upstream's ARC builder seeds numpy's global legacy generator once and makes every random choice from it in
one sequential pass (TRM_SPEC §8.2): a shuffle of each subset's tasks; per task, augmentation tries (a
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


class LegacyWords:
    """The word stream of `numpy.random.seed(seed)`'s generator, with the legacy bounded draws."""

    def __init__(self, seed: int) -> None:
        state = np.random.RandomState(seed).get_state(legacy=False)
        self._bitgen = np.random.MT19937()
        self._bitgen.state = {"bit_generator": "MT19937", "state": state["state"]}
        self.words: list[int] = []
        self.pos = 0  # index in `words` of the next unread word

    def _more(self, compact: bool = True) -> None:
        """Append words; with `compact`, first drop a long consumed prefix (moves positions: only while
        no position from `tries` is outstanding)."""
        if compact and self.pos > 4 * _CHUNK:
            del self.words[: self.pos]
            self.pos = 0
        self.words.extend(self._bitgen.random_raw(_CHUNK).tolist())

    def below(self, high: int) -> int:
        """`randint(0, high)`: uniform in [0, high) (no word taken when high == 1)."""
        largest = high - 1
        if largest == 0:
            return 0
        mask = _MASKS[largest] if largest < len(_MASKS) else (1 << largest.bit_length()) - 1
        while True:
            if self.pos >= len(self.words):
                self._more()
            value = self.words[self.pos] & mask
            self.pos += 1
            if value <= largest:
                return value

    def shuffled(self, n: int) -> list[int]:
        """The order of `n` items after `shuffle` of a list: item at each position, as original indices."""
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.below(i + 1)
            order[i], order[j] = order[j], order[i]
        return order

    def tries(self, n: int, start: int | None = None) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Read `n` augmentation tries (`randint(0, 8)`, then `permutation` of colours 1..9) from word
        position `start` (default: the current one) without consuming them: (tids [n], colour maps [n, 10]
        with 0 fixed, word position after each try). `seek` to one of those positions to consume up to it."""
        tids = np.empty(n, dtype=np.int64)
        cmaps = np.zeros((n, 10), dtype=np.int64)
        ends: list[int] = []
        masks = _MASKS
        pos = self.pos if start is None else start
        k = 0
        while k < n:
            words = self.words
            try:
                p = pos
                tid = words[p] & 7
                p += 1
                colours = [1, 2, 3, 4, 5, 6, 7, 8, 9]
                for i in range(8, 0, -1):
                    mask = masks[i]
                    j = words[p] & mask
                    p += 1
                    while j > i:
                        j = words[p] & mask
                        p += 1
                    colours[i], colours[j] = colours[j], colours[i]
            except IndexError:  # ran past the words read so far: read more, redo this try
                self._more(compact=False)
                continue
            tids[k] = tid
            cmaps[k, 1:] = colours
            ends.append(p)
            pos = p
            k += 1
        return tids, cmaps, ends

    def seek(self, pos: int) -> None:
        """Continue reading at word position `pos` (one returned by `tries`); positions handed out before
        are invalid afterwards (the consumed prefix may be dropped)."""
        self.pos = pos
        if pos > 4 * _CHUNK:
            del self.words[:pos]
            self.pos = 0


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
        ends: list[int] = []
        want = min(budget, num_aug + num_aug // 16 + 8)  # most tasks finish within this many tries
        while True:
            more_t, more_c, more_ends = words.tries(want - len(ends), ends[-1] if ends else None)
            tids, cmaps = np.concatenate([tids, more_t]), np.concatenate([cmaps, more_c])
            ends += more_ends
            _, first_seen = np.unique(_content_keys(tids, cmaps, *classes), return_index=True)
            if len(first_seen) >= num_aug + 1 or want == budget:
                break
            want = min(budget, 2 * want)
        keep = np.sort(first_seen)[: num_aug + 1]
        # Row r >= 1 is try r - 1; upstream stops right after the try that completes the set.
        words.seek(ends[keep[-1] - 1] if len(keep) == num_aug + 1 else ends[budget - 1])
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
    if p == 0:
        return np.zeros((n, 0, 2), dtype=np.uint8)
    # Per dihedral id, per draw (row, column of each pair): (largest value, mask) of its rejection rule.
    largest = (GRID_SIZE - transformed_extent(pairs)).reshape(8, 2 * p).tolist()
    rules = [[(r, _MASKS[r]) for r in row] for row in largest]
    anchor_largest, anchor_mask = p - 1, _MASKS[p - 1]
    drawn: list[int] = []
    tid_list = tids.tolist()
    k = 0
    while k < n:  # the bounded draws of `LegacyWords.below`, inlined: this loop makes most of the draws
        w, pos = words.words, words.pos
        row: list[int] = []
        try:
            anchor = 0
            if anchor_largest:
                anchor = w[pos] & anchor_mask
                pos += 1
                while anchor > anchor_largest:
                    anchor = w[pos] & anchor_mask
                    pos += 1
            skip = (2 * anchor, 2 * anchor + 1)
            for d, (top, mask) in enumerate(rules[tid_list[k]]):
                if top == 0 or d in skip:
                    row.append(0)
                    continue
                value = w[pos] & mask
                pos += 1
                while value > top:
                    value = w[pos] & mask
                    pos += 1
                row.append(value)
        except IndexError:  # ran past the words read so far: read more, redo this variant
            words._more()
            continue
        drawn += row
        words.pos = pos
        k += 1
    return np.array(drawn, dtype=np.uint8).reshape(n, p, 2)


def skip_anchors(words: LegacyWords, n_pairs: int, n_variants: int) -> None:
    """Test-split puzzles: upstream draws an anchor for each but never translates them."""
    for _ in range(n_variants):
        words.below(n_pairs)
