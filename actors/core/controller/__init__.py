"""The controller's logic: the cluster's metadata in a compacted log, replica placement and elections (`assignment`),
and the class that owns them (`controller`), over seams for node liveness, the nodes' brokers and the replicas.
"""
