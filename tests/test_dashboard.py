"""pipeline.dashboard: the static pages over ≥ 4 releases, loaded in a real headless Chromium.

The store's figures here are SYNTHETIC (written by the test); what is tested is that the pages
are built from the store, load without a console error, and that their plots render.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from pipeline.dashboard import write_dashboard
from pipeline.store import Measurement, ResultsStore, Row
from pipeline.store_records import ReleaseAB

RELEASES = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")


def _store(tmp_path) -> ResultsStore:
    store = ResultsStore(tmp_path)
    for i, version in enumerate(RELEASES):
        rows = []
        for tokens in (1, 64, 512, 4096):
            slow = 1.3 if (version >= "0.5.22" and tokens == 512) else 1.0  # a regression in 0.5.22
            shape = f"m[hidden_size=4096,num_tokens={tokens}]"
            for op, variant, us in (
                ("activation.silu_and_mul", "baseline", (2 + tokens / 100) * slow),
                ("layernorm.rmsnorm", "baseline", 3 + tokens / 120),
                ("layernorm.rmsnorm", "torch_eager", 9.0 + i),
            ):
                floor = us / 1.5 if op == "activation.silu_and_mul" and version == "0.5.20" else None
                rows.append(
                    Row(
                        op_id=op, dtype="bf16", shape=shape, variant=variant, time_us=us, spread_pct=0.5, floor_us=floor
                    )
                )
        store.add(
            Measurement(
                device="NVIDIA H200",
                taken_at=f"2026-11-2{i}T00:00:00+00:00",
                command=f"kernelsmith track run --sglang-version {version}",
                sglang=version,
                rows=rows,
            )
        )
    return store


def test_pages_say_which_release_regressed_and_give_every_point_its_command(tmp_path):
    pages = write_dashboard(_store(tmp_path), tmp_path / "site", noise_pct=3.0)
    names = sorted(p.name for p in pages)
    assert names == ["index.html", "op-activation.silu_and_mul.html", "op-layernorm.rmsnorm.html"]
    index = (tmp_path / "site" / "index.html").read_text()
    assert all(f"<th>{v}</th>" in index for v in RELEASES)
    assert index.count("class='reg'") == 1, "the 0.5.22 cell of silu_and_mul"
    assert index.count("× floor)") == 1 and "(1.50× floor)" in index, "time ÷ floor where the batch recorded it"
    op = (tmp_path / "site" / "op-activation.silu_and_mul.html").read_text()
    assert op.count("<svg") == 2, "one plot per token bucket present: T<=64 and T>=512 (64<T<512 has no shape)"
    assert "introduced in sglang 0.5.22" in op
    assert op.count("kernelsmith track run --sglang-version") == 16
    assert "torch_eager" not in (tmp_path / "site" / "op-layernorm.rmsnorm.html").read_text()


def _ab(step_verdict: str) -> dict[tuple[str, str, str], ReleaseAB]:
    """SYNTHETIC release A/B records: the 0.5.21 -> 0.5.22 step of silu_and_mul, and 0.5.23's A/A."""
    step = ReleaseAB(
        op_id="activation.silu_and_mul",
        old="0.5.21",
        new="0.5.22",
        verdict=step_verdict,
        change_pct=29.7 if step_verdict == "regression" else 0.4,
        threshold_pct=3.0,
    )
    aa = ReleaseAB(
        op_id="activation.silu_and_mul",
        old="0.5.23",
        new="0.5.23",
        verdict="no change",
        change_pct=0.4,
        threshold_pct=3.0,
    )
    return {(r.op_id, r.old, r.new): r for r in (step, aa)}


def test_a_step_the_release_ab_confirmed_is_marked_on_its_plot_beside_the_aa_band(tmp_path):
    write_dashboard(_store(tmp_path), tmp_path / "site", noise_pct=3.0, ab=_ab("regression"))
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count("class='reg'") == 1 and index.count("<small>A/B: confirmed</small>") == 1
    op = (tmp_path / "site" / "op-activation.silu_and_mul.html").read_text()
    assert "confirmed by the release A/B in one worker (+29.70%)" in op
    assert "https://github.com/sgl-project/sglang/compare/v0.5.21...v0.5.22" in op, "the release diff it is in"
    assert "A/A (the release against itself): no change, +0.40% (threshold 3.00%)" in op
    assert op.count("A/B: 0.5.22 slower") == 2, "the confirmed step marked on both buckets' plots"
    assert "stroke-dasharray" in op, "the A/A band drawn dashed"
    without = write_dashboard(_store(tmp_path), tmp_path / "plain", noise_pct=3.0)
    plain = next(p for p in without if p.name == "op-activation.silu_and_mul.html").read_text()
    assert (
        "A/B: 0.5.22 slower" not in plain and "<small>trend</small>" in (tmp_path / "plain" / "index.html").read_text()
    )


def test_a_step_the_release_ab_retracted_is_not_red(tmp_path):
    write_dashboard(_store(tmp_path), tmp_path / "site", noise_pct=3.0, ab=_ab("no change"))
    index = (tmp_path / "site" / "index.html").read_text()
    assert "class='reg'" not in index and "<small>A/B: retracted</small>" in index
    op = (tmp_path / "site" / "op-activation.silu_and_mul.html").read_text()
    assert "retracted: the release A/B in one worker found no change" in op and "A/B: 0.5.22 slower" not in op


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.browser
def test_the_dashboard_loads_in_headless_chromium_without_console_errors_and_its_plots_render(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium)")
    pages = write_dashboard(_store(tmp_path), tmp_path / "site", noise_pct=3.0, ab=_ab("regression"))
    common = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=1"]
    for page in pages:
        done = subprocess.run(
            [*common, "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert console == [], f"{page.name}: console messages {console}"
        assert "</html>" in done.stdout.lower() or "</body>" in done.stdout.lower()
        if page.name.startswith("op-"):
            assert done.stdout.count("<svg") >= 2 and "<path" in done.stdout, f"{page.name}: the plots are in the DOM"
    shot = tmp_path / "dashboard.png"
    subprocess.run(
        [
            *common,
            f"--screenshot={shot}",
            "--window-size=1200,900",
            (tmp_path / "site" / "op-activation.silu_and_mul.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.is_file() and shot.stat().st_size > 20_000, "a rendered page, not a blank one"
    artifacts = os.environ.get("KERNELSMITH_TEST_ARTIFACTS")
    if artifacts:  # CI keeps it
        pathlib.Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, pathlib.Path(artifacts) / "dashboard.png")
