"""The ``banditgate`` command: serve, migrate, demo, warm-start, bench, worker.

This is the one module that reaches into ``bench/`` and ``workers/``, lazily, so the service never
imports them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from app.settings import Settings
from app.warm_start_client import BACKOFF_S, BATCH_BYTES, RETRIES


def cmd_settings_doc(args: argparse.Namespace) -> int:
    from app.settings_doc import settings_markdown

    sys.stdout.write(settings_markdown())
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.store.migrate import upgrade

    settings = Settings()
    upgrade(settings.database_url, args.revision)
    print(f"database at {settings.database_url} is at revision {args.revision}")
    return 0


def _serve(host: str, port: int, workers: int, access_log: bool = True) -> int:
    import uvicorn

    settings = Settings()
    if workers > 1 and not settings.redis_url:
        print(
            "error: --workers > 1 needs BANDITGATE_REDIS_URL (and a shared database such as Postgres): "
            "the embedded in-process event bus reaches one process only",
            file=sys.stderr,
        )
        return 2
    warning = proxy_warning(host, settings)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        **server_limits(settings),
    )
    return 0


def server_limits(settings: Settings) -> dict[str, Any]:
    """uvicorn's part of the HTTP limits (the middleware in app/api/http_limits.py does the rest): the
    parser refuses a request head over ``max_header_bytes`` before it is parsed (h11 by its own bound,
    httptools through app/api/http_parser.py, which reads the same setting), and the idle keep-alive
    timeout. uvicorn's own proxy headers are off: it would trust X-Forwarded-For from any loopback peer;
    the app honours it from ``BANDITGATE_TRUSTED_PROXIES`` only (app/main.py)."""
    http = "h11" if settings.http_parser == "h11" else "app.api.http_parser:BoundedHttpToolsProtocol"
    return {
        "proxy_headers": False,
        "http": http,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_s,
    }


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def proxy_warning(host: str, settings: Settings) -> str | None:
    """What ``serve`` says when it listens on loopback only with no trusted proxy: the set-up of a
    reverse proxy on the same host, where every client has the proxy's address."""
    if settings.trusted_proxies or host not in LOOPBACK_HOSTS:
        return None
    return (
        f"listening on {host} with BANDITGATE_TRUSTED_PROXIES unset: behind a reverse proxy on this host "
        "every client has the proxy's address, so one client's wrong keys (the failed-authentication "
        "limit) lock out all of them; set BANDITGATE_TRUSTED_PROXIES=127.0.0.1 if the proxy sets "
        "X-Forwarded-For (docs/deploy.md)"
    )


def _state_secret(state_dir: Path, name: str, prefix: str) -> str:
    """A random secret kept in ``state_dir/name`` (created once, readable by the owner only)."""
    path = state_dir / name
    if not path.exists():
        path.write_text(prefix + secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def cmd_serve(args: argparse.Namespace) -> int:
    if args.config is not None:
        from app.declared_config.commands import apply_path

        applied = apply_path(args.config)
        if applied:
            return applied
    return _serve(args.host, args.port, args.workers, not args.no_access_log)


def cli_command() -> str:
    """How to run this command from any shell: the ``banditgate`` script beside this Python (a venv's
    bin/, on no PATH until the venv is activated), else this Python with ``-m app.cli``."""
    python = Path(sys.executable).absolute()
    script = python.parent / "banditgate"
    return shlex.quote(str(script)) if script.exists() else f"{shlex.quote(str(python))} -m app.cli"


def cmd_demo(args: argparse.Namespace) -> int:
    """Migrate, create the demo tenant/router, print the key and a walk-through, then serve."""
    from app.auth import KEY_PREFIX
    from app.demo import set_up_demo
    from app.store.migrate import upgrade

    state_dir = Path(".banditgate").absolute()
    state_dir.mkdir(exist_ok=True)
    key_file = state_dir / "admin_key"
    for variable, name, prefix in (
        ("BANDITGATE_ADMIN_KEY", "admin_key", "adm_"),
        ("BANDITGATE_SECRET_KEY", "secret_key", ""),  # encrypts the replay key stored with the backends
        ("BANDITGATE_REPLAY_API_KEY", "replay_key", "rpl_"),
    ):
        if variable not in os.environ:
            os.environ[variable] = _state_secret(state_dir, name, prefix)
    from app.demo_dataset import write_demo_dataset

    dataset = write_demo_dataset(state_dir / "demo-dataset")  # written anew: the same rows every run
    # an evaluation of both models on a separate draw of the same kinds of prompt: the logs a team folds first
    logs = write_demo_dataset(state_dir / "demo-logs", seed=1)
    os.environ.setdefault("BANDITGATE_REPLAY_DATASET", str(dataset))
    settings = Settings()
    upgrade(settings.database_url)
    base = f"http://{args.host}:{args.port}"
    key = _state_secret(state_dir, "demo_key", KEY_PREFIX)
    demo = asyncio.run(set_up_demo(settings, f"{base}/replay", key, reset=not args.keep))
    admin = os.environ["BANDITGATE_ADMIN_KEY"]
    started = "what it learned kept" if args.keep else "started afresh"
    env_file = state_dir / "demo.env"
    env_file.write_text(f"export GW={base}\nexport KEY={demo.api_key}\nexport ADMIN={admin}\n")
    env_file.chmod(0o600)
    print(
        f"""
banditgate demo
  database     {settings.database_url}
  tenant       {demo.tenant} (default router {demo.router!r} over {", ".join(demo.arms)}, {started})
  API key      {demo.api_key}   (saved in {state_dir / "demo_key"})
  admin key    {admin}   (saved in {key_file})
  shell vars   source {shlex.quote(str(env_file))}   (sets GW, KEY and ADMIN for the README walk-through)

Try it:
  curl -s {base}/route -H 'Authorization: Bearer {demo.api_key}' \\
       -H 'Content-Type: application/json' -d '{{"prompt": "Prove that sqrt(2) is irrational."}}'

Optionally, first fold what an evaluation of both models showed (240 rows drawn apart from the same
templates), so that the floor has evidence from the start (without it the router leaves demo-large only
as far as its banked slack allows):
  BANDITGATE_ADMIN_KEY={admin} {cli_command()} warm-start --gateway {base} --tenant {demo.tenant} \\
      --router {demo.router} --dataset {shlex.quote(str(logs))}

Watch it learn (replays {dataset}: maths is best on demo-large, everyday writing on demo-small):
  {cli_command()} replay-evaluator --gateway {base} --api-key {demo.api_key} --dataset {shlex.quote(str(dataset))}
and on the dashboard (sign in with the admin key):
  {base}/dashboard/?range=router&live=1
""",
        flush=True,
    )
    return _serve(args.host, args.port, 1)


def read_replay_dataset(path: str) -> Any:
    """The ``ReplayDataset`` at ``path``; a malformed one raises ``DatasetError``, a ``ValueError`` that
    ``main`` prints as one line with exit status 2."""
    from app.replay_backends import ReplayDataset

    return ReplayDataset.read(path)


def cmd_replay_backends(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.http_limits import HttpLimits
    from app.replay_backends import replay_app

    settings = Settings()
    api_key = args.api_key or (
        settings.replay_api_key.get_secret_value() if settings.replay_api_key else None
    )
    if api_key is None:
        api_key = "rpl_" + secrets.token_urlsafe(24)
        print(f"no --api-key nor BANDITGATE_REPLAY_API_KEY: calls need 'Bearer {api_key}'", flush=True)
    dataset = read_replay_dataset(args.dataset)
    print(f"serving {', '.join(dataset.names)} at http://{args.host}:{args.port}/<model>/v1", flush=True)
    app = replay_app(dataset, api_key, HttpLimits.of(settings))
    uvicorn.run(app, host=args.host, port=args.port, **server_limits(settings))
    return 0


def cmd_replay_evaluator(args: argparse.Namespace) -> int:
    import httpx

    from app.replay_evaluator import run_evaluator

    dataset = read_replay_dataset(args.dataset)

    async def run() -> int:
        async with httpx.AsyncClient(base_url=args.gateway, timeout=args.timeout) as client:
            try:
                summary = await run_evaluator(
                    client,
                    args.api_key,
                    dataset,
                    router=args.router,
                    limit=args.limit,
                    block=args.block,
                    seed=args.seed,
                )
            except httpx.TransportError as exc:
                print(f"error: the gateway at {args.gateway} could not be reached: {exc}", file=sys.stderr)
                return 1
        print(f"{summary.rows} rows, mean reward {summary.mean_reward:.3f}, errors {summary.errors}")
        return 0

    return asyncio.run(run())


def cmd_warm_start(args: argparse.Namespace) -> int:
    """Upload a replay dataset, a JSONL file, or the tenant's direct calls as a router's warm start."""
    import httpx
    from tqdm import tqdm

    from app.warm_start_client import (
        Gateway,
        GatewayRefused,
        PriorSpecError,
        WarmStartError,
        import_direct_calls,
        jsonl_rows,
        parse_priors,
        send_priors,
        upload_rows,
    )

    if not args.admin_key:
        print("error: pass --admin-key or set BANDITGATE_ADMIN_KEY", file=sys.stderr)
        return 2
    has_source = args.dataset is not None or args.jsonl is not None or args.from_direct_calls
    if not has_source and not args.prior:
        print("error: pass --dataset, --jsonl, --from-direct-calls or --prior", file=sys.stderr)
        return 2
    try:
        priors = parse_priors(args.prior)
    except PriorSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {args.admin_key}"}
    with httpx.Client(base_url=args.gateway, headers=headers, timeout=args.timeout) as client:
        gateway = Gateway(client, args.tenant, args.router, args.retries, args.backoff_s)
        try:
            if priors:
                print(send_priors(gateway, priors))
            if not has_source:
                return 0
            if args.from_direct_calls:
                with tqdm(unit="event", desc="direct calls", disable=args.quiet) as bar:
                    summary = import_direct_calls(gateway, args.batch_size, bar.update)
            elif args.jsonl is not None:
                size = args.jsonl.stat().st_size
                with tqdm(total=size, unit="B", unit_scale=True, desc="rows", disable=args.quiet) as bar:
                    rows = jsonl_rows(args.jsonl, args.id_prefix)
                    summary = upload_rows(gateway, rows, args.batch_size, bar.update, args.batch_bytes)
            else:
                from bench.dataset import load_dataset
                from bench.warm_start import dataset_rows

                dataset = load_dataset(args.dataset)
                total = dataset.n_prompts * len(dataset.model_names)
                with tqdm(total=total, unit="row", desc="rows", disable=args.quiet) as bar:
                    rows = dataset_rows(dataset, args.id_prefix)
                    summary = upload_rows(gateway, rows, args.batch_size, bar.update, args.batch_bytes)
        except (PriorSpecError, GatewayRefused) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except WarmStartError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(summary.line())
    return 0


def cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    from bench.cli import main as bench_main

    return int(bench_main(rest))


WORKERS = {"snapshot": "workers.snapshotter", "embed": "workers.embed_worker"}


def cmd_worker(rest: list[str]) -> int:
    """``banditgate worker snapshot|embed [options]``: the background workers (workers/)."""
    import importlib

    if not rest or rest[0] not in WORKERS:
        print(f"usage: banditgate worker {{{','.join(WORKERS)}}} [--help]", file=sys.stderr)
        return 2
    module = importlib.import_module(WORKERS[rest[0]])
    return int(module.main(rest[1:]))


def _config_command(name: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        from app.declared_config import commands

        return int(getattr(commands, name)(args))

    return run


def add_config_commands(sub: Any) -> None:
    """``apply``, ``export`` and ``config-schema``: the catalog as a file (docs/config.md)."""
    apply = sub.add_parser("apply", help="make the catalog what a configuration file declares")
    apply.add_argument("file", type=Path, help="the YAML file (docs/config.md)")
    apply.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    apply.add_argument("--prune", action="store_true", help="also remove what the file does not declare")
    apply.set_defaults(func=_config_command("cmd_apply"))
    export = sub.add_parser("export", help="write the catalog as a configuration file")
    export.add_argument("-o", "--output", type=Path, help="the file to write (default: stdout)")
    export.set_defaults(func=_config_command("cmd_export"))
    schema = sub.add_parser("config-schema", help="print the configuration file's JSON schema")
    schema.set_defaults(func=_config_command("cmd_config_schema"))


DESCRIPTION = (
    "banditgate: a model-routing gateway that learns which LLM or image model to call for each prompt. "
    "Settings come from BANDITGATE_* environment variables (docs/settings.md)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="banditgate", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (>1 needs Redis)")
    serve.add_argument("--no-access-log", action="store_true", help="no line per request on stderr")
    serve.add_argument("--config", type=Path, help="apply this configuration file first (docs/config.md)")
    serve.set_defaults(func=cmd_serve)
    add_config_commands(sub)

    migrate = sub.add_parser("migrate", help="apply database migrations (Alembic)")
    migrate.add_argument("--revision", default="head", help="target revision (default: the latest)")
    migrate.set_defaults(func=cmd_migrate)

    demo = sub.add_parser(
        "demo",
        help="migrate, create a demo tenant and router, and serve",
        description="Migrate, create the demo's backends, tenant and router (the tenant afresh on every run, "
        "its key kept in .banditgate/), print the keys and commands to try, then serve.",
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep what the demo tenant holds from an earlier run (its routers, decisions and feedback)",
    )
    demo.set_defaults(func=cmd_demo)

    replay = sub.add_parser("replay-backends", help="serve a replay dataset's models as OpenAI backends")
    replay.add_argument("--dataset", required=True, help="directory with models.json and rows.jsonl")
    replay.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    replay.add_argument("--port", type=int, default=8100, help="port to listen on (default 8100)")
    replay.add_argument(
        "--api-key", default=None, help="the Bearer key callers must send (default BANDITGATE_REPLAY_API_KEY)"
    )
    replay.set_defaults(func=cmd_replay_backends)

    evaluator = sub.add_parser("replay-evaluator", help="send a replay dataset's prompts and logged rewards")
    evaluator.add_argument("--gateway", required=True, help="the gateway's base URL")
    evaluator.add_argument("--api-key", required=True, help="a tenant API key")
    evaluator.add_argument("--dataset", required=True, help="directory with models.json and rows.jsonl")
    evaluator.add_argument("--router", default=None, help="router name (default: the tenant's default)")
    evaluator.add_argument("--limit", type=int, default=None, help="rows to send (cycles; default: all)")
    evaluator.add_argument("--block", type=int, default=20, help="print a summary every N rows")
    evaluator.add_argument("--seed", type=int, default=0, help="row order and reward samples")
    evaluator.add_argument("--timeout", type=float, default=120.0, help="HTTP timeout per request (s)")
    evaluator.set_defaults(func=cmd_replay_evaluator)

    warm = sub.add_parser(
        "warm-start",
        help="teach a router from logs (a replay dataset, a JSONL file or the tenant's direct calls) and "
        "declared priors",
        description="Upload logged outcomes as offline events of a router through the gateway's admin "
        "endpoint, in batches, with a progress bar. Idempotent by row id: rerun the same command to resume. "
        "--prior sets the router's declared priors first (replacing those set before).",
    )
    warm.add_argument("--gateway", required=True, help="the gateway's base URL")
    warm.add_argument(
        "--admin-key",
        default=os.environ.get("BANDITGATE_ADMIN_KEY"),
        help="the gateway's admin key (default: $BANDITGATE_ADMIN_KEY, which keeps it out of the process list)",
    )
    warm.add_argument("--tenant", required=True, help="the tenant that owns the router")
    warm.add_argument("--router", required=True, help="the router to teach")
    source = warm.add_mutually_exclusive_group()
    source.add_argument("--dataset", type=Path, help="a replay dataset directory (every model's outcome)")
    source.add_argument(
        "--jsonl", type=Path, help="a JSONL file of {id?, prompt | embedding, model, reward, cost?}"
    )
    source.add_argument(
        "--from-direct-calls",
        action="store_true",
        help="the tenant's direct calls (model: '<backend>' on /v1) that received a reward",
    )
    warm.add_argument(
        "--prior",
        action="append",
        default=[],
        metavar="MODEL=MEAN:WEIGHT",
        help="a declared prior quality of an arm: WEIGHT observations of reward MEAN (a team's eval, a public "
        "leaderboard); repeatable; replaces the router's priors; may be given without a log source",
    )
    warm.add_argument("--batch-size", type=int, default=500, help="rows per request (default 500)")
    warm.add_argument(
        "--batch-bytes",
        type=int,
        default=BATCH_BYTES,
        help=f"bytes per request (default {BATCH_BYTES}); a batch the gateway refuses as too large (413) is "
        "halved and resent",
    )
    warm.add_argument(
        "--retries",
        type=int,
        default=RETRIES,
        help=f"retries on connection errors and 5xx (default {RETRIES})",
    )
    warm.add_argument(
        "--backoff-s",
        type=float,
        default=BACKOFF_S,
        help=f"wait before the first retry, doubled for each next one (default {BACKOFF_S})",
    )
    warm.add_argument(
        "--id-prefix", default="", help="prepended to every row id (re-teach a reset router: a new prefix)"
    )
    warm.add_argument("--timeout", type=float, default=300.0, help="HTTP timeout per batch (s)")
    warm.add_argument("--quiet", action="store_true", help="no progress bar")
    warm.set_defaults(func=cmd_warm_start)

    settings_doc = sub.add_parser(
        "settings-doc", help="print every setting as a Markdown table (the page docs/settings.md)"
    )
    settings_doc.set_defaults(func=cmd_settings_doc)

    sub.add_parser("bench", help="offline replay benchmarks (banditgate bench --help)", add_help=False)
    sub.add_parser("worker", help="background workers: snapshot, embed (banditgate worker NAME --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return cmd_bench(argparse.Namespace(), argv[1:])
    if argv and argv[0] == "worker":
        return cmd_worker(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, OSError) as exc:  # a missing path, a malformed file, a bad value: no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
