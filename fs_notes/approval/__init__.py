"""Approvals a person gives outside the client (issue 30 item 1): the store, the loopback page, and
how the delete tool asks (outofband.py); `fs-notes approve` is fs_notes/approve.py."""
