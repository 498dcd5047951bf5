"""What the Hub library says, shown without secrets: the token in use (HF_TOKEN or the stored login) and
the credentials of an endpoint URL (an HF_ENDPOINT with a user and password before its host is echoed, as the
request's URL, in the library's errors and in its HTTP client's INFO log lines)."""

from __future__ import annotations

import logging
import os

from trm.secrets import redact

# The loggers of the Hub library and of its HTTP client (whatever their versioned names).
_PREFIXES = ("huggingface_hub", "httpx", "httpcore")


def _tokens() -> tuple[str | None, ...]:
    try:
        from huggingface_hub import get_token

        stored = get_token()
    except Exception:  # no library, or an unreadable token file: the patterns still apply
        stored = None
    return os.environ.get("HF_TOKEN"), stored


def error_line(err: BaseException) -> str:
    """The first line of a Hub library error, for a TRMError, with every secret replaced by `***`."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return redact(text, _tokens())


class _Redacting(logging.Filter):
    """Rewrites a record's message with its secrets replaced (the record still goes out)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact(message, _tokens())
        if shown != message:
            record.msg, record.args = shown, None
        return True


def redact_library_logs() -> None:
    """Put the redacting filter on every logger of the Hub library and its HTTP client (once each);
    called after the library is imported, before a request."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_PREFIXES):
            logger = logging.getLogger(name)
            if not any(isinstance(f, _Redacting) for f in logger.filters):
                logger.addFilter(_Redacting())
