"""A stand-in for PuzzleLoader with the same interface (no dataset on disk), for in-process trainer tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class FakeMetadata:
    seq_len: int = 16
    vocab_size: int = 12
    num_puzzle_identifiers: int = 9
    blank_identifier_id: int = 0
    pad_id: int = 0
    ignore_label_id: int = -100
    total_groups: int = 8
    mean_puzzle_examples: float = 1.0
    sets: list[str] = field(default_factory=lambda: ["all"])


class FakeLoader:
    """Deterministic random token batches; a pass has `total_groups * epochs_per_iter / gbs` batches."""

    def __init__(
        self,
        split: str,
        *,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epochs_per_iter: int = 1,
        metadata: FakeMetadata | None = None,
    ) -> None:
        self.split = split
        self.metadata = metadata or FakeMetadata()
        self.gbs, self.rank, self.world = global_batch_size, rank, world_size
        self.seed, self.epochs_per_iter = seed, epochs_per_iter
        self.fingerprint = "fake-fingerprint"
        self.identifiers = ["<blank>"] + [f"task{i}" for i in range(1, self.metadata.num_puzzle_identifiers)]
        self.test_puzzles: dict[str, Any] = {}
        self._pass, self._pos = 0, 0

    def _global_batch(self, pass_id: int, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, pass_id, index])
        m = self.metadata
        inputs = rng.integers(2, m.vocab_size, (self.gbs, m.seq_len))
        labels = np.where(rng.random((self.gbs, m.seq_len)) < 0.2, -100, (inputs + 1) % m.vocab_size)
        labels = np.where(labels < 2, 2, labels)
        labels = np.where(rng.random((self.gbs, m.seq_len)) < 0.2, -100, labels)
        ids = rng.integers(1, m.num_puzzle_identifiers, (self.gbs,))
        return {
            "inputs": torch.tensor(inputs, dtype=torch.int32),
            "labels": torch.tensor(labels, dtype=torch.int32),
            "puzzle_identifiers": torch.tensor(ids, dtype=torch.int32),
        }

    def _local(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        n = self.gbs // self.world
        return {k: v[self.rank * n : (self.rank + 1) * n].clone() for k, v in batch.items()}

    def batches_per_pass(self) -> int:
        m = self.metadata
        return int(m.total_groups * m.mean_puzzle_examples * self.epochs_per_iter // self.gbs)

    def iter_train(self):
        while self._pos < self.batches_per_pass():
            batch = self._global_batch(self._pass, self._pos)
            self._pos += 1
            yield "all", self._local(batch), self.gbs
        self._pass, self._pos = self._pass + 1, 0

    def iter_test(self):
        for index in range(2):
            yield "all", self._local(self._global_batch(10_000, index)), self.gbs

    def state_dict(self) -> dict[str, int]:
        return {"pass": self._pass, "pos": self._pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._pass, self._pos = state["pass"], state["pos"]
