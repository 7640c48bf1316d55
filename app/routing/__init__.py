"""The request path, one module one job (docs/architecture.md): decide -> forward (fallback, costs,
ensemble, judged cascade, stream) -> feedback; probes (query and shadow calls) and client-driven
cascades beside it. Domain errors (errors.py) only; app/api/ speaks HTTP."""
