"""Checkpoints that store each item of the state's growing collections once.

LangGraph checkpoints the whole state after every node, and the state holds collections that grow over a
run (``history``, ``trials``, ``patches``, the policy's ``memo`` lists and dicts): stored whole each time,
the database grows with the square of the run's length. :class:`ItemSerializer` is LangGraph's serializer
with one change: in a checkpoint's channel values, and in a write's value (what a node returned), a large
collection is replaced by a reference to its items, each item serialized on its own and stored once, under
its content hash, in the table ``dayzero_items`` of the same database. An item that changes (a trial whose
accuracy is set) is a new item; an unchanged one is never stored again.

What is referenced:

- a channel value that is a list (``history``, ``trials``, ...): its items;
- in a channel value that is a dict (``memo``, ``bests``), each value that is a list (its items) or a dict
  with string keys (its ``[key, value]`` pairs: the keys of ``memo["served"]`` are long);

and only when the collection's items serialize to ``MIN_BYTES`` or more (a short list of numbers stays
inline). A reference is the items' hashes in order: those of the full blocks of ``BLOCK`` items, each block
stored as an item of its own (the concatenated hashes), then those of the last, partial block. A checkpoint
holds about ``len / BLOCK + BLOCK`` hashes per collection rather than one per item: the total grows linearly
with the run.

A blob with references has the type ``dayzero-items`` (the envelope ``[value with None in the referenced
places, references]`` in msgpack); any other type is LangGraph's own, so checkpoints written before this
module (whole collections inline) load as they always did, and a run of the previous release resumes on
top of them.

Durability: the items are inserted (``INSERT OR IGNORE``) on the saver's connection while the checkpoint or
the write is serialized, before the saver inserts its row on that connection and commits. They are committed
in the same transaction as the row that references them or an earlier one, never a later one: a process
killed between the two leaves at worst items that nothing references. The table is created on the first
write; a reader (``saved_states`` opens the database read-only) never creates it, and a database without it
loads while no checkpoint references an item.

:class:`ItemSaver` is LangGraph's ``SqliteSaver`` holding its lock while it serializes a checkpoint too (it
holds it already for writes and reads): LangGraph saves checkpoints and writes from two threads, and the
items' inserts on the shared connection must not interleave with the other thread's statements (two implicit
``BEGIN`` at once fail: "cannot start a transaction within a transaction").

Secrets: given the run's :class:`~agent.secrets.Redactor`, the serializer masks a checkpoint's channel values and
a write's value before anything of them is serialized, items included: no secret reaches the database (its WAL
included), whatever the state holds (a model's rationale, a call's arguments, a tool's output). A resumed run
continues from what was stored, so nothing the run needs may be a secret inside the state: the task's secret
variables are resolved when a process is launched (``ToolContext.engine_env``), never stored resolved.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from .secrets import Redactor

TYPE = "dayzero-items"  # the type of a blob with references (the others are LangGraph's own)
TABLE = "dayzero_items"
BLOCK = 16  # item hashes per stored block
MIN_BYTES = 512  # a collection whose items serialize to less stays inline
HASH_BYTES = 16
_BLOCK_TYPE = "hashes"  # the type of a stored block: concatenated item hashes
_SELECT_CHUNK = 500  # hashes per SELECT (below SQLite's bound on parameters)


def _digest(type_: str, blob: bytes) -> bytes:
    return hashlib.blake2b(type_.encode() + b"\0" + blob, digest_size=HASH_BYTES).digest()


def _split(hashes: bytes) -> list[bytes]:
    return [hashes[i : i + HASH_BYTES] for i in range(0, len(hashes), HASH_BYTES)]


class ItemSerializer(JsonPlusSerializer):
    """LangGraph's serializer (same options), storing the items of large collections once in ``conn``'s
    ``dayzero_items`` table. Without ``conn`` it writes LangGraph's own format (and cannot load references).
    From more than one thread, call it under the lock of the saver on ``conn`` (:class:`ItemSaver` does)."""

    def __init__(self, conn: sqlite3.Connection | None = None, redactor: Redactor | None = None,
                 **options: Any) -> None:  # fmt: skip
        super().__init__(**options)
        self.conn = conn
        self.redactor = redactor
        self._table_ready = False

    # ---- writing

    def _redacted(self, obj: Any) -> Any:
        """``obj`` with its secrets masked: a checkpoint's channel values, or a write's value."""
        if self.redactor is None:
            return obj
        if type(obj) is dict and "channel_values" in obj and "channel_versions" in obj:
            values = self.redactor(obj["channel_values"])
            return obj if values is obj["channel_values"] else {**obj, "channel_values": values}
        return self.redactor(obj)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        obj = self._redacted(obj)
        if self.conn is None:
            return super().dumps_typed(obj)
        rows: dict[bytes, tuple[str, bytes]] = {}
        refs: list[list[Any]] = []
        if type(obj) is dict and "channel_values" in obj and "channel_versions" in obj:  # a checkpoint
            values = dict(obj["channel_values"])
            for channel, value in values.items():
                values[channel] = self._strip(value, ["channel_values", channel], rows, refs)
            stripped = {**obj, "channel_values": values}
        else:  # a write: one channel's value
            stripped = self._strip(obj, [], rows, refs)
        if not refs:
            return super().dumps_typed(obj)
        self._store(rows)
        type_, blob = super().dumps_typed([stripped, refs])
        assert type_ == "msgpack", type_
        return TYPE, blob

    def _strip(self, value: Any, path: list[str], rows: dict, refs: list) -> Any:
        """A channel's value with its large collections replaced by None, their references added to ``refs``
        and their items to ``rows``."""
        if type(value) is list:
            return None if self._reference(value, "list", path, rows, refs) else value
        if type(value) is not dict:
            return value
        out = dict(value)
        for key, inner in value.items():
            if type(key) is not str:
                continue
            if type(inner) is list:
                found = self._reference(inner, "list", [*path, key], rows, refs)
            elif type(inner) is dict and all(type(k) is str for k in inner):
                found = self._reference([[k, v] for k, v in inner.items()], "dict", [*path, key], rows, refs)
            else:
                found = False
            if found:
                out[key] = None
        return out

    def _reference(self, items: list, kind: str, path: list[str], rows: dict, refs: list) -> bool:
        serialized = [super(ItemSerializer, self).dumps_typed(item) for item in items]
        if sum(len(blob) for _, blob in serialized) < MIN_BYTES:
            return False
        hashes = []
        for type_, blob in serialized:
            digest = _digest(type_, blob)
            rows[digest] = (type_, blob)
            hashes.append(digest)
        full = len(hashes) - len(hashes) % BLOCK
        blocks = []
        for i in range(0, full, BLOCK):
            block = b"".join(hashes[i : i + BLOCK])
            digest = _digest(_BLOCK_TYPE, block)
            rows[digest] = (_BLOCK_TYPE, block)
            blocks.append(digest)
        refs.append([path, kind, b"".join(blocks), b"".join(hashes[full:])])
        return True

    def _store(self, rows: dict[bytes, tuple[str, bytes]]) -> None:
        # no commit here: the saver's commit of the row referencing them commits them too (or an earlier one)
        if not self._table_ready:
            self.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (hash BLOB PRIMARY KEY, type TEXT, blob BLOB)"
            )
            self._table_ready = True
        self.conn.executemany(f"INSERT OR IGNORE INTO {TABLE} (hash, type, blob) VALUES (?, ?, ?)",
                              [(h, t, b) for h, (t, b) in rows.items()])  # fmt: skip

    # ---- reading

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if data[0] != TYPE:
            return super().loads_typed(data)
        value, refs = super().loads_typed(("msgpack", data[1]))
        blocks = self._fetch({h for _, _, b, _ in refs for h in _split(b)})
        lists = []
        for path, kind, block_hashes, tail in refs:
            hashes = [h for b in _split(block_hashes) for h in _split(blocks[b][1])] + _split(tail)
            lists.append((path, kind, hashes))
        items = self._fetch({h for _, _, hashes in lists for h in hashes})
        for path, kind, hashes in lists:
            found = [super(ItemSerializer, self).loads_typed(items[h]) for h in hashes]  # one object each
            collection = found if kind == "list" else dict(found)
            if not path:
                value = collection
                continue
            target = value
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = collection
        return value

    def _fetch(self, hashes: set[bytes]) -> dict[bytes, tuple[str, bytes]]:
        if not hashes:
            return {}
        if self.conn is None:
            raise ValueError("a checkpoint with stored items needs the database's connection to load")
        wanted, found = list(hashes), {}
        for i in range(0, len(wanted), _SELECT_CHUNK):
            chunk = wanted[i : i + _SELECT_CHUNK]
            sql = f"SELECT hash, type, blob FROM {TABLE} WHERE hash IN ({','.join('?' * len(chunk))})"
            found.update((h, (t, b)) for h, t, b in self.conn.execute(sql, chunk))
        if missing := hashes - found.keys():
            raise KeyError(f"{len(missing)} stored item(s) of a checkpoint missing from {TABLE}")
        return found


class ItemSaver(SqliteSaver):
    """``SqliteSaver`` serializing under its lock (reentrant here), so that an :class:`ItemSerializer` on its
    connection runs one statement at a time with the saver's own."""

    def __init__(self, conn: sqlite3.Connection, *, serde: ItemSerializer) -> None:
        super().__init__(conn, serde=serde)
        self.lock = threading.RLock()  # put serializes under it, then takes it again for its statements

    def put(self, config, checkpoint, metadata, new_versions):
        with self.lock:
            return super().put(config, checkpoint, metadata, new_versions)
