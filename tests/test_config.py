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


def test_unknown_environment_setting_is_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="KERNELSMITH_NOPE"):
        load_config(environ={"KERNELSMITH_NOPE": "1"})


def test_wrong_type_is_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="budget.rounds"):
        load_config(environ={"KERNELSMITH_BUDGET__ROUNDS": "many"})


def test_sglang_src_is_honoured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={"SGLANG_SRC": "/src/sglang"}).sglang.src == "/src/sglang"


def test_cli_reports_config_errors_with_exit_code_2(tmp_path, monkeypatch, capsys):
    from pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELSMITH_BUDGET__ROUNDS", "many")
    assert main(["track"]) == 2
    assert "fix:" in capsys.readouterr().err
