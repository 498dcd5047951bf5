"""Check that shell commands written in docs and manifests only call what exists in the project.

The checker splits a bash snippet into simple commands and verifies, for each one that points into the
project: scripts exist (and accept the flags given, read from their `--help`), make targets and nox
sessions are defined, `python -m trm …` and `python -m tools.<task> …` subcommands and flags exist (argparse
introspection of the parsers the caller passes in), `python -m <module>` / `torchrun -m <module>` modules of `trm` and `tools` exist,
and paths given to `kubectl -k/-f` exist. Commands of other tools (git, kubectl verbs, vastai) pass.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}", "|&", ";;", "!"}
_WRAPPERS = {
    "sudo",
    "env",
    "time",
    "nohup",
    "setsid",
    "exec",
    "command",
    "then",
    "do",
    "else",
    "if",
    "while",
    "until",
}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# Variables a script passes through to the system or libraries (not its own settings), and the fake
# nvidia-smi's fixture directory used in rehearsals; these need no entry in the script's --help.
_PASSTHROUGH_ENV = re.compile(
    r"^(PATH|HOME|PYTHONPATH|TMPDIR|LANG|LC_ALL|FAKE_NVIDIA_SMI_DIR|(NCCL|TORCH|CUDA|WANDB|HF|OMP)_[A-Z0-9_]+)$"
)
_PYTHONS = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$|^\$\{?PY(?:THON)?\}?$")


def logical_lines(code: str) -> Iterator[str]:
    """Lines of a snippet with `\\` continuations joined and here-document bodies dropped."""
    pending = ""
    heredoc_end: str | None = None
    for raw in code.splitlines():
        if heredoc_end is not None:
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        line = pending + raw
        pending = ""
        match = _HEREDOC.search(line)
        if match:
            heredoc_end = match.group(2)
            line = line[: match.start()]
        yield line
    if pending:
        yield pending


SKIP_MARK = "# refcheck: deliberate error"


def simple_commands(code: str) -> Iterator[list[str]]:
    """Each simple command of a snippet as a word list (operators split, comments removed).

    A line ending in `# refcheck: deliberate error` (a command shown failing on purpose) is left out.
    """
    for line in logical_lines(code):
        if line.rstrip().endswith(SKIP_MARK):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            continue  # unbalanced quotes: `bash -n` reports it
        words: list[str] = []
        skip_redirect = False
        for tok in tokens:
            if skip_redirect:
                skip_redirect = False
                continue
            if tok in _OPERATORS:
                if words:
                    yield words
                words = []
            elif set(tok) <= set("<>&"):
                skip_redirect = True  # `> file`, `2>&1`: the next word is the target
                if words and words[-1].isdigit():
                    words.pop()  # the file descriptor of `2>…`
            else:
                words.append(tok)
        if words:
            yield words


def strip_prefix(words: list[str]) -> list[str]:
    """Drop leading variable assignments and wrappers (sudo, env, time, nohup, timeout N …)."""
    i = 0
    while i < len(words):
        word = words[i]
        if _ASSIGNMENT.match(word) or word in _WRAPPERS:
            i += 1
        elif word == "timeout":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-s", "-k", "--signal", "--kill-after") else 1
            i += 1  # the duration
        else:
            break
    return words[i:]


def env_assignments(words: list[str]) -> list[str]:
    """Names of the `NAME=value` assignments at the start of a command."""
    names = []
    for word in words:
        if not _ASSIGNMENT.match(word):
            break
        names.append(word.split("=", 1)[0])
    return names


class RefChecker:
    """Verifies simple commands against one project tree (`root`)."""

    def __init__(
        self,
        root: str | Path,
        parser: argparse.ArgumentParser,
        tasks: Mapping[str, argparse.ArgumentParser] | None = None,
    ):
        """`parser`: the full `python -m trm` parser (`trm.commands.build_parser()`); `tasks`: the parser of
        each repository task by module (`tools.cli.task_parsers()`: `tools.jobs` -> its parser), whose
        flags are then checked too. Passed in because the command line runs these checks (the commands
        import the checkers, never the reverse)."""
        self.root = Path(root).resolve()
        self.parser = parser
        self.tasks = dict(tasks or {})

    @functools.cached_property
    def make_targets(self) -> set[str]:
        """Targets defined in the Makefile (from make's own database, so includes count)."""
        makefile = self.root / "Makefile"
        if not makefile.exists():
            return set()
        proc = subprocess.run(
            ["make", "-pRrq", "-f", str(makefile), ":"],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        targets = set()
        for line in proc.stdout.splitlines():
            match = re.match(r"^([A-Za-z0-9_.\-/]+):(?!=)", line)
            if match and not match.group(1).startswith("."):
                targets.add(match.group(1))
        return targets

    @functools.cached_property
    def nox_sessions(self) -> set[str]:
        """Session names of noxfile.py (functions decorated with `@nox.session`)."""
        noxfile = self.root / "noxfile.py"
        if not noxfile.exists():
            return set()
        text = noxfile.read_text(encoding="utf-8")
        sessions = set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def ([A-Za-z_0-9]+)\(", text))
        sessions |= set(re.findall(r"@nox\.session\([^)]*name=['\"]([^'\"]+)['\"]", text))
        return sessions

    @functools.cache  # noqa: B019 — one checker per tree, few scripts
    def script_help(self, script: str) -> str:
        """What `bash SCRIPT --help` prints (empty when it has no help)."""
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        proc = subprocess.run(
            ["bash", script, "--help"],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return proc.stdout + proc.stderr if proc.returncode == 0 else ""

    def check(self, words: list[str]) -> list[str]:
        """Problems with one simple command (empty when it only calls what exists)."""
        assigned = env_assignments(words)
        words = strip_prefix(words)
        if not words:
            return []
        head = words[0]
        if head in ("bash", "sh") and len(words) > 1 and not words[1].startswith("-"):
            return self._script(words[1], words[2:], assigned)
        if head.startswith(("scripts/", "./scripts/")):
            return self._script(head, words[1:], assigned)
        if head == "make":
            return self._make(words[1:])
        if head == "nox" or head.endswith("/nox"):
            return self._nox(words[1:])
        if head == "trm":
            return self._trm(words[1:])
        if _PYTHONS.match(head) and len(words) > 2 and words[1] == "-m":
            return self._module(words[2], words[3:])
        if head == "torchrun":
            return self._torchrun(words[1:])
        if head == "kubectl":
            return self._kubectl(words[1:]) + self._inner_command(words[1:])
        if head == "docker" and words[1:2] and words[1] in ("run", "exec", "create"):
            return self._inner_command(words[2:])
        return []

    def check_code(self, code: str) -> list[str]:
        """Problems in every command of a snippet."""
        problems = []
        for words in simple_commands(code):
            problems += [f"`{shlex.join(words)}`: {p}" for p in self.check(words)]
        return problems

    # --- individual kinds of references -------------------------------------------------------------

    def _script(self, script: str, args: list[str], assigned: list[str]) -> list[str]:
        path = script[2:] if script.startswith("./") else script
        if "$" in path or not path.startswith("scripts/"):
            return []
        if not (self.root / path).is_file():
            return [f"script {path} does not exist"]
        flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        if not flags and not assigned:
            return []
        help_text = self.script_help(path)
        if not help_text:
            return [f"{path} --help fails, so its flags cannot be checked"] if flags else []
        problems = [
            f"{path} has no flag {flag} (not in its --help)" for flag in flags if flag not in help_text
        ]
        problems += [
            f"{path} does not document the variable {name} in its --help"
            for name in assigned
            if name.isupper()
            and not _PASSTHROUGH_ENV.match(name)
            and not re.search(rf"\b{name}\b", help_text)
        ]
        return problems

    def _make(self, args: list[str]) -> list[str]:
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        return [
            f"make target {t!r} is not defined in the Makefile" for t in targets if t not in self.make_targets
        ]

    def _nox(self, args: list[str]) -> list[str]:
        problems = []
        for i, arg in enumerate(args):
            if arg == "--":
                break
            if arg in ("-s", "--session", "--sessions") and i + 1 < len(args):
                name = args[i + 1]
                if name not in self.nox_sessions:
                    problems.append(f"nox session {name!r} does not exist in noxfile.py")
        return problems

    def _module(self, module: str, args: list[str]) -> list[str]:
        if module == "trm":
            return self._trm(args)
        if module.split(".")[0] not in ("trm", "tools"):
            return []
        rel = Path(*module.split("."))
        if not (
            (self.root / rel).with_suffix(".py").is_file() or (self.root / rel / "__main__.py").is_file()
        ):
            return [f"module {module} does not exist (no {rel}.py)"]
        if module == "trm.train":
            return check_train_overrides(args)
        if module in self.tasks:
            return check_argv(self.tasks[module], args)
        return []

    def _inner_command(self, args: list[str]) -> list[str]:
        """The command a container runs (`docker run … IMAGE python -m trm …`, `kubectl exec … -- …`)."""
        if "--" in args:
            return self.check(args[args.index("--") + 1 :])
        for i, word in enumerate(args):
            if _PYTHONS.match(word) and args[i + 1 : i + 2] == ["-m"]:
                return self.check(args[i:])
        return []

    def _torchrun(self, args: list[str]) -> list[str]:
        for i, arg in enumerate(args):
            if arg == "-m" and i + 1 < len(args):
                return self._module(args[i + 1], args[i + 2 :])
            if arg.endswith(".py") and not arg.startswith("-"):
                return [] if (self.root / arg).is_file() else [f"training script {arg} does not exist"]
        return []

    def _kubectl(self, args: list[str]) -> list[str]:
        problems = []
        for i, arg in enumerate(args):
            target = None
            if arg in ("-k", "--kustomize", "-f", "--filename") and i + 1 < len(args):
                target = args[i + 1]
            elif args[:1] == ["kustomize"] and i == 1:
                target = arg
            if target and target.startswith("jobs/") and "$" not in target:
                if not (self.root / target).exists():
                    problems.append(f"{target} does not exist")
                elif (arg in ("-k", "--kustomize") or args[:1] == ["kustomize"]) and not (
                    self.root / target / "kustomization.yaml"
                ).is_file():
                    problems.append(f"{target} has no kustomization.yaml")
        return problems

    def _trm(self, args: list[str]) -> list[str]:
        return check_argv(self.parser, args)


_OVERRIDE = re.compile(r"^[+~]{0,2}[A-Za-z_][A-Za-z0-9_.]*=")


def check_train_overrides(args: list[str]) -> list[str]:
    """Hydra overrides of `python -m trm.train` that the trainer's config rejects (unknown keys, bad values).

    Overrides whose value uses a shell variable are left out (their value is only known at run time).
    """
    overrides = [a for a in args if _OVERRIDE.match(a) and "$" not in a]
    if not overrides or "--help" in args:
        return []
    from trm.errors import TRMError
    from trm.training import config

    try:
        config.compose(overrides)
    except TRMError as err:
        return [f"trainer config: {err}"]
    return []


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def check_argv(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """Subcommands and flags of `args` that `parser` does not define (values are not checked)."""
    problems: list[str] = []
    prog = parser.prog
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            name = arg.split("=", 1)[0]
            action = parser._option_string_actions.get(name)
            if action is None:
                problems.append(f"`{prog}` has no option {name}")
                i += 1
                continue
            i += 1
            if "=" in arg or action.nargs == 0:
                continue
            if action.nargs in (None, 1, "?"):
                if action.nargs != "?" or (i < len(args) and not args[i].startswith("-")):
                    i += 1
            elif isinstance(action.nargs, int):
                i += action.nargs
            else:  # '*', '+': values run to the next option
                while i < len(args) and not args[i].startswith("-"):
                    i += 1
            continue
        sub = _subparsers(parser)
        if sub is not None:
            if arg in sub.choices:
                parser = sub.choices[arg]
                prog = parser.prog
            elif "$" not in arg:
                problems.append(f"`{prog}` has no subcommand {arg!r} (have: {', '.join(sub.choices)})")
                return problems
        i += 1
    return problems
