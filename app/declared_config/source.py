"""Reading a configuration file: its YAML (JSON is YAML too), the line of every value in it, and the
one-line refusals that name the file, the line, the object and the field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.declared_config.schema import ConfigFile

Path_ = tuple[str | int, ...]
"""Where a value sits in the file: keys and list indexes from the top, ``("tenants", 0, "name")``."""

# A list of objects under this key holds objects of this kind (for naming them in messages).
KINDS = {"backends": "backend", "tenants": "tenant", "routers": "router", "keys": "key"}


class ConfigError(Exception):
    """A file that cannot be applied: the message is one line for the operator."""


@dataclass
class Source:
    """A configuration file read: its data and the line (1-based) of each value."""

    name: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

    def line(self, path: Path_) -> int | None:
        """The line of the value at ``path``, or of the nearest value that holds it."""
        for end in range(len(path), -1, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return None

    def where(self, path: Path_) -> tuple[str, str]:
        """The object that ``path`` is in (``tenant 'acme' router 'main'``) and the field in it."""
        objects: list[str] = []
        rest: list[str | int] = []
        node = self.data
        i = 0
        while i < len(path):
            key = path[i]
            if key in KINDS and i + 1 < len(path) and isinstance(path[i + 1], int):
                index = int(path[i + 1])
                items = node.get(key) if isinstance(node, dict) else None
                item = items[index] if isinstance(items, list) and index < len(items) else None
                name = item.get("name") if isinstance(item, dict) else None
                objects.append(f"{KINDS[str(key)]} {name!r}" if isinstance(name, str) else f"{key}[{index}]")
                node, rest, i = item, [], i + 2
                continue
            rest.append(key)
            node = node.get(key) if isinstance(node, dict) else None
            i += 1
        return " ".join(objects) or "the file", dotted(rest)

    def error(self, path: Path_, message: str) -> ConfigError:
        """``file:line: object: field: message``."""
        line = self.line(path)
        place = f"{self.name}:{line}" if line is not None else self.name
        obj, name = self.where(path)
        return ConfigError(f"{place}: {obj}: {name + ': ' if name else ''}{message}")


def dotted(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _lines(node: yaml.Node, path: Path_, into: dict[Path_, int], name: str) -> None:
    into[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise ConfigError(f"{name}:{key_node.start_mark.line + 1}: the key {key!r} appears twice")
            seen.add(key)
            _lines(value_node, (*path, key), into, name)
            into[(*path, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _lines(item, (*path, index), into, name)


def parse(text: str, name: str) -> Source:
    """The YAML ``text`` of the file called ``name`` (``ConfigError`` when it is not YAML)."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else {}
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{name}{line}: not valid YAML: {problem}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: the file must hold a mapping (version, backends, tenants, ...)")
    source = Source(name, data)
    if node is not None:
        _lines(node, (), source.lines, name)
    return source


def read(path: Path) -> Source:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from exc
    return parse(text, str(path))


def validated(source: Source) -> ConfigFile:
    """The file as the admin API's models read it; ``ConfigError`` naming the first problem (and how
    many more there are)."""
    try:
        return ConfigFile.model_validate(source.data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise source.error(tuple(first["loc"]), first["msg"] + more) from exc
