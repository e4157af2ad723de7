"""The user's trust configuration: trusted keys, allowed repositories, the owner key.

Everything lives in the user config directory (``$KERNELFORGE_CONFIG``, else
``~/.config/kernelforge`` on Linux), read when needed, never at import:

* ``trust.json``: the trust store. Publisher keys (ed25519, see
  :mod:`kernelforge.signing`), each limited to repository patterns (``org/*``);
  sigstore identities (for Hugging Face's ``metadata.json.sigstore`` bundles); and an
  allow list of repositories loaded without a signature. Every change is written to a
  temporary file and swapped in with ``os.replace`` under a file lock, so a crash or
  a second process never sees half a store.
* ``owner.key``: 32 random bytes, readable by this user only (a key others can read
  or write is refused), created on the first publish. A local-hub publish stores an
  HMAC of what it published under this key (:func:`owner_mark`); a later load that can
  check the mark knows the revision was published by this user on this machine, which
  is what lets your own local kernels load without signing them.

Example:
    >>> store = load_store()                               # doctest: +SKIP
    >>> store.keys_for("kernels-community/relu")           # doctest: +SKIP
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
import os
import secrets
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelforge._parse import UPGRADE, json_loads, newer_format_number
from kernelforge._paths import env_path
from kernelforge._userdirs import user_dir
from kernelforge.errors import TrustError, one_line
from kernelforge.hub.base import validate_repo_id

__all__ = [
    "CONFIG_ENV",
    "KEY_NAME_MAX",
    "SigstoreIdentity",
    "TrustStore",
    "TrustedKey",
    "add_key",
    "add_sigstore_identity",
    "allow_repo",
    "check_owner_mark",
    "config_dir",
    "key_name_problem",
    "load_store",
    "owner_mark",
    "pattern_problem",
    "remove",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the config directory; read at call time.
CONFIG_ENV = "KERNELFORGE_CONFIG"
STORE_FILE = "trust.json"
OWNER_KEY_FILE = "owner.key"
#: The format of ``trust.json`` this version writes, and the only one it reads: its
#: fields are fixed, so a version that adds one raises it (older ones then refuse the
#: store, naming the upgrade, rather than pass over a field that narrows the trust).
STORE_FORMAT = 1
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


def config_dir() -> Path:
    """The user config directory: ``$KERNELFORGE_CONFIG`` or the platform's default (an
    empty or blank ``$KERNELFORGE_CONFIG`` counts as unset, as ``$KERNELFORGE_HUB`` does).

    Returns:
        The directory (not created here).
    """
    env = env_path(CONFIG_ENV)  # None: unset, empty or blank
    if env is not None:
        return env
    return user_dir("config", "the trust store and your keys", CONFIG_ENV, TrustError)


#: The longest key name the trust store takes: ``kernelforge trust list`` shows it on
#: one line beside the key id.
KEY_NAME_MAX = 100


def key_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a key in the trust store, if it cannot.

    ``kernelforge trust list`` prints a key's name as it is stored: a newline or an
    escape sequence in it would print as lines or colours of its own (a key entry that
    is not there, say), and a name of only spaces reads as none. ``trust add --name``
    and ``keygen --name`` refuse such a name as they read it, :func:`add_key` when it
    is called.

    Returns:
        The problem in words, naming the value and what a name may be.
    """
    if not name.strip() or len(name) > KEY_NAME_MAX or not name.isprintable():
        return (f"{name!r} is not a key label; use 1 to {KEY_NAME_MAX} printable "
                "characters, not only spaces (it is how 'kernelforge trust list' names the "
                "key)")
    return None


def _check_key_name(name: object) -> None:
    """:func:`add_key`'s ``name``: ``""`` (no name) or one :func:`key_name_problem` takes.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: a name the trust store cannot show.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    problem = key_name_problem(name) if name else None
    if problem:
        raise ValueError(f"name: {problem}; or pass '' for a key without a name")


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a repository pattern (``org/name``, ``org/*`` or ``*``), if
    it is not: ``kernelforge trust`` says it of its ``--repo`` and ``allow`` arguments,
    :func:`add_key`, :func:`add_sigstore_identity` and :func:`allow_repo` of theirs."""
    if pattern == "*":
        return None
    try:
        validate_repo_id(pattern[:-1] + "x" if pattern.endswith("/*") else pattern)
    except ValueError:
        return (f"{pattern!r} is not a repository pattern; expected 'org/name', 'org/*' or "
                "'*', made of letters, digits, '.', '_' and '-' (e.g. 'kernels-community/*')")
    return None


def _check_patterns(repos: tuple[str, ...], name: str = "repos") -> tuple[str, ...]:
    """``repos`` if each is a repository pattern (:func:`pattern_problem`).

    Raises:
        TypeError: one is not a string; ValueError: one is no pattern, each naming the
            argument ``name``.
    """
    for pattern in repos:
        if not isinstance(pattern, str):
            raise TypeError(f"{name}: {pattern!r} is not a repository pattern; expected a "
                            "string, 'org/name', 'org/*' or '*'")
        problem = pattern_problem(pattern)
        if problem:
            raise ValueError(f"{name}: {problem}")
    return repos


def _matches(repo_id: str, patterns: tuple[str, ...]) -> bool:
    # Repository ids compare without regard to case, as the hubs resolve them.
    return any(fnmatch.fnmatchcase(repo_id.lower(), p.lower()) for p in patterns)


@dataclass(frozen=True)
class TrustedKey:
    """A publisher key in the trust store.

    Attributes:
        key_id: the key id (16 hex digits).
        public_key: ``ed25519:<base64>``.
        name: a label for people.
        repos: repository patterns the key may sign for (``*``, ``org/*``, ``org/name``).
    """

    key_id: str
    public_key: str
    name: str
    repos: tuple[str, ...] = ("*",)

    def covers(self, repo_id: str) -> bool:
        """Whether this key may sign for ``repo_id`` (case aside)."""
        return _matches(repo_id, self.repos)

    def covers_only(self, repo_id: str) -> bool:
        """Whether ``repo_id`` is the one repository this key is trusted for (case
        aside): the scope under which a signature that names no repository (format 1)
        counts, since no signature the key made for another repository counts here.
        (Whoever can write this repository could still copy in a format-1 build the key
        signed for another: trusting the key for it accepts that.)"""
        return (len(self.repos) == 1 and "*" not in self.repos[0]
                and self.repos[0].lower() == repo_id.lower())


@dataclass(frozen=True)
class SigstoreIdentity:
    """A sigstore signer trusted for some repositories.

    Attributes:
        identity: the certificate identity, e.g. a GitHub workflow URI
            ``https://github.com/ORG/REPO/.github/workflows/build.yaml@refs/heads/main``.
        issuer: the OIDC issuer (GitHub Actions by default).
        repos: repository patterns this identity may sign for.
    """

    identity: str
    issuer: str
    repos: tuple[str, ...] = ("*",)

    def covers(self, repo_id: str) -> bool:
        """Whether this identity may sign for ``repo_id`` (case aside)."""
        return _matches(repo_id, self.repos)


@dataclass(frozen=True)
class TrustStore:
    """What this user trusts.

    Attributes:
        keys: trusted publisher keys.
        sigstore: trusted sigstore identities.
        allow: repositories (or ``org/*`` patterns) allowed without a signature.
        path: the file it was read from.
    """

    keys: tuple[TrustedKey, ...] = ()
    sigstore: tuple[SigstoreIdentity, ...] = ()
    allow: tuple[str, ...] = ()
    path: Path | None = field(default=None, compare=False)

    def key(self, key_id: str) -> TrustedKey | None:
        """The trusted key with this id, if any."""
        return next((k for k in self.keys if k.key_id == key_id), None)

    def identity(self, identity: str, issuer: str = GITHUB_ISSUER) -> SigstoreIdentity | None:
        """The trusted sigstore identity with this identity and issuer, if any."""
        return next((s for s in self.sigstore
                     if (s.identity, s.issuer) == (identity, issuer)), None)

    def identities_for(self, repo_id: str) -> list[SigstoreIdentity]:
        """The sigstore identities trusted for ``repo_id``."""
        return [s for s in self.sigstore if s.covers(repo_id)]

    def allows(self, repo_id: str) -> bool:
        """Whether ``repo_id`` is on the allow list (case aside)."""
        return _matches(repo_id, self.allow)

    def to_json(self) -> dict[str, Any]:
        """The JSON document stored in ``trust.json``."""
        return {
            "format": STORE_FORMAT,
            "keys": [{"key-id": k.key_id, "public-key": k.public_key, "name": k.name,
                      "repos": list(k.repos)} for k in self.keys],
            "sigstore": [{"identity": s.identity, "issuer": s.issuer, "repos": list(s.repos)}
                         for s in self.sigstore],
            "allow": list(self.allow),
        }


def _store_path(path: str | os.PathLike[str] | None) -> Path:
    return Path(os.path.expanduser(path)) if path is not None else config_dir() / STORE_FILE


def _parse_store(doc: Any, path: Path) -> TrustStore:
    def bad(problem: str) -> TrustError:
        return TrustError(f"{path}: {problem}; fix the file or remove it and re-add your "
                          "keys with 'kernelforge trust add'")

    def known(entry: str, item: dict[str, Any], names: tuple[str, ...]) -> None:
        # a misspelt field would be passed over: "repo" for "repos" trusts a key for
        # every repository, "allows" allows none
        from kernelforge.archs import closest

        for name in item:
            if name not in names:
                meant = closest(str(name), names)
                raise bad(f"{entry}: unknown field {name!r} ("
                          + (f"did you mean {meant!r}?" if meant else
                             f"expected {', '.join(map(repr, names))}") + ")")

    def entries(name: str) -> list[Any]:
        value = doc.get(name, [])
        if not isinstance(value, list):
            raise bad(f"{name!r} must be a list, got {value!r}")
        return value

    def patterns(entry: str, value: Any) -> tuple[str, ...]:
        # A string here would be read as a list of one-character patterns, "*" among them.
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise bad(f"{entry}: expected a list of repository patterns such as "
                      f'["org/*"], got {value!r}')
        for pattern in value:
            try:
                _check_patterns((pattern,))
            except ValueError as err:
                raise bad(f"{entry}: {pattern!r} is not a repository pattern (expected "
                          "'org/name', 'org/*' or '*'; 'kernelforge trust' accepts the "
                          "same)") from err
        return tuple(value)

    def text(entry: str, item: dict[str, Any], field: str, default: str | None = None) -> str:
        value = item[field] if field in item else default
        if field not in item and value is None:
            raise bad(f'{entry}: "{field}" is missing')
        if not isinstance(value, str):
            raise bad(f'{entry}: "{field}" must be a string, got {value!r}')
        return value

    def fields(entry: str, item: Any, required: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(item, dict):
            raise bad(f"{entry}: expected an object with {', '.join(map(repr, required))} "
                      f"and 'repos', got {item!r}")
        known(entry, item, (*required, "repos"))
        return item

    def scope(entry: str, item: dict[str, Any]) -> tuple[str, ...]:
        # Every kernelforge writes "repos"; a hand-written entry without it is not taken
        # to mean every repository, the broadest trust there is.
        if "repos" not in item:
            raise bad(f'{entry}: "repos" is missing; list the repositories it is trusted '
                      'for (\'org/*\', or \'*\' for every one)')
        if item["repos"] == []:  # as add_key refuses repos=()
            raise bad(f'{entry} "repos": an empty list trusts for nothing; list the '
                      'repositories (\'org/*\', or \'*\' for every one)')
        return patterns(f'{entry} "repos"', item["repos"])

    def trusted_key(i: int, item: Any) -> TrustedKey:
        from kernelforge.signing import PublicKey

        k = fields(f"keys[{i}]", item, ("key-id", "public-key", "name"))
        key_id = text(f"keys[{i}]", k, "key-id")
        # read, not yet checked: a line break in it would start a line of its own
        entry = f"keys[{i}] (key {one_line(key_id)})"
        repos = scope(entry, k)
        public = text(entry, k, "public-key")
        try:
            real = PublicKey.parse(public).key_id
        except TrustError as err:
            raise bad(f'{entry} "public-key": {err}') from None
        if key_id != real:  # signatures name the key by its id: this one would not verify
            raise bad(f'{entry} "key-id": the id of its "public-key" is {real}')
        return TrustedKey(key_id, public, text(entry, k, "name", ""), repos)

    def identity(i: int, item: Any) -> SigstoreIdentity:
        s = fields(f"sigstore[{i}]", item, ("identity", "issuer"))
        who = text(f"sigstore[{i}]", s, "identity")
        entry = f"sigstore[{i}] ({one_line(who)})"
        return SigstoreIdentity(who, text(entry, s, "issuer"), scope(entry, s))

    found = newer_format_number(doc, STORE_FORMAT, missing=None)
    if found is not None:
        raise TrustError(f"{path}: this trust store is of format {found}, written by a newer "
                         f"kernelforge (this version reads format {STORE_FORMAT}); {UPGRADE} "
                         "to use it; the file is left as it is")
    if not isinstance(doc, dict) or doc.get("format") != STORE_FORMAT:
        raise bad(f"not a trust store (expected a JSON object with \"format\": {STORE_FORMAT})")
    known("the store", doc, ("format", "keys", "sigstore", "allow"))
    keys = tuple(trusted_key(i, k) for i, k in enumerate(entries("keys")))
    sig = tuple(identity(i, s) for i, s in enumerate(entries("sigstore")))
    allow = patterns('"allow"', doc.get("allow", []))
    ids = [k.key_id for k in keys]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        # Only the first entry would count: its scope, not the one the user meant.
        raise bad(f"key {twice[0]} has {ids.count(twice[0])} entries; merge their "
                  "\"repos\" into one entry")
    return TrustStore(keys, sig, allow, path)


def load_store(path: str | os.PathLike[str] | None = None) -> TrustStore:
    """Read the trust store.

    Args:
        path: the store file; ``None`` for ``trust.json`` in :func:`config_dir`.

    Returns:
        The :class:`TrustStore`; an empty one when the file does not exist.

    Raises:
        TrustError: the file exists but is not a valid store (names the file).
    """
    p = _store_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return TrustStore(path=p)
    except OSError as err:
        raise TrustError(f"{p}: cannot read the trust store ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise TrustError(f"{p}: not a UTF-8 text file ({err}); fix or remove the file"
                         ) from err
    try:
        doc = json_loads(text)
    except ValueError as err:
        raise TrustError(f"{p}: not valid JSON ({err}); fix or remove the file") from err
    return _parse_store(doc, p)


def _update(path: str | os.PathLike[str] | None, change: Any) -> TrustStore:
    """Read, change and atomically rewrite the store under its lock."""
    import filelock

    from kernelforge._durable import remove_temp_leftovers, replace_file

    p = _store_path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(p) + ".lock", timeout=60):
            # every change of the store holds this lock, so the temporaries there are
            # those of changes killed before their rename
            remove_temp_leftovers(p, "change of the trust store")
            new = change(load_store(p))
            data = json.dumps(new.to_json(), indent=1) + "\n"
            replace_file(p, data.encode("utf-8"), mode=0o644)
    except TimeoutError:
        raise  # the lock held by another process too long: not the file system's refusal
    except OSError as err:
        raise config_write_error(err, p, "the trust store", "it is unchanged") from err
    return replace(new, path=p)


def config_write_error(err: OSError, path: Path, what: str, outcome: str) -> TrustError:
    """The error for ``err``, met writing ``what`` at ``path`` (the trust store, a key):
    the system's message names a temporary file, a folder or, for a full disk, nothing,
    so this one names the file, says what became of it and gives the fix.

    Args:
        err: what the file system said.
        path: the file being written.
        what: that file, in words (``"the trust store"``).
        outcome: what was left (``"it is unchanged"``).
    """
    from kernelforge._durable import DISK_FULL, nearest_folder

    why = err.strerror or str(err)
    if err.filename is not None and os.fsdecode(err.filename) != str(path):
        why += f": {os.fsdecode(err.filename)}"
    if err.errno in DISK_FULL:
        fix = "free space on its disk"
    else:  # the folder that exists: the one to make writable, where the rest is made
        fix = f"make {nearest_folder(path.parent)} writable"
    if _in_config_dir(path):  # the default place, which the variable moves
        fix += f", or set {CONFIG_ENV} to a directory you can write"
    return TrustError(f"{path}: cannot write {what} ({why}); {outcome}; fix: {fix}")


def _in_config_dir(path: Path) -> bool:
    """Whether ``path`` lies in the configuration directory; ``False`` where there is
    none (no home directory), so that an error about ``path`` is not replaced by that one."""
    try:
        return config_dir() in path.parents
    except TrustError:
        return False


def _merge_patterns(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    """``old`` plus the patterns of ``new`` it lacks; order is kept. Patterns compare
    without regard to case, as they are applied: the first spelling stays. A pattern
    another one covers (``org/x`` under ``org/*``, everything under ``*``) stays too: each
    is an entry the user added, and removing the broader one later must not take it
    along."""
    merged: list[str] = []
    for p in (*old, *new):
        if p.lower() not in (q.lower() for q in merged):
            merged.append(p)
    return tuple(merged)


def _covers(broad: str, pattern: str) -> bool:
    """Whether the pattern ``broad`` matches every repository ``pattern`` matches, and
    is not the same pattern (case aside): ``*`` covers all others, ``org/*`` covers
    ``org/name``."""
    if broad.lower() == pattern.lower():
        return False
    return broad == "*" or (broad.endswith("/*")
                            and pattern.lower().startswith(broad[:-1].lower()))


def _covering(pattern: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The entries of ``patterns`` that cover ``pattern`` (:func:`_covers`)."""
    return tuple(p for p in patterns if _covers(p, pattern))


def _covered(pattern: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The entries of ``patterns`` that ``pattern`` covers (:func:`_covers`)."""
    return tuple(p for p in patterns if _covers(pattern, p))


def _wanted(repos: Iterable[str] | None) -> tuple[str, ...] | None:
    """The ``repos`` of :func:`add_key` and :func:`add_sigstore_identity`, checked.

    Raises:
        TypeError: one string (read one character at a time, it was refused as ``'m'``
            for ``"me/*"``), or a pattern that is not a string.
        ValueError: a malformed pattern.
    """
    if repos is None:
        return None
    if isinstance(repos, (str, bytes)):
        raise TypeError(f"repos: expected a tuple of repository patterns, got the string "
                        f"{repos!r}; fix: pass ({repos!r},)")
    return _check_patterns(tuple(repos))


def _scope(old: tuple[str, ...] | None, wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    """The patterns an entry is trusted for once ``wanted`` is added: the rule shared by
    keys and sigstore identities, so adding one twice never narrows or silently widens it.

    Args:
        old: the stored entry's patterns; ``None`` for a new entry.
        wanted: the checked patterns asked for; ``None`` when none were given.

    Returns:
        ``wanted`` (``("*",)`` when ``None``) for a new entry; for a stored one its own
        patterns when ``wanted`` is ``None``, else both merged (:func:`_merge_patterns`).

    Raises:
        ValueError: ``wanted`` is empty (it would trust for nothing, or read as ``*``).
    """
    if wanted is not None and not wanted:
        raise ValueError("repos: an empty list trusts for nothing; pass patterns "
                         "('org/*', 'org/name' or '*'), or None to keep the scope (a new "
                         "entry: every repository)")
    if old is None:
        return wanted or ("*",)
    return old if wanted is None else _merge_patterns(old, wanted)


def add_key(
    public_key: str,
    *,
    name: str | None = None,
    repos: tuple[str, ...] | None = None,
    path: str | os.PathLike[str] | None = None,
    replaces: str | None = None,
) -> TrustedKey:
    """Trust a publisher key, or widen the trust in a key already in the store.

    A key already in the store keeps its entry, changed only as asked: ``name`` renames
    it, and ``repos`` are *added* to the patterns it is trusted for (never replacing
    them, so adding a key twice cannot narrow or silently widen what it may sign; a
    pattern that a broader one covers is kept as well, so the entry lists every pattern
    given).
    Leaving ``repos`` out keeps its scope; widening it to every repository takes an
    explicit ``repos=("*",)``. To narrow a key's scope, :func:`remove` it and add it
    again.

    Args:
        public_key: ``ed25519:<base64>`` as printed by ``kernelforge keygen``.
        name: a label for people, up to :data:`KEY_NAME_MAX` printable characters
            (:func:`key_name_problem`); ``None`` keeps the stored one (``""`` for a new
            key).
        repos: the repository patterns it may sign for (``("*",)``: any); ``None`` keeps
            a stored key's patterns and means ``("*",)`` for a new key.
        path: the store file; ``None`` for the default.
        replaces: the id of a key this one replaces; its entry is removed in the same
            atomic update (a rotated key stops being trusted).

    Returns:
        The stored :class:`TrustedKey` (compare it with ``load_store().key(key_id)``
        read before the call to see what changed).

    Raises:
        TrustError: the key cannot be read.
        ValueError: a malformed pattern, an empty ``repos``, or a ``name`` that is not
            one (a newline or other control character in it, more than
            :data:`KEY_NAME_MAX` characters, only spaces).
        TypeError: a ``name`` that is not a string, or ``repos`` given as one string
            (``"org/*"`` for ``("org/*",)``) or holding one that is not a string.
    """
    from kernelforge.signing import PublicKey

    if name is not None:
        _check_key_name(name)
    key = PublicKey.parse(public_key)
    wanted = _wanted(repos)
    stored: list[TrustedKey] = []

    def change(s: TrustStore) -> TrustStore:
        old = s.key(key.key_id)
        label = old.name if old is not None and name is None else (name or "")
        entry = TrustedKey(key.key_id, key.text, label,
                           _scope(None if old is None else old.repos, wanted))
        stored.append(entry)
        # A stored entry keeps its place, so 'kernelforge trust list' does not reorder.
        keys = tuple(entry if k.key_id == key.key_id else k for k in s.keys
                     if k.key_id != replaces or k.key_id == key.key_id)
        return replace(s, keys=keys if old is not None else keys + (entry,))

    _update(path, change)
    return stored[-1]


def _check_identity(identity: str, issuer: str) -> str:
    """``identity`` without surrounding space, if it and ``issuer`` can name a sigstore
    signer (``kernelforge trust add-sigstore`` checks them as it reads its arguments).

    Raises:
        TypeError: ``identity`` or ``issuer`` is not a string.
        TrustError: an empty identity, an issuer that is not an https:// URL, or an
            identity that is neither a URI nor an e-mail address.
    """
    for name, value in (("identity", identity), ("issuer", issuer)):
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected a string, got {type(value).__name__}")
    if not identity.strip() or not issuer.startswith("https://"):
        raise TrustError(f"identity {identity!r} / issuer {issuer!r}: expected a non-empty "
                         "identity and an https:// issuer URL")
    ident = identity.strip()
    # A certificate identity is a URI (a CI workflow) or an e-mail address (a person).
    if not (("://" in ident or "@" in ident) and not any(c.isspace() for c in ident)):
        raise TrustError(f"identity {identity!r}: expected a sigstore certificate identity, "
                         "a workflow URI such as https://github.com/ORG/REPO/.github/"
                         "workflows/build.yaml@refs/heads/main, or an e-mail address")
    return ident


def add_sigstore_identity(
    identity: str,
    *,
    issuer: str = GITHUB_ISSUER,
    repos: tuple[str, ...] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> SigstoreIdentity:
    """Trust a sigstore signer identity (for ``metadata.json.sigstore`` bundles), or
    widen the trust in one already in the store.

    The same rule as :func:`add_key`: an identity already trusted (same identity and
    issuer) keeps its entry, and ``repos`` are *added* to its patterns, never replacing
    them. Leaving ``repos`` out keeps its scope; widening it to every repository takes
    an explicit ``repos=("*",)``. To narrow it, :func:`remove` it and add it again.

    Args:
        identity: the certificate identity (a workflow URI for GitHub Actions).
        issuer: the OIDC issuer URL.
        repos: the repository patterns it may sign for (``("*",)``: any); ``None`` keeps
            a stored identity's patterns and means ``("*",)`` for a new one.
        path: the store file; ``None`` for the default.

    Returns:
        The stored :class:`SigstoreIdentity` (compare it with
        ``load_store().identity(identity, issuer)`` read before the call to see what
        changed).

    Raises:
        TrustError: an empty identity or an issuer that is not an https:// URL.
        ValueError: a malformed pattern, or an empty ``repos``.
        TypeError: ``identity`` or ``issuer`` is not a string, or ``repos`` is given as
            one string (``"org/*"`` for ``("org/*",)``) or holds one that is not a
            string.
    """
    ident = _check_identity(identity, issuer)
    wanted = _wanted(repos)
    stored: list[SigstoreIdentity] = []

    def change(s: TrustStore) -> TrustStore:
        old = s.identity(ident, issuer)
        entry = SigstoreIdentity(ident, issuer, _scope(None if old is None else old.repos,
                                                       wanted))
        stored.append(entry)
        # A stored entry keeps its place, so 'kernelforge trust list' does not reorder.
        sig = tuple(entry if (i.identity, i.issuer) == (ident, issuer) else i
                    for i in s.sigstore)
        return replace(s, sigstore=sig if old is not None else sig + (entry,))

    _update(path, change)
    return stored[-1]


def allow_repo(pattern: str, *, path: str | os.PathLike[str] | None = None) -> bool:
    """Allow a repository (or ``org/*``, or ``*``) to load without a trusted signature.

    The entries already on the allow list stay, those ``pattern`` covers included
    (``org/x`` under ``org/*``), so removing ``pattern`` later leaves them allowed; and a
    pattern that a broader entry already covers is added all the same, for the same
    reason.

    Args:
        pattern: ``org/name``, ``org/*`` or ``*`` (every repository: the signature
            requirement is then off everywhere).
        path: the store file; ``None`` for the default.

    Returns:
        ``False`` when ``pattern`` was on the allow list already (case aside), so
        nothing changed.
    """
    _check_patterns((pattern,), "pattern")
    before: list[tuple[str, ...]] = []

    def change(s: TrustStore) -> TrustStore:
        before.append(s.allow)
        return replace(s, allow=_merge_patterns(s.allow, (pattern,)))

    return _update(path, change).allow != before[0]


#: The fewest hex digits of a key id that ``remove`` takes as the start of one.
KEY_PREFIX_MIN = 8


def _key_label(k: TrustedKey) -> str:
    """``<key id> (<name>)``, or the id alone."""
    return f"{k.key_id} ({k.name})" if k.name else k.key_id


def _find_keys(s: TrustStore, what: str, where: Path) -> list[TrustedKey]:
    """The keys ``what`` names other than by their full id: by public key
    (``ed25519:...``), by name, or by the start of the id (at least
    :data:`KEY_PREFIX_MIN` hex digits).

    Raises:
        TrustError: ``what`` names several keys (listing their ids), or is the start of
            a key id that is too short to be taken as one.
    """
    if what.startswith("ed25519:"):
        from kernelforge.signing import PublicKey

        key_id = PublicKey.parse(what).key_id  # a malformed key is refused as such
        return [k for k in s.keys if k.key_id == key_id]
    named = [k for k in s.keys if k.name and k.name == what]
    low = what.lower()
    started = ([k for k in s.keys if k.key_id.startswith(low)]
               if low and all(c in "0123456789abcdef" for c in low) else [])
    if started and len(low) < KEY_PREFIX_MIN and not named:
        raise TrustError(
            f"{what!r} is the start of key id{'s' if len(started) > 1 else ''} "
            f"{', '.join(k.key_id for k in started)} in the trust store {where}, but too "
            f"short to pick a key by: give at least {KEY_PREFIX_MIN} hex digits, or the "
            "whole key id")
    found = named + [k for k in started if len(low) >= KEY_PREFIX_MIN and k not in named]
    if len(found) > 1:
        how = ("is the name of" if len(named) == len(found) else "is the start of the id of"
               if not named else "names")
        raise TrustError(
            f"{what!r} {how} {len(found)} keys in the trust store {where}: "
            f"{', '.join(_key_label(k) for k in found)}; pass the key id of the one "
            "to remove")
    return found


def remove(what: str, *, path: str | os.PathLike[str] | None = None) -> str:
    """Remove a key, a sigstore identity or an allowed repository.

    A key is named by its id, and when nothing in the store is that text exactly, by
    its public key (``ed25519:...``), by its name (when one key has it) or by the start
    of its id (at least :data:`KEY_PREFIX_MIN` hex digits, when one key's id starts so).

    Args:
        what: a key id (or its start), key name or public key, a sigstore identity
            (removed under every issuer) or an allow-list entry (case aside).
        path: the store file; ``None`` for the default.

    Returns:
        What was removed, in words.

    Raises:
        TrustError: nothing in the store matches ``what``, or it names several keys
            (the message lists their ids).
    """
    removed: list[str] = []
    where = _store_path(path)

    def change(s: TrustStore) -> TrustStore:
        gone_keys = [k for k in s.keys if k.key_id == what]
        gone_sig = [i for i in s.sigstore if i.identity == what]
        # Allow-list entries match without regard to case, as they are applied.
        gone = [a for a in s.allow if a.lower() == what.lower()]
        if not (gone_keys or gone_sig or gone):
            gone_keys = _find_keys(s, what, where)
        removed.extend(f"key {_key_label(k)}" for k in gone_keys)
        removed.extend([f"sigstore identity {what}"] * len(gone_sig))
        removed.extend(f"allowed repository {a}" for a in gone)
        if not removed:
            raise TrustError(
                f"{what!r} is not in the trust store {where}: it is no key id (or its "
                f"first {KEY_PREFIX_MIN} or more hex digits), key name, public key, "
                "sigstore identity or allowed repository there; 'kernelforge trust "
                "list' shows what is")
        return replace(s, keys=tuple(k for k in s.keys if k not in gone_keys),
                       sigstore=tuple(i for i in s.sigstore if i not in gone_sig),
                       allow=tuple(a for a in s.allow if a not in gone))

    _update(path, change)
    return ", ".join(removed)


# --- the owner key ---------------------------------------------------------------------


def _owner_key(create: bool) -> bytes | None:
    """This user's owner key; created (atomically, never clobbered) when asked to."""
    path = config_dir() / OWNER_KEY_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        if not create:
            return None
        from kernelforge._durable import write_temp

        path.parent.mkdir(parents=True, exist_ok=True)
        # removed again if the write fails (a full disk), so no key-like file is left
        tmp = write_temp(path, (secrets.token_hex(32) + "\n").encode("ascii"), mode=0o600)
        try:
            os.link(tmp, path)  # never replaces: a key another process made first wins
        except FileExistsError:
            logger.debug("%s was created by another process first; using it", path)
        finally:
            tmp.unlink()
        return _owner_key(create=False)
    except OSError as err:
        raise TrustError(f"{path}: cannot read the owner key ({err.strerror})") from err
    except UnicodeDecodeError:
        text = ""  # not the hex digits written there: corrupt, as below
    if os.name == "posix" and path.stat().st_mode & 0o077:
        # whoever reads it can mark any revision in a local hub as published by you
        raise TrustError(f"{path}: the owner key is readable or writable by other users, "
                         f"who could then make revisions pass as published by you; fix: "
                         f"chmod 600 {shlex.quote(str(path))} (on a file system without "
                         f"Unix permissions, set {CONFIG_ENV} to a directory on one that has "
                         "them)")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise TrustError(f"{path}: corrupt owner key; delete it (revisions you published "
                         "before will then need a signature or an allow-list entry)")
    return key


def _mark_message(repo_id: str, commit: str, files: Mapping[str, str]) -> bytes:
    body = json.dumps({"repo-id": repo_id, "commit": commit, "files": dict(sorted(files.items()))},
                      sort_keys=True, separators=(",", ":"))
    return b"kernelforge-owner-mark-v1\0" + body.encode("utf-8")


def owner_mark(repo_id: str, commit: str, files: Mapping[str, str]) -> dict[str, Any] | None:
    """The mark a local-hub publish stores to prove later that this user published it.

    Args:
        repo_id: the repository.
        commit: the new commit id.
        files: ``{relpath: base64 sha256}`` of every file of the revision.

    Returns:
        ``{"key-id", "mac", "time"}``, or ``None`` when the owner key cannot be created
        (a warning says why; the revision then needs a signature to load).

    Raises:
        TrustError: the owner key exists but cannot be used (others may read it, it
            cannot be read, it is corrupt): a revision published without the mark would
            be refused to its own publisher, so the publish stops with the fix instead.
    """
    try:
        key = _owner_key(create=True)
    except OSError as err:  # creating it: a folder not writable, a full disk
        logger.warning("kernelforge: %s", config_write_error(
            err, config_dir() / OWNER_KEY_FILE, "the owner key",
            "none was made, so this revision will load only if signed or allowed"))
        return None
    if key is None:  # pragma: no cover - create=True returns a key or raises
        return None
    mac = hmac.new(key, _mark_message(repo_id, commit, files), hashlib.sha256).hexdigest()
    return {"key-id": hashlib.sha256(key).hexdigest()[:16], "mac": mac, "time": time.time()}


def check_owner_mark(
    mark: object, repo_id: str, commit: str, files: Mapping[str, str]
) -> bool:
    """Whether ``mark`` proves this user published ``files`` as ``commit`` of ``repo_id``.

    Args:
        mark: the ``owner`` entry of a local-hub commit record (anything, or ``None``).
        repo_id: the repository.
        commit: the commit id.
        files: the recorded ``{relpath: base64 sha256}``.

    Returns:
        ``True`` only if this user's owner key exists and the MAC matches.
    """
    # compare_digest takes ASCII strings only (a MAC is hex): anything else is no mark
    if not isinstance(mark, dict) or not isinstance(mark.get("mac"), str) \
            or not mark["mac"].isascii():
        return False
    key = _owner_key(create=False)
    if key is None:
        return False
    expected = hmac.new(key, _mark_message(repo_id, commit, files), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, mark["mac"])
