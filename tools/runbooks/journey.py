"""Journey checks of the runbooks: what a user following them in order would hit.

1. **Environments.** Each shell block runs somewhere: on the operator's `laptop` (a checkout with its
   venv; the default of `bash cpu` and `bash cloud`), on a `docker-host` VM (Docker, host folders under
   /data/trm, no checkout), inside our `image` (a `docker exec`/`docker run` shell, or a Vast.ai
   instance of the image: no docker, no scripts/, no make), or in a `vast-venv` (a Vast.ai container
   bootstrapped from a checkout: scripts/ and the venv, but no docker and no /data/trm). `bash gpu`
   blocks must say which (`bash gpu env=image`); a command or path the environment lacks is a problem.
2. **Variables.** A `$NAME` a block uses must be set before it in that runbook, in the same environment,
   by a command that sets it for the shell: `NAME=…` alone, `export`, `read`, `for NAME in`. An inline
   `NAME=… command` sets it for that command only. Variables the shell or the environment provides
   are allowed, and a runbook may declare more with `<!-- env-provides ENV: NAME … -->`.
3. **Stop timeouts.** A `docker run` of the trainer or launcher must pass `--stop-timeout` of at least its
   SHUTDOWN_TIMEOUT plus the handoff margin (what a Job's grace period covers), and a `docker stop -t` must
   wait as long: Docker's default 10 s SIGKILLs a trainer that is still saving.
4. **Re-applied Jobs.** A Job's pod template is immutable: `kubectl apply` of an edited overlay (new image,
   settings, run name) over an existing Job fails, and over a finished one changes nothing. A block that
   applies a Job overlay first deletes the Job with `--cascade=foreground` (kubectl waits until its pods
   saved and exited; the volume stays) and `--ignore-not-found` (the first time there is none).
5. **Copies from a Job.** `kubectl cp` from a Job's pod runs tar through `exec`, which a finished pod refuses:
   the copy-out pod (`python -m tools.jobs copy-out`) is the way.
6. **Measured figures.** Durations and sizes come from `runbooks/measured.toml` (see
   `tools.runbooks.measured`); a prose estimate such as "takes 15 minutes" outside a measured marker is flagged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.runbooks.runbook import Block, Runbook
from tools.shell.refs import logical_lines, simple_commands, strip_prefix


@dataclass(frozen=True)
class Environment:
    """Where a block runs: what it lacks, and the variables it provides."""

    description: str
    missing_commands: frozenset[str] = frozenset()
    missing_paths: tuple[str, ...] = ()
    provides: frozenset[str] = frozenset()


_OPERATOR_TOOLS = frozenset({"kubectl", "vastai", "prime", "kustomize", "scp", "rsync", "ssh"})
ENVIRONMENTS: dict[str, Environment] = {
    "laptop": Environment("the operator's machine: a trm-stack checkout with its venv"),
    "docker-host": Environment(
        "a GPU VM with Docker and host folders under /data/trm, without a checkout",
        frozenset({"make", "kubectl", "vastai", "prime"}),
        ("scripts/",),
    ),
    "image": Environment(
        "inside our image (docker exec/run, or a Vast.ai instance of the image)",
        frozenset({"docker", "make", "sudo", "nox"}) | _OPERATOR_TOOLS,
        ("scripts/", "/data/trm"),
        frozenset(
            {
                "TRM_IMAGE_VARIANT",
                "TRM_IMAGE_SM_LIST",
                "TRM_IMAGE_CUDA",
                "TRM_IMAGE_OPTIMIZER_BACKEND",
                "TRM_IMAGE_GIT_SHA",
            }
        ),
    ),
    "vast-venv": Environment(
        "a Vast.ai container (stock CUDA image) with a checkout and its bootstrapped venv",
        frozenset({"docker", "sudo"}) | _OPERATOR_TOOLS,
        ("/data/trm",),
    ),
}
DEFAULT_ENV = {"cpu": "laptop", "cloud": "laptop"}
SHELL_PROVIDED = frozenset(
    {"HOME", "PATH", "PWD", "USER", "SHELL", "HOSTNAME", "RANDOM", "SECONDS", "UID", "OLDPWD", "TMPDIR"}
)

_VAR = re.compile(
    r"\$(?:\{(?P<brace>[#!]?[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-=+?])?|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
_PROVIDES = re.compile(r"<!--\s*env-provides\s+(?P<env>[a-z-]+):\s*(?P<names>[A-Za-z0-9_ ]+?)\s*-->")
_READ_OPTS_WITH_ARG = {"-p", "-t", "-n", "-N", "-d", "-u", "-a", "-i"}


def variable_uses(line: str) -> list[str]:
    """Names expanded by a shell line: `$X`/`${X}` outside single quotes, not `${X:-default}` forms."""
    names, i, single, double = [], 0, False, False
    while i < len(line):
        ch = line[i]
        if ch == "\\" and not single:
            i += 2
            continue
        if ch == "'" and not double:
            single = not single
        elif ch == '"' and not single:
            double = not double
        elif ch == "#" and not single and not double and (i == 0 or line[i - 1] in " \t;"):
            break  # a comment
        elif ch == "$" and not single:
            match = _VAR.match(line, i)
            if match:
                name = match["brace"] or match["plain"]
                defaulted = bool(match["op"]) and "?" not in match["op"]  # ${X:-d} ${X:=d} ${X:+a}
                if name.startswith("#"):
                    names.append(name[1:])  # ${#X}: the length of X
                elif not name.startswith("!") and not defaulted:
                    names.append(name)
                i = match.end()
                continue
        i += 1
    return names


def definitions(words: list[str]) -> list[str]:
    """Names a simple command sets for the rest of the shell session (not `NAME=x cmd`)."""
    while words and words[0] in ("while", "until", "if", "then", "do", "else", "!", "time"):
        words = words[1:]
    if not words:
        return []
    if all(_ASSIGN.match(w) for w in words):
        return [_ASSIGN.match(w).group(1) for w in words]  # type: ignore[union-attr]
    if _ASSIGN.match(words[0]):  # `IFS= read -r x`: the prefix is temporary, what read sets is not
        words = [
            w
            for i, w in enumerate(words)
            if not (_ASSIGN.match(w) and all(_ASSIGN.match(v) for v in words[: i + 1]))
        ]
    head, rest = words[0], words[1:]
    if head in ("export", "declare", "local", "readonly", "typeset"):
        return [w.split("=", 1)[0] for w in rest if _NAME.match(w.split("=", 1)[0]) and not w.startswith("-")]
    if head in ("read", "mapfile", "readarray"):
        names, skip = [], False
        for w in rest:
            if skip:
                skip = False
            elif w in _READ_OPTS_WITH_ARG or (w.startswith("-") and w[-1] in "ptndNuai" and len(w) > 2):
                skip = True
            elif not w.startswith("-") and _NAME.match(w):
                names.append(w)
        return names
    if head == "for" and rest and _NAME.match(rest[0]):
        return [rest[0]]
    return []


def block_env(block: Block) -> str | None:
    return block.env or DEFAULT_ENV.get(block.tier or "")


def declared_provides(book: Runbook) -> dict[str, set[str]]:
    provided: dict[str, set[str]] = {}
    for match in _PROVIDES.finditer(book.body):
        provided.setdefault(match["env"], set()).update(match["names"].split())
    return provided


def environment_problems(block: Block) -> list[str]:
    """Commands and paths the block's environment does not have."""
    if block.tier is None:
        return []
    name = block_env(block)
    if name is None:
        return [
            f"{block.where}: `bash {block.tier}` block without an environment: tag it "
            f"`bash {block.tier} env=<{'|'.join(ENVIRONMENTS)}>`"
        ]
    env = ENVIRONMENTS.get(name)
    if env is None:
        return [f"{block.where}: unknown environment env={name}; use one of {', '.join(ENVIRONMENTS)}"]
    problems = []
    for words in simple_commands(block.code):
        words = strip_prefix(words)
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program in env.missing_commands:
            problems.append(f"{block.where}: `{program}` is not available in env={name} ({env.description})")
        elif (
            program in ("bash", "sh")
            and len(words) > 1
            and words[1].startswith("scripts/")
            and ("scripts/" in env.missing_paths)
        ):
            problems.append(f"{block.where}: {words[1]} does not exist in env={name} ({env.description})")
        elif "scripts/" in env.missing_paths and _runs_repository_tooling(words):
            problems.append(
                f"{block.where}: `{' '.join(words[:3])}` is repository tooling (tools/, not in the image or "
                f"the wheel) and env={name} has no checkout ({env.description}): run it on the laptop"
            )
    for path in env.missing_paths:
        if path != "scripts/" and path in block.code:
            problems.append(f"{block.where}: {path} does not exist in env={name} ({env.description})")
    return problems


def _runs_repository_tooling(words: list[str]) -> bool:
    """`python -m tools…`: only a checkout has tools/ (the wheel and the image ship trm/ only)."""
    return any(
        words[i] == "-m" and (words[i + 1] == "tools" or words[i + 1].startswith("tools."))
        for i in range(1, len(words) - 1)
    ) and words[0].rsplit("/", 1)[-1].startswith("python")


def variable_problems(book: Runbook) -> list[str]:
    """`$NAME` used in a block but set nowhere before it (same runbook, same environment)."""
    declared = declared_provides(book)
    defined: dict[str, set[str]] = {}
    problems = []
    for block in book.blocks:
        name = block_env(block)
        if block.tier is None or name not in ENVIRONMENTS:
            continue
        known = defined.setdefault(name, set())
        allowed = SHELL_PROVIDED | ENVIRONMENTS[name].provides | declared.get(name, set())
        reported: set[str] = set()
        for line in logical_lines(block.code):
            for words in simple_commands(line):
                known.update(definitions(words))
            for var in variable_uses(line):
                if var not in known and var not in allowed and var not in reported:
                    reported.add(var)
                    problems.append(
                        f"{block.where}: ${var} is used but not set before this block in env={name} (an inline "
                        f"`{var}=… command` sets it for that command only); set it with `{var}=…` or `export`, "
                        f"or declare it with <!-- env-provides {name}: {var} -->"
                    )
    return problems


_PROSE_FIGURE = re.compile(
    r"(?:≈|~|\babout|\btakes?|\btook|\bspends?|\ballow|\bwithin)\s*\d[\d.,]*\s*"
    r"(?:s|sec|seconds?|min|minutes?|h|hours?|GB|MB|GiB|MiB)\b",
    re.I,
)
_MARKED = re.compile(r"<!-- measured:[a-z0-9_]+ -->.*?<!-- /measured -->", re.S)


def prose_figure_problems(book: Runbook) -> list[str]:
    """Estimates of durations/sizes written as prose instead of rendered from runbooks/measured.toml."""
    lines = book.body.splitlines(keepends=True)
    for block in book.blocks:  # code blocks are not prose: blank them, keeping the line numbers
        first, last = block.line - book.body_line, block.end_line - book.body_line
        lines[first : last + 1] = ["\n"] * (last + 1 - first)
    text = "".join(lines)
    text = _MARKED.sub(lambda m: " " * len(m.group(0)), text)
    problems = []
    for match in _PROSE_FIGURE.finditer(text):
        line = book.body_line + text.count("\n", 0, match.start())
        problems.append(
            f"{book.path}:{line}: '{match.group(0)}' states a figure in prose: add it to runbooks/measured.toml "
            "(value, how it was measured) and write <!-- measured:KEY --><!-- /measured --> here, then "
            "`python -m tools.runbooks measured --write`"
        )
    return problems


_TRAINING_COMMANDS = (("trm", "launch"), ("trm.train",), ("scripts/train_prod.sh",), ("train_prod.sh",))


def _runs_training(words: list[str]) -> bool:
    """The words start the launcher or the trainer (not a `--dry-run`/`--help` of it)."""
    if any(w in ("--dry-run", "--help", "-h", "--help-env") for w in words):
        return False
    return any(tuple(words[i : i + len(cmd)]) == cmd for cmd in _TRAINING_COMMANDS for i in range(len(words)))


def _option(words: list[str], *names: str) -> str | None:
    """The value of the first `--name value` / `--name=value` / `-t value` option among `words`."""
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word[len(name) + 1 :]
    return None


def _options(words: list[str], *names: str) -> list[str]:
    """Every value of a repeatable `--name value` / `--name=value` option among `words`."""
    values = []
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                values.append(words[i + 1])
            elif word.startswith(name + "="):
                values.append(word[len(name) + 1 :])
    return values


def _shutdown_timeout(words: list[str]) -> int:
    """The SHUTDOWN_TIMEOUT a `docker run` passes with `-e`, else the launcher's default."""
    from trm.launch.config.variables import ALL_VARS

    shutdown = int(next(v.default for v in ALL_VARS if v.name == "SHUTDOWN_TIMEOUT"))
    for i, word in enumerate(words[:-1]):
        if word in ("-e", "--env") and words[i + 1].startswith("SHUTDOWN_TIMEOUT="):
            value = words[i + 1].split("=", 1)[1]
            shutdown = int(value) if value.isdigit() else shutdown
    return shutdown


def stop_timeout_problems(code: str, where: str) -> list[str]:
    """`docker run` of the trainer/launcher without a long enough `--stop-timeout`; a short `docker stop -t`."""
    from tools.jobs.policy import GRACE_MARGIN_S

    problems = []
    for words in simple_commands(code):
        words = strip_prefix(words)
        if words[:2] == ["docker", "run"] and _runs_training(words):
            shutdown = _shutdown_timeout(words)
            need, given = shutdown + GRACE_MARGIN_S, _option(words, "--stop-timeout")
            if given is None or not given.isdigit() or int(given) < need:
                problems.append(
                    f"{where}: `docker run` of the trainer needs `--stop-timeout {need}` or more "
                    f"(SHUTDOWN_TIMEOUT {shutdown} s to save + {GRACE_MARGIN_S} s for the handoff); "
                    f"{'it has ' + given if given else 'without it Docker SIGKILLs it 10 s after SIGTERM'}"
                )
        elif words[:2] == ["docker", "stop"]:
            given = _option(words, "-t", "--time", "--timeout")
            need = _shutdown_timeout([]) + GRACE_MARGIN_S
            if given is not None and (not given.isdigit() or int(given) < need):
                problems.append(
                    f"{where}: `docker stop -t {given}` is shorter than the launcher's SHUTDOWN_TIMEOUT + "
                    f"handoff margin ({need} s): the trainer is killed while saving; use -t {need} or leave "
                    "-t out (the container's --stop-timeout applies)"
                )
    return problems


def job_copy_problems(code: str, where: str) -> list[str]:
    """`kubectl cp` from a Job's pod: it needs `exec`, which a finished (Completed/Failed) pod refuses."""
    problems = []
    for words in simple_commands(code):
        words = strip_prefix(words)
        if words[:2] == ["kubectl", "cp"] and any("job-name=" in w for w in words):
            problems.append(
                f"{where}: `kubectl cp` from a Job's pod fails once the Job has finished (it runs tar through "
                "exec, which a Completed or Failed pod refuses): copy the run with `python -m tools.jobs "
                "copy-out OVERLAY` (runbook 06)"
            )
    return problems


def job_apply_problems(code: str, where: str) -> list[str]:
    """`kubectl apply` of a Job overlay without deleting the Job first (foreground) in the same block."""
    problems, deleted = [], False
    for words in simple_commands(code):
        words = strip_prefix(words)
        if words[:3] == ["kubectl", "delete", "job"]:
            foreground = _option(words, "--cascade") == "foreground"
            deleted = deleted or (foreground and "--ignore-not-found" in words)
        elif words[:2] == ["kubectl", "apply"] and any("jobs/overlays/" in w for w in words):
            if "--dry-run" in " ".join(words) or deleted:
                continue
            overlay = next(w for w in words if "jobs/overlays/" in w)
            problems.append(
                f"{where}: `kubectl apply` of {overlay} without `kubectl delete job NAME --cascade=foreground "
                "--ignore-not-found` before it in the block: a Job's pod template is immutable, so re-applying "
                "an edited overlay fails (and a finished Job is not run again); delete it first (its pods save "
                "and exit, the volume stays)"
            )
    return problems


def _env_values(words: list[str]) -> dict[str, str]:
    """The `-e NAME=value` settings of a `docker run` (`-e NAME` alone copies it: value '')."""
    values = {}
    for i, word in enumerate(words[:-1]):
        if word in ("-e", "--env"):
            name, _, value = words[i + 1].partition("=")
            values[name] = value
    return values


# A detached launcher on a Docker host is restarted by its policy; these keep that from billing in a loop.
DETACHED_LAUNCH_NEEDS = ("MAX_HOURS", "GPU_HOURLY_USD")
# The port `python -m trm tensorboard` serves on inside the container, published on the host's loopback.
TENSORBOARD_PUBLISH = "127.0.0.1:6006:6006"


def docker_run_problems(code: str, where: str) -> list[str]:
    """`docker run` publishing a port beyond the host's loopback; a detached launcher without a restart
    policy, without the run's budget (MAX_HOURS, GPU_HOURLY_USD) or without the TensorBoard port."""
    problems = []
    for words in simple_commands(code):
        words = strip_prefix(words)
        if words[:2] != ["docker", "run"]:
            continue
        for i, word in enumerate(words[:-1]):
            if word in ("-p", "--publish") and not words[i + 1].startswith("127.0.0.1:"):
                problems.append(
                    f"{where}: `docker run {word} {words[i + 1]}` publishes the port on every interface of the "
                    f"host (TensorBoard has no login): use {word} 127.0.0.1:{words[i + 1].rsplit(':', 1)[-1]}:"
                    f"{words[i + 1].rsplit(':', 1)[-1]} and an SSH tunnel"
                )
        if "-d" in words and _runs_training(words):
            env = _env_values(words)
            missing = [n for n in DETACHED_LAUNCH_NEEDS if not env.get(n)]
            if _option(words, "--restart") != "on-failure" or missing:
                problems.append(
                    f"{where}: a detached `docker run` of the launcher needs `--restart on-failure` (a crash or "
                    f"reboot resumes) and the run's budget `-e MAX_HOURS=… -e GPU_HOURLY_USD=…` (the restarts "
                    f"stop when it is spent); missing: {', '.join(missing) or '--restart on-failure'}"
                )
            published = [p.rsplit(":", 1)[-1] for p in _options(words, "-p", "--publish")]
            if env.get("TENSORBOARD") != "0" and TENSORBOARD_PUBLISH.rsplit(":", 1)[-1] not in published:
                problems.append(
                    f"{where}: a detached `docker run` of the launcher writes TensorBoard event files, but the "
                    f"live view cannot reach them: add `-p {TENSORBOARD_PUBLISH}` (loopback only; an SSH tunnel "
                    "reaches it) or `-e TENSORBOARD=0`"
                )
    return problems


def adapted_measure_problems(code: str, where: str) -> list[str]:
    """`trm.eval --adapt-challenges` without `--adapt-unseen-only`: the tasks that have trained rows keep
    them, so the score measures tasks the model trained on, not the hidden set the runbook means."""
    problems = []
    for words in simple_commands(code):
        words = strip_prefix(words)
        if words[1:3] != ["-m", "trm.eval"] or not words[0].startswith("python"):
            continue
        if _option(words, "--adapt-challenges") is not None and "--adapt-unseen-only" not in words:
            problems.append(
                f"{where}: `trm.eval --adapt-challenges` without `--adapt-unseen-only` also scores the tasks "
                "with trained rows (every evaluation2 task for an arc2 model): add --adapt-unseen-only"
            )
    return problems


_SECTION_NUMBER = re.compile(r"^## (\d+[a-z]?)\. ", re.M)


def section_number_problems(book: Runbook) -> list[str]:
    """Two `## Na.` sections with the same number (links and "see §Na" become ambiguous)."""
    numbers = _SECTION_NUMBER.findall(book.body)
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    return [f"{book.path}: section number {n} is used by more than one `##` heading" for n in repeated]


def journey_problems(book: Runbook) -> list[str]:
    problems = []
    for block in book.blocks:
        problems += environment_problems(block)
        if block.tier is not None:
            problems += stop_timeout_problems(block.code, block.where)
            problems += job_apply_problems(block.code, block.where)
            problems += job_copy_problems(block.code, block.where)
            problems += docker_run_problems(block.code, block.where)
            problems += adapted_measure_problems(block.code, block.where)
    return problems + variable_problems(book) + prose_figure_problems(book) + section_number_problems(book)
