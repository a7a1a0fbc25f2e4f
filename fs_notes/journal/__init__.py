"""The journal of changes (store.py) and the door that keeps it (door.py): every change through
fs-notes can be listed and undone."""
