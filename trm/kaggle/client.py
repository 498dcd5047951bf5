"""The one place trm-stack meets the official `kaggle` client (PyPI `kaggle`, trm-stack's `kaggle` extra).

Credentials are the client's business: it reads them from its own configuration (`kaggle.json` in its
config folder, `KAGGLE_USERNAME`/`KAGGLE_KEY`, `KAGGLE_API_TOKEN` or `~/.kaggle/access_token`, or the OAuth
login `kaggle auth login` caches). trm-stack never reads, writes or prints them: it asks the client to
authenticate and turns "none found" into one line. What the client prints while it loads (its help text
when no credentials are found) is swallowed, and its verbose mode, which prints every request with its
headers, is switched off for the calls made here.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from trm.errors import TRMError
from trm.exit_codes import PUBLISH_FAILED

NO_CREDENTIALS = (
    "no Kaggle credentials: the kaggle client found none in its configuration (kaggle.json in ~/.kaggle or "
    "$KAGGLE_CONFIG_DIR, KAGGLE_USERNAME and KAGGLE_KEY, KAGGLE_API_TOKEN or ~/.kaggle/access_token, or "
    "`kaggle auth login`); create a token under kaggle.com > Settings > API and give it to the client one of "
    "those ways (never in this repository), or pass --dry-run"
)


class PublishFailed(TRMError):
    """Kaggle, or the network to it, failed a call after publishing began."""

    exit_code = PUBLISH_FAILED


def _missing_client(err: ModuleNotFoundError) -> TRMError:
    from trm.extras import extra_pins

    pins = " ".join(repr(p) for p in extra_pins("kaggle")) or "'kaggle'"
    return TRMError(
        f"the kaggle client is not installed (no module {err.name!r}): `pip install -e '.[kaggle]'` in a "
        f"checkout, or `pip install {pins}` (trm-stack's kaggle extra), or pass --dry-run"
    )


def load_api() -> Any:
    """An authenticated `kaggle.api.kaggle_api_extended.KaggleApi`; TRMError (exit 2) without credentials."""
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            from kaggle.api.kaggle_api_extended import KaggleApi  # its package authenticates on import
        except ModuleNotFoundError as err:
            raise _missing_client(err) from None
        api = KaggleApi()
        api.args = [a for a in api.args if a not in ("--verbose", "-v")]  # verbose prints request headers
        try:
            api.authenticate()
        except SystemExit:
            raise TRMError(NO_CREDENTIALS) from None
        except ValueError:  # a configuration file without a username or key
            raise TRMError(NO_CREDENTIALS) from None
        except Exception as err:  # an access token the client could not check, e.g. no network
            raise TRMError(
                f"the kaggle client could not authenticate ({type(err).__name__}); check the network and the "
                "credentials in its configuration"
            ) from None
    return api


def http_status(err: BaseException) -> int | None:
    """The HTTP status of a `requests` error the client raised (None for another error)."""
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def failure(what: str, err: BaseException) -> TRMError:
    """One line for a failed client call, without the error's text (which may echo a request)."""
    status = http_status(err)
    if status in (401, 403):
        return TRMError(
            f"{what}: Kaggle refused the credentials of the kaggle client's configuration (HTTP {status}): "
            "are they valid, and may that user write under --owner?"
        )
    if isinstance(err, ValueError):  # the client's own checks of the folder and metadata
        return TRMError(f"{what}: the kaggle client refused it: {err}")
    cause = f"HTTP {status}" if status is not None else type(err).__name__
    return PublishFailed(
        f"{what}: the call failed ({cause}); what was published before it stays; rerun to retry"
    )
