"""Checkpoints on the Hugging Face Hub: `hf://ORG/NAME[/DIR][@REVISION]` references (resolve), and
publishing one checkpoint with its provenance and a model card (publish, card). Needs the `hub` extra."""
