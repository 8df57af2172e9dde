"""``kernelsmith mcp``: the agent verbs as MCP tools over stdio (the official ``mcp`` SDK's MCPServer).

Register it with a coding agent (README, "Bringing a coder"), e.g. Claude Code:
``claude mcp add kernelsmith -- kernelsmith mcp --run my-run``. The agent then calls
``list_ops``, ``show_task``, ``planning_brief``, ``build_candidate``, ``submit_candidate``, ``trajectory``,
``finish`` and ``integrate``; each answers the data of :mod:`agent.verbs`.

The submitting client is named by the MCP handshake's ``clientInfo.name`` (``--client``
when the handshake names none), so its rounds are recorded as ``external:<name>``.

What must stay true: a Kernelsmith error reaches the agent as a tool error carrying
the message and the fix, never a traceback, and the server keeps serving; nothing is
printed on stdout but the protocol (the logs go to stderr). Without a GPU (no ``--replay``)
the tools that read answer as with one (the run's records, or the task itself where the run
has not opened the op): the instructions' first call, ``list_ops``, works everywhere (issue 47).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agent.verbs import AgentRun, build_regions
from pipeline.config import Config
from pipeline.errors import KernelsmithError
from pipeline.target import TARGET

INSTRUCTIONS = f"""Kernelsmith checks and times CUDA and Triton kernel candidates for SGLang ops against the baseline.
You write the code; Kernelsmith's harness judges it (fresh held-out shapes, poisoned outputs, adversarial
checks, timing in CUDA graphs). Start with list_ops, then show_task and planning_brief for one op; edit only
the regions show_task lists as editable (not_editable: code only other ops run, which submit refuses); check
a candidate compiles with build_candidate; submit whole region texts with submit_candidate and read the
verdict; call finish to validate the best, then integrate to patch SGLang, check through SGLang's own op and
write the PR. On a machine without a GPU list_ops, show_task, planning_brief, trajectory and build_candidate
still answer; submit_candidate, finish and integrate say so and need the GPU machine. A Triton op's
regions are Python (its @triton.jit kernel and the wrapper's launch); show_task gives its tunables and token
buckets under facts, and build_candidate runs triton.compile for {TARGET.arch} with errors in the region's lines."""


def _client_name(ctx: Context, default: str) -> str:
    try:
        info = ctx.session.client_params.clientInfo
        name = str(info.name or "").strip()
    except (AttributeError, ValueError):  # no handshake, or called outside a request (in process)
        name = ""
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name)[:40] or default


def build_server(
    make_run: Callable[[str], AgentRun],
    *,
    config: Config,
    default_client: str = "mcp",
) -> MCPServer:
    """The MCP server; ``make_run(client)`` opens the run for a client (one per client name).

    A run without a backend (no GPU here) answers the reading tools and refuses the measuring
    ones itself (:class:`agent.verbs.AgentRun`); ``build_candidate`` needs no run."""
    server = MCPServer("kernelsmith", instructions=INSTRUCTIONS)
    runs: dict[str, AgentRun] = {}

    def run_for(ctx: Context) -> AgentRun:
        client = _client_name(ctx, default_client)
        if client not in runs:
            runs[client] = make_run(client)
        return runs[client]

    # The tools answer dict[str, object] (the verbs' TypedDicts, copied): the SDK derives each tool's output
    # schema from its return annotation and checks the answer against it, and this one is the schema the
    # tools have always advertised (any object), which a TypedDict's required keys would change.
    def call(fn: Callable[[], Mapping[str, object]]) -> dict[str, object]:
        try:
            return dict(fn())
        except KernelsmithError as err:
            raise ToolError(str(err)) from err

    def call_rows(fn: Callable[[], Sequence[Mapping[str, object]]]) -> list[dict[str, object]]:
        try:
            return [dict(row) for row in fn()]
        except KernelsmithError as err:
            raise ToolError(str(err)) from err

    @server.tool()
    def list_ops(ctx: Context) -> list[dict[str, object]]:
        """Every extracted op; where this run evaluated its baseline, time ÷ floor per token bucket and the best speedup."""
        return call_rows(lambda: run_for(ctx).ops())

    @server.tool()
    def show_task(op: str, ctx: Context) -> dict[str, object]:
        """One op: its regions with line numbers, which are editable (not_editable: code only other ops run, with
        who runs it), the contract, shapes and buckets, ptxas, ncu, what was tried; a Triton op's tunables,
        autotune configs and token buckets under facts. Without a GPU: the run's records, or the task itself."""
        return call(lambda: run_for(ctx).show(op))

    @server.tool()
    def planning_brief(op: str, ctx: Context) -> dict[str, object]:
        """The bottleneck, the skills that apply (with their method text) and what not to repeat; for an op not
        evaluated yet (no GPU here), the skills its code's static features call for."""
        return call(lambda: run_for(ctx).brief(op))

    @server.tool()
    def build_candidate(op: str, regions: dict[str, str], ctx: Context) -> dict[str, object]:
        """Compile new region texts as the harness would (no GPU, nothing recorded): nvcc's ptxas resources or errors;
        for a Triton op triton.compile for sm_90, the parser's or Triton's errors in the region's own lines."""
        return call(lambda: build_regions(config, op, regions))

    @server.tool()
    def submit_candidate(op: str, regions: dict[str, str], rationale: str, ctx: Context) -> dict[str, object]:
        """Submit new texts for some editable regions (the others stay the best's) and get the harness's verdict
        (needs the GPU machine, or a server started with --replay)."""
        return call(lambda: run_for(ctx).submit(op, regions, rationale))

    @server.tool()
    def trajectory(op: str, ctx: Context) -> list[dict[str, object]]:
        """Every round of this op so far: who coded it, the outcome, the speedup, whether it was accepted."""
        return call_rows(lambda: run_for(ctx).trajectory(op))

    @server.tool()
    def finish(ctx: Context, ops: list[str] | None = None) -> dict[str, object]:
        """Final validation of each op's best (fresh shapes, adversarial checks), then the run's summary."""
        return call(lambda: run_for(ctx).finish(ops))

    @server.tool()
    def integrate(ctx: Context) -> dict[str, object]:
        """Patch SGLang with the finished run's winners, check them through SGLang's own op, write the PR (GPU)."""
        return call(lambda: run_for(ctx).integrate())

    return server


__all__ = ["INSTRUCTIONS", "build_server"]
