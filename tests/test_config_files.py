"""The policy loader reading operator files (pure logic, on pyfakefs): errors name the file."""

from __future__ import annotations

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from fs_notes.policy import PolicyError
from fs_notes.policy_file import load_policy


def test_policy_errors_name_the_file_and_line(fs: FakeFilesystem) -> None:
    fs.create_file("/p/team.toml", contents='[[workspace]]\nname = "w"\npath = "relative/path"\n')
    with pytest.raises(PolicyError) as info:
        load_policy("/p/team.toml")
    assert str(info.value).startswith("/p/team.toml:3: ")
    with pytest.raises(PolicyError) as missing:
        load_policy("/p/none.toml")
    assert "/p/none.toml" in str(missing.value)


def test_a_policy_loads_from_any_path(fs: FakeFilesystem) -> None:
    fs.create_file("/srv/notes/.keep")
    fs.create_file(
        "/etc/fs-notes/p.toml",
        contents=(
            '[[principal]]\nname = "me"\nlocal = true\n'
            '[[workspace]]\nname = "w"\npath = "/srv/notes"\n'
            '[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = ["read"]\n'
        ),
    )
    policy = load_policy("/etc/fs-notes/p.toml")
    me = policy.local_principal()
    assert policy.authorize(me, "file:///srv/notes", "read").workspace.name == "w"
