"""Per-file digests of variant directories (kernelforge.digest).

The expected digests below were cross-checked against the reference implementation of
the format (``Digest.hash_variant`` of the ``kernels`` package): same files hashed,
same relative paths, standard base64 with padding.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from kernelforge.digest import digest_block, hash_file, hash_tree, is_excluded, verify_tree
from kernelforge.errors import IntegrityError

HELLO_SHA256 = "WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM="  # sha256(b"hello\n")
EMPTY_SHA256 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="


def write(root: Path, rel: str, data: bytes | str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture
def variant(tmp_path: Path) -> Path:
    root = tmp_path / "torch-cpu"
    write(root, "__init__.py", "hello\n")
    write(root, "_ops.py", "x")
    write(root, "empty.txt", b"")
    write(root, "sub/deep/kernel.so", os.urandom(3 * (1 << 20) + 17))
    write(root, "metadata.json", "{}")
    return root


def test_known_digests_standard_base64_with_padding(variant: Path) -> None:
    files = hash_tree(variant)
    assert files["__init__.py"] == HELLO_SHA256
    assert files["empty.txt"] == EMPTY_SHA256
    assert files["_ops.py"] == base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    # a file larger than the read chunk hashes like one whole read
    big = (variant / "sub/deep/kernel.so").read_bytes()
    assert files["sub/deep/kernel.so"] == base64.b64encode(hashlib.sha256(big).digest()).decode()
    assert list(files) == sorted(files)


def test_sha512(variant: Path) -> None:
    files = hash_tree(variant, algorithm="sha512")
    expected = base64.b64encode(hashlib.sha512(b"hello\n").digest()).decode()
    assert files["__init__.py"] == expected
    assert hash_file(variant / "__init__.py", "sha512") == expected


@pytest.mark.parametrize(
    ("relpath", "excluded"),
    [
        ("metadata.json", True),
        ("metadata.json.sigstore", True),
        ("sub/metadata.json", False),  # only the top-level metadata holds the digest
        ("sub/metadata.json.sigstore", False),
        ("x.sig", False),  # the reference hashes every other file, signatures included
        ("kernel.pyc", True),
        ("a/b/kernel.pyc", True),
        ("__pycache__/notes.txt", True),
        ("a/__pycache__/b/c.py", True),
        ("x.PYC", False),
        (".hidden", False),
        ("METADATA.JSON", False),
        ("__init__.py", False),
    ],
)
def test_exclusions(tmp_path: Path, relpath: str, excluded: bool) -> None:
    write(tmp_path, "__init__.py", "a")
    write(tmp_path, relpath, "payload")
    assert is_excluded(relpath) is excluded
    assert (relpath not in hash_tree(tmp_path)) is excluded


def test_relpaths_use_forward_slashes_and_odd_names(tmp_path: Path) -> None:
    write(tmp_path, "a/b c/caf\u00e9.py", "x")
    assert list(hash_tree(tmp_path)) == ["a/b c/caf\u00e9.py"]


def test_verify_passes_on_untouched_tree(variant: Path) -> None:
    recorded = hash_tree(variant)
    verify_tree(variant, recorded)
    # metadata.json may change freely: it is not part of its own digest
    write(variant, "metadata.json", '{"id": "other"}')
    verify_tree(variant, recorded)
    # Python writing bytecode next to the sources does not break verification
    write(variant, "__pycache__/__init__.cpython-311.pyc", b"\0")
    verify_tree(variant, recorded)
    assert digest_block(variant)["files"] == recorded


def test_verify_names_changed_missing_and_extra_files(variant: Path) -> None:
    expected = hash_tree(variant)
    write(variant, "_ops.py", "tampered")
    (variant / "empty.txt").unlink()
    write(variant, "sub/evil.py", "import os")
    with pytest.raises(IntegrityError) as info:
        verify_tree(variant, expected)
    assert info.value.problems == ["changed: _ops.py", "missing: empty.txt", "extra: sub/evil.py"]
    assert info.value.where == variant
    assert "changed: _ops.py" in str(info.value)


def test_verify_with_wrong_algorithm_reports_every_file(variant: Path) -> None:
    with pytest.raises(IntegrityError, match="changed: __init__.py"):
        verify_tree(variant, hash_tree(variant), algorithm="sha512")


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_symlinks_are_refused(variant: Path, kind: str) -> None:
    if kind == "file":
        (variant / "link.py").symlink_to(variant / "__init__.py")
        name = "link.py"
    else:
        (variant / "linked").symlink_to(variant / "sub")
        name = "linked"
    with pytest.raises(IntegrityError, match=f"refused: {name} \\(a symbolic link"):
        hash_tree(variant)
    with pytest.raises(IntegrityError, match=name):
        verify_tree(variant, {})


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="not a directory"):
        hash_tree(tmp_path / "nope")


def test_unknown_algorithm_names_the_argument(variant: Path) -> None:
    with pytest.raises(ValueError, match="algorithm: unsupported digest algorithm 'md5'"):
        hash_tree(variant, algorithm="md5")


def test_digest_block_is_metadata_shaped(variant: Path) -> None:
    block = digest_block(variant)
    assert block == {"algorithm": "sha256", "files": hash_tree(variant)}


@pytest.mark.parametrize(
    ("bytecode", "refused"),
    [
        ("refuse", ["__pycache__/__init__.cpython-311.pyc", "sub/__pycache__/x.txt",
                    "sub/loose.pyc"]),
        ("allow-pycache", ["sub/loose.pyc"]),
        (None, ["sub/loose.pyc"]),  # the default: what a load does
    ],
)
def test_verify_variant_refuses_bytecode_by_rule(variant: Path, bytecode, refused) -> None:
    from kernelforge.digest import verify_variant

    meta = {"digest": digest_block(variant)}
    write(variant, "__pycache__/__init__.cpython-311.pyc", b"\0")
    write(variant, "sub/__pycache__/x.txt", "x")
    write(variant, "sub/loose.pyc", b"\0")
    with pytest.raises(IntegrityError) as info:
        if bytecode is None:
            verify_variant(variant, meta)
        else:
            verify_variant(variant, meta, bytecode=bytecode)
    assert sorted(p.split(" ")[1] for p in info.value.problems) == refused
    assert all(p.startswith("extra: ") and "delete" in p for p in info.value.problems)
    # the digest itself is unchanged: the reference hashes no bytecode either
    assert digest_block(variant) == meta["digest"]


def test_verify_tree_bytecode_rules(variant: Path) -> None:
    expected = hash_tree(variant)
    write(variant, "__pycache__/__init__.cpython-311.pyc", b"\0")
    verify_tree(variant, expected)  # "ignore", the default: builds Python imported
    verify_tree(variant, expected, bytecode="allow-pycache")
    with pytest.raises(IntegrityError, match=r"extra: __pycache__/__init__\.cpython-311\.pyc"):
        verify_tree(variant, expected, bytecode="refuse")
    with pytest.raises(ValueError, match="bytecode: expected one of"):
        verify_tree(variant, expected, bytecode="sometimes")  # type: ignore[arg-type]


def test_the_files_hashed_are_those_hugging_faces_digest_hashes(tmp_path: Path) -> None:
    """Odd names decided as their digest decides them: a file named just ".pyc" has no
    extension (hashed), a file named "__pycache__" is left out like the folder."""
    rust = pytest.importorskip("kernels._rust")
    variant = tmp_path / "v"
    (variant / "sub" / "__pycache__").mkdir(parents=True)
    for rel in (".pyc", "sub/.pyc", "__pycache__", "a.pyc", "..pyc", "ok.py",
                "sub/__pycache__/m.cpython-311.pyc", "sub/x.py"):
        (variant / rel).write_text("x\n")
    theirs = rust.Digest.hash_variant(rust.DigestAlgorithm.SHA256, str(variant)).files
    ours = hash_tree(variant)
    assert set(ours) == set(theirs) == {".pyc", "sub/.pyc", "ok.py", "sub/x.py"}


def test_hash_tree_is_sorted_by_path_across_directories(tmp_path: Path) -> None:
    for rel in ("c.py", "a/x.py", "b/y.py", "a.py", "b/a/z.py"):
        write(tmp_path / "v", rel, "x")
    assert list(hash_tree(tmp_path / "v")) == ["a.py", "a/x.py", "b/a/z.py", "b/y.py", "c.py"]


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets")
def test_a_special_file_is_refused_not_read(variant: Path, monkeypatch) -> None:
    import socket

    monkeypatch.chdir(variant / "sub")  # a short relative path: socket paths are limited
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
        with pytest.raises(IntegrityError, match=r"refused: sub/sock \(not a regular file"):
            hash_tree(variant)


def test_verify_variant_checks_the_metadata_anchor(variant: Path) -> None:
    """The sha256 of the metadata.json the trust policy saw must be what is on disk."""
    from kernelforge.digest import b64_sha256, verify_variant

    meta = {"digest": digest_block(variant)}
    seen = b64_sha256((variant / "metadata.json").read_bytes())
    verify_variant(variant, meta, metadata_sha256=seen)
    write(variant, "metadata.json", '{"other": 1}')
    with pytest.raises(IntegrityError) as info:
        verify_variant(variant, meta, metadata_sha256=seen)
    assert info.value.problems == ["changed: metadata.json"]
    (variant / "metadata.json").unlink()
    with pytest.raises(IntegrityError) as info:
        verify_variant(variant, meta, metadata_sha256=seen)
    assert info.value.problems == ["missing: metadata.json"]


@pytest.mark.parametrize("anchor", ["recorded", "locked"])
def test_verify_variant_checks_the_recorded_and_the_locked_digests(variant: Path,
                                                                   anchor: str) -> None:
    """Each record is checked on its own: a file that matches the metadata's digest but
    not the lock's pin (or the hub's record) is refused, metadata.json included."""
    from kernelforge.digest import b64_sha256, verify_variant

    meta = {"digest": digest_block(variant)}
    pins = {**hash_tree(variant),
            "metadata.json": b64_sha256((variant / "metadata.json").read_bytes())}
    verify_variant(variant, meta, **{anchor: pins})
    other = {**pins, "_ops.py": b64_sha256(b"y"), "metadata.json": b64_sha256(b"{ }")}
    with pytest.raises(IntegrityError) as info:
        verify_variant(variant, meta, **{anchor: other})
    assert info.value.problems == ["changed: _ops.py", "changed: metadata.json"]


def test_a_file_that_differs_from_several_records_is_named_once(variant: Path) -> None:
    from kernelforge.digest import b64_sha256, verify_variant

    meta = {"digest": digest_block(variant)}
    pins = {**hash_tree(variant),
            "metadata.json": b64_sha256((variant / "metadata.json").read_bytes())}
    write(variant, "_ops.py", "changed")
    with pytest.raises(IntegrityError) as info:
        verify_variant(variant, meta, recorded=pins, locked=pins)
    assert info.value.problems == ["changed: _ops.py"]


def test_verify_variant_with_a_sha512_digest(variant: Path) -> None:
    """A metadata digest made with sha512 verifies against sha512 hashes of the files,
    and the sha256 digests are still what the function returns."""
    from kernelforge.digest import verify_variant

    meta = {"digest": digest_block(variant, algorithm="sha512")}
    assert verify_variant(variant, meta) == hash_tree(variant)
    write(variant, "_ops.py", "changed")
    with pytest.raises(IntegrityError) as info:
        verify_variant(variant, meta)
    assert info.value.problems == ["changed: _ops.py"]
