"""The agents of the optimize loop, one module each, prompts in ``*.md`` beside them.

- :mod:`.testing`: the test plan (harness core + LLM-proposed edge cases kept
  only when they run cleanly on the baseline);
- :mod:`.profiling`: an Evaluation turned into a compact summary for the planner;
- :mod:`.planning`: the deterministic policy's ranking, optionally explained and
  picked from by an LLM;
- :mod:`.coding`: new region texts (LLM reply parsed by :mod:`.edits`, or the
  skill's mechanical transform offline);
- :mod:`.repair`: bounded fixes after a compile error or mismatch;
- :mod:`.single`: one agent that plans, codes and checks itself (``--mode single``).

:mod:`.prompts` loads and fills the templates; :mod:`.edits` parses replies and holds the
dialects (:data:`.edits.CUDA`, :data:`.edits.PYTHON`: a Triton task's fences, tokens and
``*_triton.md`` templates), which :mod:`optimize.languages` chooses per task.
"""
