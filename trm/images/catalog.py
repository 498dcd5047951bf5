"""GPU image variants: generated from docker/images.toml by `python -m trm image docs`; do not edit.

Each entry: variant, CUDA release, oldest driver CUDA it runs on (minor-version compatibility),
oldest driver version, compute capabilities, tag. Preflight reads it inside images.
"""

VARIANTS = (
    ("sm90", "13.0", "13.0", "580.65.06", ("9.0",), "trm:0.1.0-cu130-sm90"),
    ("sm80", "13.0", "13.0", "580.65.06", ("8.0",), "trm:0.1.0-cu130-sm80"),
    ("sm89", "13.0", "13.0", "580.65.06", ("8.9",), "trm:0.1.0-cu130-sm89"),
)
