"""`EtcdClient`: etcd's v3 API through its JSON gateway (`/v3/...`), over httpx2 under Trio.

The gateway is part of every etcd server since 3.3, so the cluster needs nothing but etcd and
an HTTP client; no gRPC stack. Its quirks, handled here once: keys and values are base64,
every int64 (revision, lease ID, TTL) is a JSON string, zero and false fields are omitted
(`succeeded` of a failed transaction, `kvs` of an empty range, `type` of a PUT event).

Invariants: a request goes to the first URL that answers, in order starting from the last one
that did (a member down costs one failed connect, not one per request); an error is raised
only once every URL failed (`EtcdError`), or at once when etcd answered with an error of its
own (it would answer the same on any member). `requests` counts HTTP requests made, for the
benchmarks' requests-per-allocation figure.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx2
import trio

from yurt.runtime.errors import Unavailable

log = logging.getLogger("yurt.cluster.etcd")

#: A watch stream is re-opened after this long without a byte (etcd sends progress only on
#: request; a half-open connection would otherwise hang the watcher forever).
WATCH_IDLE: Final = 60.0


class EtcdError(Exception):
    """etcd could not be reached on any URL, or answered with an error."""


class EtcdUnavailable(EtcdError, Unavailable):
    """No etcd member answered."""


class EtcdCompacted(EtcdError):
    """A watch asked for history etcd has compacted away: read the state again."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (oldest kept: {compact_revision})")
        self.compact_revision = compact_revision


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with `prefix` (etcd's `range_end`)."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[:i + 1])
    return b"\x00"  # every key


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(key=_unb64(kv["key"]), value=_unb64(kv.get("value", "")),
                   create_revision=int(kv.get("create_revision", 0)),
                   mod_revision=int(kv.get("mod_revision", 0)),
                   version=int(kv.get("version", 0)), lease=int(kv.get("lease", 0)))


@dataclass(frozen=True)
class WatchEvent:
    type: Literal["PUT", "DELETE"]
    kv: KeyValue


@dataclass(frozen=True)
class Compare:
    """One condition of a transaction."""

    body: dict[str, Any]

    @classmethod
    def mod_revision(cls, key: bytes, op: Literal["=", "<", ">", "!="], revision: int
                     ) -> Compare:
        return cls({"key": _b64(key), "target": "MOD", "result": _RESULT[op],
                    "mod_revision": str(revision)})

    @classmethod
    def create_revision(cls, key: bytes, op: Literal["=", "<", ">", "!="], revision: int
                        ) -> Compare:
        return cls({"key": _b64(key), "target": "CREATE", "result": _RESULT[op],
                    "create_revision": str(revision)})

    @classmethod
    def value(cls, key: bytes, op: Literal["=", "<", ">", "!="], value: bytes) -> Compare:
        return cls({"key": _b64(key), "target": "VALUE", "result": _RESULT[op],
                    "value": _b64(value)})


_RESULT: Final = {"=": "EQUAL", ">": "GREATER", "<": "LESS", "!=": "NOT_EQUAL"}


@dataclass(frozen=True)
class Op:
    """One operation of a transaction."""

    body: dict[str, Any]

    @classmethod
    def put(cls, key: bytes, value: bytes, *, lease: int = 0) -> Op:
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        return cls({"request_put": put})

    @classmethod
    def delete(cls, key: bytes) -> Op:
        return cls({"request_delete_range": {"key": _b64(key)}})

    @classmethod
    def delete_prefix(cls, prefix: bytes) -> Op:
        return cls({"request_delete_range": {"key": _b64(prefix),
                                             "range_end": _b64(prefix_end(prefix))}})

    @classmethod
    def get(cls, key: bytes) -> Op:
        return cls({"request_range": {"key": _b64(key)}})

    @classmethod
    def get_prefix(cls, prefix: bytes) -> Op:
        return cls({"request_range": {"key": _b64(prefix),
                                      "range_end": _b64(prefix_end(prefix))}})


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    #: Per operation of the branch that ran: the keys a `get` read (empty for puts, deletes).
    responses: list[list[KeyValue]] = field(default_factory=list)


class EtcdClient:
    def __init__(self, urls: Sequence[str], *, timeout: float = 5.0) -> None:
        if not urls:
            raise ValueError("no etcd URL given")
        self.urls = [u.rstrip("/") for u in urls]
        self._current = 0
        self._timeout = timeout
        self._http = httpx2.AsyncClient(timeout=timeout)
        #: HTTP requests made (watch streams count once per opening).
        self.requests = 0

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(len(self.urls)):
            i = (self._current + attempt) % len(self.urls)
            self.requests += 1
            try:
                response = await self._http.post(self.urls[i] + path, json=body)
            except httpx2.TransportError as e:
                last = e
                continue
            self._current = i
            try:
                answer: dict[str, Any] = response.json()
            except ValueError:
                raise EtcdError(f"etcd {self.urls[i]}{path}: HTTP {response.status_code}, "
                                f"not JSON: {response.text[:200]!r}") from None
            if response.status_code != 200 or "error" in answer:
                raise EtcdError(f"etcd {self.urls[i]}{path}: HTTP {response.status_code}: "
                                f"{answer.get('error') or answer.get('message') or answer}")
            return answer
        raise EtcdUnavailable(f"no etcd member answered ({', '.join(self.urls)}): {last}")

    @staticmethod
    def _revision(answer: dict[str, Any]) -> int:
        return int(answer.get("header", {}).get("revision", 0))

    async def get(self, key: bytes) -> tuple[KeyValue | None, int]:
        answer = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs", [])
        return (KeyValue.from_json(kvs[0]) if kvs else None), self._revision(answer)

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        answer = await self._call("/v3/kv/range", {"key": _b64(prefix),
                                                   "range_end": _b64(prefix_end(prefix))})
        return [KeyValue.from_json(kv) for kv in answer.get("kvs", [])], self._revision(answer)

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        return self._revision(await self._call("/v3/kv/put", Op.put(key, value, lease=lease)
                                               .body["request_put"]))

    async def delete(self, key: bytes) -> int:
        return self._revision(await self._call("/v3/kv/deleterange", {"key": _b64(key)}))

    async def txn(self, compare: list[Compare], success: list[Op],
                  failure: list[Op] | None = None) -> TxnResult:
        answer = await self._call("/v3/kv/txn", {
            "compare": [c.body for c in compare], "success": [o.body for o in success],
            "failure": [o.body for o in failure or []]})
        responses = [[KeyValue.from_json(kv) for kv in r.get("response_range", {})
                      .get("kvs", [])] for r in answer.get("responses", [])]
        return TxnResult(succeeded=bool(answer.get("succeeded", False)),
                         revision=self._revision(answer), responses=responses)

    async def lease_grant(self, ttl: int) -> int:
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        return int(answer["ID"])

    async def lease_keepalive(self, lease: int) -> int:
        """Refresh `lease`: its TTL now, 0 when it is gone (expired or revoked)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def lease_revoke(self, lease: int) -> None:
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as e:
            if "not found" not in str(e):
                raise

    async def watch(self, prefix: bytes, start_revision: int
                    ) -> AsyncGenerator[tuple[int, list[WatchEvent]], None]:
        """Every change under `prefix` from `start_revision` on, as (revision, events) in
        revision order, until cancelled. A broken stream is re-opened (on the next member
        if need be) from the revision after the last one delivered, so nothing is missed or
        repeated, for as long as etcd stays away (an etcd restart must not end a server);
        history compacted away raises `EtcdCompacted`. Close it (`aclosing`) when done: its
        stream is released then, not when the generator is collected."""
        next_revision = start_revision
        failures = 0
        while True:
            i = self._current
            # Progress notifications move the start of a re-opened stream forward while the
            # prefix is quiet, so a compaction of other keys does not cut it off.
            body = {"create_request": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix)),
                                       "start_revision": str(next_revision),
                                       "progress_notify": True}}
            self.requests += 1
            try:
                async with self._http.stream(
                        "POST", self.urls[i] + "/v3/watch", json=body,
                        timeout=httpx2.Timeout(self._timeout, read=WATCH_IDLE)) as response:
                    if response.status_code != 200:
                        raise EtcdError(f"etcd watch: HTTP {response.status_code}")
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        message = json.loads(line)
                        if "error" in message:
                            raise EtcdError(f"etcd watch: {message['error']}")
                        result = message.get("result", {})
                        if int(result.get("compact_revision", 0)):
                            raise EtcdCompacted(int(result["compact_revision"]))
                        failures = 0
                        events = result.get("events", [])
                        if not events:
                            if not result.get("created"):  # a progress notification
                                seen = int(result.get("header", {}).get("revision", 0))
                                next_revision = max(next_revision, seen + 1)
                            continue
                        batch: list[tuple[int, list[WatchEvent]]] = []
                        for raw in events:
                            kv = KeyValue.from_json(raw["kv"])
                            event = WatchEvent("DELETE" if raw.get("type") == "DELETE"
                                               else "PUT", kv)
                            if batch and batch[-1][0] == kv.mod_revision:
                                batch[-1][1].append(event)
                            else:
                                batch.append((kv.mod_revision, [event]))
                        for revision, grouped in batch:
                            next_revision = revision + 1
                            yield revision, grouped
            except (httpx2.TransportError, EtcdError) as e:
                if isinstance(e, EtcdCompacted):
                    raise
                failures += 1
                self._current = (i + 1) % len(self.urls)
                if failures == 3 * len(self.urls):
                    log.warning("etcd watch: no member answers (%s); retrying every second",
                                e)
                await trio.sleep(min(0.1 * failures, 1.0))

    async def aclose(self) -> None:
        await self._http.aclose()
