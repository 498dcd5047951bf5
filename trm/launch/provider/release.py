"""Release the machine when the run or its budget ends (ON_END / ON_BUDGET), so the bill stops too.

The release is the last thing a launch does: after the final checkpoint, the handoff bundle and the
final sync (SYNC_TO). Where it happens decides how:

  vast            `vastai stop|destroy instance $CONTAINER_ID` (Vast.ai sets CONTAINER_ID, and
                  CONTAINER_API_KEY, a key scoped to this instance, inside every instance)
  primeintellect  DELETE /api/v1/pods/{PRIME_POD_ID} on the Prime Intellect API (bearer token from
                  PRIME_API_KEY or PRIME_API_KEY_FILE); pods can only be terminated, not stopped
  kubernetes      nothing to call: the launcher's exit code ends the Job (79 for the budget, which the
                  Job's podFailurePolicy does not restart)
  host            `shutdown -h now`, only when RELEASE_VIA=host is set explicitly

Tokens are read when the release runs, sent only in the request header (or the vastai CLI's environment, never its command line), and
never logged or written anywhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trm import exit_codes
from trm.errors import TRMError

ACTIONS = ("keep", "stop", "destroy")
PROVIDERS = ("auto", "vast", "primeintellect", "kubernetes", "host")
PRIME_API_URL = "https://api.primeintellect.ai"
REDACTED = "***"
# The waits before the 2nd and 3rd try of a release that failed in a way a retry may cure (a network error, an
# HTTP 429/5xx, the vastai CLI failing or not answering): a machine left running bills until a person notices.
RETRY_WAITS_S = (15.0, 60.0)


@dataclass(frozen=True)
class ReleasePolicy:
    """What to do with the machine at the end: ON_END for a finished run, ON_BUDGET for MAX_HOURS."""

    on_end: str = "keep"
    on_budget: str = "keep"
    via: str = "auto"

    def action_for(self, exit_code: int) -> str:
        """The action for the launcher's exit code: only a finished run (0) or a spent budget (79) release;
        a failure or a stop from outside keeps the machine, so a person can look at it or resume."""
        if exit_code == exit_codes.OK:
            return self.on_end
        if exit_code == exit_codes.BUDGET_STOPPED:
            return self.on_budget
        return "keep"

    @property
    def releases(self) -> bool:
        return self.on_end != "keep" or self.on_budget != "keep"


def detect_provider(env: Mapping[str, str]) -> str | None:
    """Where this process runs, from what each platform sets; None for a plain host (never guessed)."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if env.get("CONTAINER_ID") and (env.get("CONTAINER_API_KEY") or env.get("VAST_CONTAINERLABEL")):
        return "vast"
    if env.get("PRIME_POD_ID"):
        return "primeintellect"
    return None


def check_policy(policy: ReleasePolicy, env: Mapping[str, str], *, sync_to: str) -> ReleasePolicy:
    """`policy` (ON_END, ON_BUDGET and RELEASE_VIA, parsed by trm.launch.config.variables), checked
    against where the launch runs (errors name the fix)."""
    if not policy.releases:
        return policy
    provider = resolve_provider(policy, env)
    actions = {policy.on_end, policy.on_budget} - {"keep"}
    if provider == "primeintellect" and "stop" in actions:
        raise TRMError(
            "Prime Intellect pods cannot be stopped, only terminated: use ON_END=destroy / ON_BUDGET=destroy "
            "(with SYNC_TO so the checkpoints are copied first) or keep"
        )
    if provider == "primeintellect" and not (env.get("PRIME_API_KEY") or env.get("PRIME_API_KEY_FILE")):
        raise TRMError(
            "releasing a Prime Intellect pod needs an API key with Instances read+write: set PRIME_API_KEY "
            "in the environment or PRIME_API_KEY_FILE to a file holding it"
        )
    if "destroy" in actions and provider != "kubernetes" and not sync_to:
        raise TRMError(
            "ON_END/ON_BUDGET=destroy deletes the machine's disk with the run's only checkpoints: set "
            "SYNC_TO=<rclone remote:path> so they are copied off first, or use stop / keep"
        )
    return policy


def resolve_provider(policy: ReleasePolicy, env: Mapping[str, str]) -> str:
    """RELEASE_VIA, or the detected platform; a plain host is shut down only when asked by name."""
    if policy.via != "auto":
        return policy.via
    provider = detect_provider(env)
    if provider is None:
        raise TRMError(
            f"ON_END={policy.on_end} ON_BUDGET={policy.on_budget}: no Vast.ai instance (CONTAINER_ID), Prime "
            "Intellect pod (PRIME_POD_ID) or Kubernetes pod detected; set RELEASE_VIA=host to run "
            "`shutdown -h now` on this machine, or set the platform's variables, or use keep"
        )
    return provider


# The official Vast.ai CLI, pinned, installed in a venv of its own and never into the image or the training
# venv: vastai 1.9.1 requires borb (a 12 MB PDF library for invoices, licensed AGPL-3.0 or commercial) and
# exact pins (pillow==12.2.0, cryptography==49.0.0) that would downgrade the training venv's pillow.
VASTAI_CLI = "vastai==1.9.1"
VASTAI_INSTALL = (
    f"python -m venv /opt/vastai-cli && /opt/vastai-cli/bin/pip install --quiet {VASTAI_CLI} "
    "&& ln -sf /opt/vastai-cli/bin/vastai /usr/local/bin/vastai"
)


def readiness_problem(policy: ReleasePolicy, env: Mapping[str, str]) -> str | None:
    """Checked when the launch starts, so a release that cannot work is found before hours of training, not
    after: the tool or the ids it will need. None when ready (or nothing to release)."""
    if not policy.releases:
        return None
    try:
        provider = resolve_provider(policy, env)
    except TRMError as err:
        return str(err)
    if provider == "vast":
        if shutil.which("vastai", path=env.get("PATH")) is None:
            return (
                f"ON_END={policy.on_end} ON_BUDGET={policy.on_budget} on Vast.ai needs the official CLI "
                f"on the launch's PATH: `{VASTAI_INSTALL}` (as root; its own venv), "
                "or set ON_END=keep ON_BUDGET=keep"
            )
        if not env.get("CONTAINER_ID", "").strip().isdigit():
            return "CONTAINER_ID (the Vast.ai instance id, set by Vast.ai) is missing from the launch's environment"
    if provider == "primeintellect" and not env.get("PRIME_POD_ID", "").strip():
        return (
            "PRIME_POD_ID (this pod's id, from `prime pods list`) is unset, so the pod could not be terminated "
            "at the end: set it, or set ON_END=keep ON_BUDGET=keep"
        )
    if provider == "primeintellect" and not env.get("PRIME_API_KEY"):
        path = env.get("PRIME_API_KEY_FILE", "").strip()
        if not path or not Path(path).is_file():
            return f"PRIME_API_KEY_FILE={path or '(unset)'} is not a file and PRIME_API_KEY is unset"
    if provider == "host" and shutil.which("shutdown", path=env.get("PATH")) is None:
        return "RELEASE_VIA=host needs `shutdown`, which is not on PATH here (a container cannot shut its host down)"
    return None


class ReleaseError(Exception):
    """The release request failed (the message holds no secret); `retry`: trying again may succeed."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


Log = Callable[[str], None]


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def read_prime_token(env: Mapping[str, str]) -> str:
    token = env.get("PRIME_API_KEY", "").strip()
    if token:
        return token
    path = env.get("PRIME_API_KEY_FILE", "").strip()
    if not path:
        raise ReleaseError("no Prime Intellect API key: set PRIME_API_KEY or PRIME_API_KEY_FILE")
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise ReleaseError(f"PRIME_API_KEY_FILE={path} cannot be read ({err.strerror})") from None
    if not token:
        raise ReleaseError(f"PRIME_API_KEY_FILE={path} is empty")
    return token


# How vastai (1.9.1) answers: exit 0 whether or not the request succeeded. A refusal by the API is the line
# "Failed with error <HTTP status>: <message>" on stderr; a request the API turned down otherwise is its message
# alone; success is "stopping instance <id>." / "destroying instance <id>.". Exit 2 is a usage error (argparse);
# any other exit is an exception it did not handle, the network's after its own retries of 429/5xx.
_VAST_HTTP_FAILURE = re.compile(r"failed with error (\d{3})", re.IGNORECASE)
_VAST_DONE = {"stop": "stopping instance {}", "destroy": "destroying instance {}"}
_USAGE_ERROR = 2


def retryable_status(status: int) -> bool:
    """Whether an HTTP answer with this status may differ next time: 429 (rate limit) and 5xx do; 4xx refusals
    (a bad key, a missing pod or instance) do not."""
    return status == 429 or status >= 500


def _vast_outcome(action: str, instance: str, returncode: int, output: str) -> ReleaseError | None:
    """The one place a vastai answer is judged: None when it released the instance, else the ReleaseError
    (with `retry` only for what a retry may cure)."""
    shown = f"`vastai {action} instance {instance}`"
    if returncode == _USAGE_ERROR:
        return ReleaseError(f"{shown} refused its command line (exit 2, the pinned {VASTAI_CLI}?): {output}")
    if returncode != 0:
        return ReleaseError(f"{shown} failed (exit {returncode}): {output[-500:]}", retry=True)
    if _VAST_DONE[action].format(instance) in output:  # confirmed, whatever it printed before (a 2FA retry)
        return None
    output = output[-500:]
    refused = _VAST_HTTP_FAILURE.search(output)
    if refused:
        status = int(refused.group(1))
        hint = " (CONTAINER_API_KEY or VAST_API_KEY must be a key allowed to manage this instance)" if status in (
            401, 403) else ""  # fmt: skip
        return ReleaseError(f"{shown}: the Vast.ai API answered HTTP {status}{hint}: {output}",
                            retry=retryable_status(status))  # fmt: skip
    return ReleaseError(f"{shown} did not confirm the {action}: {output or '(no output)'}")


def release_vast(action: str, env: Mapping[str, str], log: Log) -> None:
    instance = env.get("CONTAINER_ID", "").strip()
    if not instance:
        label = env.get("VAST_CONTAINERLABEL", "").strip()  # "C.<instance id>"
        instance = label.removeprefix("C.") if label.startswith("C.") else ""
    if not instance.isdigit():
        raise ReleaseError(
            "no Vast.ai instance id: CONTAINER_ID (set by Vast.ai inside the instance) is missing; pass it "
            "into the environment of the launch (e.g. `export CONTAINER_ID` in the on-start script)"
        )
    key = env.get("VAST_API_KEY", "").strip() or env.get("CONTAINER_API_KEY", "").strip()
    # `destroy` asks "Are you sure?" on stdin unless --yes: without it the CLI aborts (stdin closed) or waits for
    # an answer nobody gives (a terminal). stdin is closed either way, so no other question can wait either.
    cmd = ["vastai", action, "instance", instance, *(["--yes"] if action == "destroy" else [])]
    # The key goes in the CLI's environment (vastai reads VAST_API_KEY as --api-key's default), never on its
    # command line, where every process on the machine could read it (`ps`).
    child_env = {**env, "VAST_API_KEY": key} if key else dict(env)
    shown = " ".join(cmd)
    log(f"release: {shown}" + (" (API key from the environment)" if key else ""))
    try:
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=child_env,
        )
    except FileNotFoundError:
        raise ReleaseError(
            f"{cmd[0]} is not installed: `{VASTAI_INSTALL}` (the official Vast.ai CLI), then "
            f"`{shown}` by hand"
        ) from None
    except subprocess.TimeoutExpired:
        raise ReleaseError(f"`{shown}` did not answer within 120 s", retry=True) from None
    output = _redact((result.stdout + result.stderr).strip(), [key])
    error = _vast_outcome(action, instance, result.returncode, output)
    if error is not None:
        raise error
    log(f"release: vastai: {output[-500:]}")


def release_prime(env: Mapping[str, str], log: Log) -> None:
    pod = env.get("PRIME_POD_ID", "").strip()
    if not pod:
        raise ReleaseError("no Prime Intellect pod id: set PRIME_POD_ID (shown by `prime pods list`)")
    token = read_prime_token(env)
    base = (env.get("PRIME_API_URL", "").strip() or PRIME_API_URL).rstrip("/")
    url = f"{base}/api/v1/pods/{urllib.parse.quote(pod, safe='')}"
    log(f"release: DELETE {url} (terminates the pod)")
    request = urllib.request.Request(url, method="DELETE", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        detail = _redact(err.read(500).decode("utf-8", "replace"), [token])
        hint = " (the API key needs Instances read+write)" if err.code in (401, 403) else ""
        raise ReleaseError(
            f"DELETE {url} answered HTTP {err.code}{hint}: {detail}", retry=retryable_status(err.code)
        ) from None
    except (urllib.error.URLError, OSError) as err:
        raise ReleaseError(f"DELETE {url} failed: {_redact(str(err), [token])}", retry=True) from None
    log(f"release: Prime Intellect answered {_redact(body, [token])[:300]}")


def release_host(log: Log, env: Mapping[str, str]) -> None:
    cmd = ["shutdown", "-h", "now"]
    log(f"release: {' '.join(cmd)}")
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, env=dict(env))
    except FileNotFoundError:
        raise ReleaseError(f"{cmd[0]} is not available in this environment") from None
    if result.returncode != 0:
        raise ReleaseError(f"`{' '.join(cmd)}` failed (exit {result.returncode}): {result.stderr.strip()}")


def release(
    policy: ReleasePolicy,
    exit_code: int,
    env: Mapping[str, str],
    log: Log,
    *,
    synced: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Apply the policy for `exit_code`; returns what was done (keep, stop, destroy or exit).

    `synced` is False when the final copy to SYNC_TO failed: then nothing is destroyed (a Vast.ai instance
    is stopped instead, which keeps its disk), since the machine holds the only complete copy. A request
    that failed in a way a retry may cure is tried again after each of RETRY_WAITS_S."""
    action = policy.action_for(exit_code)
    if action == "keep":
        if policy.releases:
            log(f"release: exit {exit_code} keeps the machine (ON_END/ON_BUDGET act on exit 0 / 79 only)")
        return "keep"
    try:
        provider = resolve_provider(policy, env)
    except TRMError as err:
        log(f"release skipped: {err}")
        return "keep"
    if provider == "kubernetes":
        log(
            f"release: Kubernetes ends the Job with the launcher's exit code {exit_code}; the pod and its "
            "GPUs are freed (the PVC keeps the run)"
        )
        return "exit"
    if action == "destroy" and not synced:
        if provider == "vast":
            log("release: the final sync failed, so the instance is stopped (disk kept), not destroyed")
            action = "stop"
        else:
            log("release: the final sync failed, so the machine is kept (its disk holds the only copy)")
            return "keep"
    for wait in (*RETRY_WAITS_S, None):
        try:
            _request(provider, action, env, log)
        except ReleaseError as err:
            if err.retry and wait is not None:
                log(f"release attempt failed: {err}; trying again in {wait:g} s")
                sleep(wait)
                continue
            log(f"release FAILED: {err}; the machine is still running (and billing): release it by hand")
            return "keep"
        return action
    raise AssertionError("unreachable: the last wait is None")  # pragma: no cover


def _request(provider: str, action: str, env: Mapping[str, str], log: Log) -> None:
    """One release request to `provider`; raises ReleaseError."""
    if provider == "vast":
        release_vast(action, env, log)
    elif provider == "primeintellect":
        release_prime(env, log)
    elif provider == "host":
        release_host(log, env)
    else:  # pragma: no cover - PROVIDERS is checked when the settings are read
        raise ReleaseError(f"unknown RELEASE_VIA {provider!r}")


def describe(policy: ReleasePolicy, env: Mapping[str, str]) -> str:
    """The --dry-run text of the release step."""
    if not policy.releases:
        return "keep the machine (ON_END=keep, ON_BUDGET=keep)"
    try:
        provider = resolve_provider(policy, env)
    except TRMError as err:
        return f"release not possible: {err}"
    how = {
        "vast": "vastai stop|destroy instance $CONTAINER_ID",
        "primeintellect": "DELETE /api/v1/pods/$PRIME_POD_ID on the Prime Intellect API",
        "kubernetes": "nothing to call: the exit code ends the Job",
        "host": "shutdown -h now",
    }[provider]
    return (
        f"after the handoff and the final sync: exit 0 -> {policy.on_end}, exit 79 (MAX_HOURS) -> "
        f"{policy.on_budget}, any other exit keeps the machine; via {provider}: {how}"
    )
