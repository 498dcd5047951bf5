"""Puzzle CSVs of the Sudoku-Extreme and Maze-Hard datasets: where they come from and how they are read.

Upstream's builders download `train.csv` / `test.csv` of a Hugging Face hub dataset repo and unpack each row
after the header as `source, question, answer, rating`. The same files are accepted from a local directory
(`--source-dir DIR`, or a directory path given as `--source-repo`), so air-gapped hosts and tests never touch
the network. Downloads need the optional `huggingface_hub` dependency (the `hub` extra: `trm.extras`).
"""

from __future__ import annotations

import csv
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trm.errors import TRMError
from trm.extras import install_hint
from trm.io import sha256_file

SPLIT_FILES = {"train": "train.csv", "test": "test.csv"}
COLUMNS = ("source", "question", "answer", "rating")
_SCAN_CHUNK = 1 << 23  # bytes read per step of `scan` (below glibc's mmap threshold: buffers are reused)
_INT64 = np.iinfo(np.int64)
_NEWLINE, _RETURN, _COMMA = ord("\n"), ord("\r"), ord(",")


@dataclass(frozen=True)
class PuzzleRows:
    """Data rows of one CSV as fixed-width ASCII codes: `questions`/`answers` uint8 [n, width]; `rows` numbers
    them in the file (0 = the first row after the header), which `where` uses in errors."""

    path: Path
    rows: np.ndarray
    questions: np.ndarray
    answers: np.ndarray

    def where(self, index: int) -> str:
        """`<file> row <n>` for the row at `index` (row 1 is the header, as a spreadsheet counts)."""
        return f"{self.path} row {int(self.rows[index]) + 2}"


@dataclass(frozen=True)
class PuzzleCsv:
    """Where the fields of each data row of a puzzle CSV lie, from one streamed scan (`scan`).

    Question and answer are fixed-width fields (`width` characters; checked for every row by the scan), so a
    row's question starts at `question_at[i]` and its answer `width + 1` bytes later. Fields are read on
    demand (`take`), so a 1,000-row subsample of a 3.8M-row file reads 1,000 rows. `source` is the file, or
    the rows re-encoded in memory when the file needed the csv module (quoted fields).
    """

    path: Path
    width: int
    question_at: np.ndarray  # int64 [n]
    rating_at: np.ndarray  # int64 [n]
    rating_len: np.ndarray  # int64 [n]
    sha256: str
    source: bytes | None = None

    def __len__(self) -> int:
        return len(self.question_at)

    def _bytes(self) -> np.ndarray:
        if self.source is not None:
            return np.frombuffer(self.source, dtype=np.uint8)
        if not len(self):
            return np.zeros(0, dtype=np.uint8)
        return np.memmap(self.path, dtype=np.uint8, mode="r")  # only the pages of the rows read are loaded

    def take(self, indices: np.ndarray | None = None) -> PuzzleRows:
        """The rows at `indices` (all rows when None), in that order."""
        rows = np.arange(len(self)) if indices is None else np.asarray(indices, dtype=np.int64)
        data = self._bytes()
        if len(data) < self.width:
            return PuzzleRows(self.path, rows, *np.zeros((2, len(rows), self.width), dtype=np.uint8))
        fields = np.lib.stride_tricks.sliding_window_view(data, self.width)  # field starting at each byte
        at = self.question_at[rows]
        return PuzzleRows(self.path, rows, fields[at], fields[at + (self.width + 1)])

    def ratings(self) -> np.ndarray:
        """Every row's rating as int64; a rating that is not an integer raises naming its row."""
        data, n = self._bytes(), len(self)
        longest = int(self.rating_len.max()) if n else 0
        values = np.zeros(n, dtype=np.int64)
        ok = (self.rating_len > 0) & (self.rating_len <= 18)
        for k in range(min(longest, 18)):  # decimal digits, most significant first, vectorized
            has = ok & (self.rating_len > k)
            digit = data[self.rating_at[has] + k].astype(np.int64) - ord("0")
            ok[has] &= (digit >= 0) & (digit <= 9)
            values[has] = values[has] * 10 + np.clip(digit, 0, 9)
        for i in np.flatnonzero(~ok):  # signs, spaces, long numbers: Python's int(), as upstream parses them
            text = bytes(data[self.rating_at[i] : self.rating_at[i] + self.rating_len[i]]).decode(
                errors="replace"
            )
            try:
                values[i] = min(max(int(text), _INT64.min), _INT64.max)  # beyond int64: compares the same
            except ValueError:
                raise TRMError(
                    f"{self.path} row {i + 2}: rating {text!r} is not an integer, which --min-difficulty "
                    "needs; fix the row or leave out --min-difficulty"
                ) from None
        return values


def _hub_file(repo: str, filename: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise TRMError(
            f"downloading {filename} of the hub dataset {repo!r} needs huggingface_hub: {install_hint('hub')}; "
            "or download the CSVs elsewhere and pass --source-dir DIR"
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


def scan(path: Path, width: int, what: str = "") -> PuzzleCsv:
    """Scan a puzzle CSV once, streamed: a header, then rows of exactly the four columns source, question,
    answer, rating, question and answer `width` characters each (`what` describes them in errors). Checks
    every row's shape and hashes the file; fields are read later (`PuzzleCsv.take`, `ratings`).

    Rows are split at newlines and commas with numpy; a file with quoted fields goes through the csv module.
    """
    h = hashlib.sha256()
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    rows = 0
    try:
        # sha256 releases the GIL: one worker hashes each chunk (in order) while numpy splits it
        with open(path, "rb") as f, ThreadPoolExecutor(1) as hasher:
            header = f.readline()
            h.update(header)
            if b'"' in header:
                return _scan_quoted(path, width, what)
            _check_header(path, header.rstrip(b"\r\n").split(b",") if header.strip() else None)
            base, carry = len(header), b""
            while True:
                chunk = f.read(_SCAN_CHUNK)
                hasher.submit(h.update, chunk)
                if chunk:
                    block = carry + chunk
                    cut = block.rfind(b"\n") + 1
                    carry = block[cut:]
                else:  # the last row may lack its newline
                    block, carry = (carry + b"\n" if carry else b""), b""
                    cut = len(block)
                if cut:
                    if block.find(b'"', 0, cut) >= 0:
                        return _scan_quoted(path, width, what)
                    parts.append(_split_rows(path, memoryview(block)[:cut], base, rows, width, what))
                    rows += len(parts[-1][0])
                    base += cut
                if not chunk:
                    break
    except OSError as err:
        raise TRMError(f"{path}: unreadable CSV ({err}); download it again or fix the file") from None
    q_at, r_at, r_len = (
        np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64) for k in range(3)
    )
    return PuzzleCsv(path, width, q_at, r_at, r_len, h.hexdigest())


def _check_header(path: Path, header: list | None) -> None:
    if header is None or len(header) != len(COLUMNS):
        shown = (
            None
            if header is None
            else [c.decode(errors="replace") if isinstance(c, bytes) else c for c in header]
        )
        raise TRMError(
            f"{path} row 1: header {shown!r} does not have the {len(COLUMNS)} columns "
            f"{', '.join(COLUMNS)}; use the CSVs of the hub dataset (or write them in its layout)"
        )


def _split_rows(
    path: Path, block: memoryview, base: int, first_row: int, width: int, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(question offset, rating offset, rating length) of the whole lines in `block` (at file offset `base`).

    Fast path: the commas and newlines, in order, are exactly `,` `,` `,` `\\n` per row with question and
    answer `width` apart (one pass finds them all); anything else goes through `_commas`, which names the
    first row of the wrong shape."""
    buf = np.frombuffer(block, dtype=np.uint8)
    is_delim = buf == _NEWLINE
    is_delim |= buf == _COMMA
    delims = np.flatnonzero(is_delim)
    fields = None
    if len(delims) % 4 == 0:
        d = delims.reshape(-1, 4)
        c1, c2, c3, ends = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
        if (
            (buf[ends] == _NEWLINE).all()
            and (buf[d[:, :3]] == _COMMA).all()
            and (c2 - c1 == width + 1).all()
            and (c3 - c2 == width + 1).all()
        ):
            fields = (c1, c3)
    if fields is None:
        ends = np.flatnonzero(buf == _NEWLINE)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    stops = ends - ((ends > starts) & (buf[ends - 1] == _RETURN))  # a CRLF row ends before its \r
    if fields is None:
        fields = _commas(path, buf, starts, stops, first_row, width, what)
    c1, c3 = fields
    return base + c1 + 1, base + c3 + 1, stops - c3 - 1


def _commas(
    path: Path, buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, first_row: int, width: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(first comma, last comma) of every row from all commas of the block: raises naming the first row of the
    wrong shape."""
    commas = np.flatnonzero(buf == _COMMA)
    first = np.searchsorted(commas, starts)
    count = np.searchsorted(commas, stops) - first
    bad = np.flatnonzero(count != len(COLUMNS) - 1)
    if len(bad):
        i = int(bad[0])
        columns = 0 if stops[i] == starts[i] else int(count[i]) + 1
        raise TRMError(
            f"{path} row {first_row + i + 2}: {columns} columns, expected {len(COLUMNS)} "
            f"({', '.join(COLUMNS)}); fix or remove the row"
        )
    c1, c2, c3 = commas[first], commas[first + 1], commas[first + 2]
    for field, lo, length in (("question", c1 + 1, c2 - c1 - 1), ("answer", c2 + 1, c3 - c2 - 1)):
        bad = np.flatnonzero(length != width)
        if len(bad):
            i = int(bad[0])
            text = bytes(buf[lo[i] : lo[i] + length[i]]).decode(errors="replace")
            _wrong_width(path, first_row + i, field, text, width, what)
    return c1, c3


def _wrong_width(path: Path, row: int, field: str, text: str, width: int, what: str) -> None:
    if not text.isascii():
        raise TRMError(
            f"{path} row {row + 2}: the {field}{what} holds non-ASCII characters; fix or remove the row"
        )
    raise TRMError(
        f"{path} row {row + 2}: the {field}{what} has {len(text)} characters, expected {width}; fix or remove the row"
    )


def _scan_quoted(path: Path, width: int, what: str) -> PuzzleCsv:
    """`scan` for files with quoted fields: the csv module reads the rows, re-encoded in memory."""
    out = bytearray()
    q_at: list[int] = []
    r_at: list[int] = []
    r_len: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            _check_header(path, next(reader, None))
            for i, row in enumerate(reader):
                if len(row) != len(COLUMNS):
                    raise TRMError(
                        f"{path} row {i + 2}: {len(row)} columns, expected {len(COLUMNS)} "
                        f"({', '.join(COLUMNS)}); fix or remove the row"
                    )
                _, question, answer, rating = row
                for field, text in (("question", question), ("answer", answer)):
                    if len(text) != width or not text.isascii():
                        _wrong_width(path, i, field, text, width, what)
                rating_bytes = rating.encode()
                q_at.append(len(out))
                r_at.append(len(out) + 2 * width + 2)
                r_len.append(len(rating_bytes))
                out += f"{question},{answer},".encode() + rating_bytes + b"\n"
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TRMError(f"{path}: unreadable CSV ({err}); download it again or fix the file") from None
    arrays = (np.array(x, dtype=np.int64) for x in (q_at, r_at, r_len))
    return PuzzleCsv(path, width, *arrays, sha256=sha256_file(path), source=bytes(out))


def input_checksums(scans: dict[str, PuzzleCsv]) -> dict[str, str]:
    """{file name: sha256} of the CSVs a dataset was built from (recorded in its manifest)."""
    return {SPLIT_FILES[split]: table.sha256 for split, table in scans.items()}
