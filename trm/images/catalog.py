"""GPU image variants: generated from docker/images.toml by `python -m tools.images docs`; do not edit.

FAMILIES (trm.images.families.Family, newest first): family (= lock group), CUDA release, torch,
oldest driver branch, AdamATan2 backend its images ship.
VARIANTS: variant, CUDA release, oldest driver CUDA it runs on (minor-version compatibility),
oldest driver version, compute capabilities, tag, family.
Preflight (inside images) and the host bootstrap read it.
"""

FAMILIES = (
    ("cu130", "13.0", "2.13.0", 580, "ext"),
    ("cu128", "12.8", "2.10.0", 525, "torch"),
)

VARIANTS = (
    ("sm90", "13.0", "13.0", "580.65.06", ("9.0",), "trm:0.1.0-cu130-sm90", "cu130"),
    ("sm80", "13.0", "13.0", "580.65.06", ("8.0",), "trm:0.1.0-cu130-sm80", "cu130"),
    ("sm89", "13.0", "13.0", "580.65.06", ("8.9",), "trm:0.1.0-cu130-sm89", "cu130"),
    ("sm100", "13.0", "13.0", "580.65.06", ("10.0",), "trm:0.1.0-cu130-sm100", "cu130"),
    ("sm120", "13.0", "13.0", "580.65.06", ("12.0",), "trm:0.1.0-cu130-sm120", "cu130"),
    ("sm90-cu128", "12.8", "12.0", "525.60.13", ("9.0",), "trm:0.1.0-cu128-sm90", "cu128"),
    ("sm80-cu128", "12.8", "12.0", "525.60.13", ("8.0",), "trm:0.1.0-cu128-sm80", "cu128"),
    ("sm89-cu128", "12.8", "12.0", "525.60.13", ("8.9",), "trm:0.1.0-cu128-sm89", "cu128"),
    ("sm100-cu128", "12.8", "12.8", "570.26", ("10.0",), "trm:0.1.0-cu128-sm100", "cu128"),
    ("sm120-cu128", "12.8", "12.8", "570.26", ("12.0",), "trm:0.1.0-cu128-sm120", "cu128"),
)
