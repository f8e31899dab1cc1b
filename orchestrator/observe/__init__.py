"""Seeing what requests did: the machines' diagrams (``diagrams``) and each request's path as a Mermaid trace
(``trace``)."""
