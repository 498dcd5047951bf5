"""`python -m trm.train key=value …` (also under torchrun): parse the config, build, train, close.

Exit codes (trm.exit_codes): 0 finished, 2 configuration/input error (also: another launcher or trainer
owns the run directory, trm.runlock), 74 a checkpoint save found the disk
full (the previous checkpoint is intact), 75 stopped by SIGTERM/SIGINT after saving a complete checkpoint
(run the same command again to resume), 77 the hang watchdog saw no progress (thread stacks in
hang_rank<r>.txt; rerun to resume), 78 a non-finite loss or gradient (repro in nonfinite_step<N>_rank<r>.pt;
not to be retried unchanged), 80 CUDA out of memory (one line naming the step and micro-batch; nothing of
that step saved: rerun with the smaller micro_batch_size it names, which resumes from the newest checkpoint).
"""

from __future__ import annotations

import sys

from trm import exit_codes
from trm.errors import TRMError


def _write_keys_doc() -> int:
    """Rewrite docs/training.md's key table (run in a checkout's root) from the config's fields."""
    from trm.training.keys_doc import DOC_PATH, write_doc

    try:
        changed = write_doc()
    except (OSError, TRMError) as err:
        print(f"error: {err}; run --write-keys-doc in the root of a trm-stack checkout", file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    print(f"{DOC_PATH}: {'updated' if changed else 'up to date'}")
    return exit_codes.OK


def main(argv: list[str] | None = None) -> int:
    """Run training with Hydra-style overrides; returns the process exit code."""
    from trm.training import config

    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--write-keys-doc"]:
        return _write_keys_doc()
    if "--help" in args or "-h" in args:
        rest = [a for a in args if a not in ("--help", "-h")]
        try:
            arch = [a.partition("=")[2] for a in rest if a.lstrip("+").startswith("arch=")]
            print(config.help_text(arch[-1] if arch else "trm"))
        except TRMError as err:
            print(f"error: {err}", file=sys.stderr)
            return exit_codes.CONFIG_ERROR
        return exit_codes.OK
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config.compose([a for a in args if a != "--cfg"])
        config.fill_run_defaults(cfg)
        if "--cfg" in args:
            print(config.to_yaml(cfg))
            return exit_codes.OK
        from pathlib import Path

        from trm.distributed import initialize
        from trm.runlock import trainer_lock
        from trm.training.loop import Trainer
        from trm.training.watchdog import enable_flight_recorder

        if cfg.watchdog.timeout_minutes:  # before the process group exists: its hang dump needs the recorder
            enable_flight_recorder()
        # One owner per run directory (global rank 0; under the launcher, the launcher's lock covers it).
        with trainer_lock(Path(str(cfg.checkpoint_path))), initialize(cfg.device) as info:
            if not info.is_main:
                logging.getLogger().setLevel(logging.WARNING)
            trainer = Trainer.create(cfg, info)
            try:
                return trainer.train()
            finally:
                trainer.close()
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
