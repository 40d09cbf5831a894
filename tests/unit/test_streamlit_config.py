"""The app's Streamlit settings exist in the installed Streamlit and say what we rely on."""

from __future__ import annotations

import tomllib
from pathlib import Path

from streamlit import config as st_config

CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


def _options() -> dict[str, object]:
    data = tomllib.loads(CONFIG.read_text())
    return {f"{section}.{key}": value for section, values in data.items()
            for key, value in values.items()}


def test_every_setting_is_an_option_of_the_installed_streamlit():
    known = st_config._config_options_template  # the registry Streamlit validates against
    assert [name for name in _options() if name not in known] == []


def test_no_traceback_and_no_unneutralised_table_export_reach_a_browser():
    options = _options()
    assert options["client.showErrorDetails"] == "none"
    assert options["client.disableDataExport"] is True
