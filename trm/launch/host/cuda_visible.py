"""Which of nvidia-smi's GPUs a CUDA process sees: `CUDA_VISIBLE_DEVICES`, read as CUDA reads it.

nvidia-smi (NVML) ignores `CUDA_VISIBLE_DEVICES`; CUDA, and so torch, sees only the devices it lists, in
its order, numbered from 0. Whatever plans from nvidia-smi's list (preflight, the launcher's layout,
`select-config`, batches) must apply it, or it counts GPUs torch cannot see and plans ranks that fail
with "invalid device ordinal".

CUDA's rules (CUDA C++ Programming Guide, "CUDA Environment Variables"; torch mirrors them in
`torch.cuda._parse_visible_devices` and `_transform_uuid_to_ordinals`):

- unset: every GPU. Set: a comma-separated list of GPU indices or of UUIDs as nvidia-smi prints them
  (`GPU-…`; a MIG slice's `MIG-…`), a UUID possibly shortened to a prefix that names one device; the
  devices are enumerated in the list's order.
- The list ends at its first invalid entry: `0,2,-1,1` is GPUs 0 and 2; so an empty value, `-1` or
  `NoDevFiles` (what Slurm sets for a job without GPUs) hides every GPU. A device listed twice hides all.

CUDA drops an entry it cannot read, and every entry after it, without a word; here such a value is an
error that names the entry, since a typo would otherwise train on fewer GPUs than meant, or on none. A
negative index is taken as CUDA documents it: the end of the list. Indices are nvidia-smi's numbering,
which is CUDA's under `CUDA_DEVICE_ORDER=PCI_BUS_ID` (the launcher and preflight set it) and on a host of
one GPU model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from trm.errors import TRMError

ENV = "CUDA_VISIBLE_DEVICES"
HIDE_ALL = "NoDevFiles"  # Slurm's value for a job without GPUs
_INDEX = re.compile(r"[+-]?\d+")
_UUID_PREFIXES = ("GPU-", "MIG-")

FIX = (
    "list GPU indices (0, 1, …) or UUIDs as `nvidia-smi -L` prints them (GPU-…, MIG-… for a MIG slice), "
    "comma-separated, each GPU once; or unset CUDA_VISIBLE_DEVICES to use every GPU"
)


class VisibleDevicesError(TRMError):
    """CUDA_VISIBLE_DEVICES names a device this host does not have, or is not a list CUDA reads whole."""


def _fail(value: str, why: str) -> VisibleDevicesError:
    return VisibleDevicesError(f"{ENV}={value!r}: {why}; {FIX}")


def entries(value: str) -> list[str]:
    """The device ids CUDA reads from a CUDA_VISIBLE_DEVICES value, whitespace-stripped and ending where
    CUDA's list ends (a negative index); [] when it hides every GPU.

    Raises VisibleDevicesError for an entry CUDA would stop at while more entries follow it (they would
    be dropped silently), and for a list that mixes indices, GPU UUIDs and MIG UUIDs."""
    items = [item.strip() for item in value.split(",")]
    if items[0] in ("", HIDE_ALL):
        return []
    out: list[str] = []
    for position, item in enumerate(items):
        if _INDEX.fullmatch(item) and int(item) < 0:
            break  # CUDA's documented end of the list
        if _INDEX.fullmatch(item):
            out.append(str(int(item)))
        elif item.startswith(_UUID_PREFIXES):
            out.append(item)
        elif not item and not any(items[position + 1 :]):
            break  # a trailing comma
        else:
            hint = (
                " (UUIDs keep their GPU- or MIG- prefix)" if re.fullmatch(r"[0-9a-fA-F-]{8,}", item) else ""
            )
            what = "an empty entry" if not item else f"entry {item!r}"
            raise _fail(
                value,
                f"{what} is neither a GPU index nor a GPU-/MIG- UUID{hint}; CUDA would ignore it and every "
                "entry after it",
            )
    kinds = {_kind(e) for e in out}
    if len(kinds) > 1:
        raise _fail(value, f"it mixes {' and '.join(sorted(kinds))}, which CUDA does not read as one list")
    return out


def _kind(entry: str) -> str:
    if entry.startswith("GPU-"):
        return "GPU UUIDs"
    if entry.startswith("MIG-"):
        return "MIG UUIDs"
    return "indices"


def pick(
    value: str,
    listed: Sequence[str],
    gpu_uuids: Sequence[str],
    mig_uuids: Mapping[int, Sequence[str]],
) -> list[tuple[int, str | None]]:
    """What the parsed `listed` entries of `value` select, in their order: (nvidia-smi index of the GPU,
    the MIG UUID for one slice or None for the GPU itself, i.e. all its slices when it is in MIG mode).

    Raises VisibleDevicesError for an index past the last GPU, a UUID (prefix) that names no device or
    several, and a device listed twice."""
    chosen: list[tuple[int, str | None]] = []
    n = len(gpu_uuids)
    for entry in listed:
        if entry.startswith("MIG-"):
            found = [(i, u) for i, slices in mig_uuids.items() for u in slices if u.startswith(entry)]
            what = "MIG slice"
        elif entry.startswith("GPU-"):
            found = [(i, None) for i, u in enumerate(gpu_uuids) if u.startswith(entry)]
            what = "GPU"
        else:
            if int(entry) >= n:
                raise _fail(value, f"GPU {entry} does not exist: nvidia-smi lists {n} GPU(s) (0-{n - 1})")
            found, what = [(int(entry), None)], "GPU"
        if not found:
            raise _fail(value, f"{entry!r} is the UUID of no {what} here (see `nvidia-smi -L`)")
        if len(found) > 1:
            raise _fail(value, f"{entry!r} is the start of {len(found)} {what} UUIDs; give more of it")
        if any(_overlap(found[0], earlier) for earlier in chosen):
            raise _fail(value, f"{entry!r} names a device listed before; CUDA then sees no GPU at all")
        chosen.append(found[0])
    return chosen


def _overlap(a: tuple[int, str | None], b: tuple[int, str | None]) -> bool:
    """Whether two selections share a device (a GPU and one of its slices do)."""
    return a[0] == b[0] and (a[1] is None or b[1] is None or a[1] == b[1])
