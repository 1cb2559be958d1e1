"""Replication as Kafka does it, in plain classes the partition actors and the controller run: the partition state the
controller decides and pushes to every replica (`leader_and_isr`), the controller's placement and elections
(`assignment`), the leader's view of its followers (`leader_state`: their log end offsets, the high watermark, who
is in sync) and a follower's fetch loop (`follower`).
"""
