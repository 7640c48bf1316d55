"""The decisions this process's ledger committed lately, kept in memory so that feedback about them
(most comes back to the replica that answered, and soon) finds them without a read of the database.

Why memory may answer for the database here: a decision's row is written once, by the request that
made it, and changed afterwards only by that same request (``info``: who answered it, an ensemble's
marks), through this process's ledger, which applies each change here as soon as it is committed (a
change whose writer was cancelled, committed or not, drops the entry). So memory holds what the
database held a moment before; most ids reach the client only with the request's answer, after its
last change, and a streamed answer's id, sent first, meets the same race as a read of the database
would. What memory cannot see is a deletion: deleting a tenant or a router (on any replica)
deletes its decisions. ``CatalogChanged`` and ``RouterChanged`` on the bus clear everything here, and
where such a message was lost, the write of feedback about a deleted decision fails its foreign key and
``record_feedback`` (app/routing/feedback.py) resolves the items again from the database: a 404, as
without this cache.

An entry is held as the ledger wrote it (the driver's parameters, JSON as text) and decoded into the
ORM's values each time it is asked for, so a decision nobody gives feedback about costs the write path
one dict insertion, and no two callers share a mutable value. At most ``size`` entries, the oldest
dropped first (at 1,000 decisions a second the default 10,000 hold the last ten seconds); a decision
not held (older, or another replica's) is read as before.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.store.driver_sql import DriverRows, written_rows
from app.store.models import DecisionRow


@dataclass(slots=True)
class _Entry:
    tenant_id: int
    params: Sequence[Any]  # as the ledger wrote it: JSON as text
    merges: tuple[str, ...] = ()  # info keys merged since, as JSON text

    def row(self, rows: DriverRows) -> DecisionRow:
        """A fresh detached row, decoded anew (no two callers share a list or dict of it)."""
        attributes = rows.attributes(self.params)
        if self.merges:
            info = attributes.get("info") or {}
            for keys in self.merges:
                info.update(json.loads(keys))
            attributes["info"] = info
        return DecisionRow(**attributes)


class RecentDecisions:
    """Decisions by id, as committed by this process's ledger (``Ledger.write`` calls ``remember`` and
    ``merge`` after each commit); ``hits`` and ``misses`` count the ids ``find`` was asked for."""

    def __init__(self, size: int, dialect_name: str) -> None:
        self.size = size
        self._rows = written_rows(DecisionRow, dialect_name)
        self._id_at = self._rows.keys.index("id")
        self._tenant_at = self._rows.keys.index("tenant_id")
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # oldest first, popped in O(1)
        self.generation = 0  # bumped by each clear: a write that raced one is not remembered
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, params: Sequence[Any], generation: int) -> None:
        """A decision the ledger committed (its INSERT's parameters), unless memory was cleared since
        ``generation`` was read (before the write was handed to the ledger)."""
        if generation != self.generation:
            return
        self._entries[str(params[self._id_at])] = _Entry(int(params[self._tenant_at]), params)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def merge(self, decision_id: str, keys_json: str, generation: int) -> None:
        """Keys the ledger merged into a stored decision's ``info`` (top level, as Postgres's ``||`` and
        SQLite's ``json_patch`` merge the gateway's non-null values); nothing when it is not held."""
        entry = self._entries.get(decision_id)
        if entry is not None and generation == self.generation:
            entry.merges += (keys_json,)

    def find(self, tenant_id: int, ids: Iterable[str]) -> tuple[dict[str, DecisionRow], list[str]]:
        """The tenant's decisions among ``ids`` that memory holds, and the ids it does not hold (to
        read). A held decision of another tenant is in neither: the database would not answer it
        either."""
        found: dict[str, DecisionRow] = {}
        missing: list[str] = []
        for decision_id in dict.fromkeys(ids):
            entry = self._entries.get(decision_id)
            if entry is None:
                missing.append(decision_id)
            elif entry.tenant_id == tenant_id:
                found[decision_id] = entry.row(self._rows)
        self.hits += len(found)
        self.misses += len(missing)
        return found, missing

    def holds_any(self, ids: Iterable[str]) -> bool:
        return any(decision_id in self._entries for decision_id in ids)

    def forget(self, ids: Iterable[str]) -> None:
        for decision_id in ids:
            self._entries.pop(decision_id, None)

    def clear(self) -> None:
        """Forget everything (a tenant or router changed or deleted, on any replica)."""
        self.generation += 1
        self._entries.clear()
