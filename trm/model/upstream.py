"""Loading the reference implementations' weight files: key mapping and puzzle-embedding resize.

The references' `step_N` files hold the state dict of their loss head: keys `model.inner.…`, prefixed
with `_orig_mod.` when the run used torch.compile. Ours are the keys of our ACT model (`inner.…`). Each
architecture's spec (trm.model.registry) holds its table of names; `convert_upstream_state_dict` recognises
which one a file uses.
"""

from __future__ import annotations

import re

import torch

from trm.errors import TRMError
from trm.model.registry import ARCHS

COMPILE_PREFIX = "_orig_mod."
UPSTREAM_PREFIX = "model.inner."
OURS_PREFIX = "inner."
PUZZLE_EMB_KEY = "inner.puzzle_emb.weight"

# Per architecture, from its registry spec: the latents' starting values (buffers), also how a reference file
# is recognised, and every (reference suffix after `model.inner.`, our suffix after `inner.`); `{i}` is a block.
INIT_BUFFERS = {name: spec.init_buffers for name, spec in ARCHS.items()}
KEY_PAIRS = {name: spec.reference_keys for name, spec in ARCHS.items()}


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)") + r"\Z")


_TO_OURS = {arch: [(_pattern(up), ours) for up, ours in pairs] for arch, pairs in KEY_PAIRS.items()}
_TO_UPSTREAM = {arch: [(_pattern(ours), up) for up, ours in pairs] for arch, pairs in KEY_PAIRS.items()}


def _map_suffix(suffix: str, table: list[tuple[re.Pattern[str], str]]) -> str | None:
    for pattern, target in table:
        match = pattern.match(suffix)
        if match:
            return target.replace("{i}", match.groupdict().get("i") or "")
    return None


def _maps_all(names: list[str], arch: str) -> bool:
    return all(
        n.startswith(UPSTREAM_PREFIX) and _map_suffix(n.removeprefix(UPSTREAM_PREFIX), _TO_OURS[arch])
        for n in names
    )


def detect_arch(state_dict: dict[str, torch.Tensor]) -> str:
    """Which architecture's names a reference state dict uses: the one whose names cover every key and
    whose latent buffers are all there ("trm" when nothing decides, e.g. a dict of gradients only)."""
    names = [k.removeprefix(COMPILE_PREFIX) for k in state_dict]
    present = {n.removeprefix(UPSTREAM_PREFIX) for n in names}
    fits = [arch for arch in KEY_PAIRS if _maps_all(names, arch)]
    complete = [arch for arch in fits if set(INIT_BUFFERS[arch]) <= present]
    return (complete or fits or ["trm"])[0]


def convert_upstream_state_dict(
    state_dict: dict[str, torch.Tensor], arch: str | None = None
) -> dict[str, torch.Tensor]:
    """Map a reference state dict (with or without `_orig_mod.`) to our keys; `arch` None = detect it."""
    arch = arch or detect_arch(state_dict)
    converted: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        name = key.removeprefix(COMPILE_PREFIX)
        ours = (
            _map_suffix(name.removeprefix(UPSTREAM_PREFIX), _TO_OURS[arch])
            if name.startswith(UPSTREAM_PREFIX)
            else None
        )
        if ours is None:
            raise TRMError(
                f"reference checkpoint key {key!r} is not an arch={arch} weight this loader knows: pass a "
                "step_N file written by the reference trainer (keys `[_orig_mod.]model.inner.…`)."
            )
        converted[OURS_PREFIX + ours] = value
    return converted


def to_upstream_state_dict(
    state_dict: dict[str, torch.Tensor], compiled: bool = True, arch: str = "trm"
) -> dict[str, torch.Tensor]:
    """Inverse of `convert_upstream_state_dict`: our keys → the reference's (`_orig_mod.` if compiled)."""
    prefix = (COMPILE_PREFIX if compiled else "") + UPSTREAM_PREFIX
    result: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        upstream = (
            _map_suffix(key.removeprefix(OURS_PREFIX), _TO_UPSTREAM[arch])
            if key.startswith(OURS_PREFIX)
            else None
        )
        if upstream is None:
            raise TRMError(
                f"state-dict key {key!r} has no arch={arch} reference name: pass our model's state dict."
            )
        result[prefix + upstream] = value
    return result


def resize_puzzle_embedding(
    state_dict: dict[str, torch.Tensor], num_identifiers: int
) -> dict[str, torch.Tensor]:
    """If the puzzle table's row count differs from `num_identifiers`, replace it by its mean row, broadcast.

    Works on our keys (optionally prefixed, e.g. `model.` of the loss head); returns a new dict.
    """
    result = dict(state_dict)
    for key, table in state_dict.items():
        if key.endswith(PUZZLE_EMB_KEY) and table.shape[0] != num_identifiers:
            mean = table.float().mean(dim=0, keepdim=True).to(table.dtype)
            result[key] = mean.expand(num_identifiers, -1).clone()
    return result
