"""tfm.loaders.paths.resolve_allowed: only folders inside the allowed roots; one refusal for everything else."""

from __future__ import annotations

import os

import pytest

from tfm.loaders.paths import parse_roots, resolve_allowed


@pytest.fixture
def tree(tmp_path):
    """root/ (allowed) with a model folder; secret/ beside it (not allowed)."""
    (tmp_path / "root" / "model").mkdir(parents=True)
    (tmp_path / "secret" / "model").mkdir(parents=True)
    (tmp_path / "secret" / "file.txt").write_text("x")
    return tmp_path


def refusal(path, roots, **kw) -> str:
    with pytest.raises(ValueError) as e:
        resolve_allowed(path, roots, **kw)
    return str(e.value).replace(repr(str(path).strip()), "<PATH>")


def test_inside_a_root_is_resolved(tree):
    root = tree / "root"
    assert resolve_allowed(root / "model", [root]) == (root / "model").resolve()
    assert resolve_allowed("model", [root], base=root) == (root / "model").resolve()
    assert resolve_allowed(root / "model" / ".." / "model", [root]) == (root / "model").resolve()
    assert resolve_allowed(root / "not-yet-there", [root]) == (root / "not-yet-there").resolve()


def test_every_path_outside_gets_the_same_message(tree):
    roots = [tree / "root"]
    probes = [
        "/etc",
        "/root/.ssh",
        "/etc/passwd",
        "/no/such/path",
        str(tree / "secret"),
        str(tree / "secret" / "file.txt"),
        "~",
        "",
        "   ",
        "a\0b",
    ]
    messages = {refusal(p, roots) for p in probes}
    assert len(messages) == 1, messages
    msg = messages.pop()
    assert "is not inside a model folder this server allows" in msg and str(tree / "root") in msg  # as given


def test_dotdot_and_symlinks_cannot_escape(tree):
    root = tree / "root"
    os.symlink(tree / "secret", root / "link")
    os.symlink(tree / "secret" / "file.txt", root / "file-link")
    os.symlink(root / "model", root / "inner-link")  # a link that stays inside is fine
    same = refusal("/etc", [root])
    assert refusal(str(root / ".." / "secret" / "model"), [root]) == same
    assert refusal(str(root / "link" / "model"), [root]) == same
    assert refusal(str(root / "link"), [root]) == same
    assert refusal(str(root / "file-link"), [root]) == same
    assert refusal("../secret", [root], base=root) == same
    assert resolve_allowed(root / "inner-link", [root]) == (root / "model").resolve()


def test_a_root_given_through_a_symlink_is_resolved_too(tree):
    os.symlink(tree / "root", tree / "root-link")
    assert resolve_allowed(tree / "root" / "model", [tree / "root-link"]) == (tree / "root" / "model").resolve()


def test_parse_roots():
    assert [str(p) for p in parse_roots(f"/a{os.pathsep}{os.pathsep} /b ")] == ["/a", "/b"]
    assert parse_roots("") == []
