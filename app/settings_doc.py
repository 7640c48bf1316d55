"""docs/settings.md, rendered from the settings model: every ``BANDITGATE_*`` variable with its default,
its allowed values and its description, so the page cannot drift from ``app/settings.py``.

``banditgate settings-doc > docs/settings.md`` writes it; tests/unit/app/test_settings_doc.py fails when
the committed page differs from what this module renders.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from app.settings import Settings

REGENERATE = "python -m app.cli settings-doc > docs/settings.md"

# Variables the gateway or its scripts read that are not settings of the model.
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    (
        "PROMETHEUS_MULTIPROC_DIR",
        "unset",
        "with `banditgate serve --workers N` (N > 1): an empty directory shared by the workers, so "
        "`GET /metrics` sums every worker (prometheus-client's multiprocess mode); unset = each worker "
        "reports only itself",
    ),
    ("PORT", "`8000`", "`scripts/run.sh`: the port the demo serves on (127.0.0.1)"),
    (
        "BANDITGATE_CACHE_DIR",
        "`~/.cache/banditgate`",
        "`banditgate bench`: where prompt embeddings (and the mixture datasets' MiniLM vectors) are cached",
    ),
    (
        "TORCH_INDEX_URL",
        "unset",
        "`scripts/install.sh` (and so `run.sh`, `test.sh`): the pip index torch is installed from, e.g. "
        "`https://download.pytorch.org/whl/cpu` for the CPU wheel; unset = pip's configured indexes",
    ),
)

_BOUNDS: tuple[tuple[type[Any], str, str], ...] = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "<="),
)


def _code(text: str) -> str:
    return f"`{text}`"


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "set (secret)"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, float) and value.is_integer():
        return _code(f"{value:.1f}")
    return _code(str(value))


def _type_name(annotation: Any) -> str:
    """The value kind a variable takes: ``integer``, ``number``, ``true/false``, ``text`` or the choices."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return ", ".join(_code(str(choice)) for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        kinds = [_type_name(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return " or ".join(kinds)
    names = {bool: "true/false", int: "integer", float: "number", str: "text", SecretStr: "text (secret)"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _allowed(field: FieldInfo) -> str:
    parts = [_type_name(field.annotation)]
    for item in field.metadata:
        for kind, attribute, symbol in _BOUNDS:
            if isinstance(item, kind):
                parts.append(f"{symbol} {getattr(item, attribute)}")
        if isinstance(item, annotated_types.MinLen):
            parts.append("non-empty" if item.min_length == 1 else f"at least {item.min_length} characters")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_markdown() -> str:
    """The whole docs/settings.md page, from ``Settings.model_fields`` (their defaults, not the
    environment's values)."""
    prefix = Settings.model_config.get("env_prefix", "")
    lines = [
        "# Settings",
        "",
        f"<!-- Generated from app/settings.py; do not edit by hand. Regenerate: {REGENERATE} -->",
        "",
        "The gateway, its workers and `banditgate demo` read every setting from an environment variable "
        "(or a `.env` file in the working directory); a value outside what the table allows is refused "
        "when the process starts, naming the setting. Router behaviour (policies, hyperparameters, "
        "`embed_text`) is set per router through the admin API, not here.",
        "",
        "| variable | default | allowed | what it does |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        variable = _code(f"{prefix}{name}".upper())
        description = _cell(field.description or "")
        lines.append(f"| {variable} | {_default(field)} | {_cell(_allowed(field))} | {description} |")
    lines += [
        "",
        "Other variables read by the gateway or its scripts:",
        "",
        "| variable | default | what it does |",
        "|---|---|---|",
    ]
    lines += [f"| {_code(name)} | {default} | {_cell(text)} |" for name, default, text in OTHER_VARIABLES]
    return "\n".join(lines) + "\n"
