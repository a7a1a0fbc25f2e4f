"""The note model: what a note's text says, computed from the text alone (issue 28 item 3).

A note's title and headings (titles.py, which also finds the front matter), its tags (tags.py),
its front-matter properties and aliases (properties.py), its links as written (links.py), the
rewriting of its wikilinks to a moved note (relink.py), notes_edit's replacements and diff
(textedit.py) and what a rewrite would destroy unsaid (damage.py). The tools in fs_notes/tools/
read and write notes through the filesystem layer and keep the index; they call these
functions on the text they got.

What it guarantees
  * No I/O: nothing here opens, stats or lists a file, queries an index, uses a socket, reads the
    environment or the clock; every function is given text (and, for relink.py, a resolving
    callable) and returns values. The front matter is composed with PyYAML from a string, never
    loaded from a file and never constructed into objects.
  * Imports only the standard library's pure modules, PyYAML, other fs_notes.notes modules and
    the pure fs_notes.render and fs_notes.lexical; never fs_notes.tools, fs_notes.fs,
    fs_notes.search, fs_notes.protocol, fs_notes.transport or fs_notes.sandbox, directly or
    through another module (tests/test_import_graph.py holds this).

What it does not do: resolve a link to a note (that needs the index:
fs_notes/tools/link_resolution.py) or check that a note exists. Import the module you need:
this package re-exports nothing.
"""
