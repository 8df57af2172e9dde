"""Issue 16, the faults of files on disk: a damaged task.json (row 2), a damaged cached
sglang wheel (5), a read-only work dir (6), a corrupt results object (7), record modes
under the umask (14). Each is one line of what, where and the fix, never a traceback."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import zipfile

import pytest
from test_integrate_patch import OP as ACT_OP
from test_integrate_patch import one_op_run, wheel_source  # noqa: F401 (fixtures)
from test_loop import REPLAY, write_task

from cli.main import main
from contract import layout
from extract import sources
from pipeline.errors import NotWritable, SourceError, StaleRecordError
from pipeline.record_io import SCHEMA_VERSION, Record, file_mode, read_record, write_record
from pipeline.records import Task
from pipeline.store import Measurement, ResultsStore, Row

ROOT = pathlib.Path(__file__).resolve().parent.parent
OP = "demo.scale"


def damage(path: pathlib.Path, how: str) -> None:
    text = path.read_text(encoding="utf-8")
    if how == "empty":
        path.write_text("", encoding="utf-8")
    elif how == "truncated":
        path.write_text(text[: len(text) // 2], encoding="utf-8")
    elif how == "wrong-version":
        data = json.loads(text)
        data["schema_version"] = SCHEMA_VERSION + 7
        path.write_text(json.dumps(data), encoding="utf-8")
    elif how == "invalid":
        data = json.loads(text)
        data["files"] = "not a list"
        path.write_text(json.dumps(data), encoding="utf-8")


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# --------------------------------------------------------------------------- row 2: a damaged task.json


@pytest.mark.parametrize("how", ["empty", "truncated", "wrong-version", "invalid"])
def test_load_task_names_the_damaged_file_and_the_fix(tmp_path, how):
    folder, _ = write_task(tmp_path)
    damage(folder / "task.json", how)
    with pytest.raises(StaleRecordError) as info:
        layout.load_task(folder)
    text = str(info.value)
    assert str(folder / "task.json") in text
    assert f"kernelsmith extract --ops {OP}" in text


@pytest.mark.parametrize("how", ["empty", "truncated", "wrong-version"])
def test_bench_and_optimize_on_a_damaged_task_say_which_file_and_the_fix(tmp_path, capsys, how):
    folder, _ = write_task(tmp_path)
    damage(folder / "task.json", how)
    for argv in (
        ("bench", "--ops", OP, "--work-dir", str(tmp_path), "--output", str(tmp_path / "B.md")),
        ("optimize", "--ops", OP, "--work-dir", str(tmp_path), "--coder", "offline", "--replay", str(REPLAY)),
    ):
        code, text = run_cli(capsys, *argv)
        assert code == 2, text
        assert "Traceback" not in text
        assert str(folder / "task.json") in text and f"kernelsmith extract --ops {OP}" in text


@pytest.mark.wheel
@pytest.mark.parametrize("how", ["truncated", "wrong-version"])
def test_integrate_on_a_damaged_task_says_which_file_and_the_fix(one_op_run, monkeypatch, capsys, how):
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(ROOT / "work" / "cache"))
    task_json = one_op_run / "tasks" / ACT_OP / "task.json"
    damage(task_json, how)
    code, text = run_cli(capsys, "integrate", "--run", "r1", "--work-dir", str(one_op_run), "--skip-e2e")
    assert code == 2, text
    assert "Traceback" not in text
    assert str(task_json) in text and f"kernelsmith extract --ops {ACT_OP}" in text


def test_a_record_that_is_not_json_is_a_stale_record_error(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"schema_version": 1, "na', encoding="utf-8")
    with pytest.raises(StaleRecordError, match="not valid JSON"):
        read_record(Task, path)


@pytest.mark.wheel
@pytest.mark.parametrize("how", ["empty", "truncated", "wrong-version"])
def test_extract_rewrites_a_task_it_cannot_load(monkeypatch, sglang_source, tmp_path, capsys, how):
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(ROOT / "work" / "cache"))
    if sglang_source.kind != "wheel":
        monkeypatch.setenv("SGLANG_SRC", sglang_source.root)
    work, op = tmp_path / "work", "activation.silu_and_mul"
    argv = ("extract", "--work-dir", str(work), "--ops", op, "--no-compile")
    assert run_cli(capsys, *argv)[0] == 0
    good = layout.load_task(work / "tasks" / op)
    damage(work / "tasks" / op / "task.json", how)
    code, text = run_cli(capsys, *argv)
    assert code == 0, text
    assert "rewriting the task" in text and "no task" not in text
    assert layout.load_task(work / "tasks" / op) == good
    code, text = run_cli(capsys, *argv)  # and the next run finds it current
    assert code == 0 and "task current" in text


# --------------------------------------------------------------------------- row 5: a damaged cached wheel


def fake_wheel(version: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("sglang/kernels/jit/csrc/elementwise/act.cuh", "// kernel\n" * 200)
        archive.writestr("sglang/version.py", f'__version__ = "{version}"\n')
    return buffer.getvalue()


@pytest.fixture
def pinned_wheel(monkeypatch):
    """A small wheel pinned in sources.WHEEL_SHA256, and a fake `pip download` that writes it
    (counting its calls): the real pins and the real download are not the point here."""
    version, name = "9.9.9", "sglang-9.9.9-py3-none-any.whl"
    data = fake_wheel(version)
    monkeypatch.setitem(sources.WHEEL_SHA256, name, hashlib.sha256(data).hexdigest())
    downloads: list[bytes] = []
    served = [data]

    def fake_run(command, **kwargs):
        dest = pathlib.Path(command[command.index("-d") + 1])
        (dest / name).write_bytes(served[0])
        downloads.append(served[0])
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sources.subprocess, "run", fake_run)
    return version, name, data, downloads, served


def test_a_truncated_cached_wheel_is_downloaded_again(tmp_path, pinned_wheel, capsys):
    version, name, data, downloads, _ = pinned_wheel
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / name).write_bytes(data[: len(data) // 2])  # a download cut short
    info = sources.acquire(version, tmp_path)
    assert len(downloads) == 1
    assert (pathlib.Path(info.root) / "kernels/jit/csrc/elementwise/act.cuh").is_file()
    assert (wheels / name).read_bytes() == data
    assert "downloading it again" in capsys.readouterr().err


def test_extract_over_a_damaged_cached_wheel_downloads_it_again_or_says_why_in_one_line(
    tmp_path, pinned_wheel, monkeypatch, capsys
):
    """The CLI path of row 5: no BadZipFile traceback; a cut download is fetched again, and a download
    that is not the pinned bytes stops with what, where and the fix."""
    version, name, data, downloads, served = pinned_wheel
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / name).write_bytes(data[:100])
    monkeypatch.setenv("KERNELSMITH_SGLANG__VERSION", version)
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(cache))
    monkeypatch.delenv("SGLANG_SRC", raising=False)
    code, text = run_cli(capsys, "extract", "--list", "--work-dir", str(tmp_path / "work"))
    assert code == 0 and "Traceback" not in text and "downloading it again" in text, text
    assert len(downloads) == 1 and (cache / "wheels" / name).read_bytes() == data
    (cache / "wheels" / name).write_bytes(data[:100])
    shutil.rmtree(cache / f"sglang-{version}", ignore_errors=True)
    served[0] = fake_wheel("evil")
    code, text = run_cli(capsys, "extract", "--list", "--work-dir", str(tmp_path / "work2"))
    assert code == 2 and "Traceback" not in text, text
    assert f"the downloaded {name} fails its check" in text and "fix: re-run" in text


def test_a_good_cached_wheel_is_not_downloaded_again(tmp_path, pinned_wheel):
    version, name, data, downloads, _ = pinned_wheel
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / name).write_bytes(data)
    sources.acquire(version, tmp_path)
    assert downloads == []


def test_a_download_that_is_not_the_pinned_bytes_is_refused(tmp_path, pinned_wheel):
    version, name, data, _, served = pinned_wheel
    served[0] = fake_wheel("evil")  # a valid zip, other bytes than the pin
    with pytest.raises(SourceError, match="fails its check") as info:
        sources.acquire(version, tmp_path)
    assert "WHEEL_SHA256" in info.value.fix
    assert not (tmp_path / "wheels" / name).exists()  # never kept, never unpacked
    assert not (tmp_path / f"sglang-{version}").exists()


def test_a_version_not_on_the_index_is_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    """KERNELSMITH_SGLANG__VERSION=0.6 (issue 16 row 8): the string reaches pip, whose refusal is
    the error's cause, with pip's own ERROR lines only (not its warnings, not 200 versions)."""
    versions = ", ".join(f"0.{minor}.{patch}" for minor in range(1, 6) for patch in range(40))
    stderr = (
        "WARNING: Location 'file:///opt/pypi/simple/sglang/' is ignored: it is neither a file nor a directory.\n"
        f"ERROR: Could not find a version that satisfies the requirement sglang==0.6 (from versions: {versions})\n"
        "ERROR: No matching distribution found for sglang==0.6\n"
    )
    monkeypatch.setattr(
        sources.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 1, "", stderr)
    )
    monkeypatch.setenv("KERNELSMITH_SGLANG__VERSION", "0.6")
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SGLANG_SRC", raising=False)
    code, text = run_cli(capsys, "extract", "--list", "--work-dir", str(tmp_path / "work"))
    assert code == 2 and "Traceback" not in text
    assert "error: sglang==0.6 is not on the package index" in text and "fix: set KERNELSMITH_SGLANG__VERSION" in text
    assert "WARNING" not in text and "No matching distribution found for sglang==0.6" in text
    assert max(len(line) for line in text.splitlines()) <= 320


def test_an_unpinned_wheel_must_be_an_intact_zip(tmp_path):
    wheel = tmp_path / "sglang-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 not really")
    assert "not a readable wheel" in (sources.wheel_problem(wheel) or "")
    wheel.write_bytes(fake_wheel("1.0"))
    assert sources.wheel_problem(wheel) is None


def test_the_pinned_sglang_wheel_matches_its_pin():
    """The pin for the project's sglang (0.5.23) is the sha256 of the wheel pip gives this Python."""
    wheels = sorted((ROOT / "work" / "cache" / "wheels").glob("sglang-0.5.23-*.whl"))
    if not wheels:
        pytest.skip("no sglang 0.5.23 wheel cached on this machine")
    assert any(sources.wheel_problem(w) is None and w.name in sources.WHEEL_SHA256 for w in wheels)


def load_fetch_deps():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fetch_deps", ROOT / "tools" / "fetch-deps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fetch_deps_refuses_a_wheel_that_is_not_the_pin(tmp_path):
    module = load_fetch_deps()
    assert len(module.WHEEL_SHA256) == 64
    wheel = tmp_path / "flashinfer_python-0.7.4-py3-none-any.whl"
    wheel.write_bytes(b"cut short")
    assert "the pin is" in (module.wheel_problem(wheel) or "")


def test_fetch_deps_unpacks_only_the_pinned_flashinfer_wheel(tmp_path, monkeypatch, capsys):
    """flashinfer's sha256 is checked before use: a download that is not the pin is never unpacked
    (the headers already there stay), and the pinned bytes are."""
    module = load_fetch_deps()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("flashinfer/data/include/flashinfer/vec.cuh", "#pragma once\n")
    good = buffer.getvalue()
    served = [b"PK\x03\x04 cut short"]

    def fake_pip(command, **kwargs):
        folder = pathlib.Path(command[command.index("-d") + 1])
        (folder / "flashinfer_python-0.7.4-py3-none-any.whl").write_bytes(served[0])
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(module.subprocess, "run", fake_pip)
    monkeypatch.setattr(module, "WHEEL_SHA256", hashlib.sha256(good).hexdigest())
    dest = tmp_path / "deps"
    (dest / "flashinfer").mkdir(parents=True)
    (dest / "flashinfer" / "VERSION").write_text("earlier\n")
    assert module.main([str(dest)]) == 1
    assert "the pin is" in capsys.readouterr().err
    assert (dest / "flashinfer" / "VERSION").read_text() == "earlier\n", "the headers already there stay"
    served[0] = good
    assert module.main([str(dest)]) == 0
    assert (dest / "flashinfer/data/include/flashinfer/vec.cuh").is_file()


# --------------------------------------------------------------------------- row 6: a read-only work dir


@contextlib.contextmanager
def read_only(folder: pathlib.Path):
    """``folder`` and everything under it made unwritable for real: ``chmod a-w`` for a normal
    user, ``chattr +i`` (immutable, refused even to root) when the tests run as root."""
    paths = [folder, *folder.rglob("*")]
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a folder read-only")
        done = subprocess.run(["chattr", "-R", "+i", str(folder)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i not supported here: {done.stderr.decode(errors='replace')}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-R", "-i", str(folder)], check=True)
        return
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        p.chmod(modes[p] & ~0o222)
    try:
        yield
    finally:
        for p in reversed(paths):
            p.chmod(modes[p])


class Tiny(Record):
    n: int


def test_write_record_in_a_read_only_folder_names_the_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder), pytest.raises(NotWritable) as info:
        write_record(Tiny(n=1), folder / "x.json")
    assert str(folder) in str(info.value) and "--work-dir" in info.value.fix


def test_optimize_in_a_read_only_work_dir_is_one_line(tmp_path, capsys):
    write_task(tmp_path)
    with read_only(tmp_path):
        code, text = run_cli(
            capsys, "optimize", "--ops", OP, "--work-dir", str(tmp_path), "--coder", "offline", "--replay", str(REPLAY)
        )
    assert code == 2, text
    assert "Traceback" not in text
    assert "cannot write in" in text and str(tmp_path) in text


@pytest.mark.wheel
def test_extract_list_works_in_a_read_only_work_dir_and_extract_says_which_folder(
    monkeypatch, sglang_source, tmp_path, capsys
):
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(ROOT / "work" / "cache"))
    if sglang_source.kind != "wheel":
        monkeypatch.setenv("SGLANG_SRC", sglang_source.root)
    work = tmp_path / "work"
    assert run_cli(capsys, "extract", "--work-dir", str(work), "--list")[0] == 0
    with read_only(work):
        code, text = run_cli(capsys, "extract", "--work-dir", str(work), "--list")
        assert code == 0, text
        assert "activation.silu_and_mul" in text
        code, text = run_cli(
            capsys, "extract", "--work-dir", str(work), "--ops", "activation.silu_and_mul", "--no-compile"
        )
        assert code == 2, text
        assert "Traceback" not in text
        assert f"cannot write in {work}" in text and "fix:" in text


def test_track_reads_a_read_only_results_store_and_a_batch_added_there_names_the_folder(tmp_path, capsys):
    """On 2026-12-02 `track` in a read-only work dir called the store "not a readable database" and its
    fix was to move it aside, losing every batch: SQLite could not make its WAL files there."""
    store = ResultsStore(tmp_path)
    store.add(measurement())
    with read_only(tmp_path):
        code, out = run_cli(capsys, "track", "--work-dir", str(tmp_path))
        assert code == 0, out
        assert OP in out and "aside" not in out and "Traceback" not in out
        with pytest.raises(NotWritable) as info:
            ResultsStore(tmp_path).add(measurement().model_copy(update={"sglang": "0.5.24"}))
    assert str(tmp_path / "results") in str(info.value) and "--work-dir" in info.value.fix
    assert len(ResultsStore(tmp_path).keys()) == 1, "nothing was lost, nothing half-written"


def test_a_batch_in_a_read_only_work_dir_without_a_store_names_the_work_dir(tmp_path):
    with read_only(tmp_path), pytest.raises(NotWritable) as info:
        ResultsStore(tmp_path).add(measurement())
    assert f"cannot write in {tmp_path}:" in str(info.value)


# --------------------------------------------------------------------------- row 7: a corrupt results object


def measurement() -> Measurement:
    return Measurement(
        device="H200",
        taken_at="2026-12-01T00:00:00+00:00",
        command="kernelsmith bench",
        sglang="0.5.23",
        rows=[Row(op_id=OP, dtype="fp32", shape="n=1024", time_us=3.0)],
    )


@pytest.mark.parametrize("how", ["truncated", "missing", "edited"])
def test_track_over_a_corrupt_json_results_object_names_it_and_goes_on(tmp_path, capsys, how):
    """The first store format (JSON objects) is imported into SQLite; a corrupt object is named with
    the fix and costs only its own batch."""
    from pipeline.store_json import JsonStore

    legacy = JsonStore(tmp_path)
    key = legacy.add(measurement())
    path = legacy.objects / f"{key}.json"
    text = path.read_text(encoding="utf-8")
    if how == "truncated":
        path.write_text(text[:40], encoding="utf-8")
    elif how == "missing":
        path.unlink()
    else:
        path.write_text(text.replace("3.0", "1.0"), encoding="utf-8")  # parses, but is not the batch its key names
    with pytest.raises(StaleRecordError):
        legacy.get(key)
    code, out = run_cli(capsys, "track", "--work-dir", str(tmp_path))
    assert code == 0, out
    assert "Traceback" not in out
    assert str(path) in out and "history.jsonl" in out and "fix:" in out and "no measurements" in out


def test_track_over_a_corrupt_database_names_it(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "results.sqlite").write_bytes(b"garbage" * 512)
    code, out = run_cli(capsys, "track", "--work-dir", str(tmp_path))
    assert code == 2 and "Traceback" not in out
    assert "results.sqlite" in out and "fix:" in out


# --------------------------------------------------------------------------- row 14: the umask decides


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_records_get_the_mode_the_umask_decides(tmp_path, umask):
    old = os.umask(umask)
    try:
        assert file_mode() == 0o666 & ~umask
        path = write_record(Tiny(n=1), tmp_path / "t.json")
        key = ResultsStore(tmp_path).add(measurement())
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert key and (tmp_path / "results" / "results.sqlite").stat().st_mode & 0o777 == 0o666 & ~umask


def test_run_files_and_replay_recordings_get_the_mode_the_umask_decides(tmp_path):
    """The run folder's run.json and a replay recording are staged with mkstemp too: the umask decides their mode."""
    import os

    from optimize.backends.replay import _publish
    from optimize.run_folder import run_meta_check

    old = os.umask(0o022)
    try:
        _publish(tmp_path / "rec" / "measurements.json", {"a": 1})
        run_meta_check(tmp_path / "run", {"mode": "multi", "coder": "offline", "backend": "replay"})
    finally:
        os.umask(old)
    assert (tmp_path / "rec" / "measurements.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "run" / "run.json").stat().st_mode & 0o777 == 0o644


def test_sigterm_unwinds_like_ctrl_c_and_the_handler_is_restored(monkeypatch, capsys):
    """A `timeout` or a scheduler stops a command with SIGTERM: it must unwind (closing workers, keeping
    records) and end with the resume hint and exit 130, not die where it stands."""
    import os
    import signal

    from cli.main import main as kernelsmith
    from cli.stages import HANDLERS

    def handler(args, config):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt the handler")

    monkeypatch.setitem(HANDLERS, "track", handler)
    before = signal.getsignal(signal.SIGTERM)
    assert kernelsmith(["track"]) == 130
    assert "interrupted: results written so far are kept" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_interrupt_that_breaks_a_lock_on_its_way_out_is_still_an_interrupt(monkeypatch, capsys):
    """On the H200 (2026-12-02) a `timeout`'s SIGTERM landed inside a queue's wait and surfaced as
    "RuntimeError: release unlocked lock" with a traceback. Any error whose chain holds the
    interrupt ends as the interrupt: the resume hint, exit 130, no traceback; one that does not
    still propagates."""

    from cli.main import main as kernelsmith
    from cli.stages import HANDLERS

    def broken_by_the_interrupt(args, config):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("release unlocked lock")  # noqa: B904 (the context chain is the point)

    def plain_bug(args, config):
        raise RuntimeError("a bug")

    monkeypatch.setitem(HANDLERS, "track", broken_by_the_interrupt)
    assert kernelsmith(["track"]) == 130
    assert "interrupted: results written so far are kept" in capsys.readouterr().err
    monkeypatch.setitem(HANDLERS, "track", plain_bug)
    monkeypatch.setenv("KERNELSMITH_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="a bug"):
        kernelsmith(["track"])


def test_a_kernelsmith_bug_is_one_line_and_its_traceback_is_saved(monkeypatch, capsys, tmp_path):
    """No traceback reaches the user (the H200 sweep of 2026-12-05 printed one for a ValueError in
    build_space): the bug's type, message and place in one line, exit 70, the traceback in a file
    under the work folder, and KERNELSMITH_TRACEBACK=1 to see it raised."""

    from cli.main import main as kernelsmith
    from cli.stages import HANDLERS

    def plain_bug(args, config):
        raise ValueError("tuple.index(x): x not in tuple")

    monkeypatch.delenv("KERNELSMITH_TRACEBACK", raising=False)
    monkeypatch.setitem(HANDLERS, "track", plain_bug)
    assert kernelsmith(["track", "--work-dir", str(tmp_path / "w")]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("internal error: ValueError: tuple.index(x): x not in tuple at test_faults_files.py:")
    assert "in plain_bug" in err and "rerunning the same command resumes" in err
    saved = list((tmp_path / "w" / "crashes").glob("kernelsmith-*-track.txt"))
    assert len(saved) == 1 and f"saved in {saved[0]}" in err
    assert "Traceback (most recent call last)" in saved[0].read_text() and "plain_bug" in saved[0].read_text()


# --------------------------------------------------------------------------- issue 47: paths and records of the user's


@pytest.mark.parametrize(
    "argv",
    [
        ["extract", "--ops", "activation.silu_and_mul", "--work-dir", "{file}"],
        ["track", "--html", "{file}", "--work-dir", "{tmp}"],
        ["optimize", "--ops", OP, "--work-dir", "{file}", "--replay", str(REPLAY)],
    ],
)
def test_a_path_that_is_a_file_where_a_folder_is_needed_is_one_line(tmp_path, capsys, argv):
    target = tmp_path / "afile"
    target.write_text("not a folder")
    code, text = run_cli(capsys, *[a.format(file=target, tmp=tmp_path) for a in argv])
    assert code == 2, text
    assert "Traceback" not in text and "internal error" not in text and "Kernelsmith bug" not in text
    assert f"{target} is a file where a folder is needed" in text and "fix:" in text


def test_track_html_on_an_empty_store_says_so_and_writes_a_page_that_says_so(tmp_path, capsys):
    code, text = run_cli(capsys, "track", "--html", str(tmp_path / "dash"), "--work-dir", str(tmp_path))
    assert code == 0 and "no measurements" in text and "the dashboard says so" in text
    page = (tmp_path / "dash" / "index.html").read_text(encoding="utf-8")
    assert "No measurements yet" in page


@pytest.mark.parametrize("damaged", ["{not json", "[1, 2]", b"\xff\xfe\x00binary"])
def test_a_damaged_run_json_is_the_users_record_to_mend_not_a_bug(tmp_path, capsys, damaged):
    write_task(tmp_path)
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    if isinstance(damaged, bytes):
        (run_dir / "run.json").write_bytes(damaged)
    else:
        (run_dir / "run.json").write_text(damaged, encoding="utf-8")
    code, text = run_cli(
        capsys,
        "optimize",
        "--ops",
        OP,
        "--work-dir",
        str(tmp_path),
        "--run",
        "r1",
        "--coder",
        "offline",
        "--replay",
        str(REPLAY),
    )
    assert code == 2, text
    assert "Traceback" not in text and "Kernelsmith bug" not in text
    assert f"{run_dir / 'run.json'}" in text and "delete it to record the run's options anew" in text
