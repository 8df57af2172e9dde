"""The outside coding agent: Claude Code, Codex or a person writes the code, Kernelsmith does the rest.

The top floor (it imports optimize and integrate, nothing imports it). Kernelsmith's
testing agent (contract completion, the test plan), profiling (the summary, Nsight
Compute), planning (the policy's ranked skills with their method text), its skill
library, trajectory, budget, harness and final validation do their parts; the agent
only writes region texts. Modules, in dependency order:

- :mod:`agent.tasks`: an op id looked up (an unknown one answered with the closest known
  ids of the indexes or task folders), and the code of a task only other ops run, marked
  with who runs it, exactly as the session refuses edits to it;
- :mod:`agent.answers`: what each verb answers, as types (the JSON both front ends print);
- :mod:`agent.verbs`: the verbs over one run's records (ops, show, brief, submit,
  trajectory, finish, integrate), each answering plain JSON data; the reading verbs need no
  GPU, the measuring ones refuse without one before any work;
- :mod:`agent.mcp_server`: the same verbs as MCP tools over stdio, on the official
  ``mcp`` SDK (``kernelsmith mcp``);
- :mod:`agent.command`: ``kernelsmith agent VERB ...`` (a person, or an agent
  without MCP) and ``kernelsmith mcp``.

What must stay true: both front ends call the same verbs and read the same records,
so a run started over MCP can be continued from the command line and the other way
round; every submission is a round of :meth:`optimize.session.Session.submit`,
recorded as coder ``external:<client>``.
"""
