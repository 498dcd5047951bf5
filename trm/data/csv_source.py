"""Puzzle CSVs of the Sudoku-Extreme and Maze-Hard datasets: where they come from and how they are read.

Upstream's builders download `train.csv` / `test.csv` of a Hugging Face hub dataset repo and unpack each row
after the header as `source, question, answer, rating`. The same files are accepted from a local directory
(`--source-dir DIR`, or a directory path given as `--source-repo`), so air-gapped hosts and tests never touch
the network. Downloads need the optional `huggingface_hub` dependency (`pip install 'trm-stack[hub]'`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError
from trm.io import sha256_file

SPLIT_FILES = {"train": "train.csv", "test": "test.csv"}
COLUMNS = ("source", "question", "answer", "rating")


@dataclass(frozen=True)
class PuzzleRows:
    """The data rows of one CSV (header skipped), column by column; `path` names the file in errors."""

    path: Path
    questions: list[str]
    answers: list[str]
    ratings: list[str]

    def where(self, index: int) -> str:
        """`<file> row <n>` for the data row at `index` (row 1 is the header, as a spreadsheet counts)."""
        return f"{self.path} row {index + 2}"


def _hub_file(repo: str, filename: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise TRMError(
            f"downloading {filename} of the hub dataset {repo!r} needs huggingface_hub: "
            "`pip install 'trm-stack[hub]'`, or download the CSVs elsewhere and pass --source-dir DIR"
        ) from None
    try:
        return Path(hf_hub_download(repo, filename, repo_type="dataset", revision=revision))
    except Exception as err:  # offline host, unknown repo or file, proxy/auth problems: one message
        reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
        raise TRMError(
            f"could not download {filename} from the Hugging Face hub dataset {repo!r} ({reason}); check the "
            "repo name and that this host can reach huggingface.co (HF_ENDPOINT / proxy settings), or copy "
            f"train.csv and test.csv of {repo} to a directory and pass --source-dir DIR"
        ) from None


def resolve_split_file(
    split: str, *, source_repo: str, source_dir: str | Path | None, revision: str | None = None
) -> Path:
    """The local path of `<split>.csv`: from --source-dir, from --source-repo when it is a directory, else the hub."""
    filename = SPLIT_FILES[split]
    local = Path(source_dir) if source_dir is not None else None
    if local is None and Path(source_repo).is_dir():
        local = Path(source_repo)
    if local is None and (source_repo.startswith((".", "/", "~")) or source_repo.count("/") != 1):
        raise TRMError(
            f"--source-repo {source_repo}: no such directory, and not a hub dataset name (owner/name); pass "
            "a directory holding train.csv and test.csv, or a hub dataset such as sapientinc/sudoku-extreme"
        )
    if local is None:
        return _hub_file(source_repo, filename, revision)
    path = local / filename
    if not path.is_file():
        raise TRMError(
            f"{path}: not found; the source directory must hold train.csv and test.csv in the hub's layout "
            f"(header then rows of {', '.join(COLUMNS)})"
        )
    return path


def read_rows(path: Path) -> PuzzleRows:
    """Read a puzzle CSV: a header row, then rows of exactly the four columns source, question, answer, rating."""
    questions: list[str] = []
    answers: list[str] = []
    ratings: list[str] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None or len(header) != len(COLUMNS):
                raise TRMError(
                    f"{path} row 1: header {header!r} does not have the {len(COLUMNS)} columns "
                    f"{', '.join(COLUMNS)}; use the CSVs of the hub dataset (or write them in its layout)"
                )
            for number, row in enumerate(reader, start=2):
                if len(row) != len(COLUMNS):
                    raise TRMError(
                        f"{path} row {number}: {len(row)} columns, expected {len(COLUMNS)} "
                        f"({', '.join(COLUMNS)}); fix or remove the row"
                    )
                questions.append(row[1])
                answers.append(row[2])
                ratings.append(row[3])
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TRMError(f"{path}: unreadable CSV ({err}); download it again or fix the file") from None
    return PuzzleRows(path, questions, answers, ratings)


def input_checksums(paths: dict[str, Path]) -> dict[str, str]:
    """{file name: sha256} of the CSVs a dataset was built from (recorded in its manifest)."""
    return {SPLIT_FILES[split]: sha256_file(path) for split, path in paths.items()}
