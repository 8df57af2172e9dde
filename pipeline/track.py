"""`kernelsmith track`: the history of every measurement and the regressions in the newest one.

Nightly tracking = `kernelsmith bench` on a schedule (it adds a batch to the results
store) followed by `kernelsmith track --fail-on-regression`, which exits 1 when the
newest batch is slower than the best earlier one beyond the noise band.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pipeline.store import ResultsStore


def main(args, config) -> int:
    store = ResultsStore(config.work)
    console = Console()
    rows = store.history(getattr(args, "op", None))
    if not rows:
        console.print(f"no measurements in {store.root} yet: run `kernelsmith bench` on a GPU machine first")
        return 0
    table = Table(title=f"measurement history ({len(store.keys())} batches)")
    for col in ("taken_at", "device", "op", "dtype", "shape", "variant", "time_us", "spread_%"):
        table.add_column(col)
    for _key, batch, row in rows[-200:]:
        table.add_row(
            batch.taken_at,
            batch.device,
            row.op_id,
            row.dtype,
            row.shape,
            row.variant,
            f"{row.time_us:.2f}",
            f"{row.spread_pct:.1f}",
        )
    console.print(table)
    found = store.regressions(noise_pct=config.harness.noise_pct)
    if found:
        console.print(f"[red]{len(found)} regression(s) in the newest batch:[/red]")
        for reg in found:
            console.print(
                f"  {reg.op_id} {reg.dtype} {reg.shape} {reg.variant}: {reg.best_us:.2f} -> {reg.now_us:.2f} us (+{reg.slowdown_pct}%)"
            )
        return 1 if getattr(args, "fail_on_regression", False) else 0
    console.print("no regressions in the newest batch")
    return 0
