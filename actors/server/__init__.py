"""The broker's Ray actors: partition logs and hosts, the node's log manager, the controller, the group coordinator."""
