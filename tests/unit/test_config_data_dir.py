"""Where the data folder is: env var, checkout, or the user's folder for an installed package."""

from __future__ import annotations

from radconcord.backend import config


def test_env_var_wins_then_checkout_then_user_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "explicit"))
    assert config.data_dir() == (tmp_path / "explicit").resolve()

    monkeypatch.delenv("RADCONCORD_DATA_DIR")
    assert config.is_checkout()
    assert config.data_dir() == (config.REPO_ROOT / "data").resolve()

    # An installed package: the code's parent has no pyproject.toml (site-packages).
    monkeypatch.setattr(config, "REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert not config.is_checkout()
    assert config.data_dir() == (tmp_path / "xdg" / "radconcord").resolve()
    assert config.database_url().endswith("/xdg/radconcord/radconcord.db")
