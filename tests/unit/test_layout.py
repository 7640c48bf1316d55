"""The layout's import rules (docs/architecture.md, "Layout and dependency direction"), read from the
source: the policies and embedders are pure, the harness never reaches into the service, and only
app/api/ speaks HTTP."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HTTP = ("fastapi", "starlette")
# app/ modules outside app/api/ that are HTTP by what they are: the app factory (it wires the API's
# routers and middlewares) and the replay backends (a server of their own, standing in for model APIs).
HTTP_OUTSIDE_API = frozenset({"app/main.py", "app/replay_backends.py"})


@functools.cache
def imports(path: Path) -> frozenset[str]:
    """Every module ``path`` imports, at any depth of its code (a lazy import counts); each file parsed
    once however many rules read it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return frozenset(found)


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def offenders(
    folder: str, banned: tuple[str, ...], allowed: frozenset[str] = frozenset()
) -> dict[str, list[str]]:
    """Files under ``folder`` (but ``allowed``) importing a module under one of ``banned``."""
    bad: dict[str, list[str]] = {}
    for path in sources(folder):
        name = path.relative_to(ROOT).as_posix()
        hits = sorted(m for m in imports(path) if m.split(".")[0] in banned)
        if hits and name not in allowed:
            bad[name] = hits
    return bad


def test_the_scan_sees_imports_at_any_depth(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom app.x import y\ndef f():\n    import bench.z\n    from . import w\n")
    assert imports(source) == {"os", "app.x", "bench.z"}


def test_policies_and_embedders_import_nothing_from_the_service_or_the_harness() -> None:
    for folder in ("routers", "embeddings"):
        assert sources(folder)
        assert offenders(folder, ("app", "workers", "bench", "experiments", "replay_dataset")) == {}, folder


def test_the_replay_format_is_neutral_ground_between_the_service_and_the_harness() -> None:
    """app/ and bench/ both import replay_dataset/, so it imports neither (nor workers or experiments)."""
    assert sources("replay_dataset")
    assert offenders("replay_dataset", ("app", "workers", "bench", "experiments")) == {}


def test_the_harness_never_imports_the_service_or_the_experiments() -> None:
    assert offenders("bench", ("app", "workers", "experiments")) == {}


def test_only_app_api_speaks_http() -> None:
    outside = {
        name: hits
        for name, hits in offenders("app", HTTP, HTTP_OUTSIDE_API).items()
        if not name.startswith("app/api/")
    }
    assert outside == {}
    for path in sources("app/routing"):  # domain errors only: app/api/errors.py maps them to HTTP
        assert "HTTPException" not in path.read_text(), path


def test_the_service_loads_workers_only_from_its_cli_and_tests_never_import_experiments() -> None:
    assert offenders("app", ("workers",), frozenset({"app/cli.py"})) == {}
    assert offenders("tests", ("experiments",)) == {}


def test_one_module_of_the_service_asks_a_policy() -> None:
    """``routers.base.Context`` is built, and a policy's ``select`` called, in app/routing/decide.py only:
    fallbacks and cascades ask it for their next choice instead of asking the policy themselves."""
    builders = []
    for path in sources("app"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            builds = (
                isinstance(node, ast.ImportFrom)
                and node.module == "routers.base"
                and any(alias.name == "Context" for alias in node.names)
            )
            selects = (
                isinstance(node, ast.Attribute)
                and node.attr == "select"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "policy"
            )
            if builds or selects:
                builders.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(builders)) == ["app/routing/decide.py"]
