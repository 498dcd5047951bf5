"""Process exit codes shared by the trainer, the launch script and the Kubernetes jobs."""

OK = 0
# A user-fixable configuration or input error (bad key, missing dataset, incompatible resume).
# Orchestrators must not retry it.
CONFIG_ERROR = 2
# The trainer was asked to stop (SIGTERM/SIGINT, cost guard), saved a complete checkpoint and exited.
# Safe to retry: the same command resumes from that checkpoint. (EX_TEMPFAIL in sysexits.h.)
SAVED_RETRY = 75
