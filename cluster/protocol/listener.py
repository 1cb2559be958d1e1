"""Starting the Kafka-protocol listener for a running broker: `KafkaListener(properties)`.

The listener runs in the calling process, on a thread of its own with its own asyncio event loop: one loop serves
every connection, and the handlers await actor calls rather than block on them, so a long-poll fetch holds no
thread. Running it in the process that started the broker keeps it simple to start and to stop (a test, a demo, an
embedding application); `raybroker start`, whose process exits while the broker keeps running, hosts the same
`KafkaListener` inside detached actors pinned to its node instead (`cluster.protocol.listener_actor`).

`properties` are the broker's (Kafka's dotted keys, as given to `start_broker`): the listener keys
(`storage.config.listener_config`), `num.network.threads` (above 1, the port is bound with SO_REUSEPORT to be
shared with the node's other listener processes), and the keys the handlers use (`node.id`, `num.partitions`,
`auto.create.topics.enable`, `delete.topic.enable`, the topic defaults). The keys given are the ones DescribeConfigs
reports as set in the broker's properties.

SSL and SASL_SSL listeners get their TLS context from the `ssl.*` keys, and SASL listeners check logins against the
SCRAM credentials of the cluster's controller (`security`, `SecurityView.on_ray()` unless given). With
`authorizer.class.name` set, the listener loads the cluster's ACLs before it serves and keeps them fresh while it
runs (`cluster.protocol.security.access`).

Once bound, the listener announces its `node.id` and advertised address to the controller for its Ray node
(`BrokerView.announce`), so every node's listener names it in Metadata as the leader of the node's partitions,
and again every `broker.heartbeat.interval.ms`, so that a controller started again learns it; `stop` withdraws
it. Two nodes announcing the same `node.id` is a configuration error the second one gets.

Once it serves, the listener keeps its process's collector from pausing it: the objects alive then leave the full
collections (`actors.startup_objects`) and the young generation grows (`actors.young_collections`), so that
requests' objects die young. Both hold for the whole process, as the producer's and consumer's freeze does; a full
collection of the ~170,000 objects of a Ray driver takes ~100 ms, which would be the p99 of every client of the
listener.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Mapping
from types import TracebackType

from actors import heap_trim
from actors.metrics.ray_export import exported_metrics
from actors.metrics.recorder import BrokerMetrics
from actors.startup_objects import freeze_startup_objects
from actors.young_collections import widen_young_generation
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import SplicedFrame
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.router import Router, request_name
from cluster.protocol.security.access import AccessControl
from cluster.protocol.security.tls import server_context
from cluster.protocol.server import KafkaServer, ServerStatistics
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.ray_broker_view import RayBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.config.broker_config import BrokerConfig
from storage.config.security_config import SSL_PROTOCOLS
from storage.errors import RaybrokerError

logger = logging.getLogger(__name__)

# How long `stop` waits for the loop to close its connections before giving up on the thread.
STOP_TIMEOUT_S = 10.0


class KafkaListener:
    """A running listener: `port` (the first listener's bound port), `ports` per listener name, `stop()`."""

    def __init__(
        self,
        properties: Mapping[str, object] | None = None,
        view: BrokerView | None = None,
        security: SecurityView | None = None,
        metrics: BrokerMetrics | None = None,
        *,
        groups: GroupView | None = None,
        transactions: TransactionView | None = None,
    ) -> None:
        """Binds and starts serving before it returns; raises `InvalidConfigError` for bad settings (a keystore
        that does not load included) and `OSError` when a port cannot be bound. `view` and `security` default to
        the broker and controller of the Ray cluster this process is connected to, `groups` and `transactions` to
        its coordinators, `metrics` to this process's (exported to Ray's metrics: `actors.metrics.ray_export`)."""
        props = dict(properties or {})
        self._broker_config = BrokerConfig.from_properties(props)
        self._config = self._broker_config.listener_config
        self._static_broker_keys = frozenset(str(key).strip() for key in props)
        self._view = view if view is not None else RayBrokerView()
        self._security = security if security is not None else SecurityView.on_ray()
        self._groups = groups if groups is not None else GroupView.on_ray()
        self._transactions = (
            transactions if transactions is not None else TransactionView.on_ray(self._broker_config.transaction_config)
        )
        self._metrics = metrics if metrics is not None else exported_metrics()
        self._tls_contexts = {
            endpoint.listener_name: server_context(self._broker_config.security_config, endpoint.security_protocol)
            for endpoint in self._config.endpoints
            if endpoint.security_protocol in SSL_PROTOCOLS
        }
        self._loop = asyncio.new_event_loop()
        self._started: concurrent.futures.Future[KafkaServer] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="kafka-listener", daemon=True)
        self._stopping: asyncio.Event | None = None
        self._router: Router | None = None
        self._thread.start()
        self._server = self._started.result()
        freeze_startup_objects()
        widen_young_generation()
        heap_trim.start()

    @property
    def ports(self) -> dict[str, int]:
        return self._server.ports

    @property
    def port(self) -> int:
        return next(iter(self.ports.values()))

    @property
    def bootstrap_servers(self) -> str:
        """`host:port` of the first advertised listener, for a client's `bootstrap.servers`."""
        endpoint = self._config.advertised(self.ports)[0]
        return f"{endpoint.host}:{endpoint.port}"

    def statistics(self) -> ServerStatistics:
        return self._server.statistics()

    def stop(self) -> None:
        """Closes the listener and its connections; safe to call again."""
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> KafkaListener:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        access = AccessControl(self._broker_config.security_config, self._security)
        quotas = QuotaEnforcer(
            self._security,
            self._broker_config.quota_window_num,
            self._broker_config.quota_window_size_seconds * 1000,
            self._metrics,
        )
        features = FeatureCache(self._security)
        try:
            await access.refresh()
            server = await self._start_server(access, quotas, features)
        except BaseException as exc:
            quotas.close()
            self._started.set_exception(exc)
            return
        self._started.set_result(server)
        refreshing = asyncio.create_task(access.keep_fresh()) if access.enabled else None
        refreshing_quotas = asyncio.create_task(quotas.keep_fresh())
        refreshing_features = asyncio.create_task(features.keep_fresh())
        announcing = asyncio.create_task(self._keep_announced(self._endpoint(server)))
        try:
            await self._stopping.wait()
        finally:
            announcing.cancel()
            refreshing_quotas.cancel()
            refreshing_features.cancel()
            quotas.close()
            if refreshing is not None:
                refreshing.cancel()
            await server.stop()
            if self._router is not None:
                self._router.close()
            with contextlib.suppress(RaybrokerError):
                # The broker may be stopping too; its registry goes with it.
                await self._view.withdraw(self._endpoint(server))

    async def _start_server(self, access: AccessControl, quotas: QuotaEnforcer, features: FeatureCache) -> KafkaServer:
        """Binds first (a port of 0 is only known once bound), then builds the router for the advertised address."""
        router: Router | None = None

        async def handle(payload: bytes, context: ConnectionContext) -> bytes | SplicedFrame | None:
            assert router is not None, "the server answers only after start() returned"
            return await router.handle(payload, context)

        async def disconnected(context: ConnectionContext) -> None:
            if router is not None:
                await router.disconnected(context)

        server = KafkaServer(
            handle,
            self._config,
            reuse_port=self._broker_config.num_network_threads > 1,
            overlaps=Router.overlaps,
            security=self._broker_config.security_config,
            tls_contexts=self._tls_contexts,
            metrics=self._metrics,
            request_name=request_name,
            connection_throttle=quotas.connection_created,
            disconnected=disconnected,
        )
        await server.start()
        endpoint = self._endpoint(server)
        router = self._router = Router(
            self._view,
            endpoint,
            groups=self._groups,
            transactions=self._transactions,
            broker_config=self._broker_config,
            static_broker_keys=self._static_broker_keys,
            security=self._security,
            access=access,
            quotas=quotas,
            features=features,
            metrics=self._metrics,
        )
        try:
            await self._view.announce(endpoint)
        except BaseException:
            await server.stop()
            raise
        return server

    async def _keep_announced(self, endpoint: BrokerEndpoint) -> None:
        """Announces `endpoint` again every `broker.heartbeat.interval.ms`, as a Kafka broker's registration
        travels with its heartbeats: a controller started again (its Ray head lost and back) learns the listeners
        from them, having kept no record of any."""
        interval_s = self._broker_config.broker_heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._view.announce(endpoint)
            except RaybrokerError as exc:
                logger.debug("the controller did not take this listener's announcement: %s", exc)

    def _endpoint(self, server: KafkaServer) -> BrokerEndpoint:
        """This broker as Metadata advertises it: `node.id`, the first advertised listener, and every one."""
        advertised = self._config.advertised(server.ports)
        listeners = tuple((endpoint.listener_name, endpoint.host, endpoint.port) for endpoint in advertised)
        return BrokerEndpoint(self._broker_config.node_id, advertised[0].host, advertised[0].port, listeners)
