"""Suites as data: `suites/*.toml` (or any file given with `--suite-file`) expanded into named experiments.

A suite is one TOML table, keyed by its id (`exp03`), over a base recipe (`trm.training.recipes`):

    [exp03]
    title = "L_cycles (latent updates per cycle), Sudoku-Extreme MLP"
    recipe = "sudoku-mlp"
    overrides = ["eval_interval=2500"]           # optional, for every experiment of the suite
    grid = { "arch.L_cycles" = [2, 4, 6, 8] }    # a cartesian product over the keys, in order...

    [exp09]
    title = "puzzle embedding on/off"
    recipe = "arc2"
    experiments = [                               # ...or a list of named variants
      { label = "with", overrides = [] },
      { label = "without", overrides = ["arch.puzzle_emb_ndim=0", "arch.puzzle_emb_len=0"] },
    ]

Experiments are named `<id><letter>` (`exp03a`, `exp03b`, …; `smoke-a` when the id does not end in a
digit) and run in `<checkpoint dir>/<run name>`, the run name spelling out what differs
(`exp03b-sudoku-mlp-L_cycles-4`). Keys are the trainer's (`python -m trm.train --help`) plus `data.<flag>`
for the flags of the recipe's dataset builder (`data.subsample_size`, `data.num_aug`, …): those change the
dataset the experiment needs (its directory name comes from the suite's `dataset` template, e.g.
`"sudoku-extreme-{subsample_size}-aug-{num_aug}"`, else from the recipe's plus the changed flags).

Every experiment's overrides are composed by the trainer's own `trm.training.config.compose` before
anything runs; an unknown key or a bad combination stops with the experiment, the file and the key.
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import re
import string
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.launch.plan.plan import merge_overrides, override_key
from trm.training.config import TrainConfig, as_dict, compose
from trm.training.recipes import RECIPES, Recipe, _hydra_value, get_recipe

SUITES_DIR = Path(__file__).parent / "suites"
DATA_PREFIX = "data."
# The `python -m trm data <builder>` flags an experiment may change (as `data.<flag>`), per builder.
DATA_FLAGS: dict[str, tuple[str, ...]] = {
    "build-arc": ("num_aug", "max_puzzles", "seed"),
    "build-sudoku": ("subsample_size", "num_aug", "min_difficulty", "seed"),
    "build-maze": ("subsample_size", "seed"),
}
# Keys whose value the runner sets for each experiment (its dataset and run directory).
RUNNER_KEYS = ("data_paths", "run_name", "checkpoint_path")
SUITE_KEYS = ("title", "recipe", "overrides", "grid", "experiments", "dataset")
VARIANT_KEYS = ("label", "overrides")
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Suite:
    """One table of a suite file."""

    id: str
    title: str
    recipe: str
    source: Path
    overrides: tuple[str, ...]
    variants: tuple[tuple[str, tuple[str, ...], dict[str, Any]], ...]
    """(label, overrides, swept values) of each experiment, in order."""
    dataset: str | None = None
    """Template of the dataset directory name when experiments change `data.*` flags."""


@dataclass(frozen=True)
class Dataset:
    """The dataset an experiment trains on and the `python -m trm data` command that builds it."""

    name: str
    builder: str
    build_args: tuple[str, ...]


@dataclass(frozen=True)
class Experiment:
    """One named run of a suite: the recipe plus the suite's and its own overrides."""

    name: str
    suite: str
    title: str
    label: str
    recipe: str
    overrides: tuple[str, ...]
    """Trainer overrides and `data.*` flags of the suite and of this experiment (in that order)."""
    swept: dict[str, Any] = field(default_factory=dict)
    """What varies across the suite: key -> this experiment's value (the recipe's where it sets none)."""
    source: str = ""
    dataset_template: str | None = None

    @property
    def where(self) -> str:
        """`experiment exp03b (suite exp03 in suites/paper.toml)` for messages."""
        return f"experiment {self.name} (suite {self.suite} in {self.source})"

    @property
    def run_name(self) -> str:
        """Readable and unique: `exp03b-sudoku-mlp-L_cycles-4`."""
        return (
            f"{self.name}-{self.recipe}-{_slug(self.label)}" if self.label else f"{self.name}-{self.recipe}"
        )

    @property
    def base(self) -> Recipe:
        return get_recipe(self.recipe)

    @property
    def trainer_overrides(self) -> tuple[str, ...]:
        """The overrides without the `data.*` flags."""
        return tuple(o for o in self.overrides if not override_key(o).startswith(DATA_PREFIX))

    @property
    def data_flags(self) -> dict[str, str]:
        """`data.<flag>` values of this experiment (flag -> value text), checked against the builder."""
        recipe = self.base
        allowed = DATA_FLAGS.get(recipe.builder, ())
        flags: dict[str, str] = {}
        for item in self.overrides:
            key = override_key(item)
            if not key.startswith(DATA_PREFIX):
                continue
            flag = key[len(DATA_PREFIX) :]
            if flag not in allowed:
                known = [DATA_PREFIX + f for f in allowed]
                match = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
                hint = f" Did you mean '{match[0]}'?" if match else ""
                raise TRMError(
                    f"{self.where}: unknown data key '{key}' in {item!r}.{hint} The {recipe.builder} "
                    f"dataset of recipe {recipe.name} takes {', '.join(known) or 'no data.* keys'}."
                )
            flags[flag] = item.split("=", 1)[1]
        return flags

    @property
    def dataset(self) -> Dataset:
        """The recipe's dataset, or the variant the `data.*` flags ask for."""
        recipe = self.base
        flags = self.data_flags
        if not flags:
            return Dataset(recipe.dataset, recipe.builder, recipe.build_args)
        args = list(recipe.build_args)
        for flag, value in flags.items():
            option = "--" + flag.replace("_", "-")
            if option in args:
                args[args.index(option) + 1] = value
            else:
                args += [option, value]
        if tuple(args) == recipe.build_args:  # the recipe's own settings: its own directory
            return Dataset(recipe.dataset, recipe.builder, recipe.build_args)
        if self.dataset_template:
            values = {**_flag_values(recipe.build_args), **flags}
            try:
                name = self.dataset_template.format(**values)
            except (KeyError, IndexError, ValueError) as err:
                raise TRMError(
                    f"{self.where}: dataset template {self.dataset_template!r} names {err}, which is not a "
                    f"flag of its build ({', '.join(sorted(values))}); use those names in braces."
                ) from None
        else:
            name = recipe.dataset + "".join(f"-{f.replace('_', '-')}-{v}" for f, v in flags.items())
        return Dataset(name, recipe.builder, tuple(args))

    def run_name_for(self, extra: Sequence[str] = ()) -> str:
        """The run name: `run_name=` among the extra overrides wins."""
        for item in reversed(extra):
            if override_key(item) == "run_name":
                return item.split("=", 1)[1]
        return self.run_name

    def train_overrides(self, data_dir: Path, checkpoint_dir: Path, extra: Sequence[str] = ()) -> list[str]:
        """The complete `python -m trm.train` overrides: recipe, paths, suite, experiment, then `extra`."""
        run_name = self.run_name_for(extra)
        base = [
            *self.base.overrides,
            f"data_paths=[{data_dir / self.dataset.name}]",
            f"run_name={run_name}",
            f"checkpoint_path={checkpoint_dir / run_name}",
        ]
        return merge_overrides(base, [*self.trainer_overrides, *extra])

    def compose(self, data_dir: Path, checkpoint_dir: Path, extra: Sequence[str] = ()) -> TrainConfig:
        """The trainer's resolved config for this experiment; errors name the experiment and the key."""
        overrides = self.train_overrides(data_dir, checkpoint_dir, extra)
        try:
            return compose(overrides)
        except TRMError as err:
            raise TRMError(f"{self.where}: {err}") from None


def _slug(text: str) -> str:
    return _SLUG.sub("-", text).strip("-")


def _flag_values(args: Sequence[str]) -> dict[str, str]:
    """`--subsample-size 1000 --num-aug 1000` -> {subsample_size: '1000', num_aug: '1000'}."""
    values: dict[str, str] = {}
    flag = None
    for arg in args:
        if arg.startswith("--"):
            flag = arg[2:].replace("-", "_")
            values[flag] = ""
        elif flag is not None:
            values[flag] = f"{values[flag]} {arg}".strip()
    return values


def _letters(index: int) -> str:
    """0 -> a, 25 -> z, 26 -> aa."""
    out = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        out = string.ascii_lowercase[rem] + out
    return out


def experiment_name(suite_id: str, index: int) -> str:
    """`exp03` + 1 -> `exp03b`; `smoke` + 0 -> `smoke-a`."""
    sep = "" if suite_id[-1:].isdigit() else "-"
    return f"{suite_id}{sep}{_letters(index)}"


def _scalar(text: str) -> Any:
    """An override's value as data for the results (`4` -> 4, `false` -> False, `1e-4` -> 0.0001)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text.strip().strip("'\"")


def _lookup(tree: Mapping[str, Any], dotted: str) -> Any:
    value: Any = tree
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _recipe_value(recipe: Recipe, key: str) -> Any:
    """The recipe's value of a swept key (a `data.*` flag from its build arguments)."""
    if key.startswith(DATA_PREFIX):
        raw = _flag_values(recipe.build_args).get(key[len(DATA_PREFIX) :])
        return None if raw is None else _scalar(raw)
    if key == "arch":
        return "trm"
    if key in RUNNER_KEYS:  # set by the runner, not the recipe
        return None
    value = _lookup(as_dict(recipe.config), key)
    if isinstance(value, str) and value.startswith("${.") and value.endswith("}"):  # a sibling key
        value = _lookup(as_dict(recipe.config), f"{key.rsplit('.', 1)[0]}.{value[3:-1]}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TRMError(f'{where} must be a list of strings like "arch.L_cycles=4"')
    for item in value:
        if "=" not in item:
            raise TRMError(f"{where}: {item!r} is not key=value")
    return tuple(value)


def _check_keys(table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            match = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
            hint = f" Did you mean '{match[0]}'?" if match else ""
            raise TRMError(f"{where}: unknown key '{key}'.{hint} A suite takes {', '.join(allowed)}.")


def parse_suite(suite_id: str, table: Any, source: Path) -> Suite:
    """One suite table -> Suite (structure only: keys, recipe, grid or list); errors name file and suite."""
    where = f"{source} [{suite_id}]"
    if not isinstance(table, dict):
        raise TRMError(f"{where}: a suite is a table (title, recipe, grid or experiments)")
    _check_keys(table, SUITE_KEYS, where)
    recipe = table.get("recipe")
    if recipe not in RECIPES:
        raise TRMError(f"{where}: recipe = {recipe!r} is not a recipe; use one of {', '.join(RECIPES)}")
    common = _strings(table.get("overrides", []), f"{where} overrides")
    grid, listed = table.get("grid"), table.get("experiments")
    if (grid is None) == (listed is None):
        raise TRMError(
            f"{where}: give either `grid` (key -> list of values) or `experiments` (a list), not both"
        )
    variants: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []
    if grid is not None:
        if (
            not isinstance(grid, dict)
            or not grid
            or not all(isinstance(v, list) and v for v in grid.values())
        ):
            raise TRMError(f"{where}: grid must map each key to a non-empty list of values")
        keys = list(grid)
        for combo in itertools.product(*(grid[k] for k in keys)):
            overrides = tuple(f"{k}={_hydra_value(v)}" for k, v in zip(keys, combo, strict=True))
            label = "-".join(
                f"{k.rsplit('.', 1)[-1]}-{_hydra_value(v)}" for k, v in zip(keys, combo, strict=True)
            )
            variants.append((label, overrides, dict(zip(keys, combo, strict=True))))
    else:
        if not isinstance(listed, list) or not listed:
            raise TRMError(f"{where}: experiments must be a non-empty list of {{label, overrides}} tables")
        labels = set()
        for i, item in enumerate(listed):
            item_where = f"{where} experiments[{i}]"
            if not isinstance(item, dict) or not isinstance(item.get("label"), str) or not item["label"]:
                raise TRMError(f'{item_where}: needs a label (a short name: "no-ema")')
            _check_keys(item, VARIANT_KEYS, item_where)
            if item["label"] in labels:
                raise TRMError(f"{item_where}: label {item['label']!r} is used twice in the suite")
            labels.add(item["label"])
            overrides = _strings(item.get("overrides", []), f"{item_where} overrides")
            swept = {override_key(o): _scalar(o.split("=", 1)[1]) for o in overrides}
            variants.append((item["label"], overrides, swept))
    # Every experiment records every swept key: the suite's or the recipe's value where it sets none.
    keys = list(dict.fromkeys(k for _label, _o, swept in variants for k in swept))
    base = get_recipe(recipe)
    suite_values = {override_key(o): _scalar(o.split("=", 1)[1]) for o in common}

    def default(key: str) -> Any:
        return suite_values[key] if key in suite_values else _recipe_value(base, key)

    filled = [
        (label, overrides, {k: swept[k] if k in swept else default(k) for k in keys})
        for label, overrides, swept in variants
    ]
    dataset = table.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        raise TRMError(f'{where}: dataset must be a name template like "sudoku-extreme-{{subsample_size}}"')
    return Suite(
        id=suite_id,
        title=str(table.get("title") or suite_id),
        recipe=recipe,
        source=source,
        overrides=common,
        variants=tuple(filled),
        dataset=dataset,
    )


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(SUITES_DIR.parents[2]))
    except ValueError:
        return str(path)


def load_file(path: Path) -> list[Suite]:
    """Every suite of one TOML file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise TRMError(f"cannot read the suite file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise TRMError(f"{path} is not valid TOML: {err}") from None
    return [parse_suite(suite_id, table, Path(_display(path))) for suite_id, table in data.items()]


def expand(suite: Suite) -> list[Experiment]:
    """The suite's experiments, named in order."""
    return [
        Experiment(
            name=experiment_name(suite.id, i),
            suite=suite.id,
            title=suite.title,
            label=label,
            recipe=suite.recipe,
            overrides=(*suite.overrides, *overrides),
            swept=swept,
            source=str(suite.source),
            dataset_template=suite.dataset,
        )
        for i, (label, overrides, swept) in enumerate(suite.variants)
    ]


def shipped_files() -> list[Path]:
    """The suite files packaged with trm-stack."""
    return sorted(SUITES_DIR.glob("*.toml"))


@dataclass
class Catalog:
    """Every experiment of the shipped suites and of extra suite files, by name."""

    suites: dict[str, Suite]
    experiments: dict[str, Experiment]

    @classmethod
    def load(cls, extra_files: Iterable[Path] = ()) -> Catalog:
        suites: dict[str, Suite] = {}
        experiments: dict[str, Experiment] = {}
        for path in [*shipped_files(), *extra_files]:
            for suite in load_file(Path(path)):
                if suite.id in suites:
                    raise TRMError(
                        f"suite {suite.id} is defined in {suites[suite.id].source} and again in {suite.source}; "
                        "rename one"
                    )
                suites[suite.id] = suite
                for exp in expand(suite):
                    if exp.name in experiments:
                        raise TRMError(f"{exp.where}: the name {exp.name} is taken by another suite")
                    experiments[exp.name] = exp
        runs: dict[str, str] = {}
        for exp in experiments.values():
            if exp.run_name in runs:
                raise TRMError(
                    f"{exp.where}: run name {exp.run_name} is also {runs[exp.run_name]}'s; give distinct labels"
                )
            runs[exp.run_name] = exp.name
        return cls(suites, experiments)

    def select(self, names: Sequence[str] = (), pattern: str | None = None) -> list[Experiment]:
        """Named experiments (a suite id selects all of its experiments) or those matching a glob pattern.

        A pattern without glob characters is a prefix (`exp01` selects exp01a, exp01b, …)."""
        if pattern is not None:
            glob = pattern if any(c in pattern for c in "*?[") else pattern + "*"
            chosen = [
                e
                for e in self.experiments.values()
                if fnmatch.fnmatchcase(e.name, glob) or e.suite == pattern
            ]
            if not chosen:
                raise TRMError(
                    f"no experiment matches --pattern {pattern!r}; `python -m trm experiment list` shows them"
                )
            return chosen
        chosen = []
        for name in names:
            if name in self.experiments:
                chosen.append(self.experiments[name])
            elif name in self.suites:
                chosen.extend(expand(self.suites[name]))
            else:
                match = difflib.get_close_matches(name, [*self.experiments, *self.suites], n=1, cutoff=0.6)
                hint = f" Did you mean {match[0]}?" if match else ""
                raise TRMError(
                    f"unknown experiment {name!r}.{hint} `python -m trm experiment list` shows them"
                )
        return list({e.name: e for e in chosen}.values())


def validate(
    experiments: Sequence[Experiment], data_dir: Path, checkpoint_dir: Path, extra: Sequence[str] = ()
) -> dict[str, TrainConfig]:
    """Compose every experiment (the first error stops everything, naming the experiment and the key)."""
    configs = {}
    for exp in experiments:
        exp.dataset  # noqa: B018 - checks the data.* keys and the dataset template
        configs[exp.name] = exp.compose(data_dir, checkpoint_dir, extra)
    return configs
