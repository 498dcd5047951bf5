"""Upstream's Sudoku shuffle draws, reproduced in bulk from numpy's legacy generator (RandomState / MT19937).

Upstream's `shuffle_sudoku` makes, per augmentation: `permutation(arange(1, 10))` (shuffle of 9 items: a
bounded draw in [0, i] for i = 8..1), `rand()` (two 32-bit words; below 1/2 exactly when the first word's
top bit is 0), then `permutation(3)` for the bands, one per band for its rows, and the same for stacks and
columns (draws in [0, 2] then [0, 1]). A bounded draw in [0, i] takes the next word's low bits under the
smallest all-ones mask covering i, and another word while the result exceeds i (`legacy_draws`).

Every draw depends only on a word's low 4 bits, and the coin on its top bit, so the stream is kept as one
byte per word. A compiled regular expression walks it a block of `_BLOCK` augmentations at a time (each
bounded draw is "rejected codes, then an accepted one"), which finds every block's first word without a
Python step per word; from those, all blocks are walked in parallel with numpy to read each draw's value.
The values equal upstream's calls one by one (the tests compare them) and the generator is left where
upstream's would be.
"""

from __future__ import annotations

import re

import numpy as np

_BLOCK = 64  # augmentations found per regex match; the numpy walk then runs _BLOCK steps
_WINDOW = 1 << 24  # words generated at a time
_WORDS_PER_AUG = 32  # a little above the 30.5 words an augmentation takes on average
_CODES = np.arange(32)  # a word's code: low 4 bits, and its top bit as bit 4
# One augmentation's draws in order, as (mask, largest): a shuffle of 9, the coin's two words, 8 shuffles of 3.
_DIGITS = [((1 << i.bit_length()) - 1, i) for i in range(8, 0, -1)]
_COIN = [(0, 0), (0, 0)]  # (mask, largest) 0, 0: any word, no rejection
_THREE = [(3, 2), (1, 1)] * 8
_SCHEDULE = _DIGITS + _COIN + _THREE
_COIN_DRAW = len(_DIGITS)


def _accepts(mask: int, largest: int) -> np.ndarray:
    """bool [32]: codes a bounded draw (mask, largest) accepts."""
    return (_CODES & mask) <= largest


def _pattern(count: int) -> re.Pattern[bytes]:
    """Matches `count` consecutive augmentations' words in the code stream."""
    parts = []
    for mask, largest in _SCHEDULE:
        ok = _accepts(mask, largest)
        accepted = b"".join(re.escape(bytes([c])) for c in np.flatnonzero(ok))
        rejected = b"".join(re.escape(bytes([c])) for c in np.flatnonzero(~ok))
        parts.append((b"[" + rejected + b"]*" if rejected else b"") + b"[" + accepted + b"]")
    return re.compile(b"(?:" + b"".join(parts) + b"){%d}" % count, re.DOTALL)


_FULL = _pattern(_BLOCK)


class _CodeStream:
    """The generator's words as codes, read from a copy of its state (`randint` over all 32-bit values gives
    the words themselves, one each)."""

    def __init__(self, rng: np.random.RandomState) -> None:
        self._copy = np.random.RandomState()
        self._copy.set_state(rng.get_state())
        self.codes = b""

    def extend(self, words: int) -> None:
        """Read `words` more words (at most `_WINDOW` at a time)."""
        fresh = self._copy.randint(0, 1 << 32, size=min(words, _WINDOW), dtype=np.uint32)
        octets = fresh.astype("<u4", copy=False).view(np.uint8).reshape(-1, 4)  # little-endian bytes
        self.codes += ((octets[:, 0] & 15) | ((octets[:, 3] >> 7) << 4)).tobytes()


def _block_starts(stream: _CodeStream, count: int) -> np.ndarray:
    """Word position of every `_BLOCK`-th augmentation (0, _BLOCK, ...) and of the end of the last one."""
    starts, pos = [], 0
    blocks, rest = divmod(count, _BLOCK)
    sizes = [_BLOCK] * blocks + ([rest] if rest else [])
    last = _pattern(rest) if rest else _FULL
    for k, size in enumerate(sizes):
        pattern = last if k == len(sizes) - 1 else _FULL
        starts.append(pos)
        while (m := pattern.match(stream.codes, pos)) is None or m.end() == len(stream.codes):
            stream.extend(
                _WORDS_PER_AUG * (count - k * _BLOCK) + 4096
            )  # ran out of words (a match ending at the very end might need more rejections)
        pos = m.end()
        del size
    starts.append(pos)
    return np.array(starts, dtype=np.int64)


def _consume(rng: np.random.RandomState, words: int) -> None:
    """Advance `rng` past `words` words, as upstream's calls did (its bit generator skips them unconverted)."""
    bitgen = np.random.MT19937()
    bitgen.state = {"bit_generator": "MT19937", "state": rng.get_state(legacy=False)["state"]}
    for start in range(0, words, _WINDOW):  # in windows: bounded memory
        bitgen.random_raw(min(_WINDOW, words - start))
    state = bitgen.state["state"]
    _, _, _, has_gauss, gauss = rng.get_state()
    rng.set_state(("MT19937", state["key"], state["pos"], has_gauss, gauss))


def draw_shuffles(rng: np.random.RandomState, count: int) -> dict[str, np.ndarray]:
    """`count` augmentations as upstream draws them from `rng`, which is advanced past them: digit maps
    uint8 [count, 10] (blank 0 fixed), transpose flags bool [count], row and column permutations [count, 9]."""
    blocks = -(-count // _BLOCK)
    values = np.zeros((len(_SCHEDULE), _BLOCK, blocks), dtype=np.uint8)  # [draw, step, block]
    if count:
        stream = _CodeStream(rng)
        starts = _block_starts(stream, count)
        codes = np.frombuffer(stream.codes, dtype=np.uint8)
        # (codes accepted, or None when every code is; mask) per draw
        rules = [(None if mask == largest else _accepts(mask, largest), mask) for mask, largest in _SCHEDULE]
        p = starts[:-1].copy()
        for step in range(_BLOCK):  # every block walks its augmentations in parallel
            if step == count - (blocks - 1) * _BLOCK:
                p = p[:-1]  # the last block is shorter
            for d, (ok_codes, mask) in enumerate(rules):
                at = codes[p]
                if ok_codes is not None:
                    bad = np.flatnonzero(~ok_codes[at])
                    if len(bad):  # rejected words: step on
                        while len(bad):
                            p[bad] += 1
                            bad = bad[~ok_codes[codes[p[bad]]]]
                        at = codes[p]
                values[d, step, : len(p)] = at & mask if d != _COIN_DRAW else at >> 4
                p += 1
        _consume(rng, int(starts[-1]))
    drawn = values.transpose(0, 2, 1).reshape(len(_SCHEDULE), blocks * _BLOCK)[:, :count]
    return _permutations(drawn, count)


def _three_orders() -> np.ndarray:
    """uint8 [3, 2, 3]: `shuffle` of [0, 1, 2] after its draws j2 in [0, 2] (swap items 2, j2), then j1 in
    [0, 1] (swap items 1, j1)."""
    out = np.zeros((3, 2, 3), dtype=np.uint8)
    for j2 in range(3):
        for j1 in range(2):
            order = [0, 1, 2]
            order[2], order[j2] = order[j2], order[2]
            order[1], order[j1] = order[j1], order[1]
            out[j2, j1] = order
    return out


_THREE_ORDERS = _three_orders()


def _permutations(drawn: np.ndarray, count: int) -> dict[str, np.ndarray]:
    """The shuffles' results from their draws ([draw, augmentation]; `shuffle` swaps item i with item j for
    i = n-1..1)."""
    digits = np.tile(np.arange(1, 10, dtype=np.uint8)[:, None], (1, count))  # [position, augmentation]
    for k, i in enumerate(range(8, 0, -1)):
        j = drawn[k].astype(np.intp)[None]
        held = digits[i].copy()
        digits[i] = np.take_along_axis(digits, j, axis=0)[0]
        np.put_along_axis(digits, j, held[None], axis=0)
    base = len(_DIGITS) + len(_COIN)
    perms = _THREE_ORDERS[drawn[base::2], drawn[base + 1 :: 2]]  # [8, count, 3]: bands, rows x3, stacks, ...
    digit_maps = np.zeros((count, 10), dtype=np.uint8)
    digit_maps[:, 1:] = digits.T
    rows = (perms[0, :, :, None] * 3 + perms[1:4].transpose(1, 0, 2)).reshape(count, 9)
    cols = (perms[4, :, :, None] * 3 + perms[5:8].transpose(1, 0, 2)).reshape(count, 9)
    return {"digit_maps": digit_maps, "transpose": drawn[_COIN_DRAW] == 0, "rows": rows, "cols": cols}
