"""Typed, layered configuration.

Layers, later wins: built-in defaults < ``kernelsmith.toml`` (or the file named by
``--config`` / ``KERNELSMITH_CONFIG``) < ``KERNELSMITH_*`` environment variables <
command-line flags. Unknown keys under a known section are rejected at every layer, so a
typo is an error that names the key and the nearest known one, not a setting silently
ignored; a ``KERNELSMITH_*`` variable that names no setting at all (``KERNELSMITH_HOME``)
is another tool's and only warned about. An invalid value's error names the layer
that set it (the file, the variable, the flag).

Environment spelling: ``KERNELSMITH_<SECTION>__<KEY>`` for nested keys
(``KERNELSMITH_LLM__MODEL=o4-mini``), ``KERNELSMITH_<KEY>`` for top-level ones
(``KERNELSMITH_WORK_DIR=/scratch/ks``). ``SGLANG_SRC`` is honoured as
``sglang.src`` because SGLang users already set it. A string field takes the variable's
text as it is; other fields read JSON (lists, numbers, bools).

Units are in the names (``_s``, ``_usd``, ``_pct``).
"""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import sys
import tomllib
import types
from collections.abc import Mapping
from typing import Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline.errors import ConfigError
from pipeline.target import TARGET

DEFAULT_SGLANG_VERSION = "0.5.23"
DEFAULT_OPS = ("activation.silu_and_mul", "layernorm.fused_add_rmsnorm", "layernorm.rmsnorm")
ENV_PREFIX = "KERNELSMITH_"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SglangConfig(Section):
    version: str = DEFAULT_SGLANG_VERSION
    src: str | None = None  # installed package dir or git checkout; None = the pinned wheel
    cache_dir: str | None = None  # where wheels are downloaded and unpacked; None = <work_dir>/cache


class ExtractConfig(Section):
    arch: str = TARGET.arch
    jobs: int = Field(default=max(1, (os.cpu_count() or 1)), ge=1)
    compile_check: bool = True
    token_counts: list[int] = Field(default_factory=lambda: [1, 8, 64, 512, 4096, 16384])


class AgentModel(Section):
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


# A model served on this machine (llama.cpp on a CPU, 2026-12-01) needs minutes per reply
# and has a small context; a hosted one answers in seconds and may reason at length.
REMOTE_TIMEOUT_S = 120.0
REMOTE_MAX_TOKENS = 8192
LOCAL_TIMEOUT_S = 900.0
LOCAL_MAX_TOKENS = 2048
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


class LlmConfig(Section):
    base_url: str | None = None  # None = no endpoint: the offline optimizer is used
    model: str = "o4-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.2
    # None: by endpoint (see `local`): REMOTE_MAX_TOKENS / REMOTE_TIMEOUT_S for a hosted one,
    # LOCAL_MAX_TOKENS / LOCAL_TIMEOUT_S for one on this machine; a value set here always wins
    max_tokens: int | None = Field(default=None, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=4, ge=0)
    agents: dict[Literal["testing", "profiling", "planning", "coding", "repair", "single"], AgentModel] = Field(
        default_factory=dict
    )
    # USD per million tokens: {model: {"input": x, "output": y}}
    prices_usd_per_mtok: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {"o4-mini": {"input": 1.10, "output": 4.40}}
    )
    cache: bool = True  # False: neither read nor write the reply cache
    # True: ask the endpoint again even where the cache holds a reply to the same request
    # (the new reply replaces the entry), e.g. after the server was fixed or for new samples
    fresh_samples: bool = False

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @property
    def local(self) -> bool:
        """The endpoint is on this machine (localhost, 127.x, ::1): slow replies, small context."""
        from urllib.parse import urlsplit

        if not self.base_url:
            return False
        try:
            host = (urlsplit(self.base_url).hostname or "").lower()
        except ValueError:
            return False
        return host in LOCAL_HOSTS or host.startswith("127.")

    @property
    def effective_timeout_s(self) -> float:
        """Seconds one request may take: ``timeout_s`` if set, else the endpoint's default."""
        if self.timeout_s is not None:
            return float(self.timeout_s)
        return LOCAL_TIMEOUT_S if self.local else REMOTE_TIMEOUT_S

    @property
    def effective_max_tokens(self) -> int:
        """Reply tokens asked for: ``max_tokens`` if set, else the endpoint's default."""
        if self.max_tokens is not None:
            return int(self.max_tokens)
        return LOCAL_MAX_TOKENS if self.local else REMOTE_MAX_TOKENS


class BudgetConfig(Section):
    rounds: int = Field(default=8, ge=0)
    tokens: int = Field(default=2_000_000, ge=0)
    dollars_usd: float = Field(default=5.0, ge=0)
    wall_s: float = Field(default=3600.0, ge=0)
    gpu_s: float = Field(default=1200.0, ge=0)
    repair_attempts: int = Field(default=2, ge=0)


class SearchConfig(Section):
    """How the offline coder searches a round: composed mechanical transforms, a population at a time.

    ``strategy``: ``auto`` (every point when the space holds at most ``evals_per_round``,
    else Kernel Tuner's genetic algorithm), ``off`` (one transform a round, as before), or
    any Kernel Tuner strategy name (``brute_force``, ``genetic_algorithm``, ``greedy_ils``,
    ``random_sample``, ...).
    """

    strategy: str = "auto"
    population: int = Field(default=16, ge=1)  # candidates built at once and timed in one worker
    evals_per_round: int = Field(default=32, ge=1)  # new points a round may evaluate
    build_jobs: int = Field(default=max(1, (os.cpu_count() or 1)), ge=1)  # nvcc processes at once
    # A population is checked in full but first timed at this many shapes per token bucket and
    # timing dtype (0: every member timed in full); only the ``promote`` best members faster
    # than the baseline there are then timed at every shape. Why: on the H200 (2026-12-02) a
    # member's full timing took ~20 s, so a population of 8 did not finish a 73 s round.
    screen_per_bucket: int = Field(default=1, ge=0)
    promote: int = Field(default=2, ge=1)
    # A space of at most this many points is cut to the points whose transforms compose before
    # the search, so every member of a population is a real candidate; each point is made once
    # to know (~20 ms here: activation.cuh's 2048 points took 48 s), so a larger space is cut
    # by pairs of choices instead (on the H200, 2026-12-02, the uncut 1024-point spaces of relu2
    # and per_token_quant_fp8 built 3 and 2 members of a population of 16).
    restrict_points: int = Field(default=512, ge=0)
    # A space the round samples (larger than ``evals_per_round``) is first measured one choice at a
    # time: each dimension's choices alone, at most ``population`` of them, in transform order (PDL
    # first); the genetic algorithm then starts from the choices that beat the best, composed. Why:
    # every offline win on the H200 so far was one choice (PDL on fused_add_rmsnorm, the PDL sweeps
    # of sessions 11 and 14), while the random first draws of 2026-12-05's `kernelsmith run` each
    # composed three or four choices and none was accepted.
    singles_first: bool = True
    # The skills a run may plan with (ids of optimize/skills/*.toml; empty: the whole library).
    # A sweep over many ops that measures one family of transforms names that family here
    # (``--skills``), so no population is spent on the others.
    skills: list[str] = Field(default_factory=list)
    # Final validation also judges the best at every other op that runs code it changes, at that
    # op's own shapes (optimize.reach_ops: rope.cuh serves three ops, activation.cuh nine). Off only
    # to reproduce runs from before it: a candidate then reaches the patch judged at its own op alone.
    judge_companions: bool = True


class HarnessConfig(Section):
    worker_timeout_s: float = 120.0
    # a worker whose log has not grown for this long is killed as hung (optimize/harness/isolate.py):
    # it logs every check case and timed shape, so only a kernel that never returns stays silent;
    # the slowest honest silence is a first torch.compile of a reference (tens of seconds)
    stall_s: float = 90.0
    # the evaluation worker in a bubblewrap sandbox (no network, homes hidden; pipeline/sandbox.py);
    # its environment is scrubbed either way
    sandbox: bool = True
    noise_pct: float = 3.0
    l2_multiple: float = 3.0
    graph_calls: int = 20
    repeats: int = 15
    held_out_shapes: int = 6
    # `bench --all`: baseline checks (correctness only, never timed) running at once on one GPU
    health_workers: int = Field(default=4, ge=1)
    # `bench --all`: start no build or check after this many seconds (None: no limit); a rerun resumes
    sweep_budget_s: float | None = Field(default=None, gt=0)
    # optimize: profile the baseline and each new best with Nsight Compute (where ncu is
    # installed) and give its DRAM throughput, occupancy and warp stalls to the planner
    ncu_profile: bool = True
    # `track run` also writes each census batch as JSON lines here (pipeline.history), a folder the
    # project can commit, from which `track rebuild` remakes the store; "" writes none. A relative
    # path is beside the work folder (work/ at the repository's root: its history/census/)
    history_dir: str = "history/census"


class IntegrateConfig(Section):
    """Time limits of integrate's SGLang check (``kernelsmith integrate``, ``--self-check``).

    A warm batch builds the JIT modules of a run of ops at once, at most
    ``warm_batch_modules`` modules; a batch that does not answer in ``warm_timeout_s``
    costs that long, its worker is restarted and its cases build on first call instead. A
    case (which may include a cold build) that does not answer in ``case_timeout_s`` skips
    its op's other cases. Measured on the H200 (2026-12-01): 16 modules built at once in
    45 s; a built module's call takes milliseconds and a first call that builds at most
    45 s. (What looked like a hung batch there was one op's 78 rejected cases, each
    restarting its worker for 12 s: ``integrate.errors.CallRaised``.)
    """

    warm_timeout_s: float = Field(default=300.0, gt=0)
    case_timeout_s: float = Field(default=120.0, gt=0)
    warm_batch_modules: int = Field(default=16, ge=1)


class RunConfig(Section):
    """``kernelsmith run`` (extract -> optimize -> integrate) as one job that fits a coffee break.

    Inside ``run`` optimize's wall budget is ``optimize_wall_s`` and a search round measures at
    most ``search_evals_per_round`` new points in populations of ``search_population`` (the lower
    of these and ``budget.wall_s`` / ``search.*`` apply; a standalone ``kernelsmith optimize`` is
    not capped). Why: issue 14 item 7 asks for the three default ops in at most 10 minutes on the
    H200. With 330 s and the search's own 32 points in populations of 16 (H200, 2026-12-02),
    silu_and_mul's one round took 237 s (26 members, 2 populations), fused_add_rmsnorm's 99 s
    and its final check 17 s, so optimize ran 417 s and rmsnorm never started; the wall budget
    is checked between populations, so a population is what a round overshoots by. Smaller
    populations and rounds give every default op its round and leave integrate (SGLang's build,
    tests and the end-to-end figure) its minutes. A rerun with the same ``--run`` resumes.
    """

    optimize_wall_s: float = Field(default=300.0, gt=0)
    search_evals_per_round: int = Field(default=16, ge=1)
    search_population: int = Field(default=8, ge=1)
    search_promote: int = Field(default=1, ge=1)  # members of a screened population timed in full


class ScaleConfig(Section):
    """Where the units of work run (``optimize``, ``bench --ops``, ``track run``; :mod:`optimize.scale`).

    ``gpus``: the local GPUs to run on, as CUDA ordinals of this process's view (``--gpus 0,1``);
    empty = every visible GPU. One lane (one evaluation worker at a time) per GPU; with one GPU
    the serial path runs, exactly as before. ``ray_address``: send the units to a Ray cluster
    instead (``--ray ADDRESS``: ``auto``, ``HOST:PORT``, ``ray://HOST:PORT`` or ``local`` for a
    cluster started here), one task with ``num_gpus=1`` each; ``ray_connect_timeout_s`` bounds the
    reachability check made before Ray is asked to connect (Ray itself waits minutes).
    """

    gpus: list[int] = Field(default_factory=list)
    ray_address: str | None = None
    ray_connect_timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if any(g < 0 for g in value) or len(set(value)) != len(value):
            raise ValueError(f"GPU ordinals must be distinct and >= 0, got {value}")
        return value


class Config(Section):
    work_dir: str = "work"
    sglang: SglangConfig = Field(default_factory=SglangConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    integrate: IntegrateConfig = Field(default_factory=IntegrateConfig)
    scale: ScaleConfig = Field(default_factory=ScaleConfig)
    run: RunConfig = Field(default_factory=RunConfig)

    @field_validator("work_dir")
    @classmethod
    def _a_folder(cls, value: str) -> str:
        """The work folder may not exist yet, but where it does it must be a folder: every stage writes in it."""
        path = pathlib.Path(value)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path.resolve()} is a file where a folder is needed: pass a folder's path")
        return value

    @property
    def work(self) -> pathlib.Path:
        return pathlib.Path(self.work_dir).resolve()

    @property
    def history(self) -> pathlib.Path | None:
        """The JSON-lines folder of the census batches (``harness.history_dir``), None for none."""
        if not self.harness.history_dir:
            return None
        path = pathlib.Path(self.harness.history_dir)
        return path if path.is_absolute() else self.work.parent / path

    @property
    def cache(self) -> pathlib.Path:
        return pathlib.Path(self.sglang.cache_dir).resolve() if self.sglang.cache_dir else self.work / "cache"


def _merge(base: Mapping[str, object], over: Mapping[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in over.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = _merge(current, value)
        else:
            out[key] = value
    return out


def _field_type(path: list[str]) -> object:
    """The annotation of the config field at ``path`` (``["llm", "model"]``); None where no
    field has that path (pydantic then names the unknown key)."""
    node: object = Config
    for part in path:
        node = _unwrap_optional(node)
        if get_origin(node) is dict:  # llm.agents.<agent>: the part is the dict's key
            node = get_args(node)[1]
            continue
        if not (isinstance(node, type) and issubclass(node, BaseModel)):
            return None
        field = node.model_fields.get(part)
        if field is None:
            return None
        node = field.annotation
    return node


def _unwrap_optional(annotation: object) -> object:
    """``Model | None`` -> ``Model``; anything else as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        models = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
    return annotation


def _takes_str(annotation: object) -> bool:
    """Whether a field of this type holds a string (``str``, ``str | None``, a Literal of strings)."""
    if annotation is str:
        return True
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_takes_str(a) for a in get_args(annotation))
    if origin is Literal:
        return any(isinstance(a, str) for a in get_args(annotation))
    return False


def _env_layer(environ: dict[str, str], names: dict[tuple[str, ...], str] | None = None) -> dict[str, object]:
    """The ``KERNELSMITH_*`` layer. ``names`` (filled in) maps each key path to the variable
    that set it, so a validation error can name the variable.

    A variable whose first part is no setting (``KERNELSMITH_HOME``, another tool's) is
    not ours: it is ignored with a warning. Under a known section an unknown key is a
    typo, and pydantic refuses it (with the nearest key, :func:`_problems`).
    """
    layer: dict[str, object] = {}
    names = {} if names is None else names
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if path[0] not in Config.model_fields:
            print(
                f"warning: ignoring {name}: not a kernelsmith setting "
                f"(settings are KERNELSMITH_<SECTION>__<KEY>; sections: {', '.join(sorted(_SECTIONS))})",
                file=sys.stderr,
            )
            continue
        node = layer
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"environment: {name} sets a key under {part}, which another variable set to a value",
                    fix=f"unset one of the KERNELSMITH_{part.upper()}* variables",
                )
            node = child
        node[path[-1]] = _parse_env_value(value, _field_type(path))
        names[tuple(path)] = name
    if environ.get("SGLANG_SRC"):
        sglang = layer.setdefault("sglang", {})
        if isinstance(sglang, dict):  # not: KERNELSMITH_SGLANG set it to a value, which pydantic refuses, naming it
            sglang.setdefault("src", environ["SGLANG_SRC"])
            names.setdefault(("sglang", "src"), "SGLANG_SRC")
    return layer


def _parse_env_value(value: str, annotation: object = None) -> object:
    """Environment values are strings. A string field takes the string as it is
    (``KERNELSMITH_SGLANG__VERSION=0.6`` is "0.6", ``KERNELSMITH_LLM__MODEL=4`` is "4");
    other fields accept JSON for lists, numbers and bools, else the text as it is."""
    if _takes_str(annotation):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


_SECTIONS = sorted(
    k for k, f in Config.model_fields.items() if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
)


def _has(data: Mapping[str, object], path: tuple[str, ...]) -> bool:
    node: object = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _keys_at(path: tuple[str, ...]) -> list[str]:
    """The keys a config section at ``path`` knows (for "did you mean")."""
    annotation = _field_type(list(path)) if path else Config
    while get_origin(annotation) is dict:
        annotation = get_args(annotation)[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _problems(
    err: ValidationError,
    layers: list[tuple[str, Mapping[str, object]]],
    env_names: dict[tuple[str, ...], str],
    flags: dict[str, str],
) -> str:
    """One clause per validation error: the key, pydantic's reason, the layer that set the
    value (the file, the variable, the flag), and for an unknown key the nearest known one."""
    out = []
    for error in err.errors(include_url=False):
        loc = tuple(str(p) for p in error["loc"])
        key = ".".join(loc)
        msg = error["msg"]
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc[-1], _keys_at(loc[:-1]), n=1)
            msg = "unknown key" + (f" (did you mean {'.'.join((*loc[:-1], close[0]))}?)" if close else "")
        source = "default"
        for prefix in (loc[:n] for n in range(len(loc), 0, -1)):
            found = next((name for name, data in reversed(layers) if _has(data, prefix)), None)
            if found is None:
                continue
            if found == "environment":
                source = f"environment {env_names.get(prefix, 'KERNELSMITH_' + '__'.join(prefix).upper())}"
            elif found == "command line":
                flag = flags.get(".".join(prefix))
                source = f"command line {flag}" if flag else "command line"
            else:
                source = found
            break
        value = error.get("input")
        shown = f" = {value!r}" if error["type"] != "extra_forbidden" and not isinstance(value, dict) else ""
        out.append(f"{key}{shown}: {msg} (set by {source})")
    return "; ".join(out)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, object] | None = None,
    environ: dict[str, str] | None = None,
    flags: dict[str, str] | None = None,
) -> Config:
    """Build the effective config from file, environment and command-line overrides.

    ``flags`` maps a dotted key to the command-line flag that sets it, so an error in an
    override names the flag."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, object] = {}
    file = path or environ.get(ENV_PREFIX + "CONFIG")
    if file is None and pathlib.Path("kernelsmith.toml").is_file():
        file = "kernelsmith.toml"
    if file is not None:
        given = "--config" if path else ("KERNELSMITH_CONFIG" if environ.get(ENV_PREFIX + "CONFIG") else "default")
        data = _read_file(pathlib.Path(file), given)
    env_names: dict[tuple[str, ...], str] = {}
    env = _env_layer(environ, env_names)
    layers = [(f"config file {file}", data), ("environment", env), ("command line", overrides or {})]
    merged: dict[str, object] = {}
    for _, layer in layers:
        merged = _merge(merged, layer)
    try:
        return Config.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(
            f"invalid configuration: {_problems(err, layers, env_names, flags or {})}",
            fix="correct or remove the value where it is set (the layer named above); "
            "keys and types: README.md, Configuration",
        ) from err


def _read_file(file: pathlib.Path, given: str) -> dict[str, object]:
    """The TOML file's table; every way it cannot be read is a ConfigError naming it."""
    fix = f"pass a TOML file ({given})" if given != "default" else "fix or remove ./kernelsmith.toml"
    if file.is_dir():
        raise ConfigError(f"config file {file} is a directory", fix=f"{fix}, e.g. {file / 'kernelsmith.toml'}")
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ConfigError(f"config file {file} not found", fix=f"{fix} that exists") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {file} is not UTF-8 text", fix=fix) from err
    except OSError as err:
        raise ConfigError(f"config file {file} cannot be read: {err.strerror or err}", fix=fix) from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {file} is not valid TOML: {err}", fix="fix the TOML syntax") from err
