"""The ``banditgate`` command: serve, migrate, demo, bench, worker.

This is the one module that reaches into ``bench/`` and ``workers/``, lazily, so the service never
imports them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from pathlib import Path

from app.settings import Settings


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
    uvicorn.run(
        "app.main:create_app", factory=True, host=host, port=port, workers=workers, access_log=access_log
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    return _serve(args.host, args.port, args.workers, not args.no_access_log)


def cmd_demo(args: argparse.Namespace) -> int:
    """Migrate, create the demo tenant/router, print the key and a walk-through, then serve."""
    from app.demo import set_up_demo
    from app.store.migrate import upgrade

    state_dir = Path(".banditgate")
    state_dir.mkdir(exist_ok=True)
    key_file = state_dir / "admin_key"
    if "BANDITGATE_ADMIN_KEY" not in os.environ:
        if not key_file.exists():
            key_file.write_text("adm_" + secrets.token_urlsafe(24))
            key_file.chmod(0o600)
        os.environ["BANDITGATE_ADMIN_KEY"] = key_file.read_text().strip()
    dataset = state_dir / "demo-dataset"
    if not (dataset / "rows.jsonl").exists():
        from app.demo_dataset import write_demo_dataset

        write_demo_dataset(dataset)
    os.environ.setdefault("BANDITGATE_REPLAY_DATASET", str(dataset))
    settings = Settings()
    upgrade(settings.database_url)
    base = f"http://{args.host}:{args.port}"
    demo = asyncio.run(set_up_demo(settings, backend_base_url=f"{base}/replay"))
    admin = os.environ["BANDITGATE_ADMIN_KEY"]
    env_file = state_dir / "demo.env"
    env_file.write_text(f"export GW={base}\nexport KEY={demo.api_key}\nexport ADMIN={admin}\n")
    env_file.chmod(0o600)
    print(
        f"""
banditgate demo
  database     {settings.database_url}
  tenant       {demo.tenant} (default router {demo.router!r} over {", ".join(demo.arms)})
  API key      {demo.api_key}
  admin key    {admin}   (saved in {key_file})
  shell vars   source {env_file}   (sets GW, KEY and ADMIN for the README walk-through)

Try it:
  curl -s {base}/route -H 'Authorization: Bearer {demo.api_key}' \\
       -H 'Content-Type: application/json' -d '{{"prompt": "Prove that sqrt(2) is irrational."}}'

Watch it learn (replays {dataset}: maths is best on demo-large, everyday writing on demo-small):
  banditgate replay-evaluator --gateway {base} --api-key {demo.api_key} --dataset {dataset}
""",
        flush=True,
    )
    return _serve(args.host, args.port, 1)


def cmd_replay_backends(args: argparse.Namespace) -> int:
    import uvicorn

    from app.replay_backends import load_dataset, replay_app

    dataset = load_dataset(args.dataset)
    print(f"serving {', '.join(dataset.names)} at http://{args.host}:{args.port}/<model>/v1", flush=True)
    uvicorn.run(replay_app(dataset), host=args.host, port=args.port)
    return 0


def cmd_replay_evaluator(args: argparse.Namespace) -> int:
    import httpx

    from app.replay_backends import load_dataset
    from app.replay_evaluator import run_evaluator

    async def run() -> int:
        async with httpx.AsyncClient(base_url=args.gateway, timeout=args.timeout) as client:
            summary = await run_evaluator(
                client,
                args.api_key,
                load_dataset(args.dataset),
                router=args.router,
                limit=args.limit,
                block=args.block,
                seed=args.seed,
            )
        print(f"{summary.rows} rows, mean reward {summary.mean_reward:.3f}, errors {summary.errors}")
        return 0

    return asyncio.run(run())


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="banditgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (>1 needs Redis)")
    serve.add_argument("--no-access-log", action="store_true", help="no line per request on stderr")
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="apply database migrations (Alembic)")
    migrate.add_argument("--revision", default="head")
    migrate.set_defaults(func=cmd_migrate)

    demo = sub.add_parser("demo", help="migrate, create a demo tenant and router, and serve")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.set_defaults(func=cmd_demo)

    replay = sub.add_parser("replay-backends", help="serve a replay dataset's models as OpenAI backends")
    replay.add_argument("--dataset", required=True, help="directory with models.json and rows.jsonl")
    replay.add_argument("--host", default="127.0.0.1")
    replay.add_argument("--port", type=int, default=8100)
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
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
