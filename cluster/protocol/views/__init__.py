"""What the protocol handlers call: one view per role of the broker, each over a transport to where the role runs.

`transport` (a role's methods called by name: `InProcessTransport` over the in-process broker's plain roles,
`RayTransport` over an actor), `group_view` (the group coordinator), `transaction_view` (the transaction coordinator;
`transaction_transport` its actor with its same-node channel), `security_view` (the controller's credentials and ACLs),
each written once and built for either host (`in_process`, `on_ray`); `broker_view` (topics and partitions), written
once over the controller's transport and a `PartitionTransport` to the partitions' leaders, the one part each host
writes its own way, since fetches and appends take different paths: `in_process_broker_view` and `ray_broker_view`.
"""
