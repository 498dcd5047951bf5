"""A run's checkpoints. The training loop's face: `Checkpointer` (load, flags, save, wait, close), what a
checkpoint reads from the run (`CheckpointContents`, `Progress`, `rank_shard`) and `InitialWeights`.

Inside: the on-disk layout (`layout`: step_N/ folders, manifest, discovery, pruning), the state they hold
(`state`), the background writer (`async_writer`), when to save (`rolling`), saving and retention
(`checkpointer`), the weights a run starts from (`initial_weights`: our step_N/ or a reference
file), resuming (`resume`) and choosing the best one (`best`).
"""

from trm.training.checkpointing.checkpointer import CheckpointContents, Checkpointer
from trm.training.checkpointing.resume import InitialWeights, Resumed
from trm.training.checkpointing.state import Progress, rank_shard

__all__ = ["CheckpointContents", "Checkpointer", "InitialWeights", "Progress", "Resumed", "rank_shard"]
