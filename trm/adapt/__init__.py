"""Test-time training: fine-tune a checkpoint on the demonstrations of tasks it was not trained on.

TRM sees a task's demonstrations only through its puzzle-embedding rows, which training learns from
them; a task without trained rows gets the mean row and scores about zero. Adaptation builds the task
file's augmented demonstration set with the ARC dataset builder (`tasks`), gives every identifier a row
(`rows`: its trained row when the source has one, else the mean trained row) and trains on it with the
trainer (`run`): budgeted by steps and/or minutes, checkpointed, resumable and SIGTERM-safe.
"""
