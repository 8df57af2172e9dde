"""Each subcommand's handler: the parsed flags turned into the stage's typed options, and the stage run.

The three stages take typed options (:class:`extract.command.ExtractOptions`,
:class:`optimize.command.OptimizeOptions`, :class:`integrate.command.IntegrateOptions`) and are
called with them here, by ``kernelsmith run`` (:mod:`cli.run`) and by the agent's ``integrate`` verb;
nothing builds an argv to reach a stage. ``headroom`` and ``track`` take typed options too
(:class:`integrate.headroom.HeadroomOptions`; :class:`pipeline.track.TrackOptions`,
:class:`bench.census.CensusOptions`, :class:`bench.release_ab.ReleaseABOptions`, built in
:mod:`cli.track`), and so do the agent's verbs and the MCP server
(:class:`agent.command.AgentOptions`, :class:`agent.command.McpOptions`), and ``bench``
(:class:`bench.sections.BenchOptions`).

Each handler imports its stage inside the call: ``kernelsmith extract`` must not pay for (or need)
torch, which the optimizer's floor imports. The import-graph test reads those imports as arrows like
any other (``tests/test_import_graph.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from cli.parser import ops_of
from pipeline.config import Config
from pipeline.output import EMIT

if TYPE_CHECKING:
    from bench.sections import BenchOptions
    from extract.command import ExtractOptions
    from integrate.command import IntegrateOptions
    from optimize.command import OptimizeOptions

Handler = Callable[[argparse.Namespace, Config], int]


def extract_options(args: argparse.Namespace) -> ExtractOptions:
    from extract.command import ExtractOptions

    return ExtractOptions(
        ops=ops_of(args),
        all_ops=bool(getattr(args, "all", False)),
        listing=bool(getattr(args, "list", False)),
        no_compile=bool(getattr(args, "no_compile", False)),
        language=getattr(args, "language", None),
    )


def optimize_options(args: argparse.Namespace) -> OptimizeOptions:
    from optimize.command import OptimizeOptions

    return OptimizeOptions(
        ops=ops_of(args),
        all_ops=bool(getattr(args, "all", False)),
        coder=getattr(args, "coder", None),
        mode=getattr(args, "mode", None) or OptimizeOptions.mode,
        run=getattr(args, "run", None),
        replay=getattr(args, "replay", None),
        emitted=getattr(args, EMIT, None),
    )


def integrate_options(args: argparse.Namespace) -> IntegrateOptions:
    from integrate.command import IntegrateOptions

    self_check = getattr(args, "self_check", None)
    return IntegrateOptions(
        run=getattr(args, "run", None),
        in_place=bool(getattr(args, "in_place", False)),
        git_branch=getattr(args, "git_branch", None),
        skip_e2e=bool(getattr(args, "skip_e2e", False)),
        merge_from=tuple(getattr(args, "merge_from", None) or ()),
        self_check=None if self_check is None else tuple(self_check),
        emitted=getattr(args, EMIT, None),
    )


def extract_stage(args: argparse.Namespace, config: Config) -> int:
    from extract import command as extract_command

    return extract_command.run(extract_options(args), config)


def optimize_stage(args: argparse.Namespace, config: Config) -> int:
    from optimize import command as optimize_command

    return optimize_command.run(optimize_options(args), config)


def integrate_stage(args: argparse.Namespace, config: Config) -> int:
    from integrate import command as integrate_command

    return integrate_command.run(integrate_options(args), config)


def bench_options(args: argparse.Namespace) -> BenchOptions:
    from bench.sections import DEFAULT_OUTPUT, BenchOptions

    dtypes = getattr(args, "dtypes", None)
    return BenchOptions(
        ops=ops_of(args),
        all_ops=bool(getattr(args, "all", False)),
        dtypes=tuple(dtypes) if dtypes else None,
        torch_compile=not getattr(args, "no_torch_compile", False),
        output=getattr(args, "output", None) or DEFAULT_OUTPUT,
        emitted=getattr(args, EMIT, None),
    )


def _bench(args: argparse.Namespace, config: Config) -> int:
    from bench import bench

    return bench.run(bench_options(args), config)


def _headroom(args: argparse.Namespace, config: Config) -> int:
    from integrate import headroom

    goal = getattr(args, "goal_pct", None)
    options = headroom.HeadroomOptions(
        emitted=getattr(args, EMIT, None), **({"goal_pct": goal} if goal is not None else {})
    )
    return headroom.run(options, config)


def _track(args: argparse.Namespace, config: Config) -> int:
    from cli import track

    return track.main(args, config)


def _run(args: argparse.Namespace, config: Config) -> int:
    from cli import run

    return run.main(args, config)


def _agent(args: argparse.Namespace, config: Config) -> int:
    from agent import command as agent_command

    # a flag not given falls back to the options record's own default (read from the class, not spelt here)
    defaults = agent_command.AgentOptions
    options = agent_command.AgentOptions(
        verb=args.verb,
        op=getattr(args, "op", None),
        run=getattr(args, "run", None) or defaults.run,
        client=getattr(args, "client", None) or defaults.client,
        replay=getattr(args, "replay", None),
        regions=tuple(getattr(args, "region", None) or defaults.regions),
        rationale=getattr(args, "rationale", None) or defaults.rationale,
        ops=ops_of(args),
    )
    return agent_command.run(options, config)


def _mcp(args: argparse.Namespace, config: Config) -> int:
    from agent import command as agent_command

    defaults = agent_command.McpOptions
    options = agent_command.McpOptions(
        run=getattr(args, "run", None) or defaults.run,
        client=getattr(args, "client", None) or defaults.client,
        replay=getattr(args, "replay", None),
    )
    return agent_command.serve(options, config)


#: subcommand -> its handler
HANDLERS: dict[str, Handler] = {
    "extract": extract_stage,
    "optimize": optimize_stage,
    "integrate": integrate_stage,
    "bench": _bench,
    "run": _run,
    "track": _track,
    "headroom": _headroom,
    "agent": _agent,
    "mcp": _mcp,
}

__all__ = [
    "HANDLERS",
    "Handler",
    "bench_options",
    "extract_options",
    "extract_stage",
    "integrate_options",
    "integrate_stage",
    "optimize_options",
    "optimize_stage",
]
