"""A broker's log dirs: lock, identity, clean-shutdown marker, checkpoint files, and the logs over them."""
