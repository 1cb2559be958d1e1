"""Consumer groups as Kafka's group coordinator keeps them: the membership state machine (`group_membership`) and the
committed offsets in `__consumer_offsets` (`offsets`), over handles of that topic's partitions.
"""
