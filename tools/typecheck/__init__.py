"""Type check with a ratchet: mypy over trm/ and tools/ (its settings: pyproject.toml [tool.mypy]), where no
file may have more errors than tools/typecheck/baseline.json records for it.

    python -m tools.typecheck            # check (part of `make lint`)
    python -m tools.typecheck --update   # record lower counts after fixing errors (never higher ones)
    python -m tools.typecheck --record-all   # every count, higher ones too (start; accepted by review)

Exit codes: 0 no file has more errors than its baseline and the baseline is current; 1 a file gained errors
(they are printed) or fixed ones are not yet recorded (`--update` records them); 2 mypy could not run (its
message is printed) or the baseline file is unreadable.
"""
