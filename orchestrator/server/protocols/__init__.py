"""The standard agent protocols, each a mapping over the same ``Backend`` as the native routes."""
