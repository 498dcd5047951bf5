"""The resume part: the optimizer backend read from the training log."""

from __future__ import annotations

from tools.gpu.check import resume


def test_the_optimizer_backend_is_read_from_the_training_log() -> None:
    log = "INFO trm.optim: AdamATan2 backend: torch (the adam_atan2 extension does not import; …)\nstep 3"
    assert resume.optimizer_backend(log) == "torch"
    assert resume.optimizer_backend("AdamATan2 backend: ext (compiled adam_atan2 extension)") == "ext"
    assert resume.optimizer_backend("no optimizer line") is None
