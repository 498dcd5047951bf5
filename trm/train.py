"""`python -m trm.train key=value …` (also under torchrun): parse the config, build, train, close.

Exit codes (trm.exit_codes): 0 finished, 2 configuration/input error, 74 a checkpoint save found the disk
full (the previous checkpoint is intact), 75 stopped by SIGTERM/SIGINT after saving a complete checkpoint
(run the same command again to resume).
"""

from __future__ import annotations

import sys

from trm import exit_codes
from trm.errors import TRMError


def main(argv: list[str] | None = None) -> int:
    """Run training with Hydra-style overrides; returns the process exit code."""
    from trm.training import config

    args = list(sys.argv[1:] if argv is None else argv)
    if "--help" in args or "-h" in args:
        print(config.help_text())
        return exit_codes.OK
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config.compose([a for a in args if a != "--cfg"])
        config.fill_run_defaults(cfg)
        if "--cfg" in args:
            print(config.to_yaml(cfg))
            return exit_codes.OK
        from trm.distributed import initialize
        from trm.training.loop import Trainer

        with initialize(cfg.device) as info:
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
