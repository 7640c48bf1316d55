"""The configuration file's published JSON schema: what ``banditgate config-schema`` prints is the
committed deploy/banditgate.schema.json (a change to the file format shows in review), and the committed
example file is valid by it and by the models that apply it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from app.cli import main
from app.declared_config.schema import ConfigFile, config_schema
from app.declared_config.source import read, validated

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def test_the_printed_schema_is_the_committed_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config-schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == (DEPLOY / "banditgate.schema.json").read_text()
    assert json.loads(printed) == config_schema()


def test_the_example_file_is_valid_by_the_schema_and_the_models() -> None:
    data = yaml.safe_load((DEPLOY / "banditgate.yaml").read_text())
    jsonschema.Draft202012Validator(config_schema()).validate(data)
    config = validated(read(DEPLOY / "banditgate.yaml"))
    assert [b.name for b in config.backends] == ["gpt-4o-mini", "gpt-4o", "llama-3.1-8b"]
    assert [r.name for r in config.tenants[0].routers] == ["main", "careful", "savings"]


def test_the_schema_refuses_what_the_models_refuse() -> None:
    """A secret written in the file, an unknown key and a bad URL: both the schema and the models say no."""
    validator = jsonschema.Draft202012Validator(config_schema())
    for bad in (
        {"backends": [{"name": "b", "base_url": "http://x", "api_key": "sk-1"}]},
        {"backends": [{"name": "b", "base_url": "http://x", "colour": "red"}]},
        {"backends": [{"name": "b", "base_url": "x"}]},
        {"tenants": [{"name": "t", "keys": [{"name": "k", "key": "bg_1"}]}]},
        {"version": 2},
    ):
        assert not validator.is_valid(bad), bad
        with pytest.raises(ValueError):
            ConfigFile.model_validate(bad)
