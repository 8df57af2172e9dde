"""Typed, layered configuration.

Layers, later wins: built-in defaults < ``kernelsmith.toml`` (or the file named by
``--config`` / ``KERNELSMITH_CONFIG``) < ``KERNELSMITH_*`` environment variables <
command-line flags. Unknown keys are rejected at every layer, so a typo is an error
that names the key, not a setting silently ignored.

Environment spelling: ``KERNELSMITH_<SECTION>__<KEY>`` for nested keys
(``KERNELSMITH_LLM__MODEL=o4-mini``), ``KERNELSMITH_<KEY>`` for top-level ones
(``KERNELSMITH_WORK_DIR=/scratch/ks``). ``SGLANG_SRC`` is honoured as
``sglang.src`` because SGLang users already set it.

Units are in the names (``_s``, ``_usd``, ``_pct``).
"""

from __future__ import annotations

import os
import pathlib
import tomllib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.errors import ConfigError

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
    arch: str = "sm_90a"
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


class HarnessConfig(Section):
    worker_timeout_s: float = 120.0
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


class Config(Section):
    work_dir: str = "work"
    sglang: SglangConfig = Field(default_factory=SglangConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)

    @property
    def work(self) -> pathlib.Path:
        return pathlib.Path(self.work_dir).resolve()

    @property
    def cache(self) -> pathlib.Path:
        return pathlib.Path(self.sglang.cache_dir).resolve() if self.sglang.cache_dir else self.work / "cache"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_layer(environ: dict[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    sections = set(Config.model_fields) - {"work_dir"}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if len(path) == 1 and path[0] not in Config.model_fields:
            raise ConfigError(
                f"unknown setting {name}",
                fix=f"use KERNELSMITH_<SECTION>__<KEY>; sections: {', '.join(sorted(sections))}",
            )
        node = layer
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _parse_env_value(value)
    if environ.get("SGLANG_SRC"):
        layer.setdefault("sglang", {}).setdefault("src", environ["SGLANG_SRC"])
    return layer


def _parse_env_value(value: str) -> Any:
    """Environment values are strings; accept JSON for lists/numbers/bools."""
    import json

    try:
        return json.loads(value)
    except ValueError:
        return value


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Build the effective config from file, environment and command-line overrides."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    file = path or environ.get(ENV_PREFIX + "CONFIG")
    if file is None and pathlib.Path("kernelsmith.toml").is_file():
        file = "kernelsmith.toml"
    if file is not None:
        try:
            data = tomllib.loads(pathlib.Path(file).read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise ConfigError(f"config file {file} not found", fix="pass an existing --config file") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config file {file} is not valid TOML: {err}", fix="fix the TOML syntax") from err
    data = _merge(data, _env_layer(environ))
    data = _merge(data, overrides or {})
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors(include_url=False))
        raise ConfigError(
            f"invalid configuration: {problems}",
            fix="check the key names and types in kernelsmith.toml / KERNELSMITH_* variables",
        ) from err
