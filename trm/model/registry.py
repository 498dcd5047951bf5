"""The architecture registry: `arch=<name>` → its schema, model config and model class.

Each architecture declares its keys once (a `*Fields` dataclass with field docstrings): the command-line
schema (`*Arch`: adds `name`, `loss` and the trainer's defaults) and the model config (`*Config`: adds the
dataset sizes) both derive from it. Training, checkpoints, `load_checkpoint=`, packaging, inference and
evaluation go through `get_spec` / `model_config` / `build_model`. Importing this module imports no torch:
the model classes are loaded when first used.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from typing import Any

from trm.errors import TRMError
from trm.model.schema import HRMArch, TransformerBaselineArch, TRMArch, TRMHier6Arch, TRMSingleZArch, URMArch

# Schema keys that are not model settings.
NON_MODEL_KEYS = ("name", "loss")


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: its names, schema, model config and model class, and where its numbers come from."""

    name: str
    """The `arch=<name>` option."""
    model_id: str
    """The reference's class path, the default of `arch.name`."""
    schema: type
    """The `arch.*` schema (Hydra structured config)."""
    config_ref: str
    """`module:Class` of the model config (schema keys plus dataset sizes)."""
    model_ref: str
    """`module:Class` of the ACT model, built from a config."""
    reference: str
    """The reference implementation and config this one is faithful to."""

    @property
    def config(self) -> type:
        """The model config class."""
        return _load(self.config_ref)

    @property
    def model(self) -> type:
        """The ACT model class."""
        return _load(self.model_ref)


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


ARCHS: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        ArchSpec(
            name="trm",
            model_id="recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMArch,
            config_ref="trm.model.config:TRMConfig",
            model_ref="trm.model.act:TinyRecursiveModel",
            reference="TinyRecursiveModels config/arch/trm.yaml, models/recursive_reasoning/trm.py",
        ),
        ArchSpec(
            name="trm_singlez",
            model_id="recursive_reasoning.trm_singlez@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMSingleZArch,
            config_ref="trm.model.trm_variants:TRMSingleZConfig",
            model_ref="trm.model.trm_variants:TRMSingleZModel",
            reference="TinyRecursiveModels config/arch/trm_singlez.yaml, models/recursive_reasoning/trm_singlez.py",
        ),
        ArchSpec(
            name="trm_hier6",
            model_id="recursive_reasoning.trm_hier6@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMHier6Arch,
            config_ref="trm.model.trm_variants:TRMHier6Config",
            model_ref="trm.model.trm_variants:TRMHier6Model",
            reference="TinyRecursiveModels config/arch/trm_hier6.yaml, models/recursive_reasoning/trm_hier6.py",
        ),
        ArchSpec(
            name="hrm",
            model_id="recursive_reasoning.hrm@HierarchicalReasoningModel_ACTV1",
            schema=HRMArch,
            config_ref="trm.model.trm_variants:HRMConfig",
            model_ref="trm.model.trm_variants:HRMModel",
            reference="TinyRecursiveModels config/arch/hrm.yaml, models/recursive_reasoning/hrm.py",
        ),
        ArchSpec(
            name="transformers_baseline",
            model_id="recursive_reasoning.transformers_baseline@Model_ACTV2",
            schema=TransformerBaselineArch,
            config_ref="trm.model.trm_variants:TransformerBaselineConfig",
            model_ref="trm.model.trm_variants:TransformerBaselineModel",
            reference="TinyRecursiveModels config/arch/transformers_baseline.yaml, "
            "models/recursive_reasoning/transformers_baseline.py",
        ),
        ArchSpec(
            name="urm",
            model_id="urm.urm@URM",
            schema=URMArch,
            config_ref="trm.model.urm:URMConfig",
            model_ref="trm.model.urm:UniversalReasoningModel",
            reference="URM (arXiv 2512.14693) config/arch/urm.yaml, models/urm/urm.py",
        ),
    )
}


def get_spec(name: str) -> ArchSpec:
    """The spec for `arch=<name>` or a reference class path (`arch.name`); unknown names name the closest."""
    for spec in ARCHS.values():
        if name in (spec.name, spec.model_id):
            return spec
    choices = [*ARCHS, *(s.model_id for s in ARCHS.values())]
    match = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    hint = f" Did you mean '{match[0]}'?" if match else ""
    raise TRMError(f"unknown architecture {name!r}: use arch=<one of {', '.join(ARCHS)}>.{hint}")


def spec_of(arch: Any) -> ArchSpec:
    """The spec of a schema or model-config object."""
    for spec in ARCHS.values():  # exact types: the TRM ablations subclass TRM's classes
        if type(arch) is spec.schema:
            return spec
    for spec in ARCHS.values():
        if type(arch).__name__ == spec.config_ref.rpartition(":")[2] and type(arch) is spec.config:
            return spec
    raise TRMError(f"{type(arch).__name__} is not a registered architecture config.")


def model_config(
    arch: Any,
    *,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    num_puzzle_identifiers: int,
    forward_dtype: str | None = None,
) -> Any:
    """The model config of a schema object plus the dataset sizes (forward_dtype replaces `auto`)."""
    spec = spec_of(arch)
    values = {k: v for k, v in dataclasses.asdict(arch).items() if k not in NON_MODEL_KEYS}
    if forward_dtype is not None:
        values["forward_dtype"] = forward_dtype
    return spec.config(
        batch_size=batch_size,
        seq_len=seq_len,
        vocab_size=vocab_size,
        num_puzzle_identifiers=num_puzzle_identifiers,
        **values,
    )


def build_model(config: Any) -> Any:
    """The ACT model for a model config."""
    return spec_of(config).model(config)
