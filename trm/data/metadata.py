"""`dataset.json`: per-split metadata in upstream's schema, and merging across several dataset dirs."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.errors import TRMError


@dataclass
class DatasetMetadata:
    """Fields of a split's `dataset.json` (upstream's PuzzleDatasetMetadata)."""

    pad_id: int
    ignore_label_id: int | None
    blank_identifier_id: int
    vocab_size: int
    seq_len: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    total_puzzles: int
    sets: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for `dataset.json`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "dataset.json") -> DatasetMetadata:
        """Build from a parsed `dataset.json`, naming the file and the missing key on error."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise TRMError(
                f"{where}: missing keys {missing}; rebuild the dataset with `python -m trm data build-arc`"
            )
        return cls(**{n: data[n] for n in names})

    @classmethod
    def read(cls, path: str | Path) -> DatasetMetadata:
        """Read a `dataset.json` file."""
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, json.JSONDecodeError) as err:
            raise TRMError(
                f"{path}: unreadable ({err}); rebuild the dataset with `python -m trm data build-arc`"
            ) from None


_MUST_MATCH = ("pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len")


def merge_metadata(items: list[tuple[str, DatasetMetadata]]) -> DatasetMetadata:
    """Merge the metadata of several data paths: counts summed, mean weighted, set names `all`, `all1`, …."""
    first_path, first = items[0]
    for path, other in items[1:]:
        for key in _MUST_MATCH:
            if getattr(other, key) != getattr(first, key):
                raise TRMError(
                    f"{path}: {key}={getattr(other, key)!r} differs from {first_path} ({getattr(first, key)!r}); "
                    "only datasets with the same encoding can be combined in data_paths"
                )
    total_puzzles = sum(m.total_puzzles for _, m in items)
    examples = sum(m.mean_puzzle_examples * m.total_puzzles for _, m in items)
    return dataclasses.replace(
        first,
        num_puzzle_identifiers=sum(m.num_puzzle_identifiers for _, m in items),
        total_groups=sum(m.total_groups for _, m in items),
        total_puzzles=total_puzzles,
        mean_puzzle_examples=examples / total_puzzles if total_puzzles else 0.0,
        sets=[f"all{i}" if i else "all" for i in range(len(items))],
    )
