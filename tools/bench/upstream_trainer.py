"""Run upstream's `pretrain.py` for the trainer benchmark, on CPU as well as CUDA; nothing is changed on disk.

    python -m tools.bench.upstream_trainer [--device cpu|cuda] [--metrics FILE.jsonl] <checkout> [overrides ...]

Upstream hard-codes CUDA and imports the adam-atan2 CUDA extension. Two changes let it run on CPU; with `--device cpu` (the default) this applies those changes in memory, to the script's
source text, and then runs it as `__main__` in one process (no torchrun, so no process group):

- device switch: every "cuda" device string and `.cuda()` call becomes CPU; NCCL becomes gloo;
- optimizer: `adam_atan2.AdamATan2` is ours, which has the same 0.0.3 update rule and constructor.

`--metrics PATH` records every `wandb.log` call (after `wandb.init`, also when W&B is disabled) as one JSON
line `{"step": N, name: value, ...}` in PATH: the curve harness (tools.bench.curves) reads upstream's
learning curves from it.

With `--device cuda` the script runs unchanged; only when the extension does not import does ours stand
in. The evaluator's cross-process gather is not patched: benchmark with `evaluators=[]`. Every replacement
must match at least once, so a changed upstream fails here with the pattern named instead of silently
running on a GPU path.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from trm.errors import TRMError

# (pattern, replacement) applied to pretrain.py's source, in order.
DEVICE_SWITCH = (
    ('torch.device("cuda")', 'torch.device("cpu")'),
    ('map_location="cuda"', 'map_location="cpu"'),
    ('device="cuda"', 'device="cpu"'),
    (".cuda()", ".cpu()"),
    ('backend="nccl"', 'backend="gloo"'),
    ('torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))', "pass"),
)


def patched_source(source: str, script: Path) -> str:
    """pretrain.py's source with the device switch applied; a pattern that no longer occurs is an error."""
    for pattern, replacement in DEVICE_SWITCH:
        if pattern not in source:
            raise TRMError(
                f"{script}: expected `{pattern}` in upstream's trainer and found none; this upstream "
                "revision needs an updated tools.bench.upstream_trainer.DEVICE_SWITCH"
            )
        source = source.replace(pattern, replacement)
    return source


def install_optimizer_shim() -> None:
    """Make `from adam_atan2 import AdamATan2` resolve to our implementation of the same rule."""
    from trm.optim import AdamATan2

    module = types.ModuleType("adam_atan2")
    module.AdamATan2 = AdamATan2  # type: ignore[attr-defined]
    sys.modules["adam_atan2"] = module


def install_tracking_stub() -> None:
    """Stand in for wandb where it does not import (the GPU kit leaves it out): the benches run upstream with
    tracking off anyway. `run` stays None, so upstream skips copying its code and config to the run."""
    module = types.ModuleType("wandb")
    module.run = None  # type: ignore[attr-defined]
    module.Settings = lambda **kwargs: kwargs  # type: ignore[attr-defined]
    module.init = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    module.log = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    module.finish = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules["wandb"] = module


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def extension_imports() -> bool:
    """Whether the compiled adam-atan2 extension imports (then upstream uses it unchanged)."""
    try:
        import adam_atan2  # noqa: F401
    except ImportError:
        return False
    return True


def install_metrics_hook(path: Path) -> None:
    """Append each `wandb.log(data, step=N)` of the run to `path` as JSON (tensors as floats), then log it."""
    import json

    import wandb

    sink = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run; a log stream)

    def recording(log):
        def logged(data, step=None, *args, **kwargs):
            row = {"step": step, **{k: float(v) for k, v in data.items()}}
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            return log(data, step, *args, **kwargs)

        return logged

    real_init = wandb.init

    def init(*args, **kwargs):
        run = real_init(*args, **kwargs)
        wandb.log = recording(wandb.log)  # init (re)binds wandb.log: wrap what it bound
        return run

    wandb.init = init


def run(checkout: Path, overrides: list[str], device: str = "cpu", metrics: Path | None = None) -> None:
    """Execute pretrain.py as `__main__` with `overrides` as its command line.

    device "cpu": with the device switch and our optimizer. "cuda": unchanged, except that our optimizer
    stands in for the extension when that does not import.
    """
    script = checkout / "pretrain.py"
    if not script.is_file():
        raise TRMError(f"{checkout} has no pretrain.py: point TRM_UPSTREAM at a TinyRecursiveModels clone")
    source = script.read_text(encoding="utf-8")
    if device == "cpu":
        source = patched_source(source, script)
    code = compile(source, str(script), "exec")
    if device == "cpu" or not extension_imports():
        install_optimizer_shim()
    if not importable("wandb"):
        install_tracking_stub()
    if metrics is not None:
        install_metrics_hook(metrics)
    sys.path.insert(0, str(checkout))
    sys.argv = [str(script), *overrides]
    # A real `__main__` module: pydantic resolves the config classes' annotations through sys.modules,
    # and Hydra finds config_path relative to the file the code was compiled from (the checkout's).
    main_module = types.ModuleType("__main__")
    main_module.__file__ = str(script)
    sys.modules["__main__"] = main_module
    exec(code, main_module.__dict__)


def main(argv: list[str] | None = None) -> int:
    """`<checkout> [overrides...]`; a TRMError is printed without traceback (exit 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    device, metrics = "cpu", None
    while args[:1] in (["--device"], ["--metrics"]) and len(args) > 1:
        if args[0] == "--device":
            device = args[1]
        else:
            metrics = Path(args[1])
        args = args[2:]
    if not args or device not in ("cpu", "cuda"):
        print(
            "usage: python -m tools.bench.upstream_trainer [--device cpu|cuda] [--metrics FILE.jsonl] <checkout> "
            "[hydra overrides ...]",
            file=sys.stderr,
        )
        return 2
    try:
        run(Path(args[0]).resolve(), args[1:], device, metrics)
    except TRMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
