"""Matching GPU model names (nvidia-smi's and torch's `NVIDIA H100 80GB HBM3`) against short keys.

A key matches whole words of the device name, case-insensitively: "A10" is not the A100 or the A10G, "L4"
not the L40S, "B200" not the GB200. The hardware table's tiers and the MFU peak table both match this way.
"""

from __future__ import annotations

import re
from functools import cache


@cache
def name_pattern(key: str) -> re.Pattern[str]:
    """`key` as whole words of a device name."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", re.IGNORECASE)


def names_model(key: str, device_name: str) -> bool:
    """Whether `key` occurs as whole words in `device_name`."""
    return name_pattern(key).search(device_name) is not None
