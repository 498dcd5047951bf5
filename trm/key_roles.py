"""Each config key's role, carried in its dataclass field's metadata.

A trainer key (trm.training.config) or architecture key (trm.model.schema) without a role defines the
training math: it is in the config hash (the default run name) and is compared on resume (a changed
architecture key is refused, another changed key warned about). A role says otherwise:

- `RUN_ONLY`: changes neither the math nor the data (logging, checkpoint cadence, the device); out of the
  hash and the resume checks. A section field (`checkpoint`) with it leaves out the whole section.
- `LATER`: added after runs were named by their config hash; out of the hash while at its default, so
  existing runs keep their names.
- `EVAL_ONLY` (architecture keys): changes only evaluation; out of the hash, may change on resume.
- `RESUMABLE` (architecture keys): numerics or naming only, no shape or semantics change; may differ on
  resume (still hashed).

`renamed_from` records a key's old flat spelling (`checkpoint_every_minutes` for `checkpoint.every_minutes`),
still accepted on the command line and in stored configs. trm.training.config derives its key sets from
these (RUN_ONLY_KEYS, LATER_KEYS, ARCH_EVAL_ONLY_KEYS, ARCH_RESUMABLE_KEYS, RENAMED_KEYS), and
docs/training.md's key table is generated from them (`python -m trm.train --write-keys-doc`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

ROLE = "trm.role"
RENAMED_FROM = "trm.renamed_from"
RUN_ONLY = "run-only"
LATER = "later"
EVAL_ONLY = "eval-only"
RESUMABLE = "resumable"
ROLES = (RUN_ONLY, LATER, EVAL_ONLY, RESUMABLE)


def keyed(
    role: str | None = None,
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    renamed_from: str | None = None,
) -> Any:
    """A dataclass field with `default` (or `default_factory`) whose metadata carries its role and old name."""
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown key role {role!r}; use one of {', '.join(ROLES)}")
    metadata = {ROLE: role} if role else {}
    if renamed_from:
        metadata[RENAMED_FROM] = renamed_from
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def role_of(field: dataclasses.Field[Any]) -> str | None:
    """The field's role (None: it defines the math)."""
    return field.metadata.get(ROLE)


def with_role(cls: type, role: str) -> list[str]:
    """The names of `cls`'s fields that have `role`, in declaration order."""
    return [f.name for f in dataclasses.fields(cls) if role_of(f) == role]
