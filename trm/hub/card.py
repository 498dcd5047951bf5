"""The model card (README.md) of a published checkpoint: the Hub's YAML metadata (license, datasets,
metrics, library_name, tags) written with huggingface_hub's own ModelCardData, and a body that says what the
checkpoint is, what it was trained on, what it scored, and how to evaluate it with trm-stack."""

from __future__ import annotations

from typing import Any

LIBRARY_NAME = "trm-stack"
TAGS = ("tiny-recursive-model", "trm", "arc-agi", "pytorch")


def _build_flags(args: dict[str, Any]) -> str:
    """`python -m trm data build-arc` flags that rebuild a dataset from its manifest's args."""
    flags = []
    if args.get("subsets"):
        flags.append("--subsets " + " ".join(args["subsets"]))
    for key in (
        "test_set_name",
        "seed",
        "num_aug",
        "max_puzzles",
        "subsample_size",
        "puzzle_identifiers_start",
    ):
        if args.get(key) is not None:
            flags.append(f"--{key.replace('_', '-')} {args[key]}")
    return " ".join(flags)


def _metrics_table(metrics: dict[str, Any]) -> str:
    if not metrics:
        return "No evaluation was recorded with this checkpoint (it was not an evaluation checkpoint).\n"
    rows = "\n".join(f"| `{k}` | {v:.4f} |" for k, v in sorted(metrics.items()) if isinstance(v, int | float))
    return f"| metric | value |\n|---|---|\n{rows}\n"


def _hardware(facts: dict[str, Any] | None) -> str:
    if not facts:
        return "Not recorded (the run was not started by the trm-stack launcher).\n"
    gpus = facts.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    wall = (facts.get("wall_time") or {}).get("wall_seconds")
    cost = facts.get("cost_estimate_usd")
    lines = [
        f"- GPUs: {len(gpus)} × {', '.join(names) or 'unknown'} (world size {facts.get('world_size')})"
        if gpus
        else f"- CPU only (world size {facts.get('world_size')})",
        f"- wall clock: {wall / 3600:.2f} h"
        if isinstance(wall, int | float)
        else "- wall clock: not recorded",
        f"- cost estimate: ${cost:.2f}" if isinstance(cost, int | float) else "- cost estimate: not recorded",
    ]
    return "\n".join(lines) + "\n"


def _lock_line(lock: dict[str, str] | None) -> str:
    return f"; runtime lock `{lock['file']}` sha256 `{lock['sha256']}`" if lock else ""


def render_card(provenance: dict[str, Any], config: dict[str, Any], license_id: str) -> str:
    """README.md text: YAML front matter (huggingface_hub's ModelCardData) and the Markdown body."""
    from huggingface_hub import ModelCardData

    repo = provenance["repo_id"]
    datasets = provenance["datasets"]
    subsets = sorted({s for d in datasets for s in (d.get("args") or {}).get("subsets") or []})
    arch = config.get("arch") or {}
    arch_name = str(arch.get("name", "trm")).split("@")[0].rsplit(".", 1)[-1]
    data = ModelCardData(
        license=license_id,
        library_name=LIBRARY_NAME,
        datasets=[f"arc-agi/{s}" for s in subsets] or None,
        metrics=sorted(provenance["eval_metrics"]) or None,
        tags=[*TAGS, arch_name],
    )
    selected = provenance["selected"]
    why = (
        f"the best checkpoint of its run by `{selected['metric']}` = {selected['value']:.4f}"
        if selected["by"] == "best"
        else "the step asked for"
        if selected["by"] == "step"
        else "the newest complete checkpoint of its run"
    )
    env = provenance["environment"]
    first = datasets[0] if datasets else {}
    build = _build_flags(first.get("args") or {})
    data_dir = f"data/{first.get('source_dir_name', 'dataset')}"
    dataset_lines = "\n".join(
        f"- `{d['folder']}/`: fingerprint `{d['fingerprint']}`, {d['identifiers']['count']} puzzle identifiers "
        f"(identifiers.json sha256 `{d['identifiers']['sha256']}`, upstream-identical: "
        f"{'yes' if d['identifiers']['upstream_identical'] else 'no'}), built by {d.get('builder')} with "
        f"`{_build_flags(d.get('args') or {})}`"
        for d in datasets
    )
    body = f"""
# {repo.split("/")[-1]}

A Tiny Recursive Model (arch `{arch_name}`) checkpoint trained with trm-stack: step {provenance["step"]}
of run `{provenance.get("run_name")}`, {why}.

## Evaluation

{_metrics_table(provenance["eval_metrics"])}
## Training data and the puzzle embedding

TRM looks up one learned embedding row per puzzle identifier, by its position in the training dataset's
`identifiers.json`. The rows mean nothing without that file, so it is published in `dataset/` with the
dataset's manifest. Evaluate on the dataset it was trained on (same fingerprint), or the rows of the test
tasks are someone else's:

{dataset_lines}

## How to evaluate it

```bash
pip install -e '.[hub]'   # in a trm-stack checkout
python -m trm data build-arc --output-dir {data_dir} {build}
python -m trm.eval hf://{repo} data_paths='[{data_dir}]'
python -m trm.eval hf://{repo} data_paths='[{data_dir}]' --puzzle-ids blank   # reliance on the puzzle ids
python -m trm package kaggle hf://{repo} kaggle-bundle/   # offline Kaggle dataset
```

Pin a revision with `hf://{repo}@COMMIT`; what these commands write records the commit they read.
`python -m trm data audit {data_dir}` reports train/test overlap in that dataset.

## Environment

- code: trm-stack git `{env.get("git_sha")}`; image digest `{env.get("image_digest") or "none (not run from an image)"}`
- torch {env.get("torch")}{_lock_line(env.get("runtime_lock"))}

## Hardware and cost

{_hardware(provenance.get("hardware_and_cost"))}
## Files

- `checkpoint/`: the trm step folder (model, EMA weights, config, progress; no optimizer state)
- `config.json`: the resolved training config
- `dataset/`: manifest.json, identifiers.json, test/dataset.json of the training dataset
- `trm_provenance.json`: everything above, machine-readable
"""
    return f"---\n{data.to_yaml()}\n---\n{body}"
