"""The README.md written into a Kaggle bundle."""

from __future__ import annotations

from typing import Any


def render_readme(
    config: dict[str, Any], pins: dict[str, str], python_version: str, include_torch: bool, wheels: bool
) -> str:
    """Markdown describing the bundle and the offline install + inference commands for a Kaggle kernel."""
    arch = config["arch"]
    name = config.get("arch_name", "trm")
    title = {"trm": "Tiny Recursive Model", "urm": "Universal Reasoning Model"}.get(name, name)
    layers = f"L_layers {arch['L_layers']}" if "L_layers" in arch else f"num_layers {arch['num_layers']}"
    ids = config["identifiers"]
    src = config["source"]
    lines = [
        f"# {name.upper()} weights and offline wheels for ARC Prize inference",
        "",
        f"{title} from `{src['checkpoint']}` ({src['kind']}, step {src['step']}), packaged by "
        f"trm-stack {config['created']['trm_stack']}: hidden_size {arch['hidden_size']}, "
        f"{layers}, H_cycles {arch['H_cycles']}, L_cycles {arch['L_cycles']}, "
        f"{arch.get('halt_max_steps', arch.get('loops'))} ACT steps, loss {config['loss_type']}.",
        "",
        "Puzzle embeddings: "
        + (
            f"the trained table ({ids['trained_rows']} rows) and `identifiers.json`, so tasks seen in "
            "training reuse their trained rows; "
            if ids["shipped"]
            else "the trained table is not included; "
        )
        + f"every unseen task uses row {ids['unseen_id']}, the mean of the trained rows.",
        "",
        "Files are listed with their sha256 in `manifest.json`; inference verifies them before loading.",
        "",
    ]
    if wheels:
        torch_note = (
            "torch is included."
            if include_torch
            else "torch is not included: the kernel's preinstalled torch is used."
        )
        lines += [
            "## Install in a Kaggle kernel (internet off)",
            "",
            f"The `wheels/` folder holds wheels for CPython {python_version} on manylinux x86_64: "
            f"{len(pins)} pinned dependencies (`wheels/requirements.txt`) and trm-stack. {torch_note}",
            "",
            "```bash",
            "W=/kaggle/input/<this-dataset>/wheels",
            "pip install --no-index --find-links $W -r $W/requirements.txt",
            "pip install --no-index --no-deps $W/trm_stack-*.whl",
            "```",
            "",
            "The pinned versions replace the kernel's copies of these packages (numpy among them). The "
            f"bundle was made with torch {config['created']['torch']}; "
            + (
                "the wheelhouse's torch is installed with the rest."
                if include_torch
                else "check the kernel's `torch.__version__` if loading fails."
            ),
            "",
        ]
    lines += [
        "## Write the submission",
        "",
        "```bash",
        "python -m trm infer --weights /kaggle/input/<this-dataset> \\",
        "    --challenges /kaggle/input/arc-prize-2025/arc-agi_test_challenges.json \\",
        "    --out /kaggle/working/submission.json --max-minutes 600 --ranks auto",
        "```",
        "",
        "`--max-minutes` lowers the number of augmentations per task when time runs short; every test input "
        "always gets two attempts. `--ranks auto` splits the tasks into groups run by one process per GPU "
        "(all four of the competition's); a group whose process fails or runs out of time gets the un-adapted "
        "predictions and the others keep theirs.",
        "",
        "Tasks without a trained puzzle row (every task of a hidden test set) get the mean row: the model never "
        "sees their demonstrations and they score about zero, and inference says how many there are. Add "
        "`--adapt-minutes M` (within `--max-minutes`) to first fine-tune on their demonstrations "
        "(test-time training, saved and resumable under `--adapt-dir`, default `adapt/` next to `--out`).",
        "",
    ]
    return "\n".join(lines)
