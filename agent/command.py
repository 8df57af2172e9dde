"""``kernelsmith agent VERB ...`` and ``kernelsmith mcp``: the outside coding agent's two front ends.

Both open the same run (``--run``, default ``agent``) with the same backend: the GPU
harness, or ``--replay FILE`` (a simulation: every figure it answers is SIMULATED).
The command line prints each verb's answer as JSON on stdout; ``submit`` and ``build``
read the region texts from ``--region NAME=FILE`` (``-`` for stdin) and ``submit`` the
rationale from ``--rationale``. ``build`` (nvcc, or Triton's compile for a Triton op: no GPU) and
``show`` without a GPU need no backend.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agent.verbs import AgentRun, build_regions, show_task
from optimize.errors import GpuRequired
from pipeline.config import Config
from pipeline.errors import ConfigError


def _backend(args: Any, config: Config) -> Any:
    replay = getattr(args, "replay", None)
    if replay:
        from optimize.backends.replay import ReplayBackend

        return ReplayBackend(replay)
    from optimize.backends.gpu import GpuBackend

    backend = GpuBackend(config)
    backend.require()
    return backend


def _regions(specs: list[str] | None) -> dict[str, str]:
    regions: dict[str, str] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            raise ConfigError(f"--region {spec!r} is not NAME=FILE", fix="e.g. --region act_and_mul_kernel=new.cu")
        try:
            regions[name] = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        except OSError as err:
            raise ConfigError(
                f"--region {name}: cannot read {path}: {err.strerror}", fix="give a readable file"
            ) from err
    if not regions:
        raise ConfigError(
            "submit needs at least one --region NAME=FILE", fix="name the region and the file with its new text"
        )
    return regions


def main(args: Any, config: Config) -> int:
    if args.verb == "build":  # nvcc or triton.compile on this machine: no backend, no run
        if not args.op:
            raise ConfigError("build needs an op", fix="kernelsmith agent build OP --region NAME=FILE")
        built = build_regions(config, args.op, _regions(args.region))
        json.dump(built, sys.stdout, indent=1, default=str)
        print()
        return 0 if built["ok"] else 1
    try:
        backend = _backend(args, config)
    except GpuRequired as err:
        if args.verb != "show" or not args.op:
            raise
        print(f"note: {err.message}; showing the task only (nothing evaluated)", file=sys.stderr)
        json.dump(show_task(config, args.op, err.message), sys.stdout, indent=1, default=str)
        print()
        return 0
    if getattr(backend, "simulated", False):
        print(backend.describe(), file=sys.stderr)
    run = AgentRun(config, args.run or "agent", backend, client=args.client or "cli")
    verb = args.verb
    answer: Any
    if verb == "ops":
        answer = run.ops()
    elif verb in ("show", "brief", "trajectory"):
        answer = getattr(run, verb)(args.op)
    elif verb == "submit":
        answer = run.submit(args.op, _regions(args.region), args.rationale or "")
    elif verb == "finish":
        answer = run.finish(args.ops)
    else:
        answer = run.integrate()
    json.dump(answer, sys.stdout, indent=1, default=str)
    print()
    return 0


def mcp_main(args: Any, config: Config) -> int:
    """Serve the verbs over stdio until the client closes the connection.

    On a machine without a GPU (and no ``--replay``) the server still starts: ``show_task``
    answers the task itself and ``build_candidate`` compiles, as on the command line; every
    tool that measures answers the GPU error and its fix, so a coder on a laptop can read
    tasks and compile candidates before it needs the GPU machine.
    """
    from agent.mcp_server import build_server

    offline: GpuRequired | None = None
    try:
        backend = _backend(args, config)
    except GpuRequired as err:
        backend, offline = None, err
        print(f"note: {err.message}; serving show_task (the task only) and build_candidate", file=sys.stderr)

    def make_run(client: str) -> AgentRun:
        if offline is not None:
            raise offline
        return AgentRun(config, args.run or "agent", backend, client=client)

    server = build_server(make_run, config=config, offline=offline, default_client=args.client or "mcp")
    server.run("stdio")
    return 0


__all__ = ["main", "mcp_main"]
