"""The ``kernelsmith`` command line's flags: the argparse tree, and the flags that set config keys.

The flags are parsed here and nowhere else: :mod:`cli.stages` turns them into each stage's typed
options, and :func:`overrides` into the config layer the flags make (:func:`pipeline.config.load_config`).
"""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.config import DEFAULT_OPS

DESCRIPTION = "The `kernelsmith` command line."


def _common(parser: argparse.ArgumentParser) -> None:
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("--quiet", "-q", action="store_true", help="no progress lines: errors and results only")
    loud.add_argument(
        "--verbose", "-v", action="store_true", help="a Kernelsmith bug's traceback printed (KERNELSMITH_TRACEBACK=1)"
    )
    parser.add_argument("--config", help="config file (TOML); default ./kernelsmith.toml if present")
    parser.add_argument("--work-dir", help="where tasks, runs and caches live (default ./work)")
    parser.add_argument(
        "--sglang", metavar="PATH", help="sglang checkout or package folder (else SGLANG_SRC, else the pinned wheel)"
    )
    parser.add_argument("--sglang-version", help="pinned sglang wheel version (default 0.5.23)")


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the result as one JSON document on stdout (progress on stderr)"
    )


def _scale(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus",
        metavar="I,J,...",
        help="local GPU ordinals to run on, one lane each (scale.gpus; default: every visible GPU; one = the serial path)",
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="send the units to a Ray cluster (auto, HOST:PORT, ray://HOST:PORT, local), num_gpus=1 each (scale.ray_address)",
    )


def _gpus(text: str) -> list[int]:
    """``--gpus`` as ordinals: ``0,2,3``; ``all`` = every visible GPU (an empty list)."""
    from pipeline.errors import ConfigError

    if text.strip().lower() in ("", "all"):
        return []
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise ConfigError(
            f"--gpus {text!r} is not a list of GPU ordinals", fix="pass ordinals separated by commas, e.g. --gpus 0,1"
        ) from err


def _ops(parser: argparse.ArgumentParser, *, default_all: bool = False) -> None:
    parser.add_argument("--ops", nargs="+", metavar="OP", help=f"op ids (default: {' '.join(DEFAULT_OPS)})")
    parser.add_argument("--all", action="store_true", help="every op the index knows")


def ops_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The op ids the flags name (`--ops`), in their order; empty when none is named."""
    return tuple(getattr(args, "ops", None) or ())


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``'s, through the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelsmith")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed: `make install`)"


def _extract_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``extract`` subcommand's parser: the ops, --list, the compile check and the language."""
    p = sub.add_parser("extract", help="index SGLang's kernels and write standalone tasks")
    _common(p)
    _ops(p)
    p.add_argument("--list", action="store_true", help="print the indexed ops and kernels as a table")
    p.add_argument("--no-compile", action="store_true", help="skip the nvcc compile check")
    p.add_argument("--jobs", type=int, help="parallel compile jobs")
    p.add_argument(
        "--language",
        choices=("cuda", "triton", "all"),
        help="which ops: --list and --ops default to both, --all to cuda (Triton: --language triton or all)",
    )


def _optimize_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``optimize`` subcommand's parser: the ops, the coder, the round budget, the run, the search and scale."""
    p = sub.add_parser("optimize", help="run the agent loop on extracted tasks")
    _common(p)
    _json(p)
    _ops(p)
    p.add_argument("--coder", choices=["llm", "offline"], help="default: llm when an endpoint is configured")
    p.add_argument("--mode", choices=["multi", "single"], default="multi")
    p.add_argument("--rounds", type=int, help="round budget per op")
    p.add_argument("--run", help="run name (default: a new timestamped one; an existing one resumes)")
    p.add_argument("--replay", metavar="FILE", help="replay recorded measurements instead of a GPU (testing)")
    p.add_argument(
        "--search",
        metavar="STRATEGY",
        help="offline coder's search: auto (default), off (one transform a round) or a Kernel Tuner strategy",
    )
    p.add_argument(
        "--skills",
        metavar="ID[,ID...]",
        help="plan with these skills only (ids of optimize/skills/*.toml; default: every skill)",
    )
    _scale(p)
    p.add_argument(
        "--fresh-samples",
        action="store_true",
        default=None,
        help="ask the LLM endpoint again even where the reply cache holds an answer (the new one replaces it)",
    )


def _integrate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``integrate`` subcommand's parser: the run, where the patch goes, e2e, merging runs and the self-check."""
    p = sub.add_parser("integrate", help="patch winners into an SGLang tree and prove them")
    _common(p)
    _json(p)
    p.add_argument("--run", help="optimize run to integrate (default: the latest)")
    p.add_argument("--in-place", action="store_true", help="patch the sglang tree given by --sglang/SGLANG_SRC itself")
    p.add_argument(
        "--git-branch", metavar="NAME", help="commit the patch on a new branch of the checkout (never pushes)"
    )
    p.add_argument("--skip-e2e", action="store_true", help="skip end-to-end measurements")
    p.add_argument(
        "--from",
        dest="merge_from",
        nargs="+",
        metavar="RUN",
        help="one build of everything: --run NAME is first assembled from these runs' accepted candidates",
    )
    p.add_argument(
        "--self-check",
        nargs="*",
        metavar="OP",
        default=None,
        help="GPU: check these tasks' unmodified baselines through SGLang, pristine vs a pristine copy "
        "(no OP: every task under <work-dir>/tasks); writes work/integrate/self-check/",
    )


def _bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``bench`` subcommand's parser: the ops, the table's file, torch.compile, the sweep's budget and scale."""
    p = sub.add_parser("bench", help="measure baselines on the GPU and write BENCHMARKS.md")
    _common(p)
    _json(p)
    _ops(p)
    p.add_argument("--output", help="the Markdown file bench writes its section into (default BENCHMARKS.md)")
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument(
        "--budget-s",
        type=float,
        metavar="S",
        help="--all: start no build or check after S seconds, still write the table (harness.sweep_budget_s); a rerun resumes",
    )
    _scale(p)


def _headroom_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``headroom`` subcommand's parser: the common flags and --json only."""
    p = sub.add_parser(
        "headroom", help="which ops a kernel at its floor would save the most model-step time on (store x recipes)"
    )
    _common(p)
    _json(p)
    p.add_argument(
        "--goal-pct",
        type=float,
        metavar="PCT",
        help="the decode-step gain SGLang's ops are weighed against, from the newest layer records (default 2)",
    )


def _track_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``track`` subcommand's parser: the action, ab's releases, the history, the regression gate and scale."""
    p = sub.add_parser("track", help="measurement history and regressions (nightly tracking)")
    _common(p)
    _json(p)
    p.add_argument(
        "action",
        nargs="?",
        choices=["show", "run", "ab", "export", "rebuild"],
        default="show",
        help="run: the census, one batch; ab: two releases' kernels of each op timed in one worker (--old, --new); "
        "export: the store's batches as JSON lines into --history; rebuild: the store from --history",
    )
    p.add_argument("--old", metavar="TASKS", help="ab: the older release's tasks (a folder with tasks/ or a tarball)")
    p.add_argument("--new", metavar="TASKS", help="ab: the newer release's tasks (default: the work folder's)")
    p.add_argument(
        "--plant",
        type=int,
        metavar="N",
        help="ab: the new release runs each timed call N times (a planted regression the verdict must flag)",
    )
    p.add_argument(
        "--history", metavar="DIR", help="export, rebuild: the JSON-lines folder (default harness.history_dir)"
    )
    p.add_argument("--tasks", help="run: a folder with tasks/ or a tarball of one (extract --all --no-compile)")
    p.add_argument("--ops", nargs="+", metavar="OP", help="run: only these ops")
    p.add_argument("--op", help="only this op id")
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 on a standing regression, on no measurements, or on a batch older than --max-age-h",
    )
    p.add_argument("--max-age-h", type=float, help="the newest batch must be at most this old (a missed night fails)")
    p.add_argument("--html", metavar="DIR", help="also write the static HTML dashboard into DIR")
    _scale(p)


def _agent_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``agent`` subcommand's parser: the verb, its op, the run, the client and a submission's regions."""
    p = sub.add_parser("agent", help="an outside coder's verbs over a run (ops, show, brief, submit, ...)")
    _common(p)
    p.add_argument("verb", choices=["ops", "show", "brief", "build", "submit", "trajectory", "finish", "integrate"])
    p.add_argument("op", nargs="?", help="the op (show, brief, build, submit, trajectory)")
    p.add_argument("--run", help="the run (default: agent); a rerun continues it")
    p.add_argument("--replay", metavar="FILE", help="replay recorded measurements instead of a GPU (SIMULATED)")
    p.add_argument("--client", help="who codes (recorded as coder external:<client>; default cli)")
    p.add_argument(
        "--region", action="append", metavar="NAME=FILE", help="submit, build: a region's new text (- = stdin)"
    )
    p.add_argument("--rationale", help="submit: what changed and why it is correct")
    p.add_argument("--ops", nargs="+", metavar="OP", help="finish: these ops only (default: every op of the run)")


def _mcp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``mcp`` subcommand's parser: the run, replay and the client's name."""
    p = sub.add_parser("mcp", help="serve the agent verbs as MCP tools over stdio (Claude Code, Codex, ...)")
    _common(p)
    p.add_argument("--run", help="the run (default: agent)")
    p.add_argument("--replay", metavar="FILE", help="replay recorded measurements instead of a GPU (SIMULATED)")
    p.add_argument("--client", help="name for clients whose handshake gives none (default mcp)")


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``run`` subcommand's parser: the ops, the round budget and the run."""
    p = sub.add_parser("run", help="extract, optimize, integrate on the default ops")
    _common(p)
    _ops(p)
    p.add_argument("--rounds", type=int)
    p.add_argument("--run", help="run name (default: a new timestamped one; an existing one resumes)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelsmith", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"kernelsmith {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _extract_parser(sub)
    _optimize_parser(sub)
    _integrate_parser(sub)
    _bench_parser(sub)
    _headroom_parser(sub)
    _track_parser(sub)
    _agent_parser(sub)
    _mcp_parser(sub)
    _run_parser(sub)
    return parser


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    over: dict[str, Any] = {}
    if getattr(args, "work_dir", None):
        over["work_dir"] = args.work_dir
    sglang: dict[str, Any] = {}
    if getattr(args, "sglang", None):
        sglang["src"] = args.sglang
    if getattr(args, "sglang_version", None):
        sglang["version"] = args.sglang_version
    if sglang:
        over["sglang"] = sglang
    if getattr(args, "jobs", None) is not None:  # 0 is a value (and refused by the config), not "unset"
        over["extract"] = {"jobs": args.jobs}
    if getattr(args, "rounds", None) is not None:
        over["budget"] = {"rounds": args.rounds}
    search: dict[str, Any] = {}
    if getattr(args, "search", None):
        search["strategy"] = args.search
    if getattr(args, "skills", None):
        search["skills"] = [part.strip() for part in args.skills.split(",") if part.strip()]
    if search:
        over["search"] = search
    if getattr(args, "budget_s", None) is not None:
        over["harness"] = {"sweep_budget_s": args.budget_s}
    scale: dict[str, Any] = {}
    if getattr(args, "gpus", None) is not None:
        scale["gpus"] = _gpus(args.gpus)
    if getattr(args, "ray", None):
        scale["ray_address"] = args.ray
    if scale:
        over["scale"] = scale
    if getattr(args, "fresh_samples", None):
        over["llm"] = {"fresh_samples": True}
    return over


#: config key (dotted) -> the flag that sets it, so a config error names the flag
FLAGS = {
    "work_dir": "--work-dir",
    "sglang.src": "--sglang",
    "sglang.version": "--sglang-version",
    "extract.jobs": "--jobs",
    "budget.rounds": "--rounds",
    "search.strategy": "--search",
    "search.skills": "--skills",
    "harness.sweep_budget_s": "--budget-s",
    "scale.gpus": "--gpus",
    "scale.ray_address": "--ray",
    "llm.fresh_samples": "--fresh-samples",
}
