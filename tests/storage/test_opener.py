"""The one opener: regular files only (never blocking on a FIFO), inside the root, pinned."""

from __future__ import annotations

import os
import shutil

import pytest

from tpufeed.errors import CorruptDataError, SourceError, SourceNotFoundError
from tpufeed.storage.opener import FileIdentity, open_pinned, open_regular, real_path_of


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "root"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"a" * 100)
    (tmp_path / "outside.bin").write_bytes(b"o" * 100)
    return folder


def _opened(path: str, **kwargs) -> bytes:
    fd = open_regular(path, **kwargs)
    try:
        return os.pread(fd, 1000, 0)
    finally:
        os.close(fd)


def test_a_regular_file_inside_the_root_opens(root):
    assert _opened(str(root / "a.bin"), root=str(root)) == b"a" * 100


def test_a_symlink_inside_the_root_to_a_file_inside_it_opens(root):
    os.symlink(root / "a.bin", root / "link.bin")
    assert _opened(str(root / "link.bin"), root=str(root)) == b"a" * 100


def test_a_symlink_out_of_the_root_is_refused_by_name(root, tmp_path):
    os.symlink(tmp_path / "outside.bin", root / "escape.bin")
    with pytest.raises(CorruptDataError, match="escape.bin leads to .*outside.bin, outside"):
        _opened(str(root / "escape.bin"), root=str(root))
    assert _opened(str(root / "escape.bin")) == b"o" * 100  # without a root: the user's own path


def test_links_false_refuses_any_symlink_in_the_files_place(root):
    """For files tpufeed writes itself (cache entries, copies), which are never links."""
    os.symlink(root / "a.bin", root / "link.bin")
    with pytest.raises(SourceError, match=r"link\.bin is a symlink"):
        _opened(str(root / "link.bin"), links=False)
    assert _opened(str(root / "a.bin"), links=False) == b"a" * 100


def test_a_root_that_is_itself_a_symlink_holds_its_own_files(root, tmp_path):
    os.symlink(root, tmp_path / "alias")
    assert _opened(str(tmp_path / "alias" / "a.bin"), root=str(tmp_path / "alias")) == b"a" * 100


def test_a_sibling_folder_sharing_the_roots_prefix_is_outside(root, tmp_path):
    (tmp_path / "root2").mkdir()
    (tmp_path / "root2" / "b.bin").write_bytes(b"b")
    os.symlink(tmp_path / "root2" / "b.bin", root / "b.bin")
    with pytest.raises(CorruptDataError, match="outside the dataset root"):
        _opened(str(root / "b.bin"), root=str(root))


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "kind, words",
    [("fifo", "a FIFO"), ("dir", "a directory"), ("device", "a character device")],
)
def test_anything_but_a_regular_file_is_refused_without_blocking(root, kind, words):
    path = str(root / "x")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
    else:
        path = "/dev/zero"
    with pytest.raises(SourceError, match=words):
        _opened(path)


def test_a_missing_file_is_named(root):
    with pytest.raises(SourceNotFoundError, match="no such file: .*missing"):
        _opened(str(root / "missing"))


@pytest.mark.parametrize("how", ["rename over", "symlink", "truncate", "same size and mtime"])
def test_a_pinned_file_changed_since_is_refused(root, tmp_path, how):
    path = str(root / "a.bin")
    fd, pin = open_pinned(path)
    os.close(fd)
    st = os.stat(path)
    if how == "rename over":
        shutil.copyfile(tmp_path / "outside.bin", path + ".new")
        os.replace(path + ".new", path)
    elif how == "symlink":
        os.replace(tmp_path / "outside.bin", root / "other.bin")
        os.remove(path)
        os.symlink(root / "other.bin", path)
    elif how == "truncate":
        os.truncate(path, 10)
    else:  # another inode, of the same size, given the same modification time
        with open(path + ".new", "wb") as f:
            f.write(b"b" * 100)
        os.utime(path + ".new", ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(path + ".new", path)
    with pytest.raises(CorruptDataError, match="a.bin changed since it was first opened"):
        _opened(path, pinned=pin)


def test_the_pin_is_the_files_identity(root):
    fd, pin = open_pinned(str(root / "a.bin"))
    os.close(fd)
    st = os.stat(root / "a.bin")
    assert pin == FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    assert pin.key() == f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def test_the_real_path_is_read_from_the_descriptor_not_the_name(root, tmp_path):
    fd = open_regular(str(root / "a.bin"))
    try:
        os.replace(root / "a.bin", tmp_path / "moved.bin")
        assert real_path_of(fd, str(root / "a.bin")) == str(tmp_path / "moved.bin")
    finally:
        os.close(fd)
