"""Layered, typed configuration: file < KERNELSMITH_ environment < command line."""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from pipeline.errors import ConfigError


def test_defaults_without_any_layer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config.sglang.version == "0.5.23"
    assert config.llm.configured is False
    assert config.extract.arch == "sm_90a"


def test_layers_override_in_order(tmp_path):
    file = tmp_path / "ks.toml"
    file.write_text('work_dir = "from-file"\n[llm]\nmodel = "file-model"\ntemperature = 0.5\n')
    env = {"KERNELSMITH_LLM__MODEL": "env-model", "KERNELSMITH_BUDGET__ROUNDS": "3"}
    config = load_config(file, environ=env, overrides={"budget": {"rounds": 5}})
    assert config.work_dir == "from-file"
    assert config.llm.model == "env-model"  # env beats file
    assert config.llm.temperature == 0.5  # file value kept where nothing overrides it
    assert config.budget.rounds == 5  # command line beats env


def test_unknown_key_in_file_is_rejected_with_its_name(tmp_path):
    file = tmp_path / "ks.toml"
    file.write_text("[llm]\nmodle = 'typo'\n")
    with pytest.raises(ConfigError, match="llm.modle"):
        load_config(file, environ={})


def test_a_stray_kernelsmith_variable_only_warns(tmp_path, monkeypatch, capsys):
    """KERNELSMITH_HOME (another tool's, or a shell's) names no setting: warned about, not fatal."""
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={"KERNELSMITH_HOME": "/opt/ks", "KERNELSMITH_FOO__BAR": "1"})
    assert config.sglang.version == "0.5.23"
    err = capsys.readouterr().err
    assert "warning: ignoring KERNELSMITH_HOME" in err and "warning: ignoring KERNELSMITH_FOO__BAR" in err


def test_cli_runs_with_a_stray_kernelsmith_variable(tmp_path, monkeypatch, capsys):
    from cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELSMITH_HOME", "/opt/ks")
    assert main(["track", "--work-dir", str(tmp_path)]) == 0
    assert "KERNELSMITH_HOME" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("KERNELSMITH_LLM__MODLE", "llm.model"),
        ("KERNELSMITH_BUDGET__WALL", "budget.wall_s"),
        ("KERNELSMITH_LLM__AGENTS__CODING__MODLE", "llm.agents.coding.model"),
    ],
)
def test_an_unknown_key_in_a_known_section_is_an_error_naming_the_nearest(tmp_path, monkeypatch, name, nearest):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(environ={name: "x"})
    assert f"did you mean {nearest}?" in str(info.value)
    assert f"environment {name}" in str(info.value)


def test_an_unknown_key_in_the_file_names_the_file_and_the_nearest_key(tmp_path):
    file = tmp_path / "ks.toml"
    file.write_text("[budget]\nround = 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(file, environ={})
    assert "did you mean budget.rounds?" in str(info.value) and f"config file {file}" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "read"),
    [
        ("KERNELSMITH_SGLANG__VERSION", "0.6", lambda c: c.sglang.version),
        ("KERNELSMITH_LLM__MODEL", "4", lambda c: c.llm.model),
        ("KERNELSMITH_LLM__API_KEY_ENV", "true", lambda c: c.llm.api_key_env),
        ("KERNELSMITH_LLM__AGENTS__CODING__MODEL", "7", lambda c: c.llm.agents["coding"].model),
        ("KERNELSMITH_SGLANG__SRC", "123", lambda c: c.sglang.src),
    ],
)
def test_a_string_field_takes_the_string_from_the_environment(tmp_path, monkeypatch, name, value, read):
    monkeypatch.chdir(tmp_path)
    assert read(load_config(environ={name: value})) == value


def test_other_environment_values_still_read_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(
        environ={
            "KERNELSMITH_EXTRACT__TOKEN_COUNTS": "[1, 8]",
            "KERNELSMITH_BUDGET__ROUNDS": "3",
            "KERNELSMITH_EXTRACT__COMPILE_CHECK": "false",
            "KERNELSMITH_HARNESS__SWEEP_BUDGET_S": "30.5",
        }
    )
    assert config.extract.token_counts == [1, 8]
    assert config.budget.rounds == 3 and config.extract.compile_check is False
    assert config.harness.sweep_budget_s == 30.5


def test_errors_name_the_layer_that_set_the_value(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "ks.toml"
    file.write_text("[budget]\nrounds = -1\n")
    with pytest.raises(ConfigError, match=f"budget.rounds = -1: .* \\(set by config file {file}\\)"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match="budget.rounds = 'x': .*set by environment KERNELSMITH_BUDGET__ROUNDS"):
        load_config(file, environ={"KERNELSMITH_BUDGET__ROUNDS": "x"})
    with pytest.raises(ConfigError, match="budget.rounds = -2: .*set by command line --rounds"):
        load_config(file, environ={}, overrides={"budget": {"rounds": -2}}, flags={"budget.rounds": "--rounds"})


def test_config_pointing_at_a_directory_is_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    from cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["track", "--config", str(tmp_path), "--work-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"config file {tmp_path} is a directory" in err
    assert "fix: pass a TOML file (--config)" in err and "Traceback" not in err


def test_config_file_that_is_not_text_is_a_config_error(tmp_path):
    file = tmp_path / "ks.toml"
    file.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(file, environ={})


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_rejected_with_the_allowed_range(tmp_path, monkeypatch, capsys, jobs):
    from cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["extract", "--work-dir", str(tmp_path), "--list", "--jobs", jobs]) == 2
    err = capsys.readouterr().err
    assert f"extract.jobs = {int(jobs)}: Input should be greater than or equal to 1" in err
    assert "set by command line --jobs" in err


def test_wrong_type_is_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="budget.rounds"):
        load_config(environ={"KERNELSMITH_BUDGET__ROUNDS": "many"})


def test_sglang_src_is_honoured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={"SGLANG_SRC": "/src/sglang"}).sglang.src == "/src/sglang"


def test_cli_reports_config_errors_with_exit_code_2(tmp_path, monkeypatch, capsys):
    from cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELSMITH_BUDGET__ROUNDS", "many")
    assert main(["track"]) == 2
    assert "fix:" in capsys.readouterr().err
