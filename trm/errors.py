"""User-facing errors: raised for bad input or environment, printed without a traceback."""


class TRMError(Exception):
    """A problem the user can fix. The message names the file/key/task and says how to fix it."""

    exit_code = 2
