"""Errors shared across the command line, the server's start-up and the exercise target.

A module of its own so that what raises them (`serve`, `exercises/target.py`) and what reports
them (`cli`) do not import each other.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A usage or configuration problem: reported on one line, exit status 2."""
