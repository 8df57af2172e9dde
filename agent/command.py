"""``kernelsmith agent VERB ...`` and ``kernelsmith mcp``: the outside coding agent's two front ends.

Both open the same run (``--run``, default ``agent``) with the same backend: the GPU
harness, or ``--replay FILE`` (a simulation: every figure it answers is SIMULATED).
The command line prints each verb's answer as JSON on stdout; ``submit`` and ``build``
read the region texts from ``--region NAME=FILE`` (``-`` for stdin) and ``submit`` the
rationale from ``--rationale``.

Without a GPU and without ``--replay`` (issue 47: a new user's first commands on a laptop all
failed with the GPU error) the verbs that only read answer from the tasks and the run's records
(``ops``, ``show``, ``brief``, ``trajectory``; ``build`` compiles on the CPU), and the verbs that
measure (``submit``, ``finish``, ``integrate``) refuse before any work (before a region file or
stdin is read), in one line with the fix (:meth:`agent.verbs.AgentRun.measuring`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Literal

from agent.verbs import MEASURING, AgentRun, build_regions
from optimize.backends import Backend
from pipeline.config import Config
from pipeline.errors import ConfigError

OP_VERBS = ("show", "brief", "build", "submit", "trajectory")  # the verbs about one op
Verb = Literal["ops", "show", "brief", "build", "submit", "trajectory", "finish", "integrate"]


@dataclass(frozen=True)
class AgentOptions:
    """What one ``kernelsmith agent VERB`` is asked: ``op`` for the verbs about one op (:data:`OP_VERBS`),
    ``regions`` the ``NAME=FILE`` specs ``submit`` and ``build`` read (``-`` for stdin; read only by
    them, and only after a measuring verb was allowed), ``ops`` the ops ``finish`` validates (empty:
    every op of the run), ``replay`` a file of recorded measurements instead of a GPU (SIMULATED)."""

    verb: Verb
    op: str | None = None
    run: str = "agent"
    client: str = "cli"
    replay: str | None = None
    regions: tuple[str, ...] = ()
    rationale: str = ""
    ops: tuple[str, ...] = ()


@dataclass(frozen=True)
class McpOptions:
    """What ``kernelsmith mcp`` serves: the run, the backend (``replay``, else the GPU) and the client
    name for a handshake that gives none."""

    run: str = "agent"
    client: str = "mcp"
    replay: str | None = None


def _backend(replay: str | None, config: Config) -> tuple[Backend | None, str]:
    """The measurement backend (the replay file, else this machine's GPU), or None and why there is none."""
    if replay:
        from optimize.backends.replay import ReplayBackend

        return ReplayBackend(replay), ""
    from optimize.backends.gpu import GpuBackend

    backend = GpuBackend(config)
    ok, why = backend.available()
    return (backend, "") if ok else (None, why)


def _regions(specs: tuple[str, ...]) -> dict[str, str]:
    regions: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            raise ConfigError(f"--region {spec!r} is not NAME=FILE", fix="e.g. --region act_and_mul_kernel=new.cu")
        try:
            regions[name] = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        except OSError as err:
            raise ConfigError(
                f"--region {name}: cannot read {path}: {err.strerror}", fix="give a readable file"
            ) from err
        except UnicodeDecodeError as err:  # the user's file, not a Kernelsmith bug
            raise ConfigError(
                f"--region {name}: {path} is not UTF-8 text (byte {err.start}: {err.reason})",
                fix="give the region's new source text as a UTF-8 file",
            ) from None
    if not regions:
        raise ConfigError(
            "submit needs at least one --region NAME=FILE", fix="name the region and the file with its new text"
        )
    return regions


def run(options: AgentOptions, config: Config) -> int:
    """One verb over the run; its answer as JSON on stdout (see the module doc)."""
    verb = options.verb
    if verb in OP_VERBS and not options.op:
        raise ConfigError(
            f"`kernelsmith agent {verb}` needs an op",
            fix=f"kernelsmith agent {verb} OP (`kernelsmith agent ops` lists them)",
        )
    if verb == "build":  # nvcc or triton.compile on this machine: no backend, no run
        built = build_regions(config, str(options.op), _regions(options.regions))
        json.dump(built, sys.stdout, indent=1, default=str)
        print()
        return 0 if built["ok"] else 1
    backend, why = _backend(options.replay, config)
    run = AgentRun(config, options.run, backend, client=options.client, no_gpu=why)
    if verb in MEASURING:
        run.measuring(verb)  # before any work: no file read, no op opened
    if backend is None:
        print(f"note: {why}; answering from the tasks and run {run.run}'s records (nothing measured)", file=sys.stderr)
    elif getattr(backend, "simulated", False):
        print(backend.describe(), file=sys.stderr)
    answer: Any
    if verb == "ops":
        answer = run.ops()
    elif verb in ("show", "brief", "trajectory"):
        answer = getattr(run, verb)(options.op)
    elif verb == "submit":
        answer = run.submit(str(options.op), _regions(options.regions), options.rationale)
    elif verb == "finish":
        answer = run.finish(options.ops or None)
    else:
        answer = run.integrate()
    json.dump(answer, sys.stdout, indent=1, default=str)
    print()
    return 0


def serve(options: McpOptions, config: Config) -> int:
    """Serve the verbs over stdio until the client closes the connection.

    On a machine without a GPU (and no ``--replay``) the server still starts and the tools that
    read answer as on the command line (``list_ops``, ``show_task``, ``planning_brief``,
    ``trajectory``; ``build_candidate`` compiles); every tool that measures answers the GPU error
    and its fix, so a coder on a laptop can read tasks and compile candidates before it needs the
    GPU machine.
    """
    from agent.mcp_server import build_server

    backend, why = _backend(options.replay, config)
    if backend is None:
        print(
            f"note: {why}; list_ops, show_task, planning_brief, trajectory and build_candidate answer here, "
            "submit_candidate, finish and integrate need a GPU or --replay FILE",
            file=sys.stderr,
        )

    def make_run(client: str) -> AgentRun:
        return AgentRun(config, options.run, backend, client=client, no_gpu=why)

    server = build_server(make_run, config=config, default_client=options.client)
    server.run("stdio")
    return 0


__all__ = ["OP_VERBS", "AgentOptions", "McpOptions", "Verb", "run", "serve"]
