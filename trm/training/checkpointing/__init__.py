"""A run's checkpoints: the on-disk layout (`layout`), the state they hold (`state`), the background
writer (`async_writer`), when to save (`rolling`), saving and retention (`checkpointer`), resuming
(`resume`) and choosing the best one (`best`)."""
