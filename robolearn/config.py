"""Typed run configuration: dataclasses loaded from YAML plus ``key=value`` overrides.

Unknown keys and values of the wrong type are errors that name the key and what
is allowed, so a typo never silently trains the wrong thing. The ``agent``
section is validated against the chosen algorithm's own config dataclass.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import datetime
import difflib
import itertools
import json
import math
import numbers
import re
import shlex
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import yaml

from robolearn.shell import shell

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_CONFIG = "ppo_cartpole"


class ConfigError(ValueError):
    """A config that cannot be used; the message says which key and what to fix."""


@dataclass
class EnvConfig:
    """Which simulator and task, and how many worlds."""

    task: str = "cartpole"  # a sims task name, or gym:<Gymnasium id>
    num_envs: int = 64
    backend: Literal["mujoco", "warp"] = "mujoco"  # warp: MuJoCo Warp on `device` (cuda:N; cpu only for tests)
    device: str = "cpu"
    num_threads: int = 0  # 0: one per core
    kwargs: dict[str, Any] = field(default_factory=dict)  # task-specific settings
    # training only: each world's first episode starts at a random step of its time limit, so that episodes
    # end staggered, not all on one step (legged_gym's init_at_random_ep_len; sims.task.start_at_random_steps)
    # (a resume always staggers them, where the env allows: robolearn.registry.stagger_episodes)
    random_episode_start: bool = False
    # domain randomization (sims/randomization.py: ranges, latency, noise, auto); empty: none
    randomization: dict[str, Any] = field(default_factory=dict)
    # fixed observation delay / action latency in control steps (sims/delay.py), any task incl. gym:; empty: none
    delay: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunnerConfig:
    """How long to train and what to save."""

    total_steps: int = 1_000_000  # env steps, summed over envs
    # also stop (then export and evaluate as usual) before an iteration that would end past this much training,
    # judged by the last one's length (an iteration is never cut short), spanning any pretraining or offline
    # phase (a run it ends there exports what that phase has trained; a resume goes on with it); 0: no limit
    max_minutes: float = 0.0
    random_steps: int = 10_000  # off-policy only: uniform random actions first
    utd_ratio: float = 1.0  # off-policy only: gradient updates per env step collected
    checkpoint_every: int = 50  # iterations (on-policy) or 1000s of env steps (off-policy)
    log_every: int = 1  # iterations between metric lines
    eval_episodes: int = 10
    video_seconds: float = 8.0  # 0 disables the video
    # torch intra-op threads for the networks (physics has its own native threads).
    # 1 by default: on a 2-core machine shared with the physics threads, 2 torch
    # threads ran PPO 8x slower (1.1k vs 9.2k env steps/s on Pendulum). 0: torch's default.
    torch_threads: int = 1
    # float32 matmul precision (torch.set_float32_matmul_precision). "medium" rounds matmul
    # inputs to bfloat16 and accumulates in float32 (oneDNN on CPUs with AMX / AVX512-BF16,
    # 3.6x faster 256x256 layers on this machine; TF32 on NVIDIA GPUs); "highest": plain float32.
    matmul_precision: Literal["highest", "high", "medium"] = "highest"
    # Flush denormal floats to zero on CPU. Adam's second moments of tiny gradients decay
    # into denormals, and x86 computes on those about 7x slower: fused Adam took 0.56 ms
    # instead of 0.08 ms per TD3+BC update on hopper-medium. Values below 1.2e-38 become 0.
    flush_denormal: bool = True

    def apply_torch_settings(self) -> TorchSettings:
        """Threads and matmul precision for this process (runners call it before building agents); returns the
        settings it replaced, for the caller to put back (:meth:`TorchSettings.restore`)."""
        before = TorchSettings()
        if self.torch_threads > 0:
            torch.set_num_threads(self.torch_threads)
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.set_flush_denormal(self.flush_denormal)  # False where the CPU cannot (no SSE3): nothing changes
        return before


def denormals_flushed() -> bool:
    """Whether ``torch.set_flush_denormal`` is on (torch has no getter): a float32 denormal halved on the CPU comes
    out 0. Float32 and CPU named: under a float64 default dtype 1e-38 is no denormal, and flushing is the CPU's."""
    return bool((torch.tensor([1e-38], dtype=torch.float32, device="cpu") * 0.5).item() == 0.0)


class TorchSettings:
    """torch's threads, matmul precision and denormal flushing as they are now (what
    :meth:`RunnerConfig.apply_torch_settings` sets), to put back with :meth:`restore`."""

    def __init__(self) -> None:
        self.threads, self.precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
        self.flushing = denormals_flushed()

    def restore(self) -> None:
        torch.set_num_threads(self.threads)
        torch.set_float32_matmul_precision(self.precision)
        torch.set_flush_denormal(self.flushing)


@contextlib.contextmanager
def torch_settings_kept() -> Iterator[None]:
    """Put torch's threads, matmul precision and denormal flushing back as they were on leaving: a run sets them for
    itself (:meth:`RunnerConfig.apply_torch_settings`), and a script that went on after ``train()`` had computed on
    one thread (``runner.torch_threads``' default) at the run's precision."""
    before = TorchSettings()
    try:
        yield
    finally:
        before.restore()


@dataclass
class LoggingConfig:
    wandb: Literal["offline", "online", "disabled"] = "offline"
    project: str = "robolearn"
    progress: bool = True
    group: str = ""  # W&B's run group (the seeds of one setting), and its tags
    tags: tuple[str, ...] = ()

    def logger_args(self, run_name: str) -> dict[str, Any]:
        """What a run's :class:`~robolearn.logger.RunLogger` takes from these settings."""
        return {"wandb_mode": self.wandb, "project": self.project, "name": run_name, "progress": self.progress,
                "group": self.group, "tags": self.tags}


@dataclass
class TrainConfig:
    """One training run: everything needed to reproduce it."""

    algo: str = "ppo"
    name: str = ""  # run name: the config file's name (load_config), else <algo>_<task>
    seed: int = 0
    run_dir: str = "runs"
    dataset: str = ""  # offline algorithms: the dataset to train on (`robolearn dataset list`)
    env: EnvConfig = field(default_factory=EnvConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    agent: Any = None  # the algorithm's config dataclass, filled by load_config

    @property
    def run_name(self) -> str:
        return self.name or "_".join(part.replace(":", "_").replace("/", "_") for part in (self.algo, self.env.task))


def resolve_config_path(name_or_path: str | None) -> Path:
    """A YAML path, or the name of a file in configs/ (with or without .yaml)."""
    name = name_or_path or DEFAULT_CONFIG
    # configs/<name>.yaml from outside the repository (as the configs' own comments write it) is ours
    shipped = CONFIG_DIR / Path(name).name if Path(name).parent == Path("configs") else CONFIG_DIR / name
    for candidate in (Path(name), CONFIG_DIR / name, CONFIG_DIR / f"{name}.yaml", shipped):
        if candidate.is_file():
            return candidate
    if Path(name).is_dir() and not (Path(name) / "config.yaml").is_file():
        raise ConfigError(f"{name}: a folder; give a config's YAML file (or a name in configs/)")
    if (Path(name) / "config.yaml").is_file():  # a run's folder: its config is read by --resume
        raise ConfigError(f"{name} is a run: continue it with {shell('robolearn', 'train', '--resume', name)} "
                          f"(from Python: robolearn.train(resume={str(name)!r})); a config is a YAML file or a "
                          "name in configs/")
    stems = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    close = difflib.get_close_matches(Path(name).stem, stems, n=1)
    hint = f"did you mean '{close[0]}'? or " if close else ""
    raise ConfigError(f"no config '{name}': {hint}give a YAML path or one of: {', '.join(stems)}")


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``; a syntax error is a :class:`ConfigError` naming the file and line."""
    try:
        return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {_yaml_problem(err)}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {err.start}); a config is YAML text") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last: ``algo: ppo``
    then ``algo: sac`` would train SAC without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # `<<: *defaults` (merged by PyYAML after this) and complex keys: as PyYAML takes them
            if node.flow_style and _glued(key_node, value_node):  # {gamma:0.9}: as an override's is refused (it had
                name, _, rest = key_node.value.partition(":")  # been "unknown key 'agent.gamma:0.9'")
                raise yaml.constructor.ConstructorError(
                    None, None, f"'{key_node.value}' is read as one key with no value (a mapping's colon needs a space "
                                f"after it): write '{name}: {rest}'", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"'{key}' is given twice (lines {seen[key]} and {key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _glued(key: yaml.ScalarNode, value: yaml.Node) -> bool:
    """Whether YAML read ``key: value`` from ``name:value`` written without the space after its colon: a plain
    key holding a colon, of an empty value that no colon of its own gave (``gym:id: null``, ``gym:id:``, an
    explicit ``? gym:id`` and a quoted key are written so on purpose)."""
    empty = isinstance(value, yaml.ScalarNode) and value.tag == "tag:yaml.org,2002:null" and value.value == ""
    if not (empty and key.style is None and ":" in key.value.strip(":")):
        return False
    text = key.start_mark.buffer  # (the document's text: read_yaml loads a string)
    if not isinstance(text, str):
        return True
    explicit = text[:key.start_mark.index].rstrip().endswith("?")
    return not explicit and ":" not in text[key.end_mark.index:value.start_mark.index]


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line out of PyYAML's multi-line error: where, what, and what to fix."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    opened = f" ({context} opened at line {start.line + 1})" if context and start else ""
    return f"{where}invalid YAML: {problem}{opened}; fix the syntax"


def load_config(path: str | Path | None, overrides: str | Sequence[str] | Mapping[str, Any] = ()) -> TrainConfig:
    """Read ``path`` (a config's name such as ``"ppo_cartpole"``, a YAML path as a str or Path, or None: the
    default config), apply ``key=value`` overrides (a list, one string, or a mapping
    ``{"runner.total_steps": 1e5}``), validate. A dict of settings is :func:`config_from_dict`'s."""
    if isinstance(overrides, str):
        overrides = [overrides]
    if overrides is not None and not isinstance(overrides, (Mapping, list, tuple)):
        raise TypeError(f"overrides: 'key=value' strings (a list, or one) or a mapping {{key: value}}; got "
                        f"{type(overrides).__name__} {overrides!r:.60}")
    if isinstance(path, TrainConfig):  # (it had been looked up as a config named after its repr)
        raise TypeError("load_config(path): this is already a TrainConfig; train() takes it as it is "
                        "(dataclasses.replace(cfg, ...) changes a section)")
    if isinstance(path, Mapping):  # (it had been said as "no config '{...}'" and every config's name)
        raise TypeError("load_config(path) reads a config file (a name such as 'ppo_cartpole', or a YAML path); "
                        "a dict of settings is robolearn.config.config_from_dict(raw)")
    file = resolve_config_path(str(path) if path else None)
    raw = read_yaml(file)
    if raw is None:  # an empty file (or comments only) would train the defaults without a word
        check_run_config(file, {})  # (a run's emptied config.yaml: told how to restore it, not what a config sets)
        raise ConfigError(f"{file}: empty; a config sets at least algo and env (configs/ppo_cartpole.yaml is one)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping of keys")
    check_run_config(file, raw)
    file_task = _task_of(raw)
    as_written = copy.deepcopy(raw)
    _apply_overrides(raw, overrides)
    if "name" not in raw:
        # runs are named after their config file (runs/srl_hopper_j16/<time>), not only its algo and task, which
        # several configs share; and its task where an override changed it. A run's own config.yaml always
        # has the key, so a resume keeps the name it had
        task = _task_of(raw)
        raw["name"] = file.stem if task == file_task else f"{file.stem}_{str(task).replace(':', '_').replace('/', '_')}"
    try:
        with _given_in_python(overrides if isinstance(overrides, Mapping) else ()):
            return config_from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"{file}: {err}" if _fails_alike(as_written, err) else str(err)) from None


def refuse_algo_change(run_dir: str | Path, overrides: str | Sequence[str] | Mapping[str, Any]) -> None:
    """A resume goes on with its run's algorithm (its checkpoint holds that algorithm's networks and optimizer):
    an ``algo=`` override is refused in one line naming both, as ``env.task`` is (it had failed on the run's agent
    section as another algorithm's unknown keys, ``did you mean ...``, which a resume cannot act on)."""
    if isinstance(overrides, str):
        overrides = [overrides]
    probe: dict[str, Any] = {}
    _apply_overrides(probe, overrides)  # (a malformed override is said here as load_config says it)
    if "algo" not in probe:
        return
    try:
        trained = read_yaml(run_config_path(run_dir)).get("algo")
    except (OSError, ValueError, AttributeError):
        return  # the resume says what is wrong with its config
    if trained is not None and probe["algo"] != trained:
        raise ConfigError(f"algo: {run_dir} trained with '{trained}'; a resume goes on with its algorithm, not "
                          f"'{probe['algo']}': drop algo=, or train a new run with it")


def _apply_overrides(raw: dict[str, Any], overrides: Sequence[str] | Mapping[str, Any] | None) -> None:
    """Set each override in ``raw``, in order: ``key=value`` strings (the value read as YAML), or a mapping's
    values as they are (typed and checked later, as YAML's are). None: none (load_config's check lets it through)."""
    if overrides is None:  # (it had failed as "'NoneType' object is not iterable")
        return
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            _set_dotted(raw, str(key).strip(), _plain(value))
        return
    overrides = list(overrides)
    for at, item in enumerate(overrides):
        if not isinstance(item, str):
            raise TypeError(f"overrides must be 'key=value' strings, got {item!r}")
        key, sep, value = item.partition("=")
        if not sep or not key:
            before = overrides[at - 1] if at else None  # `name=my run` unquoted: the shell passed `run` on its own
            # `seed 3`, `runner.seed 3`: a setting without its '=' (`run.v2` of `name=my run.v2` is no key)
            a_key = item.split(".")[0] in {f.name for f in dataclasses.fields(TrainConfig)}
            words = list(itertools.takewhile(lambda word: isinstance(word, str) and "=" not in word, overrides[at:]))
            split = (f"; if it goes with the one before, a shell split that at its space: quote the whole override, "
                     f"{shell(' '.join([before, *words]))}") if not sep and not a_key and isinstance(before, str) \
                and "=" in before else ""  # (every word of `name=my new run` up to the next override)
            raise ConfigError(f"override '{item}' must look like key=value (e.g. runner.total_steps=100000){split}")
        comment = "'#' at the start" if value.strip().startswith("#") else "' #'"  # (YAML's comments)
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as err:
            if _parses_without_comments(value):  # [a, b #c]: the comment took the closing bracket with it
                example = "{name: 'run #1'}" if value.strip().startswith("{") else "['run #1']"
                raise ConfigError(f"override '{item}': {comment} starts a comment in YAML, which cut off the rest of "
                                  "the value, its closing brackets too; quote the item that holds it, in YAML's quotes "
                                  f"inside the shell's (e.g. \"{key.strip()}={example}\")") from None
            raise ConfigError(f"override '{item}': {_yaml_problem(err)} "
                              f"({_split_by_a_shell(overrides[at:]) or 'quote strings, close brackets'})") from None
        # YAML took the rest for a comment (a quoted '#' stays)
        if re.search(r"(^|\s)#", value) and "#" not in repr(parsed):
            raise ConfigError(f"override '{item}': {comment} starts a comment in YAML, which would drop what "
                              f"follows; quote the value: {_quoted_twice(key.strip(), value.strip())} (the outer "
                              "quotes for a shell, the inner for YAML)")
        if said := _read_otherwise(key.strip(), value.strip(), parsed) or _read_otherwise_within(value, parsed):
            raise ConfigError(f"override '{item}': {said}")
        glued = _glued_key(parsed)  # {gamma:0.9}: YAML's one key 'gamma:0.9', of no value (not one quoted so)
        if glued is not None and f"'{glued}'" not in value and f'"{glued}"' not in value:
            name, _, rest = glued.partition(":")
            raise ConfigError(f"override '{item}': YAML reads '{glued}' as one key with no value (a mapping's colon "
                              f"needs a space after it): write {{{name}: {rest}}}")
        _set_dotted(raw, key.strip(), parsed)


def _parses_without_comments(value: str) -> bool:
    """Whether ``value``, which YAML does not read, would read with each '#' that starts a comment (at the start, or
    after a space) taken as a plain character: then the comment is what broke it."""
    if not re.search(r"(^|\s)#", value):
        return False
    try:
        yaml.safe_load(re.sub(r"(^|\s)#", r"\1x", value))
    except yaml.YAMLError:
        return False
    return True


def _quoted_twice(key: str, text: str) -> str:
    """``key=text`` with ``text`` quoted for YAML and the whole for a shell: in double quotes, what a shell reads in
    those (``$5``, a backquote, ``"``, ``\\``) escaped, or in single ones where it holds a ``!`` (bash's history);
    YAML's single quotes double a ``'``."""
    yaml_text = "'" + text.replace("'", "''") + "'"
    override = f"{key}={yaml_text}"
    if "!" in override:
        return shell(override)
    return '"' + re.sub(r'([\\"$`])', r"\\\1", override) + '"'


def _split_by_a_shell(items: Sequence[Any]) -> str:
    """How to pass ``items[0]`` whole where it and the items after it, joined by spaces, read as one value: a shell
    splits ``agent.actor_hidden=[64, 64]`` at its space into ``agent.actor_hidden=[64,`` and ``64]``, and the first
    had been told to close its brackets, which it does; else ''."""
    for end in range(2, len(items) + 1):
        if not all(isinstance(item, str) for item in items[:end]):
            break
        joined = " ".join(items[:end])
        with contextlib.suppress(yaml.YAMLError):
            yaml.safe_load(joined.partition("=")[2])
            return f"a shell split it at its spaces: quote the whole override, {shell(joined)}"
    return ""


def _read_otherwise(key: str, text: str, parsed: Any) -> str | None:
    """What YAML 1.1 made of a number written with a leading 0 (octal: ``seed=010`` is 8, the seed of ``008``
    too) or with colons (base 60: ``1:30`` is 90), where that is not the number as written; else None."""
    if not (misread := _misread(text, parsed)):
        return None
    said, meant = misread
    return (f"{said}; write {'it without the 0s' if meant else 'the number itself'} ({key}={meant or '...'}), or quote "
            f"it for text ({_quoted_twice(key, text)} on a command line)")


def misread_number(text: str) -> str | None:
    """Where YAML 1.1 reads the number ``text`` is, or one its list or mapping holds, as octal or base 60, not as
    written: what it read and what to write (deploy's ``--safety stop_after_s=010``, 8 s); else None."""
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if misread := _misread(text.strip(), parsed):
        said, meant = misread
        return f"{said}; write {_write_instead(meant)}"
    return _read_otherwise_within(text, parsed)


def _read_otherwise_within(text: str, parsed: Any) -> str | None:
    """:func:`_read_otherwise` for the numbers a list or mapping holds (``agent.actor_hidden=[064, 064]`` had been
    [52, 52]); else None."""
    if not isinstance(parsed, (list, dict)):
        return None
    nodes = [yaml.compose(text)]
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, yaml.SequenceNode):
            nodes.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            nodes.extend(value for _, value in node.value)
        elif isinstance(node, yaml.ScalarNode) and node.tag.endswith((":int", ":float")) and \
                (misread := _misread(node.value, yaml.safe_load(node.value))):  # (a quoted one is text: a str tag)
            said, meant = misread
            return f"{said}; write {_write_instead(meant)}, or quote it for text ('{node.value}')"
    return None


def _write_instead(meant: str) -> str:
    """What to write for a number :func:`_misread` found misread: ``meant`` (its digits), or, where that is ''
    (base 60), the number itself."""
    return f"it without the 0s ({meant})" if meant else "the number itself"


def _misread(text: str, parsed: Any) -> tuple[str, str] | None:
    """What YAML 1.1 read a plain number ``text`` as (``parsed``) where that is not the number as written, and the
    number written without its leading 0s ('' for base 60); else None."""
    if isinstance(parsed, bool) or not isinstance(parsed, (int, float)):
        return None
    if re.fullmatch(r"[-+]?0[0-7_]+", text) and int(text.replace("_", ""), 10) != parsed:
        return f"YAML reads a number with a leading 0 as octal, {text} as {parsed}", str(int(text.replace("_", ""), 10))
    if re.fullmatch(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?", text):
        return f"YAML reads a number with colons in base 60, {text} as {parsed}", ""
    return None


def _glued_key(value: Any) -> str | None:
    """A mapping key in ``value`` (nested too) that YAML read as ``name:value`` with no value, the colon written
    without a space after it; None where there is none."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and item is None and ":" in key.strip(":"):
                return key
            if (found := _glued_key(item)) is not None:
                return found
    if isinstance(value, list):
        return next((found for item in value if (found := _glued_key(item)) is not None), None)
    return None


def _fails_alike(raw: dict[str, Any], err: ConfigError) -> bool:
    """Whether the file as written, no overrides, fails with ``err`` too: then the error names the file (a
    resumed run's misspelt key in its config.yaml), and an override's own mistake is not blamed on it."""
    try:
        config_from_dict(raw)
    except ConfigError as again:
        return str(again) == str(err)
    return False


def _task_of(raw: dict[str, Any]) -> Any:
    """``env.task`` of a raw config (None where it is not given, or ``env`` is not a section)."""
    env = raw.get("env")
    return env.get("task") if isinstance(env, dict) else None


def flat_keys(raw: Any, prefix: str = "") -> dict[str, Any]:
    """A config's plain data as ``{"agent.gamma": 0.99, ...}``: the keys overrides name."""
    if not isinstance(raw, dict):
        return {prefix.rstrip("."): raw} if prefix else {}
    return {k: v for key, value in raw.items() for k, v in flat_keys(value, f"{prefix}{key}.").items()}


RUN_SECTIONS = ("algo", "env", "runner", "agent")  # what every run's config.yaml holds (write_config)


def check_run_config(path: Path, raw: dict[str, Any]) -> None:
    """Refuse a run's ``config.yaml`` without all of :data:`RUN_SECTIONS` (cut short, or edited): the defaults
    would fill them in, and a resume or an evaluation would silently run another task or budget. Says how to
    restore it from the run's checkpoint. A config of one's own (not in a run directory) may leave them out."""
    run_dir = path.parent
    if path.name != "config.yaml" or not ((run_dir / "checkpoints").is_dir() or (run_dir / "metrics.jsonl").is_file()):
        return
    if missing := [key for key in RUN_SECTIONS if key not in raw]:
        checkpoint = run_dir / "checkpoints" / "latest.pt"
        code = (f"import torch, yaml; c = torch.load({str(checkpoint)!r}, map_location='cpu', weights_only=True)"
                f"['config']; open({str(path)!r}, 'w').write(yaml.safe_dump(c, sort_keys=False))")
        restore = f"; its checkpoint keeps the config it trained with: python3 -c {shlex.quote(code)}" \
            if checkpoint.is_file() else ""
        what = f"incomplete, without {', '.join(missing)}" if raw else "empty"
        raise ConfigError(f"{path}: {what} (cut short or edited?): a run's config holds every section{restore}")


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The config a run was trained with (``<run_dir>/config.yaml``); errors name the file."""
    path = run_config_path(run_dir)
    raw = read_yaml(path)
    if raw is None:  # emptied: told how to restore it, as one cut short is
        check_run_config(path, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    check_run_config(path, raw)
    try:
        return config_from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def run_config_path(run_dir: str | Path) -> Path:
    """``run_dir``'s ``config.yaml``; a path that is no run is told what it is instead and what to give."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: {_not_a_run(Path(run_dir))}")
    return path


def _not_a_run(path: Path) -> str:
    """What ``path``, given where a run's folder was expected, is instead, and what to give."""
    if path.name == "config.yaml" and path.is_file():
        return f"give the run's folder, {path.parent}, not its config.yaml"
    if path.is_file() and (run := run_above(path)):  # <run>/export/controller.onnx, <run>/eval.json
        return f"a file in the run {run} ({path.resolve().relative_to(run.resolve())}); give the run's folder itself"
    if path.is_file() and path.suffix in (".yaml", ".yml"):  # (had been only "a file, not a run's folder")
        return (f"a config file, not a run's folder (runs/<name>/<time>, which training it makes: robolearn train "
                f"{path}; from Python train(load_config(path)), and make_env(load_config(path)) builds its env)")
    if path.is_file():
        return "a file, not a run's folder (runs/<name>/<time>)"
    from robolearn.runs import find_run_dirs  # (runs imports this module)

    if path.is_dir() and (runs := find_run_dirs(path)):
        newest = max(runs, key=lambda run: run.stat().st_mtime)
        return f"a folder of {len(runs)} run(s), not one; give one of them, e.g. the newest: {newest}"
    if path.is_dir() and (run := run_above(path)):  # <run>/export, <run>/deploy/<time>
        return f"a folder inside the run {run} ({path.resolve().relative_to(run.resolve())}); give the run's folder itself"
    if not path.exists() and (CONFIG_DIR / f"{path.name}.yaml").is_file():
        return (f"no such folder; '{path.name}' is a config (robolearn train {path.name} trains it; "
                "robolearn list shows the runs)")
    return "not a run directory (no config.yaml)" if path.exists() else "no such run directory"


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a run's: a run's config.yaml and what a run writes beside it (metrics.jsonl or
    checkpoints/; a project's own config.yaml is no run)."""
    return (folder / "config.yaml").is_file() and ((folder / "metrics.jsonl").is_file() or (folder / "checkpoints").is_dir())


def run_above(path: Path) -> Path | None:
    """The run folder (:func:`is_run_folder`) that ``path`` lies in: the nearest one above it, as given where it can."""
    for folder in (*path.parents, *path.resolve().parents):  # as given first (a relative run said relative)
        if is_run_folder(folder):
            return folder
    return None


def config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    """A validated :class:`TrainConfig` from plain data; the ``agent`` section is the settings of ``algo``
    (one of ``policies.AGENTS``, or ``module:Class`` for an algorithm of one's own)."""
    from policies import agent_entry

    raw = dict(raw)
    agent_raw = raw.pop("agent", None) or {}
    cfg = build_dataclass(TrainConfig, raw, "")
    if cfg.env.num_envs < 1:
        raise ConfigError(f"env.num_envs: must be at least 1, got {cfg.env.num_envs}")
    if cfg.env.num_envs > 2**31 - 1:  # MuJoCo's C int (sims.MAX_ENVS): said here, before anything is built
        raise ConfigError(f"env.num_envs: must be at most {2**31 - 1}, got {cfg.env.num_envs:.4g}")
    if cfg.runner.total_steps < 0:  # 0 is meaningful: an offline-to-online run that only pretrains
        raise ConfigError(f"runner.total_steps: must not be negative, got {cfg.runner.total_steps}")
    for key in ("checkpoint_every", "log_every"):
        if getattr(cfg.runner, key) < 1:
            raise ConfigError(f"runner.{key}: must be at least 1 (every iteration), got {getattr(cfg.runner, key)}")
    for key in ("eval_episodes", "random_steps", "video_seconds", "max_minutes", "utd_ratio"):
        if getattr(cfg.runner, key) < 0:
            raise ConfigError(f"runner.{key}: must not be negative (0 turns it off), got {getattr(cfg.runner, key)}")
    if ".." in Path(cfg.name).parts or Path(cfg.name).is_absolute():
        raise ConfigError(f"name: {cfg.name!r} would put the run outside run_dir; give a folder name (e.g. pend_base)")
    config_cls = agent_entry(cfg.algo)[0]
    if not isinstance(agent_raw, dict):
        raise ConfigError(f"agent: must be a mapping of the algorithm's settings{_one_text(agent_raw, config_cls)}")
    try:
        cfg.agent = build_dataclass(config_cls, agent_raw, "agent.")
    except ConfigError as err:
        unknown = sorted(set(agent_raw) - {f.name for f in dataclasses.fields(config_cls)})
        owners = _algorithms_with(unknown[0]) if unknown else []
        if owners:  # the section is another algorithm's (algo= changed on a config written for it)
            raise ConfigError(f"{err}; '{unknown[0]}' is a setting of {', '.join(owners)}: the agent section "
                              f"is for algo '{cfg.algo}'") from None
        raise
    return cfg


def _algorithms_with(key: str) -> list[str]:
    """The algorithms (``policies.AGENTS``) whose settings include ``key``."""
    from policies import AGENTS

    return sorted(name for name, (config_cls, _) in AGENTS.items()
                  if key in {f.name for f in dataclasses.fields(config_cls)})


def validated(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` checked as :func:`load_config` checks a YAML file, and rebuilt: a config built or changed
    in Python (``cfg.env.num_envs = "lots"``, an agent config of another algorithm) is a one-line error
    here, not a failure deep inside a run."""
    refuse_none_sections(cfg)
    try:
        raw = to_dict(cfg)
    except TypeError as err:  # json: a value that is not plain data (a Path, a tensor...)
        raise ConfigError(f"config values must be plain data (numbers, strings, lists, mappings): {err}") from None
    with _given_in_python([""]):
        return config_from_dict(raw)


_PYTHON_KEYS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("python_keys", default=frozenset())


@contextlib.contextmanager
def _given_in_python(keys: typing.Iterable[str]) -> Iterator[None]:
    """While a config is built: the dotted keys (and the sections, "" for all) whose values were given in Python,
    a mapping of overrides or a config changed in Python, not read as YAML (:func:`_from_python`)."""
    token = _PYTHON_KEYS.set(frozenset(str(key).strip() for key in keys))
    try:
        yield
    finally:
        _PYTHON_KEYS.reset(token)


def _from_python(key: str) -> bool:
    """Whether ``key``'s value was given in Python, so that its message writes Python's values (False, ['a']), not
    YAML's (off, [a])."""
    given, parts = _PYTHON_KEYS.get(), key.split("[")[0].split(".")
    return "" in given or any(".".join(parts[:n]) in given for n in range(1, len(parts) + 1))


def refuse_none_sections(cfg: TrainConfig, resume: bool = False) -> None:
    """A section set to None in Python (``cfg.runner = None``), refused as an override's ``runner=null`` is: it had
    trained every setting of that section at its default without a word. ``agent`` None is TrainConfig's own
    default, the algorithm's defaults (what ``TrainConfig(algo=...)`` trains), but not a ``resume``'s, which goes on
    with the run's own (it had been told every agent setting changed to None, then failed on a TypeError)."""
    if resume and cfg.agent is None:
        raise ConfigError("cfg.agent is None: a resume goes on with the run's agent settings, "
                          "robolearn.config.load_run_config(run).agent (or train(resume=run, overrides=[...]))")
    if none := [section for section in SECTIONS if section != "agent" and getattr(cfg, section, None) is None]:
        key, _, value = _SECTION_EXAMPLES[none[0]].partition("=")
        raise ConfigError(f"cfg.{none[0]} is None: a section cannot be None (that would train every {none[0]} setting "
                          f"at its default, not the config's); set the settings to change instead, as in "
                          f"cfg.{key} = {yaml.safe_load(value)!r}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """The plain-data form written to the run directory and checkpoints (tuples become lists for YAML)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def _plain(value: Any) -> Any:
    """``value`` with numpy and torch arrays and scalars as Python lists and numbers, inside mappings and lists too:
    a range given as np.array([0.8, 1.2]) in a mapping setting (env.randomization, env.kwargs) had been taken as
    it was, and the run then failed to write its config.yaml ("Object of type ndarray is not JSON serializable")."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return (tuple if isinstance(value, tuple) else list)(_plain(item) for item in value)
    if not isinstance(value, (str, bytes)) and callable(getattr(value, "tolist", None)):
        return value.tolist()
    return value


SECTIONS = ("env", "runner", "agent", "logging")  # a config's sections of settings
_SECTION_EXAMPLES = {"env": "env.num_envs=64", "runner": "runner.total_steps=100000", "agent": "agent.gamma=0.99",
                     "logging": "logging.wandb=disabled"}  # one setting of each section, for messages


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` (``runner.total_steps``) in ``raw`` to ``value``, making the sections on the way;
    a whole section given as a mapping (``env={...}``) sets its keys in the file's section (:func:`_merged`)."""
    *parents, leaf = key.split(".")
    if not parents and leaf in SECTIONS and value is None:  # (it had put every setting of the section back to its
        raise ConfigError(f"override '{key}=null': a section cannot be null (that would put every {key} setting "  # default)
                          f"back to its default, the config's with them); set the keys to change instead, "
                          f"{key}.<key>=... (e.g. {_SECTION_EXAMPLES[key]})")
    node = raw
    for depth, part in enumerate(parents):
        if node.get(part) is None:  # absent, or a section left empty in the file (`runner:`)
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict) and (depth or part not in SECTIONS):
            raise _not_a_section('.'.join(parents[:depth + 1]), key)
        if not isinstance(node, dict):  # its value said: `env=5 env.num_envs=2` had blamed 'env' alone
            raise ConfigError(f"override '{key}': '{part}' is {node!r} here, not a section "
                              "of keys (set so by the file or an override before this one)")
    if not parents and leaf in SECTIONS and isinstance(value, Mapping) and isinstance(node.get(leaf), dict):
        node[leaf] = _merged(node[leaf], value)  # env={num_envs: 8} sets that key, as env.num_envs=8: it had
        return  # replaced the file's whole section (the task with it), training the defaults under the config's name
    node[leaf] = value


def _merged(section: dict[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    """``section`` with ``value``'s keys set, as their dotted overrides would: a nested mapping sets its own keys
    (env={randomization: {obs_noise_std: 0.01}} keeps the other ranges), an empty one replaces (turns it off)."""
    merged = dict(section)
    for key, item in value.items():
        nested = isinstance(item, Mapping) and item and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], item) if nested else item
    return merged


def build_dataclass(cls: type, raw: dict[str, Any], prefix: str) -> Any:
    """``cls(**raw)`` with every key and value checked against ``cls``'s type hints;
    errors name the key as ``<prefix><key>``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        top = ({f.name for f in dataclasses.fields(TrainConfig)} - set(SECTIONS)) if prefix else set()
        hint = f"; '{unknown[0]}' is a top-level setting: {unknown[0]}=..." if unknown[0] in top else ""
        close = difflib.get_close_matches(unknown[0], list(fields), n=1)
        meant = f" (did you mean '{prefix}{close[0]}'?)" if close and not hint else ""
        raise ConfigError(f"unknown key '{prefix}{unknown[0]}'{meant}; allowed keys here: {', '.join(sorted(fields))}{hint}")
    values = {}
    for name, value in raw.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            value = {} if value is None else value  # `runner:` with nothing under it: the defaults
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{name}: expected a section of keys, got {value!r}{_one_text(value, hint)}")
            values[name] = build_dataclass(hint, value, f"{prefix}{name}.")
        elif isinstance(value, dict) and value and not _takes_mapping(hint):  # (`seed.x=1` had been "expected int,
            raise _not_a_section(f"{prefix}{name}", f"{prefix}{name}.{next(iter(value))}")  # got {'x': 1}")
        else:
            values[name] = check_value(value, hint, f"{prefix}{name}")
        _check_range(name, values[name], f"{prefix}{name}")
    built = cls(**values)
    _check_order(vars(built), prefix)
    return built


def _check_range(name: str, value: Any, key: str) -> None:
    """Settings whose meaning has a range, by name across sections and agents (PPO, SAC, IQL, HIQL, SPiRL...):
    outside it a run would train wrong without a word (a negative gradient-norm limit flips the gradients,
    a negative clip ratio pins every ratio) or fail deep inside a step."""
    if isinstance(value, bool) or value is None:
        return
    numbers_given = value if isinstance(value, (list, tuple)) else [value]  # a range's two ends, too
    rule = _range_of(name)
    if any(isinstance(number, float) and not math.isfinite(number) for number in numbers_given):
        finite = "finite numbers" if isinstance(value, (list, tuple)) else "a finite number"  # and its range if known
        raise ConfigError(f"{key}: got {value}; give {finite}" + (f": {rule[4]}" if rule else ""))
    if rule is None:
        return
    low, high, low_open, high_open, meaning = rule
    for number in numbers_given:
        if not isinstance(number, (int, float)):
            continue
        if number < low or (low_open and number == low) or number > high or (high_open and number == high):
            raise ConfigError(f"{key}: {meaning}, got {value!r}")


def _range_of(name: str) -> tuple[float, float, bool, bool, str] | None:
    """(low, high, low excluded, high excluded, what the setting is) for setting ``name``, or None."""
    inf = math.inf
    if name == "gamma":
        return 0, 1, True, False, "the discount must be in (0, 1] (e.g. 0.99)"
    if name == "lam":
        return 0, 1, False, False, "GAE's lambda must be in [0, 1] (e.g. 0.95)"
    if name == "expectile":
        return 0, 1, True, True, "an expectile is in (0, 1) (e.g. 0.7)"
    if name == "tau" or name.endswith("_tau"):
        return 0, 1, True, False, "a target network's update rate is in (0, 1] (e.g. 0.005)"
    if name in ("max_grad_norm", "clip_ratio") or name.endswith("_kl"):
        return 0, inf, True, False, "must be above 0"
    if name.endswith("noise_std"):  # noise added on purpose: 0 is none (randomization's default)
        return 0, inf, False, False, "noise, must be >= 0 (0: none)"
    if name.endswith("_std") and not name.startswith("log_") or name.startswith("init_") and name.endswith("alpha"):
        return 0, inf, True, False, "a scale, must be above 0"
    if name.endswith(("beta", "alpha", "_coef", "noise_clip")):
        return 0, inf, False, False, "a weight, must be >= 0 (0 turns the term off)"
    if name.endswith("_lr") or name in ("lr", "learning_rate"):
        return 0, inf, False, False, "a learning rate, must be >= 0 (0 freezes what it trains)"
    if name.endswith("hidden"):
        return 1, inf, False, False, "layer sizes, each at least 1"
    if name.endswith(("batch_size", "buffer_size")) or name in (
            "subgoal_steps", "rep_dim", "num_steps", "num_epochs", "num_minibatches", "num_critics",
            "jsrl_step", "jsrl_window"):
        return 1, inf, False, False, "must be at least 1"
    if name == "offline_ratio":  # above 1, the online share of a batch had been a negative-size tensor after pretraining
        return 0, 1, False, False, "the share of each online batch drawn from the dataset, in [0, 1] (0 drops the dataset)"
    if name in ("warmup_steps", "pretrain_updates", "jsrl_horizon", "jsrl_tolerance", "target_critics"):
        return 0, inf, False, False, "must be >= 0"
    if name in ("torch_threads", "num_threads"):
        return 0, inf, False, False, "threads, must be >= 0 (0: all the cores)"
    if name == "seed":
        return 0, 2**32 - 1, False, False, "must be in [0, 2**32 - 1] (numpy's and torch's seeds)"
    return None


def _check_order(values: dict[str, Any], prefix: str) -> None:
    """Settings of one section (``values``: all of them, defaults included) that bound one another: a lower
    bound above its upper, a batch larger than the buffer it is drawn from."""
    _check_pairs(values, prefix, (("min_lr", "max_lr"), ("min_std", "max_std"), ("batch_size", "buffer_size"),
                                  ("online_batch_size", "online_buffer_size")))
    _check_adaptive_lr(values, prefix)


def _check_pairs(values: dict[str, Any], prefix: str, pairs: Sequence[tuple[str, str]]) -> None:
    """Each (low, high) of ``pairs`` whose two settings are numbers in ``values``: low above high refused."""
    for low, high in pairs:
        a, b = values.get(low), values.get(high)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > b:
            raise ConfigError(f"{prefix}{low} ({a!r}) must not exceed {prefix}{high} ({b!r})")


def check_starts(cfg: TrainConfig) -> None:
    """A new run's starting values inside the bounds kept on what they start (PPO's init_std within [min_std,
    max_std]). A new run's alone: a resume goes on from its checkpoint's values, whatever the run started at (a
    changed init_* is refused), so raising agent.min_std above the run's init_std is a resume's to make; the run's
    config.yaml then holds both, as it must load for eval and the next resume."""
    _check_pairs(vars(cfg.agent), "agent.", (("min_std", "init_std"), ("init_std", "max_std")))


def _check_adaptive_lr(values: dict[str, Any], prefix: str) -> None:
    """An adaptive schedule's (PPO's) start inside the range it keeps the rate in. Outside it the schedule only
    clamps its own steps: learning_rate=1.0 (max_lr 1e-2) took a dozen Adam steps above max_lr, the KL at
    thousands, before it shrank in; 1e-7 (min_lr 1e-5) moved the policy so little that the KL read 0, which the
    schedule takes for no information, and the rate stayed 1e-7 all run. A fixed schedule reads neither bound."""
    lr, low, high = (values.get(key) for key in ("learning_rate", "min_lr", "max_lr"))
    if values.get("schedule") != "adaptive" or not all(isinstance(x, (int, float)) for x in (lr, low, high)):
        return
    if not low <= lr <= high:
        side, near = ("above", high) if lr > high else ("below", low)
        raise ConfigError(
            f"{prefix}learning_rate ({lr!r}) is {side} [{prefix}min_lr, {prefix}max_lr] = [{low!r}, {high!r}], the "
            f"range {prefix}schedule=adaptive moves the rate within (it clamps its steps, not the start): set "
            f"{prefix}learning_rate inside it ({near!r}, say), widen {prefix}min_lr/{prefix}max_lr to include "
            f"{lr!r}, or use {prefix}schedule=fixed (which ignores min_lr and max_lr)")


def _not_a_section(setting: str, key: str) -> ConfigError:
    """The error for ``key`` (``seed.x``) naming keys under ``setting``, which takes one value."""
    return ConfigError(f"{setting}: a setting, not a section: it takes one value ({setting}=...), no keys under it "
                       f"({key})")


def _one_text(value: Any, section: type) -> str:
    """What to fix where the value of a section (the dataclass ``section``) is ``value``, text that reads as one of
    its keys and a value written without the space after the colon (``agent:`` then ``  gamma:0.9`` on the next
    line: YAML's text 'gamma:0.9'); else '' (``env: gym:Pendulum-v1`` is no key of env's)."""
    name, colon, rest = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not colon or not rest or rest[0].isspace() or name not in {f.name for f in dataclasses.fields(section)}:
        return ""
    return f" (YAML reads '{value}' as one piece of text: a key's colon needs a space after it, '{name}: {rest}')"


def _takes_mapping(hint: Any) -> bool:
    """Whether a setting typed ``hint`` may hold a mapping (``env.kwargs``, ``Any``), whose keys dotted overrides
    set; any other is one value."""
    if hint is Any or typing.get_origin(hint) is dict:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and any(map(_takes_mapping, typing.get_args(hint)))


def checkable(hint: Any) -> bool:
    """Whether :func:`check_value` knows ``hint``: Any, bool, int, float, str, Literal, and unions, lists,
    tuples and dicts of those. Anything else (a Sequence, a Callable, an array) it would wrongly refuse."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint in (bool, int, float, str, type(None)) or origin in (Literal, dict):
        return True
    if origin in (typing.Union, types.UnionType, tuple, list):
        return all(checkable(arg) for arg in args if arg is not Ellipsis)
    return False


def _list_of_one(value: Any, item_hint: Any, key: str) -> str:
    """A list's setting given one item (logging.tags=a): the list of it to write, in YAML's words ([a]) or
    Python's (['a']); nothing where the value is no item either (a safe pose of 'home')."""
    if value is None or isinstance(value, dict):
        return ""
    try:
        check_value(value, item_hint, key)
    except ConfigError:
        return ""
    return f" (a list of one: {[value] if _from_python(key) else f'[{value}]'})"


def check_value(value: Any, hint: Any, key: str) -> Any:
    """Return ``value`` coerced to ``hint`` where lossless, or raise naming ``key``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is Literal:
        if value not in args:
            said = ""
            if value is False and "disabled" in args:  # logging.wandb=off (YAML's), or False from Python
                said = " (to log nothing: 'disabled')" if _from_python(key) else \
                    " (YAML reads off/no/false as a boolean: write 'disabled')"
            raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {list(args)}{said}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return check_value(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} does not fit {hint}")
    if origin in (tuple, list):
        fixed = origin is tuple and args and args[-1] is not Ellipsis  # tuple[str, float]: each position its own
        if not isinstance(value, (list, tuple)):
            one = "" if fixed else _list_of_one(value, args[0] if args else Any, key)
            raise ConfigError(f"{key}: expected a list, got {value!r}{one}")
        if fixed and len(value) != len(args):
            raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)} ({list(value)!r})")
        hints = args if fixed else [args[0] if args else Any] * len(value)
        items = [check_value(v, h, f"{key}[{i}]") for i, (v, h) in enumerate(zip(value, hints))]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if value is None:  # `env.randomization=null`: none, as an empty mapping means
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        if len(args) == 2 and checkable(args[1]):  # dict[str, float]: each value too (Go1's reward_weights)
            return {name: check_value(item, args[1], f"{key}.{name}") for name, item in value.items()}
        return value
    if hint is str and isinstance(value, Path):  # run_dir=Path(...) from Python
        return str(value)
    if hint is float and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)  # an int, or a numpy number from Python
    if hint is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if hint is float and isinstance(value, str):
        try:  # YAML reads 3e-4 as a string; accept it
            return float(value)
        except ValueError:
            pass
    if hint is int and isinstance(value, (str, float)) and not isinstance(value, bool):
        try:  # 1e4, 2.5e6 (YAML strings) or 1.0e+4 (a YAML float): accept whole numbers
            number = float(value)
        except ValueError:
            number = None
        if number is not None and number.is_integer():
            return int(number)
    if isinstance(hint, type) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    if value is None:  # `dataset=` or `key: ` with nothing after it
        names = " (a name from `robolearn dataset list`)" if key == "dataset" else ""
        raise ConfigError(f"{key}: needs a value ({getattr(hint, '__name__', hint)}){names}, got none")
    if hint is str and isinstance(value, (bool, numbers.Number, datetime.date)):  # name=64, name=0.99: YAML's
        if isinstance(value, bool):
            example = "" if "[" in key else f" (\"{key}='...'\" on a command line: a shell takes off one pair of quotes)"
            raise ConfigError(f"{key}: expected str, got {value!r}: YAML reads yes/no/on/off/true/false as a boolean; "
                              f"quote the value for text{example}")
        example = "" if "[" in key else f" (\"{key}='{value}'\" on a command line)"
        raise ConfigError(f"{key}: expected str, got {value!r}: YAML reads {value} as a "
                          f"{'date' if isinstance(value, datetime.date) else 'number'}; quote the value for text{example}")
    raise ConfigError(f"{key}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
