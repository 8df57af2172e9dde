"""The top floor: the ``kernelsmith`` command line, above every stage.

Modules, in dependency order:

- :mod:`cli.parser`: the argparse tree and the flags that set config keys (``overrides``, ``FLAGS``).
- :mod:`cli.track`: ``kernelsmith track``, which reads the store (:mod:`pipeline.track`) or measures
  (the census and the release A/B, :mod:`bench`).
- :mod:`cli.run`: ``kernelsmith run``, extract -> optimize -> integrate in-process through the stages'
  typed options.
- :mod:`cli.stages`: each subcommand's handler; the parsed flags turned into a stage's options.
- :mod:`cli.main`: the entry point: config layering, ``--json``/``--quiet``, and every error as one line
  of cause and one of fix.

Nothing below this floor imports it: a stage is reached by its ``run(options, config)``, never by
an argv or a module named in a string.
"""
