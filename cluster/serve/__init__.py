"""Ray Serve on raybroker: share groups as the task queue of Serve's asynchronous inference."""
