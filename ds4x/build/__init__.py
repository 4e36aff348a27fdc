"""The builder: pinned sources, the quilt series, the patched workspace, wheels with
provenance, and the release tooling (roll, newest, export)."""
