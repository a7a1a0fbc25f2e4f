"""Full-text search of a workspace: an SQLite FTS5 index (index.py) and its queries (query.py)."""
