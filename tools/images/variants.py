"""Image variants from `docker/images.toml`: validated, with their tags and build arguments."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from trm.errors import TRMError
from trm.images.compat import arch_cuda_floor, cuda_major_minor, min_driver_for
from trm.images.families import Family

CONFIG_PATH = Path("docker/images.toml")
_DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")
_ARCH = re.compile(r"^\d+\.\d+$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class Variant:
    """One image variant: what it is built from and for which GPU architectures."""

    name: str
    description: str
    cuda: str
    lock: str
    archs: tuple[str, ...]
    extras: tuple[str, ...]
    build_base: str
    runtime_base: str
    # The package index this variant's torch comes from (PyTorch's CUDA-specific index, e.g.
    # https://download.pytorch.org/whl/cu126); empty: PyPI, whose torch is the default CUDA build.
    index: str = ""
    # The torch release the lock pins ([families.<lock>].torch; [image].torch for the CPU variant).
    torch: str = ""
    # The GPU family (its lock group) and the AdamATan2 backend its images ship ("ext"/"torch").
    family: Family | None = None

    @property
    def optimizer_backend(self) -> str:
        """ "ext" when the image bakes the compiled adam-atan2 extension, else "torch"."""
        return self.family.optimizer_backend if self.family else "torch"

    @property
    def is_gpu(self) -> bool:
        return bool(self.archs)

    @property
    def cuda_tag(self) -> str:
        """`cu130` for CUDA 13.0, `cpu` for the CPU variant."""
        return "cu" + self.cuda.replace(".", "") if self.cuda else "cpu"

    @property
    def sm_list(self) -> tuple[str, ...]:
        """`("sm_90",)` for archs `("9.0",)`."""
        return tuple("sm_" + arch.replace(".", "") for arch in self.archs)

    @property
    def driver_cuda_floor(self) -> str:
        """The oldest driver CUDA version that runs this image: `<major>.0` (CUDA minor-version
        compatibility: the images carry SASS for their GPUs, so no PTX needs the driver's JIT), raised to
        the first CUDA release of its GPUs (Blackwell: 12.8, whose driver is R570; trm.images.compat)."""
        if not self.cuda:
            return ""
        family_floor = f"{self.cuda.split('.')[0]}.0"
        arch_floor = arch_cuda_floor(self.archs)
        if arch_floor and cuda_major_minor(arch_floor) > cuda_major_minor(family_floor):
            return arch_floor
        return family_floor

    @property
    def min_driver(self) -> str:
        """The oldest driver version that runs this image (`""` for the CPU variant): e.g. 570.26."""
        return (min_driver_for(self.driver_cuda_floor) or "") if self.cuda else ""

    @property
    def container_env(self) -> dict[str, str]:
        """NVIDIA container toolkit variables baked into the runtime image (empty on the CPU variant)."""
        if not self.is_gpu:
            return {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": "", "NVIDIA_REQUIRE_CUDA": ""}
        return {
            "NVIDIA_VISIBLE_DEVICES": "all",
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
            "NVIDIA_REQUIRE_CUDA": f"cuda>={self.driver_cuda_floor}",
        }

    def torch_pin(self) -> str:
        """The torch version the lock pins: `2.13.0+cpu`, `2.13.0+cu126` (from a PyTorch index) or `2.13.0`."""
        if not self.is_gpu:
            return f"{self.torch}+cpu"
        return f"{self.torch}+{self.cuda_tag}" if self.index else self.torch

    def version_tag(self, version: str) -> str:
        """The human tag: `<version>-cu130-sm90`, or `<version>-cpu` (variant `sm90-cu126` → `-cu126-sm90`)."""
        if not self.is_gpu:
            return f"{version}-cpu"
        return f"{version}-{self.cuda_tag}-{self.name.removesuffix('-' + self.cuda_tag)}"

    def content_tag(self, content_hash: str) -> str:
        """The immutable tag: `<variant>-<first 12 hex of the build-input hash>`."""
        return f"{self.name}-{content_hash[:12]}"


@dataclass(frozen=True)
class ImageConfig:
    """The whole of `docker/images.toml`."""

    path: Path
    repository: str
    python: str
    torch: str
    adam_atan2: str
    max_layer_bytes: int
    smoke_command: tuple[str, ...]
    smoke_preflight_args: str
    variants: dict[str, Variant] = field(default_factory=dict)
    families: dict[str, Family] = field(default_factory=dict)

    def select(self, names: list[str] | None) -> list[Variant]:
        """The named variants in the given order (all, in file order, when `names` is empty)."""
        if not names:
            return list(self.variants.values())
        unknown = [n for n in names if n not in self.variants]
        if unknown:
            raise TRMError(
                f"unknown image variant {', '.join(map(repr, unknown))}: {self.path} defines "
                f"{', '.join(self.variants)}; pick from those (e.g. VARIANTS=cpu) or add a "
                "[variants.<name>] table there"
            )
        return [self.variants[n] for n in dict.fromkeys(names)]


def _require(table: dict, key: str, kind: type, where: str, path: Path):
    if key not in table:
        raise TRMError(f"{path}: {where} is missing the key '{key}'; add it (see the other variants)")
    value = table[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TRMError(f"{path}: {where}.{key} must be a {kind.__name__}, got {value!r}")
    return value


def _check_ref(ref: str, where: str, path: Path) -> str:
    if not _DIGEST_REF.match(ref):
        raise TRMError(
            f"{path}: {where} = {ref!r} is not pinned by digest; write it as name:tag@sha256:<64 hex> "
            "(find the digest with `docker buildx imagetools inspect name:tag`)"
        )
    return ref


def load_config(path: str | Path = CONFIG_PATH) -> ImageConfig:
    """Parse and validate the variants file; every problem names the file and key."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TRMError(f"{path} not found: run from the repository root or pass --config") from None
    except tomllib.TOMLDecodeError as err:
        raise TRMError(f"{path} is not valid TOML ({err}); fix the syntax") from None
    image = _require(raw, "image", dict, "the file", path)
    build_base = _check_ref(_require(image, "build_base", str, "[image]", path), "[image].build_base", path)
    runtime_base = _check_ref(
        _require(image, "runtime_base", str, "[image]", path), "[image].runtime_base", path
    )
    smoke_table = _require(raw, "smoke", dict, "the file", path)
    smoke = _require(smoke_table, "command", list, "[smoke]", path)
    if not smoke or not all(isinstance(part, str) for part in smoke):
        raise TRMError(f"{path}: [smoke].command must be a non-empty list of strings")
    config = ImageConfig(
        path=path,
        repository=_require(image, "repository", str, "[image]", path),
        python=_require(image, "python", str, "[image]", path),
        torch=_require(image, "torch", str, "[image]", path),
        adam_atan2=_require(image, "adam_atan2", str, "[image]", path),
        max_layer_bytes=_require(image, "max_layer_bytes", int, "[image]", path),
        smoke_command=tuple(smoke),
        smoke_preflight_args=_require(smoke_table, "preflight_args", str, "[smoke]", path),
    )
    for name, table in _require(raw, "families", dict, "the file", path).items():
        config.families[name] = _load_family(name, table, path)
    variants = _require(raw, "variants", dict, "the file", path)
    if not variants:
        raise TRMError(f"{path}: [variants] is empty; define at least one [variants.<name>] table")
    extras_by_lock: dict[str, tuple[str, ...]] = {}
    index_by_lock: dict[str, str] = {}
    for name, table in variants.items():
        where = f"[variants.{name}]"
        if not _NAME.match(name):
            raise TRMError(f"{path}: variant name {name!r} must be lower-case letters, digits and '-'")
        archs = tuple(_require(table, "archs", list, where, path))
        for arch in archs:
            if not isinstance(arch, str) or not _ARCH.match(arch):
                raise TRMError(f"{path}: {where}.archs has {arch!r}; write compute capabilities like '9.0'")
        lock = _require(table, "lock", str, where, path)
        if "cuda" in table:
            raise TRMError(
                f"{path}: {where}.cuda is no longer read: a GPU variant's CUDA is its family's "
                f"([families.{lock}].cuda); delete the key"
            )
        family = config.families.get(lock)
        if bool(family) != bool(archs):
            raise TRMError(
                f"{path}: {where} has lock={lock!r} and archs={list(archs)}; a GPU variant needs archs and a "
                f"lock naming a [families.<name>] table ({', '.join(config.families) or 'none defined'}), "
                "a CPU variant neither"
            )
        arch_floor = arch_cuda_floor(archs)
        if family and arch_floor and cuda_major_minor(family.cuda) < cuda_major_minor(arch_floor):
            raise TRMError(
                f"{path}: {where} builds for {list(archs)}, which CUDA {family.cuda} (lock {lock!r}) cannot "
                f"target: they need CUDA {arch_floor} or newer (trm.images.compat.FIRST_CUDA_FOR_ARCH); use a "
                "family of that CUDA release or newer"
            )
        extras = tuple(sorted(_require(table, "extras", list, where, path)))
        if extras_by_lock.setdefault(lock, extras) != extras:
            raise TRMError(
                f"{path}: {where}.extras {list(extras)} differ from another variant using lock '{lock}'; "
                "variants that share a lock must share extras (or give this one its own lock)"
            )
        index = table.get("index", "")
        if not isinstance(index, str) or (index and not re.match(r"^https://[^\s/]+/\S*$", index)):
            raise TRMError(
                f"{path}: {where}.index = {index!r} must be an https:// package index URL (or absent)"
            )
        if index and not archs:
            raise TRMError(
                f"{path}: {where}.index is for GPU variants (the CPU torch comes from PIP_FIND_LINKS)"
            )
        if index_by_lock.setdefault(lock, index) != index:
            raise TRMError(
                f"{path}: {where}.index {index!r} differs from another variant using lock '{lock}'; variants "
                "that share a lock resolve from the same index"
            )
        config.variants[name] = Variant(
            name=name,
            description=_require(table, "description", str, where, path),
            cuda=family.cuda if family else "",
            lock=lock,
            archs=archs,
            extras=extras,
            build_base=build_base if archs else runtime_base,
            runtime_base=runtime_base,
            index=index,
            torch=family.torch if family else config.torch,
            family=family,
        )
    return config


def _load_family(name: str, table: object, path: Path) -> Family:
    where = f"[families.{name}]"
    if not isinstance(table, dict):
        raise TRMError(f"{path}: {where} must be a table")
    cuda = _require(table, "cuda", str, where, path)
    if not re.match(r"^\d+\.\d+$", cuda):
        raise TRMError(f"{path}: {where}.cuda = {cuda!r}; write the CUDA release like '12.8'")
    min_driver = _require(table, "min_driver", int, where, path)
    if not 400 <= min_driver < 10_000:
        raise TRMError(f"{path}: {where}.min_driver = {min_driver}; write the driver branch, e.g. 525")
    backend = _require(table, "optimizer_backend", str, where, path)
    if backend not in ("ext", "torch"):
        raise TRMError(f"{path}: {where}.optimizer_backend = {backend!r}; use 'ext' or 'torch'")
    return Family(name, cuda, _require(table, "torch", str, where, path), min_driver, backend)
