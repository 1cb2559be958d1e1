"""One module per API family: each a plain handler from a decoded request (`cluster.protocol.framing.Request`) to
a kio response object, working against a `cluster.protocol.broker_view.BrokerView`. No handler touches a socket."""
