"""Settings: the table, the sources and their precedence, clear errors, documentation."""

from __future__ import annotations

from pathlib import Path

import pytest

from postroom.config import SETTINGS, ListenAddress, load_settings
from postroom.errors import ConfigError

DOCS = Path(__file__).parents[1] / "docs" / "configuration.md"


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings(env={}, cwd=tmp_path)
    assert settings.data_dir == tmp_path / "postroom-data"
    assert settings.database_url == f"sqlite:///{tmp_path / 'postroom-data' / 'postroom.db'}"
    assert settings.smtp_listen == ListenAddress("127.0.0.1", 2525)
    assert settings.http_listen == ListenAddress("127.0.0.1", 8025)
    assert settings.platform_domain == "localhost"
    assert settings.master_key_file == tmp_path / "postroom-data" / "master.key"
    assert settings.key_pepper_file == tmp_path / "postroom-data" / "key-pepper"
    assert settings.hash_key_file == tmp_path / "postroom-data" / "hash-key"
    assert settings.blobs_path == tmp_path / "postroom-data" / "blobs"


def test_toml_file_then_environment(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    config = conf_dir / "postroom.toml"
    config.write_text(
        'data_dir = "var/data"\nplatform_domain = "Mail.Example.COM"\n'
        '[smtp]\nlisten = "0.0.0.0:25"\n[http]\nlisten = "[::1]:8080"\n'
        "[jobs]\nlease_seconds = 90\n"
    )
    settings = load_settings(config, env={"POSTROOM_JOBS_LEASE_SECONDS": "120"}, cwd=tmp_path)
    # Relative paths in a file are relative to the file's folder.
    assert settings.data_dir == conf_dir / "var" / "data"
    assert settings.database_url.endswith("/etc/var/data/postroom.db")
    assert settings.platform_domain == "mail.example.com"
    assert settings.smtp_listen == ListenAddress("0.0.0.0", 25)
    assert str(settings.http_listen) == "[::1]:8080"
    assert settings.jobs_lease_seconds == 120  # the environment wins


def test_config_file_from_environment_and_cwd(tmp_path: Path) -> None:
    (tmp_path / "postroom.toml").write_text('platform_domain = "cwd.example"\n')
    other = tmp_path / "other.toml"
    other.write_text('platform_domain = "env.example"\n')
    assert load_settings(env={}, cwd=tmp_path).platform_domain == "cwd.example"
    env = {"POSTROOM_CONFIG": str(other)}
    assert load_settings(env=env, cwd=tmp_path).platform_domain == "env.example"


def test_environment_variables_use_underscores_for_dots(tmp_path: Path) -> None:
    env = {
        "POSTROOM_SMTP_LISTEN": "127.0.0.2:2626",
        "POSTROOM_DATABASE_URL": "postgresql://postroom@db.internal:5432/mail",
        "POSTROOM_WORKER_HANDLER_MODULES": "a.b, c.d",
    }
    settings = load_settings(env=env, cwd=tmp_path)
    assert settings.smtp_listen == ListenAddress("127.0.0.2", 2626)
    assert settings.database_url == "postgresql://postroom@db.internal:5432/mail"
    assert not settings.is_sqlite
    assert settings.worker_handler_modules == ("a.b", "c.d")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POSTROOM_SMTP_LISTEN": "localhost"}, "smtp.listen (from POSTROOM_SMTP_LISTEN)"),
        ({"POSTROOM_SMTP_LISTEN": "127.0.0.1:99999"}, "smtp.listen"),
        ({"POSTROOM_JOBS_LEASE_SECONDS": "soon"}, "jobs.lease_seconds"),
        ({"POSTROOM_JOBS_LEASE_SECONDS": "0"}, "between 1 and 86400"),
        ({"POSTROOM_DATABASE_URL": "mysql://x/y"}, "database_url"),
        ({"POSTROOM_DATABASE_URL": "postgresql://host"}, "must name a database"),
        ({"POSTROOM_PLATFORM_DOMAIN": "not a domain!"}, "platform_domain"),
        ({"POSTROOM_LOG_LEVEL": "loud"}, "log.level"),
    ],
)
def test_invalid_values_name_the_setting(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=env, cwd=tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("data_dir = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken, env={}, cwd=tmp_path)
    typo = tmp_path / "typo.toml"
    typo.write_text('[smtp]\nlisen = "127.0.0.1:25"\n')
    with pytest.raises(ConfigError, match="unknown setting 'smtp.lisen'"):
        load_settings(typo, env={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", env={}, cwd=tmp_path)
    wrong_type = tmp_path / "type.toml"
    wrong_type.write_text("[jobs]\nlease_seconds = true\n")
    with pytest.raises(ConfigError, match=r"jobs.lease_seconds \(in .*type.toml\)"):
        load_settings(wrong_type, env={}, cwd=tmp_path)


def test_secrets_are_masked_in_the_display(tmp_path: Path) -> None:
    env = {"POSTROOM_DATABASE_URL": "postgresql://mail:hunter2@db:5432/mail"}
    shown = load_settings(env=env, cwd=tmp_path).display_values()
    assert shown["database_url"] == "postgresql://mail:***@db:5432/mail"
    assert "hunter2" not in repr(shown)
    assert set(shown) == {spec.name for spec in SETTINGS}


def test_every_setting_has_help_and_is_documented() -> None:
    doc = DOCS.read_text()
    for spec in SETTINGS:
        assert len(spec.help) > 15, f"{spec.name} has no real help text"
        assert f"`{spec.name}`" in doc, f"{spec.name} is missing from docs/configuration.md"
        assert f"`{spec.env_var}`" in doc, f"{spec.env_var} is missing from docs/configuration.md"
