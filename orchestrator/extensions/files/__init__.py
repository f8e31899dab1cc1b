"""The workspace tools: ``filesystem`` (read, list, search, write and edit beneath a root) and ``bash``, with the
confinement (``confine``), walking (``walk``), matching (``match``), atomic writing (``write``) and capped reading
(``capped_read``) they share."""
