"""The trust policy: may this build variant be imported into this process?

Checked on every load, online and offline alike, before any file of the variant is
imported (and, for a remote hub, before the variant is downloaded). In order:

1. **Published by you.** A local-hub revision whose owner mark this user's owner key
   verifies (:func:`kernelforge.trust.check_owner_mark`) loads.
2. **Signed by a trusted key.** ``build/<variant>.sig`` names a key in the trust store
   that covers the repository, and the signature over the repository's id and
   ``metadata.json`` verifies (a build signed for another repository and copied here
   does not count). Signatures of the older format 1 name no repository, so they count
   only from a key trusted for this one repository: from a key trusted for several,
   such a signature may have been made for another of them. A
   signature by a trusted key that does *not* verify is refused outright, whatever else
   allows the repository: it means ``metadata.json`` changed after signing (a
   :class:`~kernelforge.errors.SignatureMismatchError`; a load fetches the copies it took
   from the download cache again once first, as they may have been damaged on their way).
   So is a signature file that cannot be read as one (an
   :class:`~kernelforge.errors.UnreadableSignatureError`, after the same one fetch of a
   kept copy): it is never taken for an unsigned build.
3. **Signed through sigstore.** ``build/<variant>/metadata.json.sigstore`` (Hugging
   Face's bundles) verifies against a sigstore identity the trust store holds for the
   repository. Verification uses the ``sigstore`` package with its embedded trust root,
   offline, and is only attempted when such an identity is configured. A bundle that
   does not verify, or cannot be read, is a note, and the variant is judged as one
   without it; a load that would refuse the variant without it fetches again, once, a
   kept copy that cannot be read (:attr:`TrustDecision.unreadable_bundle`).
4. **Pinned or allowed.** The exact bytes are pinned by a lock file, the caller passed
   ``trust_remote_code=True`` or a list holding the repository, or the trust store's
   allow list covers it.

Repository ids compare without regard to case throughout (key scopes, the allow list,
``trust_remote_code``, the repository a signature names), as the hubs resolve them.
Anything else is refused with :class:`~kernelforge.errors.TrustError` saying what was
found and how to allow it. Builds loaded by path (``get_local_kernel``,
``LOCAL_KERNELS``) are the caller's explicit choice and do not go through this policy.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kernelforge.errors import SignatureMismatchError, TrustError, UnreadableSignatureError
from kernelforge.hub.base import sigstore_path, validate_repo_id
from kernelforge.trust import SigstoreIdentity, TrustStore, load_store

__all__ = ["NOT_ALLOWED", "NO_SIGNATURE", "REPUBLISH", "TrustDecision", "TrustRequest",
           "allow_key", "evaluate", "key_fix", "require"]

logger = logging.getLogger(__name__)

AllowArg = bool | Sequence[str]

#: The reason of a refusal by the policy: one that trusting, allowing or pinning the
#: kernel lifts (the other refusals, of a tampered signature say, stand whatever is allowed).
NOT_ALLOWED = "not published by you, not signed by a trusted key and not allowed"
#: The note of a refusal of a variant that carries no signature at all.
NO_SIGNATURE = "no signature (build/<variant>.sig)"
#: The notes of a sigstore bundle that a sigstore identity trusted for the repository
#: would vouch for: none is trusted for it, or those trusted did not sign it.
NO_SIGSTORE_IDENTITY = "a sigstore bundle is present, but no sigstore identity is trusted"
SIGSTORE_NOT_VERIFIED = "the sigstore bundle does not verify for a trusted identity"
#: The note of a sigstore bundle that a trusted identity would check, but sigstore is
#: not installed to check it.
NO_SIGSTORE_PACKAGE = ("a sigstore bundle is present, but the 'sigstore' package is not "
                       "installed")
#: The fix for a signature by a trusted key that fails as the hub serves it (it does not
#: verify, or cannot be read): no trust or allowance lifts that refusal, and only the
#: publisher can make a signature that passes. A load that took the copies from the
#: download cache says the cache's fix first instead (:mod:`kernelforge.locate`).
REPUBLISH = "its publisher must publish the kernel again with --sign"


def key_fix(refusal: str, pattern: str) -> str:
    """The way out of a refusal (its text) through what the variant is signed with, so
    that the command offered is one that can vouch for it: for a ``.sig``, trusting its
    key (``kernelforge trust add``); for a sigstore bundle, trusting its sigstore
    identity (``kernelforge trust add-sigstore``), or installing sigstore where an
    identity is trusted already; for both, either. A variant signed with neither has
    no key to trust until its publisher signs it."""
    from kernelforge.signing import UPGRADE_TO_CHECK

    trust = f"kernelforge trust add KEY --repo '{pattern}'"
    bundle = _bundle_fix(refusal, pattern)
    if UPGRADE_TO_CHECK in refusal:  # its signature is one this version cannot check
        key: str | None = f"{UPGRADE_TO_CHECK} against a key you trust ({trust})"
    elif NO_SIGNATURE in refusal:
        key = None
    else:
        key = f"trust its publisher's key ({trust})"
    if key is None and bundle is None:
        return (f"have its publisher sign it (kernelforge publish --sign) and trust that "
                f"key ({trust})")
    return " or ".join(way for way in (key, bundle) if way is not None)


def _bundle_fix(refusal: str, pattern: str) -> str | None:
    """The way out of a refusal (its text) through the variant's sigstore bundle, where
    one would vouch for it (``None``: there is none, or it cannot be read, which no
    trust lifts)."""
    if NO_SIGSTORE_IDENTITY in refusal or SIGSTORE_NOT_VERIFIED in refusal:
        return (f"trust the sigstore identity that signed it (kernelforge trust "
                f"add-sigstore IDENTITY --repo '{pattern}')")
    if NO_SIGSTORE_PACKAGE in refusal:
        return ("install sigstore (pip install sigstore) to check its sigstore bundle "
                "against the sigstore identity you trust")
    return None


def allow_key(allow: AllowArg) -> bool | tuple[str, ...]:
    """A hashable form of a ``trust_remote_code`` argument (for in-process caches).

    Raises:
        TypeError: ``allow`` is neither a bool nor a sequence of repository ids.
        ValueError: an entry of the list is not a repository id ``org/name`` (a pattern
            such as ``org/*`` included: patterns belong in the trust store).
    """
    if isinstance(allow, bool):
        return allow
    if isinstance(allow, (str, bytes)) or not isinstance(allow, Sequence):
        raise TypeError(
            "trust_remote_code: expected True/False or a list of repository ids, got "
            f"{allow!r}"
        )
    for entry in allow:
        if isinstance(entry, str) and "*" in entry:
            raise ValueError(
                f"trust_remote_code: {entry!r} is a pattern, but the list takes repository "
                "ids ('org/name'), each allowed as written; to allow every repository a "
                f"pattern matches, add it to your trust store: kernelforge trust allow "
                f"'{entry}' (quoted, so that the shell leaves the '*' alone)"
            )
        try:
            validate_repo_id(entry)
        except ValueError as err:
            raise ValueError(f"trust_remote_code: {err}") from err
    return tuple(sorted(allow))


@dataclass(frozen=True)
class TrustRequest:
    """What is known about a variant when deciding whether to trust it.

    Attributes:
        repo_id: the repository it comes from.
        variant: the variant name.
        metadata: the exact bytes of its ``metadata.json``.
        signature: the bytes of ``build/<variant>.sig``, if there is one.
        sigstore_bundle: the bytes of ``metadata.json.sigstore``, if there is one.
        owned: a local-hub revision whose owner mark verified.
        pinned: the lock file that pins these exact bytes, if any.
        where: the hub, for messages.
    """

    repo_id: str
    variant: str
    metadata: bytes
    signature: bytes | None = None
    sigstore_bundle: bytes | None = None
    owned: bool = False
    pinned: str | None = None
    where: str = ""


@dataclass(frozen=True)
class TrustDecision:
    """The outcome of :func:`evaluate`.

    Attributes:
        allowed: whether the variant may be imported.
        reason: why, in words (``signed by key 3f2a... (alice)``).
        signer: the key id or sigstore identity that signed it, if one verified.
        notes: what else was found (an untrusted signer, a bundle that did not verify).
        unreadable_bundle: the variant's sigstore bundle, which a sigstore identity
            trusted for the repository would have vouched through, is not one sigstore
            reads: a copy the download cache kept may have been damaged, and a load
            that this decision refuses fetches it again (:mod:`kernelforge.locate`).
    """

    allowed: bool
    reason: str
    signer: str | None = None
    notes: tuple[str, ...] = ()
    unreadable_bundle: bool = False

    def __str__(self) -> str:
        verdict = "allowed" if self.allowed else "refused"
        if self.reason.startswith(f"{verdict} "):  # "allowed by the trust store (...)"
            head = f"trust: {self.reason}"
        else:
            head = f"trust: {verdict}, {self.reason}"
        return "; ".join([head, *self.notes])


def _check_key_signature(
    req: TrustRequest, store: TrustStore, notes: list[str]
) -> TrustDecision | None:
    from kernelforge.hub.base import signature_path
    from kernelforge.signing import (
        FORMAT_1,
        UPGRADE_TO_CHECK,
        PublicKey,
        newer_format,
        parse_signature,
    )

    if req.signature is None:
        notes.append(NO_SIGNATURE)
        return None
    newer = newer_format(req.signature)
    if newer is not None:  # no means of trust here, but no tampering either
        notes.append(f"signed in format {newer}, which only a newer kernelforge reads; "
                     f"{UPGRADE_TO_CHECK}")
        return None
    where = f"{req.repo_id}: {signature_path(req.variant)}"
    try:
        sig = parse_signature(req.signature, where)
    except TrustError as err:  # typed, so that a load can fetch a damaged kept copy again
        # what was expected helps its publisher, not the user of a damaged kept copy
        raise UnreadableSignatureError(
            f"{err}; refusing to load it, even where the repository is allowed (a signature "
            f"that cannot be read is never taken for an unsigned build); fix: {REPUBLISH}",
            req.variant, problem=f"{where}: not a valid signature file") from err
    key = store.key(sig.key_id)
    if key is None:
        notes.append(f"signed by key {sig.key_id}, which is not in the trust store")
        return None
    if not PublicKey.parse(key.public_key).verify(sig.signature, req.variant, req.metadata,
                                                  sig.repo_id):
        problem = (f"{req.repo_id}: the signature {signature_path(req.variant)} by trusted "
                   f"key {sig.key_id} ({key.name or 'unnamed'}) does not verify: "
                   f"build/{req.variant}/metadata.json, or the signature file itself, was "
                   "changed after it was signed")
        raise SignatureMismatchError(
            f"{problem}; refusing to load it, even where the repository is allowed; fix: "
            f"{REPUBLISH}", req.variant, problem=problem)
    # Repository ids compare without regard to case, as the hubs resolve them.
    if sig.repo_id is not None and sig.repo_id.lower() != req.repo_id.lower():
        notes.append(f"signed by trusted key {sig.key_id} for {sig.repo_id}, not for "
                     f"{req.repo_id}: a build copied from another repository (or the "
                     "repository was renamed: publish it again with --sign)")
        return None
    if not key.covers(req.repo_id):
        notes.append(f"signed by trusted key {sig.key_id}, but that key is trusted only "
                     f"for {', '.join(key.repos)}")
        return None
    if sig.repo_id is None and not key.covers_only(req.repo_id):
        notes.append(
            f"signed by trusted key {sig.key_id} in the older signature format "
            f"({FORMAT_1}), which names no repository; the key is trusted for "
            f"{', '.join(key.repos)}, so the signature may have been made for another of "
            "those repositories and copied here. Its publisher binds it to this "
            "repository by publishing again with --sign; as it is, it counts only from a "
            f"key trusted for {req.repo_id} alone ('kernelforge trust remove "
            f"{sig.key_id}', then 'kernelforge trust add KEY --repo {req.repo_id}')"
        )
        return None
    label = f" ({key.name})" if key.name else ""
    return TrustDecision(True, f"signed by trusted key {sig.key_id}{label}", sig.key_id,
                         tuple(notes))


def _check_sigstore(
    req: TrustRequest, identities: list[SigstoreIdentity], notes: list[str]
) -> tuple[TrustDecision | None, bool]:
    """The decision a sigstore bundle earns (``None``: none; what was found is noted),
    and whether the bundle was one sigstore cannot read where a trusted identity would
    have checked it (so that a load can fetch a damaged kept copy again)."""
    if req.sigstore_bundle is None:
        return None, False
    if not identities:
        notes.append(f"{NO_SIGSTORE_IDENTITY} for {req.repo_id} ('kernelforge trust "
                     "add-sigstore')")
        return None, False
    try:
        from sigstore.errors import Error as SigstoreError
        from sigstore.models import Bundle, InvalidBundle
        from sigstore.verify import Verifier, policy
    except ImportError:
        notes.append(f"{NO_SIGSTORE_PACKAGE} (pip install sigstore)")
        return None, False
    try:
        bundle = Bundle.from_json(req.sigstore_bundle)
    except (InvalidBundle, ValueError) as err:
        notes.append(f"{sigstore_path(req.variant)} is not a valid bundle: {err}")
        return None, True
    try:
        verifier = Verifier.production(offline=True)
    except SigstoreError as err:
        notes.append(f"cannot load sigstore's trust root: {err}")
        return None, False
    failures = []
    for ident in identities:
        check = policy.AllOf([
            policy.AnyOf([policy.OIDCIssuer(ident.issuer), policy.OIDCIssuerV2(ident.issuer)]),
            policy.AnyOf([policy.Identity(identity=ident.identity),
                          policy.OIDCBuildSignerURI(ident.identity)]),
        ])
        try:
            verifier.verify_artifact(req.metadata, bundle, check)
        except SigstoreError as err:
            failures.append(f"{ident.identity}: {err}")
            continue
        return TrustDecision(True, f"sigstore signature by {ident.identity}", ident.identity,
                             tuple(notes)), False
    notes.append(f"{SIGSTORE_NOT_VERIFIED} (" + "; ".join(failures) + ")")
    return None, False


def evaluate(
    req: TrustRequest, *, allow: AllowArg = False, store: TrustStore | None = None
) -> TrustDecision:
    """Decide whether a variant may be imported (the policy in the module docstring).

    Args:
        req: what is known about the variant.
        allow: ``trust_remote_code``: ``True`` allows anything unsigned, a list of
            repository ids allows those.
        store: the trust store; ``None`` reads the user's.

    Returns:
        The :class:`TrustDecision` (allowed or not, and why).

    Raises:
        TrustError: a signature by a trusted key does not verify (tampering, or damage
            on the way: a :class:`~kernelforge.errors.SignatureMismatchError`), the
            signature file is malformed (whoever signed it: an
            :class:`~kernelforge.errors.UnreadableSignatureError`), or the trust store is.
    """
    if req.owned:
        return TrustDecision(True, "published to this local hub by you")
    store = store if store is not None else load_store()
    notes: list[str] = []
    decision = _check_key_signature(req, store, notes)
    if decision is not None:
        return decision
    decision, unreadable = _check_sigstore(req, store.identities_for(req.repo_id), notes)
    if decision is not None:
        return decision
    return replace(_unsigned(req, allow, store, notes), unreadable_bundle=unreadable)


def _unsigned(req: TrustRequest, allow: AllowArg, store: TrustStore, notes: list[str]
              ) -> TrustDecision:
    """The decision on a variant that no signature vouches for: pinned, allowed, or
    refused (:func:`evaluate`)."""
    if req.pinned:
        return TrustDecision(True, f"these exact files are pinned by {req.pinned}",
                             notes=tuple(notes))
    key = allow_key(allow)
    if key is True:
        return TrustDecision(True, "allowed by trust_remote_code=True", notes=tuple(notes))
    if isinstance(key, tuple) and req.repo_id.lower() in (r.lower() for r in key):
        return TrustDecision(True, "allowed by the trust_remote_code list", notes=tuple(notes))
    if store.allows(req.repo_id):
        return TrustDecision(True, f"allowed by the trust store ({store.path})",
                             notes=tuple(notes))
    return TrustDecision(False, NOT_ALLOWED, notes=tuple(notes))


def require(decision: TrustDecision, req: TrustRequest) -> None:
    """Raise unless ``decision`` allows the variant.

    Args:
        decision: from :func:`evaluate`.
        req: the request it was made for.

    Raises:
        TrustError: naming the repository, variant and hub, what was found and the fixes.
    """
    if decision.allowed:
        logger.debug("%s %s: %s", req.repo_id, req.variant, decision)
        return
    found = "; ".join(decision.notes) or "no signature"
    where = f" from {req.where}" if req.where else ""
    raise TrustError(
        f"refusing to load {req.repo_id} (variant {req.variant}){where}: it is "
        f"{decision.reason} ({found}). To load it: {key_fix(found, 'ORG/*')}, "
        "allow the repository "
        f"(kernelforge trust allow {req.repo_id}), or allow it for this load only "
        f"(trust_remote_code=True or trust_remote_code=[{req.repo_id!r}] in Python; "
        f"--trust-remote-code or --allow {req.repo_id} on the command line)"
    )
