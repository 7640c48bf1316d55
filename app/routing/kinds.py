"""Chat and image backends: a request is refused (422) before any decision when none of the backends it
could reach serves its path, instead of being routed to a backend that cannot answer it (a 502)."""

from __future__ import annotations

from app.routing.answers import IMAGE_PATH
from app.routing.errors import Invalid
from app.routing.turn import Turn

WHAT = {
    "chat": "chat completions (POST /v1/chat/completions)",
    "image": "image generations (POST /v1/images/generations)",
}


def kind_for(path: str) -> str:
    """The backend kind that serves ``path``."""
    return "image" if path == IMAGE_PATH else "chat"


async def check_serves(turn: Turn, path: str, backend: str | None = None) -> None:
    """Invalid unless ``backend`` (a direct call) or at least one arm the turn's request may reach (its
    router's arms, narrowed to ``candidates``) is of the kind ``path`` needs."""
    needed = kind_for(path)
    if backend is not None:
        what, names = f"backend {backend!r}", [backend]
    else:
        router = turn.router
        assert router is not None, "a routed turn has its router"
        what, names = f"router {router.name!r}", list(turn.request.candidates or router.arms)
    kinds = {b.kind for b in await turn.ctx.catalog.backends(names)}
    if not kinds or needed in kinds:
        return
    has = " and ".join(sorted(kinds))
    raise Invalid(
        f"{what} routes {has} backends, which cannot serve {WHAT[needed]}: send this request to "
        f"{' or '.join(WHAT[k] for k in sorted(kinds))}, or use a router whose arms are {needed} backends",
        param="model",
    )
