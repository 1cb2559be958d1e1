"""The controller's metadata log and its copies on other brokers: how cluster metadata survives its node's disk.

The controller appends every metadata record to its own log (on its node, `metadata.log.dir`) and then sends the
batch to the copies (`storage.logdir.metadata_mirror`) of up to `metadata.replication.factor` - 1 other registered
brokers, its metadata mirrors (chosen in node order, kept while their brokers stay registered, another taken in
place of one lost). A write is acknowledged once every mirror in sync has it; a mirror that fails or answers late
(`MIRROR_TIMEOUT_S`) leaves the in-sync set (the write stands on the others, as a partition's ISR shrinks), and no
write waits on it again until it is back in sync.

Catching a mirror up (a new one, or one out of sync, `MIRROR_RETRY_MS` after it last failed) is `sync`, which the
controller's host runs on a thread of its own, never under the controller's lock nor in its monitor pass: a broker
that stands still (paused, its node cut off) answers nothing until `MIRROR_TIMEOUT_S`, and neither elections nor
heartbeats may wait for that. The controller finds where the copy parts from its log by the copy's newest epoch, as
a Kafka follower truncates by OffsetForLeaderEpoch, truncates it there and sends what follows; the last batches go
under the sends' lock, so the mirror joins the in-sync set with no write between.

Epochs: each controller runs in an epoch above every epoch before it (`start_epoch`, from the newest epoch of its
log and what the host's `claim_epoch` keeps, Ray's GCS KV), and stamps it on its batches as their partition leader
epoch. A copy refuses a write or truncation from an older epoch; the controller that gets that answer
(`StaleControllerEpochError`) is fenced: it writes nothing more and every write raises `NotControllerError`.

Starting on a node whose disk lost the log, or holds an older one (`adopt_newest`), the controller first takes the
newest copy among the running brokers (highest epoch, then longest): it truncates its own log where the two part
and appends the rest, then replays; topics keep their ids and configs, and ACLs, SCRAM credentials and the
producer-id block are all there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

from storage.clock import Clock
from storage.errors import BrokerNotAvailableError, NotControllerError, RaybrokerError, StaleControllerEpochError
from storage.logdir.metadata_mirror import NO_EPOCH, MirrorState, log_state, read_whole_batches
from storage.partition.log import Log
from storage.pending import Pending
from storage.records.record_batch import iter_batches

logger = logging.getLogger(__name__)

# How long the controller waits for a mirror's answer before it leaves the in-sync set.
MIRROR_TIMEOUT_S = 2.0
# How long a mirror that failed waits before the controller tries to catch it up again.
MIRROR_RETRY_MS = 5000
# The bytes of one catch-up or adoption read.
COPY_CHUNK_BYTES = 1024 * 1024


class MirrorLink(Protocol):
    """A broker's copy of the metadata log as the controller reaches it (each call answers a `Pending`)."""

    def metadata_state(self) -> Pending[MirrorState]: ...

    def metadata_append(self, controller_epoch: int, offset: int, batches: bytes) -> Pending[MirrorState]: ...

    def metadata_truncate(self, controller_epoch: int, offset: int) -> Pending[MirrorState]: ...

    def metadata_offset_for_epoch(self, epoch: int) -> Pending[tuple[int, int]]: ...

    def metadata_read(self, offset: int, max_bytes: int) -> Pending[bytes]: ...


class MetadataReplication:
    """The controller's side of the metadata log's copies; see the module docstring. `replicate` is called under the
    controller's lock (one write at a time), `sync` from any other thread; the mirror set and every send to a mirror
    in sync are guarded by a lock of this class's own."""

    def __init__(self, log: Log, own_node: str | None, factor: int, clock: Clock) -> None:
        """`own_node`: the controller's node, whose broker's first log dir is this very log, never a mirror."""
        self._log = log
        self._own_node = own_node
        self._factor = factor
        self._clock = clock
        self.epoch = NO_EPOCH
        self.fenced = False
        self._mirrors: list[str] = []
        self._in_sync: set[str] = set()
        self._retry_at_ms: dict[str, int] = {}
        self._lock = threading.Lock()

    # --- start -----------------------------------------------------------------------------------

    def adopt_newest(self, links: Mapping[str, MirrorLink]) -> str | None:
        """Takes the newest copy among `links` if it is newer than this log (see the module docstring); returns the
        node it came from, None if this log was the newest."""
        own = log_state(self._log)
        states = self._states({node: link for node, link in links.items() if node != self._own_node})
        if not states:
            return None
        source = max(states, key=lambda node: states[node].position)
        newest = states[source]
        if newest.position <= own.position:
            return None
        link = links[source]
        common = 0
        if own.latest_epoch != NO_EPOCH:
            epoch, end = link.metadata_offset_for_epoch(own.latest_epoch).result(MIRROR_TIMEOUT_S)
            common = 0 if epoch == NO_EPOCH else min(own.end_offset, end)
        if common < own.end_offset:
            self._log.truncate_to(common)
        offset = common
        while offset < newest.end_offset:
            batches = link.metadata_read(offset, COPY_CHUNK_BYTES).result(MIRROR_TIMEOUT_S)
            if not batches:
                break
            offset = self._log.append_as_follower(batches).last_offset + 1
        self._log.flush()
        logger.warning(
            "metadata log taken from node %s's copy: offsets %d..%d (epoch %d)",
            source,
            common,
            self._log.log_end_offset,
            newest.latest_epoch,
        )
        return source

    def start_epoch(self, epoch: int) -> None:
        """This controller writes in `epoch` from the log's end on (above every epoch its log holds)."""
        self.epoch = epoch
        self._log.become_leader(epoch)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch among the log's batches (`NO_EPOCH` if none)."""
        return log_state(self._log).latest_epoch

    # --- writes ----------------------------------------------------------------------------------

    def check_active(self) -> None:
        """`NotControllerError` once a successor fenced this controller."""
        if self.fenced:
            raise NotControllerError(f"the controller of epoch {self.epoch} was fenced by a successor")

    def replicate(self, offset: int, links: Mapping[str, MirrorLink]) -> None:
        """Sends the batches appended from `offset` to every mirror in sync (in reads of `COPY_CHUNK_BYTES`, each
        sent to every mirror at once), after choosing mirrors among `links` (the registered brokers); returns once
        each answered up to the log's end or left the set. `NotControllerError` if a mirror knows a newer
        controller (this one is fenced)."""
        with self._lock:
            self._choose(links)
            end = self._log.log_end_offset
            while self._in_sync and offset < end:
                offset = self._send_chunk(offset, links)

    def _send_chunk(self, offset: int, links: Mapping[str, MirrorLink]) -> int:
        """Sends one read from `offset` to every mirror in sync; the offset after it (the log's end if the read held
        no batch). A mirror that fails, or does not end where the read does, leaves the set."""
        batches = read_whole_batches(self._log, offset, COPY_CHUNK_BYTES)
        read = list(iter_batches(batches))
        after = read[-1].last_offset + 1 if read else self._log.log_end_offset
        sent = {node: links[node].metadata_append(self.epoch, offset, batches) for node in sorted(self._in_sync)}
        for node, pending in sent.items():
            try:
                state = pending.result(MIRROR_TIMEOUT_S)
            except StaleControllerEpochError as exc:
                raise self._fence(exc) from exc
            except RaybrokerError as exc:
                self._leave(node, f"did not take offset {offset}: {exc}")
                continue
            if state.end_offset != after:
                self._leave(node, f"stands at offset {state.end_offset}, not {after}", 0)
        return after

    def sync(self, links: Mapping[str, MirrorLink]) -> None:
        """One upkeep pass (see the module docstring): mirrors chosen again among `links`, then each out of sync
        whose retry is due caught up. Waits on the brokers it catches up, so it runs off the controller's lock."""
        if self.fenced:
            return
        now_ms = self._clock.milliseconds()
        with self._lock:
            self._choose(links)
            due = [
                node
                for node in self._mirrors
                if node not in self._in_sync and now_ms >= self._retry_at_ms.get(node, now_ms)
            ]
        for node in due:
            self._try_catch_up(node, links[node])

    def describe(self) -> dict[str, object]:
        """The controller's epoch, its mirrors and which of them are in sync (for `raybroker status`)."""
        with self._lock:
            return {"epoch": self.epoch, "mirrors": list(self._mirrors), "in_sync": sorted(self._in_sync)}

    # --- mirrors ---------------------------------------------------------------------------------

    def _choose(self, links: Mapping[str, MirrorLink]) -> None:
        kept = [node for node in self._mirrors if node in links]
        for node in set(self._mirrors) - set(kept):
            self._in_sync.discard(node)
            self._retry_at_ms.pop(node, None)
        wanted = self._factor - 1
        for node in sorted(links):
            if len(kept) >= wanted:
                break
            if node != self._own_node and node not in kept:
                kept.append(node)
        self._mirrors = kept[: max(wanted, 0)]

    def _try_catch_up(self, node: str, link: MirrorLink) -> None:
        """Catches `node`'s copy up without the lock, then sends what was written meanwhile and adds it to the
        in-sync set under it (unless it stopped being a mirror meanwhile)."""
        try:
            offset = self._catch_up(link)
            with self._lock:
                if node not in self._mirrors or self.fenced:
                    return
                self._send_from(link, offset, self._log.log_end_offset)
                self._in_sync.add(node)
                self._retry_at_ms.pop(node, None)
        except StaleControllerEpochError as exc:
            with self._lock:
                self._fence(exc)
        except RaybrokerError as exc:
            with self._lock:
                self._leave(node, f"could not be caught up: {exc}")

    def _catch_up(self, link: MirrorLink) -> int:
        """Truncates the copy where it parts from this log and sends it the rest as far as it is now; the copy's
        end."""
        state = link.metadata_state().result(MIRROR_TIMEOUT_S)
        if state.latest_epoch > self.epoch:
            raise StaleControllerEpochError(f"a copy holds epoch {state.latest_epoch}, newer than {self.epoch}")
        common = 0
        if state.latest_epoch != NO_EPOCH:
            epoch, epoch_end = self._log.end_offset_for_epoch(state.latest_epoch)
            common = 0 if epoch == NO_EPOCH else min(state.end_offset, epoch_end)
        if common < state.end_offset:
            link.metadata_truncate(self.epoch, common).result(MIRROR_TIMEOUT_S)
        return self._send_from(link, common, self._log.log_end_offset)

    def _send_from(self, link: MirrorLink, offset: int, end: int) -> int:
        """Sends the copy, which ends at `offset`, this log's batches up to `end`; the copy's end."""
        while offset < end:
            batches = read_whole_batches(self._log, offset, COPY_CHUNK_BYTES)
            after = link.metadata_append(self.epoch, offset, batches).result(MIRROR_TIMEOUT_S)
            if after.end_offset <= offset:
                raise BrokerNotAvailableError(f"the copy, at offset {after.end_offset}, took no batch from {offset}")
            offset = after.end_offset
        return offset

    def _leave(self, node: str, why: str, retry_ms: int = MIRROR_RETRY_MS) -> None:
        """`node`'s mirror leaves the in-sync set; `sync` catches it up `retry_ms` from now."""
        if node in self._in_sync or node not in self._retry_at_ms:
            logger.warning("metadata mirror on node %s %s; it leaves the in-sync set", node, why)
        self._in_sync.discard(node)
        self._retry_at_ms[node] = self._clock.milliseconds() + retry_ms

    def _fence(self, exc: StaleControllerEpochError) -> NotControllerError:
        """Marks this controller fenced; the error its write raises."""
        self.fenced = True
        logger.error("controller of epoch %d fenced: %s", self.epoch, exc)
        return NotControllerError(f"the controller of epoch {self.epoch} was fenced by a successor: {exc}")

    def _states(self, links: Mapping[str, MirrorLink]) -> dict[str, MirrorState]:
        asked = {node: link.metadata_state() for node, link in links.items()}
        states = {}
        for node, pending in asked.items():
            try:
                states[node] = pending.result(MIRROR_TIMEOUT_S)
            except RaybrokerError as exc:
                logger.warning("node %s's copy of the metadata log did not answer: %s", node, exc)
        return states
