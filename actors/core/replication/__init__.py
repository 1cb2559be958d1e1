"""A replica's side of replication, as Kafka does it: the partition state the controller decides and pushes to every
replica (`leader_and_isr`), the leader's view of its followers (`leader_state`: their log end offsets, the high
watermark, who is in sync) and a follower's fetch loop (`follower`).
"""
