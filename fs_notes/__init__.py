"""fs-notes: an MCP server for a folder of markdown notes, with layered containment."""

__version__ = "0.1.0"
