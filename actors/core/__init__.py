"""The broker's roles as plain classes, without Ray: what the Ray actors of `actors.server` construct and delegate to,
and what the in-process broker (`actors.core.in_process_broker`) wires together for tests and development.

One folder per role: `controller/` (the cluster's metadata, placement and elections), `replication/` (a replica's
leader/follower role), `groups/` (consumer groups: membership and committed offsets), `security/` (ACLs and SCRAM).
A transaction coordinator goes to `transactions/` beside them. Every role takes its clock (`storage.clock`) and its
collaborators as arguments, so it runs on a `MockClock` in a unit test. Nothing here imports Ray or any other
`actors` module (`tests/test_layering.py` checks it): only the standard library, non-Ray libraries, `storage` and
`actors.core` itself.
"""
