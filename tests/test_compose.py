"""docker-compose.yml and .env.example are safe as shipped: gunicorn published on the
host's loopback only, no proxy header trusted, plain HTTP (no TLS proxy in compose), and
web's health check asks the HTTP health endpoint. No Docker engine is needed: the files
are parsed and `${VAR:-default}` is resolved as compose resolves it."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROXY_SETTINGS = {
    "TEMPO_BEHIND_HTTPS": "false",
    "TEMPO_TRUST_PROXY_SSL_HEADER": "false",
    "TEMPO_PROXY_COUNT": "0",
}
DEFAULTED = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def resolved(value: str, env: dict[str, str]) -> str:
    """`value` with each ${VAR:-default} as compose reads it, given the variables `env`."""
    return DEFAULTED.sub(lambda m: env.get(m.group(1)) or m.group(2) or "", value)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {name.strip(): value.strip() for name, value in pairs}


def test_web_is_published_on_loopback_only(compose):
    assert compose["services"]["web"]["ports"] == ["127.0.0.1:8000:8000"]


def test_no_service_is_published_on_every_interface(compose):
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


@pytest.mark.parametrize("env_name", [None, ".env.example"])
def test_no_proxy_header_is_trusted_by_default(compose, env_example, env_name):
    """Neither with no .env at all nor with .env copied from .env.example."""
    env = {} if env_name is None else env_example
    web_env = compose["services"]["web"]["environment"]
    got = {name: resolved(str(web_env[name]), env) for name in PROXY_SETTINGS}
    assert got == PROXY_SETTINGS


def test_an_operator_can_still_turn_the_proxy_settings_on(compose):
    behind_proxy = {
        "TEMPO_BEHIND_HTTPS": "true",
        "TEMPO_TRUST_PROXY_SSL_HEADER": "true",
        "TEMPO_PROXY_COUNT": "1",
    }
    web_env = compose["services"]["web"]["environment"]
    got = {name: resolved(str(web_env[name]), behind_proxy) for name in PROXY_SETTINGS}
    assert got == behind_proxy


def test_env_example_trusts_no_proxy(env_example):
    assert {name: env_example[name] for name in PROXY_SETTINGS} == PROXY_SETTINGS


def test_web_health_check_asks_the_health_endpoint(compose):
    check = compose["services"]["web"]["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"]
    assert "http://127.0.0.1:8000/api/health/" in check[3]
    compile(check[3], "healthcheck", "exec")  # the one-liner is valid Python


def test_every_service_has_a_health_check(compose):
    missing = [
        name
        for name, service in compose["services"].items()
        if name != "migrate" and "test" not in service.get("healthcheck", {})
    ]
    assert missing == []


READ = re.compile(r'(?:env|Env\(\)|os\.environ)\.\w+\(\s*"([A-Z][A-Z0-9_]*)"')
COMPOSE_ONLY = {"POSTGRES_DB", "POSTGRES_USER", "POSTGRES_PASSWORD"}  # the postgres image's


def test_env_example_lists_exactly_the_variables_the_settings_read():
    """Every variable the settings read is in .env.example, and the example offers none
    that nothing reads (the tunings' TEMPO_TUNING_<KEY> are not offered)."""
    settings = (ROOT / "schedapp" / "settings.py").read_text()
    runall = (ROOT / "tasksapp" / "management" / "commands" / "runall.py").read_text()
    read = set(READ.findall(settings))
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M))
    assert read - listed == set()
    assert listed - read - set(READ.findall(runall)) - COMPOSE_ONLY == set()
