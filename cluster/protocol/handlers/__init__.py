"""One module per API family: each a plain handler from a decoded request (`cluster.protocol.framing.Request`) to
a kio response object, working against the views of `cluster.protocol.views` (`broker_view.BrokerView` and the
group, transaction and security views). No handler touches a socket."""
