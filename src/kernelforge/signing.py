"""Publisher keys and variant signatures (ed25519, through ``cryptography``).

A publisher signs each build variant it publishes: the signed message is a fixed
domain tag, the repository it is published to, the variant name and the exact bytes of
the variant's ``metadata.json``. The metadata holds the digest of every other file of
the variant, so a valid signature plus a digest check vouch for every byte that gets
imported, and only in the repository it was published to. The signature is stored next
to the variant, at ``build/<variant>.sig``, as JSON::

    {"format": "kernelforge-signature/2", "algorithm": "ed25519", "repo-id": "org/name",
     "key-id": "3f2a...", "public-key": "ed25519:<base64>", "signature": "<base64>"}

Signatures of format 1 (kernelforge before format 2) sign the same without the
repository. They still verify, but the trust policy (:mod:`kernelforge.policy`) counts
one only from a key trusted for that one repository alone.

The ``public-key`` field only helps people; verification always uses the key from the
trust store (:mod:`kernelforge.trust`) named by ``key-id``.

Private keys are PKCS#8 PEM files readable by their owner only; public keys are written
``ed25519:<base64 of the 32 raw bytes>``; a key id is the first 16 hex digits of the
sha256 of the raw public key. ``cryptography`` is imported when a key is used, never
when this module is.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge._parse import UPGRADE, json_loads
from kernelforge._parse import newer_format as _newer_format
from kernelforge.errors import KernelforgeError, TrustError

__all__ = [
    "PublicKey",
    "Signature",
    "SigningKey",
    "check_signable",
    "generate_key",
    "load_signing_key",
    "newer_format",
    "parse_signature",
]

SIGNATURE_FORMAT = "kernelforge-signature/2"
#: What to do about a signature of a newer format (:func:`newer_format`).
UPGRADE_TO_CHECK = f"{UPGRADE} to check it"
FORMAT_1 = "kernelforge-signature/1"
_DOMAIN_1 = b"kernelforge-variant-signature-v1\0"
_DOMAIN_2 = b"kernelforge-variant-signature-v2\0"
_PREFIX = "ed25519:"
#: A key id as :attr:`PublicKey.key_id` makes it.
_KEY_ID_RE = re.compile(r"[0-9a-f]{16}")


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as err:  # pragma: no cover - cryptography is a dependency
        raise KernelforgeError(
            "signatures need the 'cryptography' package; install it with "
            "'pip install cryptography'"
        ) from err
    return ed25519


def signed_message(variant: str, metadata: bytes, repo_id: str | None = None) -> bytes:
    """The bytes a variant signature covers: domain tag, repository (format 2; ``None``:
    format 1, which names none), variant name, metadata bytes."""
    if repo_id is None:
        return _DOMAIN_1 + variant.encode("utf-8") + b"\0" + metadata
    return _DOMAIN_2 + repo_id.encode("utf-8") + b"\0" + variant.encode("utf-8") + b"\0" + metadata


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key.

    Attributes:
        raw: the 32 key bytes.
    """

    raw: bytes

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """Read ``ed25519:<base64>``.

        Args:
            text: the key as printed by ``kernelforge keygen`` (surrounding space is
                ignored).

        Returns:
            The key.

        Raises:
            TrustError: the text is not an ed25519 public key.
        """
        text = text.strip()
        body = text[len(_PREFIX):] if text.startswith(_PREFIX) else None
        try:
            raw = base64.b64decode(body or "", validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if body is None or len(raw) != 32:
            raise TrustError(
                f"public key: {text[:60]!r} is not an ed25519 public key; expected "
                "'ed25519:<base64 of 32 bytes>' as printed by 'kernelforge keygen'"
            )
        return cls(raw)

    @property
    def text(self) -> str:
        """``ed25519:<base64>``."""
        return _PREFIX + base64.b64encode(self.raw).decode("ascii")

    @property
    def key_id(self) -> str:
        """The first 16 hex digits of the sha256 of the raw key."""
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def verify(self, signature: bytes, variant: str, metadata: bytes,
               repo_id: str | None = None) -> bool:
        """Whether ``signature`` signs ``metadata`` of ``variant`` with this key.

        Args:
            signature: the raw 64-byte signature.
            variant: the variant name.
            metadata: the exact bytes of the variant's ``metadata.json``.
            repo_id: the repository a format-2 signature names; ``None`` for format 1.

        Returns:
            ``True`` when the signature is valid.
        """
        from cryptography.exceptions import InvalidSignature

        key = _crypto().Ed25519PublicKey.from_public_bytes(self.raw)
        try:
            key.verify(signature, signed_message(variant, metadata, repo_id))
        except InvalidSignature:
            return False
        return True


def check_signable(digests: Mapping[str, Mapping[str, Any] | None], where: object,
                   unversioned: Sequence[str] = ()) -> None:
    """Refuse to sign variants whose ``metadata.json`` records no file digests, or no
    ``version``.

    A signature covers only the metadata; without its ``digest`` block it would vouch
    for none of the code, and without its ``version`` nothing would show that a build
    on branch ``vN`` was published as version N rather than copied there (loads refuse
    such a signed build on a version branch).

    Args:
        digests: ``{variant: digest block}`` (empty or ``None`` where there is none).
        where: the build directory, for messages.
        unversioned: the variants whose metadata records no ``version``.

    Raises:
        TrustError: naming the variants without digests or version and how to fix them.
    """
    if unversioned:
        raise TrustError(
            f"{where}: cannot sign variant(s) {', '.join(sorted(unversioned))}: their "
            "metadata.json records no version, so a signature would not show which version "
            "branch the build belongs on; rebuild with 'kernelforge build' (which records "
            "it) and publish again, or publish without --sign"
        )
    missing = sorted(v for v, block in digests.items() if not block)
    if missing:
        raise TrustError(
            f"{where}: cannot sign variant(s) {', '.join(missing)}: their metadata.json "
            "records no file digests, so a signature would not cover the code; rebuild with "
            "'kernelforge build' (which writes digests) and publish again, or publish "
            "without --sign"
        )


class SigningKey:
    """An ed25519 private key, loaded from a file.

    Args:
        private: a ``cryptography`` ``Ed25519PrivateKey``.
        path: where it was read from, for messages.
    """

    def __init__(self, private: Any, path: Path | None = None) -> None:
        self._private = private
        self.path = path

    @property
    def public(self) -> PublicKey:
        """The matching public key."""
        from cryptography.hazmat.primitives import serialization

        raw = self._private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return PublicKey(raw)

    def sign_variant(self, variant: str, metadata: bytes, *, repo_id: str) -> bytes:
        """The signature file for one variant published to ``repo_id``.

        Args:
            variant: the variant name (``torch-cpu``).
            metadata: the exact bytes of its ``metadata.json``.
            repo_id: the repository it is published to (``org/name``); the signature
                vouches for the variant in that repository only.

        Returns:
            The JSON bytes to store at ``build/<variant>.sig``.
        """
        from kernelforge.hub.base import validate_repo_id

        validate_repo_id(repo_id)
        signature = self._private.sign(signed_message(variant, metadata, repo_id))
        public = self.public
        doc = {
            "format": SIGNATURE_FORMAT,
            "algorithm": "ed25519",
            "repo-id": repo_id,
            "key-id": public.key_id,
            "public-key": public.text,
            "signature": base64.b64encode(signature).decode("ascii"),
        }
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")

    def __repr__(self) -> str:
        return f"SigningKey({self.public.key_id}, path={str(self.path)!r})"


@dataclass(frozen=True)
class Signature:
    """A parsed signature file.

    Attributes:
        key_id: the id of the key that claims to have signed.
        signature: the raw signature bytes.
        public_key: the public key the file carries (informative only), or ``None``.
        repo_id: the repository it was made for (format 2), ``None`` for format 1.
    """

    key_id: str
    signature: bytes
    public_key: str | None
    repo_id: str | None = None


def newer_format(data: bytes) -> str | None:
    """The ``format`` of a signature file that a newer kernelforge wrote
    (``kernelforge-signature/<N>`` with ``N`` above this version's), else ``None``: such
    a signature cannot be checked here, which is no sign that it was tampered with."""
    try:
        doc = json_loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return _newer_format(doc, SIGNATURE_FORMAT)


def parse_signature(data: bytes, where: str) -> Signature:
    """Read a ``build/<variant>.sig`` file.

    Args:
        data: the file's bytes.
        where: its location, for messages.

    Returns:
        The :class:`Signature`.

    Raises:
        TrustError: the file is not a kernelforge signature, or is one of a newer
            format (:func:`newer_format`); names ``where``. For a file that is none, it
            says what was expected but no fix: that depends on where the file came from
            (its publisher signs again; a damaged copy in the download cache is removed),
            which the caller knows.
    """
    from kernelforge.hub.base import validate_repo_id

    newer = newer_format(data)
    if newer is not None:
        raise TrustError(f"{where}: a signature of format {newer!r}, written by a newer "
                         f"kernelforge (this version reads {SIGNATURE_FORMAT!r} and "
                         f"{FORMAT_1!r}); {UPGRADE_TO_CHECK}")

    try:
        doc = json_loads(data.decode("utf-8"))
        ok = (
            isinstance(doc, dict)
            and doc.get("format") in (SIGNATURE_FORMAT, FORMAT_1)
            and doc.get("algorithm") == "ed25519"
            # the id a key has (PublicKey.key_id): the refusal of a key not trusted names
            # it, so it may hold nothing else (another line of advice, an escape sequence)
            and isinstance(doc.get("key-id"), str)
            and _KEY_ID_RE.fullmatch(doc["key-id"]) is not None
        )
        repo_id = doc.get("repo-id") if ok and doc["format"] == SIGNATURE_FORMAT else None
        if ok and doc["format"] == SIGNATURE_FORMAT:
            validate_repo_id(repo_id)
        raw = base64.b64decode(doc["signature"], validate=True) if ok else b""
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, binascii.Error):
        ok, raw = False, b""
    if not ok or len(raw) != 64:
        raise TrustError(
            f"{where}: not a valid signature file; expected JSON with format "
            f"{SIGNATURE_FORMAT!r} (or {FORMAT_1!r}), algorithm 'ed25519', 'key-id' (16 hex "
            "digits), a "
            "base64 'signature' and, in format 2, the 'repo-id' it was made for"
        )
    public = doc.get("public-key")
    return Signature(doc["key-id"], raw, public if isinstance(public, str) else None,
                     repo_id)


def load_signing_key(path: str | os.PathLike[str]) -> SigningKey:
    """Read a private key written by :func:`generate_key`.

    Args:
        path: the PEM file.

    Returns:
        The :class:`SigningKey`.

    Raises:
        TrustError: the file is missing, readable by others, or not an ed25519 key.
    """
    from cryptography.hazmat.primitives import serialization

    p = Path(os.path.expanduser(path))
    try:
        data = p.read_bytes()
        mode = p.stat().st_mode
    except OSError as err:
        raise TrustError(f"{p}: cannot read the signing key ({err.strerror}); create one "
                         "with 'kernelforge keygen'") from err
    if b"PRIVATE KEY-----" not in data:
        what = ("a public key (ed25519:...), which others add to their trust store"
                if data.strip().startswith(_PREFIX.encode()) else "no PEM private key")
        raise TrustError(f"{p}: this is {what}; signing takes the private key file "
                         "'kernelforge keygen' wrote (keys/NAME.pem in the config directory, "
                         "or the --out file)")
    if os.name == "posix" and mode & 0o077:
        raise TrustError(f"{p}: the signing key is readable by other users; fix: "
                         f"chmod 600 {shlex.quote(str(p))}")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        reason = str(err).split(". See https://")[0]  # cryptography adds a bug-report link
        raise TrustError(f"{p}: not an unencrypted PEM private key ({reason}); create one "
                         "with 'kernelforge keygen'") from err
    if not isinstance(private, _crypto().Ed25519PrivateKey):
        raise TrustError(f"{p}: not an ed25519 key; create one with 'kernelforge keygen'")
    return SigningKey(private, p)


def generate_key(path: str | os.PathLike[str], *, overwrite: bool = False) -> SigningKey:
    """Create a new ed25519 key pair and write the private key.

    The key is written to a hidden temporary file beside ``path`` and then put in
    place in one step, so ``path`` never holds half a key. Without ``overwrite`` that
    step creates ``path`` exclusively: of two runs writing the same file at once, one
    wins and the other gets the "already exists" error, never a key that the winner's
    file then replaces.

    Args:
        path: the private key file to create (mode 0600); its directory is created.
        overwrite: replace an existing file.

    Returns:
        The new :class:`SigningKey`; ``.public.text`` is what others add to their
        trust store.

    Raises:
        TrustError: ``path`` is a directory, or a folder above it is a file; ``path``
            exists (or appears while the key is written) and ``overwrite`` is false.
    """
    from cryptography.hazmat.primitives import serialization

    from kernelforge._durable import fsync_dir, replace_file, write_temp

    p = Path(os.path.expanduser(path))
    _check_key_path(p)
    if not overwrite and (p.exists() or p.is_symlink()):
        raise _key_exists(p)
    private = _crypto().Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    p.parent.mkdir(parents=True, exist_ok=True)
    if overwrite:
        replace_file(p, pem, chmod=0o600)
        return SigningKey(private, p)
    tmp = write_temp(p, pem, chmod=0o600)
    try:
        try:
            os.link(tmp, p)  # fails if p exists: no rename over another run's key
        except FileExistsError:
            raise _key_exists(p) from None
        except OSError as err:
            if err.errno not in _NO_LINKS:
                raise
            _create_exclusively(p, pem)  # a file system without hard links
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(p.parent)
    return SigningKey(private, p)


def _check_key_path(path: Path, fix: str = "give a path in a directory") -> None:
    """Refuse a private key path that names a directory, or that lies under a file (where
    creating its folder would fail with only "File exists" or "Not a directory").

    Args:
        path: the private key file.
        fix: what to do about a file in the way (the place is the caller's to name).

    Raises:
        TrustError: naming the directory, or the file in the way.
    """
    if path.is_dir():
        raise TrustError(f"{path} is a directory; give the key's file path, e.g. "
                         f"{shlex.quote(str(path / 'NAME.pem'))}")
    above = next((p for p in path.parents if p.exists() or p.is_symlink()), None)
    if above is not None and not above.is_dir():
        raise TrustError(f"{path}: {above} is a file, not a directory, so the key cannot "
                         f"be written there; fix: {fix}")


def _key_exists(path: Path) -> TrustError:
    """:func:`generate_key`'s refusal of an existing file, in its own words (``keygen``
    says its ``--force`` in a message of its own)."""
    return TrustError(f"{path}: a key already exists; pass overwrite=True to replace it, "
                      "or another path")


#: What ``os.link`` raises where the file system has no hard links (FAT, some network
#: and FUSE file systems).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP}


def _create_exclusively(path: Path, data: bytes) -> None:
    """Create ``path`` (mode 0600) only if it does not exist, and write ``data``: the
    exclusive creation :func:`generate_key` needs where no hard link can be made. A
    crash while writing leaves a partial file, which :func:`load_signing_key` refuses
    as no key."""
    from kernelforge._durable import write_new

    try:
        write_new(path, data, mode=0o600)
    except FileExistsError:
        raise _key_exists(path) from None
