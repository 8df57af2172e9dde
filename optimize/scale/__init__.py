"""Scale-out: the units of work of ``optimize``, ``bench --ops`` and ``track run`` spread over GPUs.

A *unit* is one op's bench or census timing, or one call of the measurement backend
(an evaluation, a search population, a profile): each runs whole on one GPU, so the
baseline and its candidates are still timed interleaved in one worker process on one
device. The driver keeps the run's records (trajectories, results store, BENCHMARKS.md):
a run whose units went to several GPUs is one run, written as a serial one is.

Modules in dependency order:

- errors: the package's error types (Ray missing, a cluster that cannot be reached);
- devices: which local GPUs the lanes use (``scale.gpus``, ``--gpus``; default every visible one);
- units: a unit, what it returns (done, raised, lost), running one here on a pinned GPU, and
  the task folder and build-cache entries that travel with a unit to another host;
- local: one lane (a thread) per local GPU fed from one queue, builds sharing the host's cores;
- cluster: the same units as Ray tasks with ``num_gpus=1`` (``--ray ADDRESS``);
- pool: which of the two a command gets (none: today's serial path, one GPU or fewer);
- backend: a measurement backend whose calls are units (what the optimize loop talks to);
- ops: the optimize loop over several ops at once, one op per lane, one run.
"""
