"""docker-compose.yml, parsed (no Docker engine needed): the services a scaled-out deployment needs, one
image built from this checkout for every banditgate role, commands the ``banditgate`` command line
accepts, environment variables that are real settings pointing at the compose's own Postgres and Redis,
and a health check behind every ``service_healthy`` dependency."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from app.cli import WORKERS, build_parser
from app.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {f"BANDITGATE_{name.upper()}" for name in Settings.model_fields}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def banditgate_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in compose["services"].items()
        if str(s.get("image", "")).startswith("banditgate:") or "build" in s
    }


def test_the_services_of_a_scaled_out_deployment(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "gateway", "embed-worker", "snapshotter"} <= set(services)
    assert str(services["postgres"]["image"]).startswith("postgres:")
    assert str(services["redis"]["image"]).startswith("redis:")
    assert services["gateway"]["deploy"]["replicas"] >= 2
    # the gateway's published ports are on the loopback interface only
    for port in services["gateway"]["ports"]:
        assert str(port).startswith("127.0.0.1:"), port


def test_every_banditgate_role_runs_this_checkout_built_image(compose: dict[str, Any]) -> None:
    roles = banditgate_services(compose)
    assert {"migrate", "gateway", "embed-worker", "snapshotter"} <= set(roles)
    for name, service in roles.items():
        build = service.get("build")
        if build is not None:  # built from this directory and its Dockerfile
            context = build if isinstance(build, str) else build.get("context", ".")
            assert (REPO / context / "Dockerfile").is_file(), name
    built = {s["image"] for s in roles.values() if "build" in s}
    for name, service in roles.items():
        assert service["image"] in built, f"{name} runs {service['image']}, which no service builds"


def test_every_command_is_one_the_command_line_accepts(compose: dict[str, Any]) -> None:
    parser = build_parser()
    for name, service in banditgate_services(compose).items():
        command = [str(part) for part in service.get("command", [])]
        assert command and command[0] == "banditgate", name
        if command[1] == "worker":
            assert command[2] in WORKERS, name
            continue
        args = parser.parse_args(command[1:])  # exits (fails the test) on an unknown option
        assert args.command == command[1], name


def test_the_environment_names_real_settings_and_the_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    seen: set[str] = set()
    for name, service in banditgate_services(compose).items():
        env = service.get("environment") or {}
        assert isinstance(env, dict), f"{name}: environment as a mapping"
        for key, value in env.items():
            if key.startswith("BANDITGATE_"):
                assert key in SETTINGS, f"{name}: {key} is no setting of app/settings.py"
                seen.add(key)
            if key in ("BANDITGATE_DATABASE_URL", "BANDITGATE_REDIS_URL"):
                host = urlsplit(str(value)).hostname
                assert host in services, f"{name}: {key} points at {host}, not a service of the compose"
    assert seen, "no banditgate setting is set in the compose"


def test_each_healthy_dependency_has_a_health_check(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on {dependency}, not a service"
            wanted = condition["condition"] if isinstance(condition, dict) else "service_started"
            target = services[dependency]
            if wanted == "service_healthy":
                check = target.get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{dependency} has no health check"
            elif wanted == "service_completed_successfully":
                assert target.get("restart") == "no", f"{dependency} runs once: restart 'no'"
    # the gateway's own health check is the image's (Dockerfile HEALTHCHECK on /healthz)
    assert (
        "HEALTHCHECK" in (REPO / "Dockerfile").read_text() and "/healthz" in (REPO / "Dockerfile").read_text()
    )
