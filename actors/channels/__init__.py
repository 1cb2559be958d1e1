"""Same-node and replica channels that bypass Ray calls: each channel's frames, its server side and its client side."""
