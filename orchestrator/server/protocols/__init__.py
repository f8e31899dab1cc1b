"""The standard agent protocols the service speaks, each a mapping over the same ``Backend`` as its own routes."""
