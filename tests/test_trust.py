"""Keys, signatures, the trust store, the owner mark and the trust policy."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from kf_sharing import isolate

from kernelforge import policy, signing, trust
from kernelforge.cli import main
from kernelforge.errors import SignatureMismatchError, TrustError, UnreadableSignatureError

pytestmark = pytest.mark.usefixtures("cpu_system")

META = b'{"name": "relu", "id": "_relu_x", "digest": {"algorithm": "sha256", "files": {}}}'


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    return signing.generate_key(tmp_path / "keys" / "pub.pem")


# --- keys and signatures ------------------------------------------------------------------


def test_key_file_is_private_and_round_trips(key: signing.SigningKey, tmp_path: Path) -> None:
    path = tmp_path / "keys" / "pub.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = signing.load_signing_key(path)
    assert again.public == key.public and len(key.public.key_id) == 16
    assert signing.PublicKey.parse(key.public.text) == key.public
    with pytest.raises(TrustError, match="already exists; pass overwrite=True"):
        signing.generate_key(path)
    path.chmod(0o644)
    with pytest.raises(TrustError, match="readable by other users; fix: chmod 600"):
        signing.load_signing_key(path)


@pytest.mark.parametrize("text", ["ed25519:", "ed25519:AAAA", "rsa:abc", "", "ed25519:!!"])
def test_malformed_public_keys_are_named(text: str) -> None:
    with pytest.raises(TrustError, match="is not an ed25519 public key"):
        signing.PublicKey.parse(text)


def test_signature_binds_repository_metadata_bytes_and_variant(key: signing.SigningKey) -> None:
    sig = signing.parse_signature(key.sign_variant("torch-cpu", META, repo_id="org/relu"),
                                  "x.sig")
    assert sig.key_id == key.public.key_id and sig.repo_id == "org/relu"
    assert key.public.verify(sig.signature, "torch-cpu", META, "org/relu")
    assert not key.public.verify(sig.signature, "torch-cpu", META, "org/other")  # copied
    assert not key.public.verify(sig.signature, "torch-cpu", META)  # passed off as format 1
    assert not key.public.verify(sig.signature, "torch-cuda", META, "org/relu")  # other slot
    assert not key.public.verify(sig.signature, "torch-cpu", META.replace(b"x", b"y"),
                                 "org/relu")
    with pytest.raises(ValueError, match="org/name"):
        key.sign_variant("torch-cpu", META, repo_id="relu")


def test_the_signed_message_is_the_documented_one() -> None:
    """The bytes a signature covers are part of the file format: signatures written by
    earlier releases (format 1 and 2) must go on verifying, so they are fixed here."""
    assert signing.signed_message("torch-cpu", b"{}", "Org/Relu") == (
        b"kernelforge-variant-signature-v2\0Org/Relu\0torch-cpu\0{}")
    assert signing.signed_message("torch-cpu", b"{}") == (
        b"kernelforge-variant-signature-v1\0torch-cpu\0{}")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_signing_key_its_group_or_others_can_access_is_refused(key: signing.SigningKey,
                                                                  tmp_path: Path,
                                                                  mode: int) -> None:
    path = tmp_path / "keys" / "pub.pem"
    path.chmod(mode)
    with pytest.raises(TrustError, match="readable by other users; fix: chmod 600"):
        signing.load_signing_key(path)


def test_a_public_key_given_as_the_signing_key_is_named(key: signing.SigningKey,
                                                         tmp_path: Path) -> None:
    """The .pub file beside the key (or any other file) is named for what it is, before
    any advice about its mode."""
    pub = tmp_path / "pub.pub"
    pub.write_text(key.public.text + "\n")
    pub.chmod(0o644)
    with pytest.raises(TrustError, match=r"this is a public key \(ed25519:...\), which others "
                       r"add to their trust store; signing takes the private key file"):
        signing.load_signing_key(pub)
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    junk.chmod(0o600)
    with pytest.raises(TrustError, match="not an unencrypted PEM private key") as info:
        signing.load_signing_key(junk)
    assert "https://" not in str(info.value)


def _format_1(key: signing.SigningKey) -> bytes:
    """A signature file as kernelforge wrote them before format 2 (no repository)."""
    import base64

    raw = key._private.sign(signing.signed_message("torch-cpu", META))
    return json.dumps({"format": "kernelforge-signature/1", "algorithm": "ed25519",
                       "key-id": key.public.key_id, "public-key": key.public.text,
                       "signature": base64.b64encode(raw).decode()}).encode()


def test_format_1_signatures_count_only_from_a_key_for_that_one_repository(
    key: signing.SigningKey,
) -> None:
    sig = signing.parse_signature(_format_1(key), "x.sig")
    assert sig.repo_id is None and key.public.verify(sig.signature, "torch-cpu", META)
    req = policy.TrustRequest("org/relu", "torch-cpu", META, signature=_format_1(key))
    # A key trusted for several repositories: the signature names none, so it may have
    # been made for another of them and copied here.
    trust.add_key(key.public.text, name="alice", repos=("org/*",))
    decision = policy.evaluate(req)
    assert not decision.allowed
    assert "older signature format (kernelforge-signature/1)" in str(decision)
    assert "trusted for org/*" in str(decision)
    assert "publishing again with --sign" in str(decision)
    assert (f"'kernelforge trust remove {key.public.key_id}', then 'kernelforge trust add "
            "KEY --repo org/relu'") in str(decision)
    assert policy.evaluate(req, allow=["org/relu"]).allowed  # still allowed explicitly
    # Tampering is still refused outright, whatever the scope.
    with pytest.raises(TrustError, match="does not verify"):
        policy.evaluate(replace(req, metadata=META.replace(b"x", b"y")))
    # Trusted for exactly this repository (case aside), the key vouches for it.
    trust.remove(key.public.key_id)
    trust.add_key(key.public.text, name="alice", repos=("Org/Relu",))
    assert policy.evaluate(req).allowed
    assert "signed by trusted key" in policy.evaluate(req).reason
    # ... and not for another one, nor with a second repository in its scope.
    assert not policy.evaluate(replace(req, repo_id="org/other")).allowed
    trust.add_key(key.public.text, repos=("org/other",))
    assert not policy.evaluate(req).allowed


@pytest.mark.parametrize("scope, asked, covered", [
    (("org/*",), "ORG/relu", True),
    (("Org/Relu",), "org/relu", True),
    (("org/relu",), "org/relu2", False),
    (("org/*",), "other/relu", False),
])
def test_key_scopes_and_the_allow_list_ignore_case(
    key: signing.SigningKey, scope: tuple[str, ...], asked: str, covered: bool,
) -> None:
    """Repository ids compare without regard to case, as the hubs resolve them: a key
    trusted for org/* signs for ORG/relu, and allowing Org/Relu allows org/relu."""
    trust.add_key(key.public.text, repos=scope)
    sig = key.sign_variant("torch-cpu", META, repo_id=asked)
    req = policy.TrustRequest(asked, "torch-cpu", META, signature=sig)
    assert policy.evaluate(req).allowed is covered
    trust.remove(key.public.key_id)
    unsigned = policy.TrustRequest(asked, "torch-cpu", META)
    assert policy.evaluate(unsigned, allow=[scope[0].replace("*", "relu")]).allowed is covered
    trust.allow_repo(scope[0])
    assert policy.evaluate(unsigned).allowed is covered


def test_a_signature_made_for_another_repository_does_not_vouch(
    key: signing.SigningKey,
) -> None:
    trust.add_key(key.public.text, name="alice", repos=("org/*",))
    sig = key.sign_variant("torch-cpu", META, repo_id="org/other")
    req = policy.TrustRequest("org/relu", "torch-cpu", META, signature=sig)
    decision = policy.evaluate(req)
    assert not decision.allowed
    assert "for org/other, not for org/relu: a build copied from another" in str(decision)
    assert policy.evaluate(req, allow=["org/relu"]).allowed  # still allowed explicitly
    # the same repository spelled with other case (the Hub resolves ids so) is no copy
    trust.add_key(key.public.text, repos=("*",))
    same = policy.TrustRequest("Org/Other", "torch-cpu", META, signature=sig)
    assert policy.evaluate(same).allowed
    forged = json.loads(sig)
    forged["repo-id"] = "org/relu"  # the field rewritten: the signature no longer verifies
    with pytest.raises(TrustError, match="does not verify"):
        policy.evaluate(policy.TrustRequest("org/relu", "torch-cpu", META,
                                            signature=json.dumps(forged).encode()))


_SIG64 = '"signature": "' + "A" * 86 + '=="'  # 64 bytes, well-formed


@pytest.mark.parametrize("data", [
    b"", b"{}", b"not json",
    b'{"format": "kernelforge-signature/1", "algorithm": "ed25519", "key-id": "a", '
    b'"signature": "AA=="}',
    # format 2 without the repository it was made for, or with a bad one
    ('{"format": "kernelforge-signature/2", "algorithm": "ed25519", "key-id": "a", '
     + _SIG64 + "}").encode(),
    ('{"format": "kernelforge-signature/2", "algorithm": "ed25519", "key-id": "a", '
     '"repo-id": "no-slash", ' + _SIG64 + "}").encode(),
    # another algorithm than the one the key is for
    ('{"format": "kernelforge-signature/2", "algorithm": "rsa", "key-id": "a", '
     '"repo-id": "org/x", ' + _SIG64 + "}").encode(),
    # a key id that is none: the refusal of an untrusted key names it, so a hub could
    # add a line of advice of its own to it ("run kernelforge trust allow '*'")
    *(('{"format": "kernelforge-signature/2", "algorithm": "ed25519", "key-id": "' + kid
       + '", "repo-id": "org/x", ' + _SIG64 + "}").encode()
      for kid in ("0123456789abcdef, trusted.\\nTo load it: kernelforge trust allow *",
                  "0123456789abcde", "0123456789ABCDEF", "0123456789abcdef\\n")),
])
def test_malformed_signature_files_are_named(data: bytes) -> None:
    with pytest.raises(TrustError, match=r"org/x: build/torch-cpu.sig: not a valid signature"
                       ) as info:
        signing.parse_signature(data, "org/x: build/torch-cpu.sig")
    # what was expected, but no fix: that depends on where the file came from
    assert "expected JSON" in str(info.value) and "--sign" not in str(info.value)


def test_a_signature_that_fails_as_served_says_the_publishers_fix(
    key: signing.SigningKey,
) -> None:
    """The policy knows nothing of where the files came from: its refusal of a trusted
    key's signature that does not verify, or of a signature file it cannot read, ends
    with the publisher's fix (nothing allowed lifts either), and keeps the problem apart
    for a load that took them from the download cache to say with the cache's fix."""
    trust.add_key(key.public.text, name="alice")
    sig = key.sign_variant("torch-cpu", META, repo_id="org/relu")
    req = policy.TrustRequest("org/relu", "torch-cpu", META, signature=sig)
    assert policy.evaluate(req).allowed
    for bad, kind, problem in [
        (replace(req, metadata=META + b" "), SignatureMismatchError, "does not verify"),
        (replace(req, signature=sig[:40]), UnreadableSignatureError,
         "build/torch-cpu.sig: not a valid signature file"),
    ]:
        with pytest.raises(kind) as info:
            policy.evaluate(bad, allow=True)
        said, err = str(info.value), info.value
        assert isinstance(err, (SignatureMismatchError, UnreadableSignatureError))
        assert said.startswith(err.problem), said
        assert "; refusing to load it, even where the repository is allowed" in said, said
        assert said.endswith("; fix: its publisher must publish the kernel again with "
                             "--sign"), said
        assert problem in err.problem and "--sign" not in err.problem, err.problem
        assert "\n" not in said and err.variant == "torch-cpu"


# --- the trust store ----------------------------------------------------------------------


def test_store_add_allow_remove_is_atomic_and_listed(key: signing.SigningKey,
                                                     env: dict[str, Path]) -> None:
    assert trust.load_store().keys == ()
    entry = trust.add_key(key.public.text, name="alice", repos=("org/*",))
    trust.allow_repo("other/kernel")
    trust.add_sigstore_identity("https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main",
                                repos=("o/*",))
    store = trust.load_store()
    assert store.key(entry.key_id) == entry and entry.covers("org/relu")
    assert not entry.covers("evil/relu")
    assert store.allows("other/kernel") and not store.allows("other/kernel2")
    assert [s.identity for s in store.identities_for("o/x")] and not store.identities_for("p/x")
    path = env["config"] / "trust.json"
    assert json.loads(path.read_text())["format"] == 1
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temps
    assert trust.remove(entry.key_id) == f"key {entry.key_id} (alice)"
    assert trust.load_store().key(entry.key_id) is None
    with pytest.raises(TrustError, match="is not in the trust store"):
        trust.remove("nothing-like-this")


def test_readding_a_key_adds_repositories_and_keeps_its_name(key: signing.SigningKey,
                                                             tmp_path: Path) -> None:
    """Adding a trusted key again never replaces its entry: a second --repo adds to its
    scope, leaving --repo out keeps the scope (no silent widening to *), and the name
    stays unless a new one is given."""
    other = signing.generate_key(tmp_path / "keys" / "other.pem")
    trust.add_key(other.public.text, name="first")
    entry = trust.add_key(key.public.text, name="alice", repos=("org/*",))
    assert (entry.name, entry.repos) == ("alice", ("org/*",))
    entry = trust.add_key(key.public.text, repos=("other/*",))
    assert (entry.name, entry.repos) == ("alice", ("org/*", "other/*"))
    assert trust.add_key(key.public.text).repos == ("org/*", "other/*")  # not widened to *
    # a pattern that a broader one covers is kept too: the entry lists every one given
    assert trust.add_key(key.public.text, repos=("org/relu",)).repos == (
        "org/*", "other/*", "org/relu")
    entry = trust.add_key(key.public.text, name="bob", repos=("other/relu", "third/x"))
    assert (entry.name, entry.repos) == (
        "bob", ("org/*", "other/*", "org/relu", "other/relu", "third/x"))
    store = trust.load_store()
    assert store.key(key.public.key_id) == entry
    assert [k.name for k in store.keys] == ["first", "bob"]  # one entry, in its place
    assert trust.add_key(key.public.text, repos=("*",)).repos == (
        *entry.repos, "*")  # explicit only, and the narrower patterns stay
    assert trust.add_key(other.public.text, name="").name == ""
    # a new key: everything unless scoped, unnamed unless named
    trust.remove(key.public.key_id)
    assert trust.add_key(key.public.text) == trust.TrustedKey(
        key.public.key_id, key.public.text, "", ("*",))


WORKFLOW = "https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main"


def test_readding_a_sigstore_identity_adds_repositories_like_a_key() -> None:
    """The rule of add_key: a second add never narrows the identity's scope, leaving the
    repositories out keeps it (no silent widening to *), only an explicit * widens."""
    other = trust.add_sigstore_identity("https://github.com/o/other/.github/workflows/x.yaml")
    assert other.repos == ("*",)  # a new identity: everything unless scoped
    entry = trust.add_sigstore_identity(WORKFLOW, repos=("org/*",))
    assert entry.repos == ("org/*",)
    assert trust.add_sigstore_identity(WORKFLOW, repos=("org/other",)).repos == (
        "org/*", "org/other")  # kept, though org/* covers it
    assert trust.add_sigstore_identity(WORKFLOW).repos == (
        "org/*", "org/other")  # not widened to *
    entry = trust.add_sigstore_identity(f" {WORKFLOW} ", repos=("team/relu",))
    assert entry.repos == ("org/*", "org/other", "team/relu")
    store = trust.load_store()
    assert store.identity(WORKFLOW) == entry and [s.identity for s in store.sigstore] == [
        other.identity, WORKFLOW]  # one entry, in its place
    # another issuer is another identity, with its own scope
    gitlab = trust.add_sigstore_identity(WORKFLOW, issuer="https://gitlab.com",
                                         repos=("g/*",))
    assert gitlab.repos == ("g/*",) and trust.load_store().identity(WORKFLOW) == entry
    assert trust.add_sigstore_identity(WORKFLOW, repos=("*",)).repos == (
        *entry.repos, "*")  # explicit
    assert trust.load_store().identity(WORKFLOW, "https://gitlab.com").repos == ("g/*",)


@pytest.mark.parametrize("identity", ["not-a-uri", "https://x y", "   "])
def test_a_sigstore_identity_must_be_a_uri_or_an_address(identity: str) -> None:
    with pytest.raises(TrustError, match="identity"):
        trust.add_sigstore_identity(identity)
    assert trust.load_store().sigstore == ()
    assert trust.add_sigstore_identity("dev@example.org").identity == "dev@example.org"


def test_an_empty_list_of_repositories_is_refused(env: dict[str, Path]) -> None:
    """repos=() would trust for nothing, or (as a missing value) for everything: neither
    is what was asked, so it is refused, for keys and identities, new or stored."""
    public = signing.generate_key(env["config"] / "k.pem").public.text
    for _ in range(2):  # new, then stored
        with pytest.raises(ValueError, match="repos: an empty list trusts for nothing"):
            trust.add_key(public, repos=())
        with pytest.raises(ValueError, match="repos: an empty list trusts for nothing"):
            trust.add_sigstore_identity(WORKFLOW, repos=())
        trust.add_key(public, repos=("org/*",))
        trust.add_sigstore_identity(WORKFLOW, repos=("org/*",))
    store = trust.load_store()
    assert store.identity(WORKFLOW).repos == ("org/*",)  # type: ignore[union-attr]
    assert [k.repos for k in store.keys] == [("org/*",)]


def test_patterns_that_differ_only_in_case_are_one(key: signing.SigningKey) -> None:
    """Scopes and the allow list apply without regard to case, so they are kept and
    removed that way too: no second spelling is stored, and removing one spelling
    leaves none allowing the repository."""
    trust.add_key(key.public.text, repos=("org/a",))
    assert trust.add_key(key.public.text, repos=("ORG/A",)).repos == ("org/a",)
    assert trust.add_key(key.public.text, repos=("Org/*",)).repos == ("org/a", "Org/*")
    assert trust.allow_repo("Org/Relu")
    assert not trust.allow_repo("org/relu")  # already allowed: nothing changes
    assert trust.load_store().allow == ("Org/Relu",)
    assert trust.remove("ORG/RELU") == "allowed repository Org/Relu"
    assert not trust.load_store().allows("org/relu")


def test_a_key_listed_twice_in_the_store_is_refused(key: signing.SigningKey,
                                                    env: dict[str, Path]) -> None:
    """Only one entry of a key would count (its scope, not the one meant): a store that
    lists a key twice is refused, saying which."""
    trust.add_key(key.public.text, repos=("org/a",))
    path = env["config"] / "trust.json"
    doc = json.loads(path.read_text())
    doc["keys"].append(dict(doc["keys"][0], repos=["org/b"]))
    path.write_text(json.dumps(doc))
    with pytest.raises(TrustError, match=f"key {key.public.key_id} has 2 entries; merge"):
        trust.load_store()


def test_corrupt_store_is_named(env: dict[str, Path]) -> None:
    path = env["config"] / "trust.json"
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    with pytest.raises(TrustError, match=f"{path}: not valid JSON"):
        trust.load_store()
    path.write_text('{"format": 0}')
    with pytest.raises(TrustError, match="not a trust store"):
        trust.load_store()


def test_a_store_of_a_newer_format_is_refused_and_left_as_it_is(
        key: signing.SigningKey, env: dict[str, Path]) -> None:
    """A newer kernelforge sharing the config folder may write a format this version
    cannot read: the error says so and names the upgrade (not "re-add your keys"), and a
    change made here does not replace the file."""
    path = env["config"] / "trust.json"
    path.parent.mkdir(parents=True)
    text = '{"format": 2, "keys": {"new": "layout"}}'
    path.write_text(text)
    said = (f"{path}: this trust store is of format 2, written by a newer kernelforge "
            "\\(this version reads format 1\\); upgrade kernelforge")
    with pytest.raises(TrustError, match=said):
        trust.load_store()
    with pytest.raises(TrustError, match=said):
        trust.add_key(key.public.text)
    assert path.read_text() == text


def test_a_field_this_version_does_not_know_is_refused_and_the_store_left_as_is(
        key: signing.SigningKey, env: dict[str, Path]) -> None:
    """Within one format the fields are fixed: a field an older version passed over
    could narrow the trust ("expires", a misspelt "repo"), so ignoring it would trust
    more than the file says. Reading refuses it, and a change leaves the file alone."""
    trust.add_key(key.public.text, repos=("org/a",))
    path = env["config"] / "trust.json"
    doc = json.loads(path.read_text())
    doc["keys"][0]["expires"] = "2030-01-01"
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    with pytest.raises(TrustError, match=r"keys\[0\]: unknown field 'expires'"):
        trust.load_store()
    with pytest.raises(TrustError, match="unknown field 'expires'"):
        trust.add_key(key.public.text, repos=("org/b",))
    assert path.read_bytes() == before


@pytest.mark.parametrize("pattern", ["not a repo", "org", "org/ab*", "*/x"])
def test_bad_patterns_are_refused(pattern: str, key: signing.SigningKey) -> None:
    """As 'kernelforge trust' refuses them, naming the argument and the patterns taken
    (before: "repo_id: 'org/ab*' is not a valid repository id", of an argument that
    takes patterns)."""
    said = (f"{pattern!r} is not a repository pattern; expected 'org/name', 'org/*' or "
            "'*', made of letters, digits, '.', '_' and '-' (e.g. 'kernels-community/*')")
    with pytest.raises(ValueError) as info:
        trust.allow_repo(pattern)
    assert str(info.value) == f"pattern: {said}"
    for add in (lambda: trust.add_key(key.public.text, repos=("me/*", pattern)),
                lambda: trust.add_sigstore_identity(WORKFLOW, repos=(pattern,))):
        with pytest.raises(ValueError) as info:
            add()
        assert str(info.value) == f"repos: {said}"
    assert trust.load_store().allow == () and trust.load_store().keys == ()


KEY_TEXT = "ed25519:" + "A" * 43 + "="


@pytest.mark.parametrize("doc, problem", [
    # a string where a list belongs would be read as one-character patterns, "*" among them
    ({"allow": "alice/*"}, r'"allow": expected a list of repository patterns'),
    ({"keys": [{"key-id": "ab", "public-key": KEY_TEXT, "repos": "alice/*"}]},
     r'keys\[0\] \(key ab\) "repos": expected a list'),
    ({"sigstore": [{"identity": "me", "issuer": "https://x", "repos": "alice/*"}]},
     r'sigstore\[0\] \(me\) "repos": expected a list'),
    # patterns the command line refuses are refused in the file too
    ({"allow": ["alice*"]}, r"\"allow\": 'alice\*' is not a repository pattern"),
    ({"keys": [{"key-id": "ab", "public-key": KEY_TEXT, "repos": ["*/*"]}]},
     r"keys\[0\] \(key ab\) \"repos\": '\*/\*' is not a repository pattern"),
    ({"allow": [7]}, r'"allow": expected a list'),
    ({"keys": {"ab": KEY_TEXT}}, r"'keys' must be a list"),
])
def test_store_entries_must_be_lists_of_valid_patterns(env: dict[str, Path], doc: dict,
                                                       problem: str) -> None:
    path = env["config"] / "trust.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": 1, **doc}))
    with pytest.raises(TrustError, match=f"{path}: {problem}.*fix the file"):
        trust.load_store()


KEY_ID = signing.PublicKey.parse(KEY_TEXT).key_id


@pytest.mark.parametrize("doc, problem", [
    # a misspelt field would be passed over: "repo" would trust the key for everything
    ({"keys": [{"key-id": KEY_ID, "public-key": KEY_TEXT, "name": "", "repo": ["a/*"]}]},
     r"keys\[0\]: unknown field 'repo' \(did you mean 'repos'\?\)"),
    ({"allows": ["a/*"]}, r"the store: unknown field 'allows' \(did you mean 'allow'\?\)"),
    # ... and so would a missing one: it is not taken as every repository
    ({"keys": [{"key-id": KEY_ID, "public-key": KEY_TEXT, "name": ""}]},
     rf'keys\[0\] \(key {KEY_ID}\): "repos" is missing; list the repositories it is '
     r"trusted for \('org/\*', or '\*' for every one\)"),
    ({"sigstore": [{"identity": "me", "issuer": "https://x"}]},
     r'sigstore\[0\] \(me\): "repos" is missing'),
    ({"keys": [{"key-id": KEY_ID, "public-key": KEY_TEXT, "repos": []}]},
     rf'keys\[0\] \(key {KEY_ID}\) "repos": an empty list trusts for nothing'),
    # a key is found by the id a signature names, and verified with its public key
    ({"keys": [{"key-id": "0123456789abcdef", "public-key": KEY_TEXT, "repos": ["*"]}]},
     rf'keys\[0\] \(key 0123456789abcdef\) "key-id": the id of its "public-key" is '
     rf"{KEY_ID}"),
    ({"keys": [{"key-id": KEY_ID, "public-key": "ed25519:AAAA", "repos": ["*"]}]},
     rf"keys\[0\] \(key {KEY_ID}\) \"public-key\": public key: 'ed25519:AAAA' is not an "
     "ed25519 public key"),
    ({"keys": [{"key-id": KEY_ID, "public-key": KEY_TEXT, "name": None, "repos": ["*"]}]},
     rf'keys\[0\] \(key {KEY_ID}\): "name" must be a string, got None'),
    ({"keys": [{"name": "me", "public-key": KEY_TEXT}]}, r'keys\[0\]: "key-id" is missing'),
    ({"keys": [{"key-id": KEY_ID, "public-key": KEY_TEXT, "name": 7, "repos": ["*"]}]},
     rf'keys\[0\] \(key {KEY_ID}\): "name" must be a string, got 7'),
    ({"keys": [[KEY_ID, KEY_TEXT]]}, r"keys\[0\]: expected an object with 'key-id'"),
    ({"sigstore": [{"identity": "me"}]}, r'sigstore\[0\] \(me\): "issuer" is missing'),
    # the entry is named on the error's one line, whatever the file holds
    ({"keys": [{"key-id": "ab\nerror: cd", "public-key": KEY_TEXT, "repos": ["*"]}]},
     r'keys\[0\] \(key ab\\nerror: cd\) "key-id": the id of its "public-key" is'),
    ({"sigstore": [{"identity": "me\x1b[2J", "issuer": 3}]},
     r'sigstore\[0\] \(me\\x1b\[2J\): "issuer" must be a string, got 3'),
    # a sigstore identity is read as strictly as a key
    ({"sigstore": [{"identity": "me", "issuer": "https://x", "repo": ["a/*"]}]},
     r"sigstore\[0\]: unknown field 'repo' \(did you mean 'repos'\?\)"),
    ({"sigstore": [{"identity": "me", "issuer": "https://x", "repos": []}]},
     r'sigstore\[0\] \(me\) "repos": an empty list trusts for nothing'),
    ({"sigstore": [{"identity": True, "issuer": "https://x"}]},
     r'sigstore\[0\]: "identity" must be a string, got True'),
])
def test_a_store_entry_of_the_wrong_shape_is_named(env: dict[str, Path], doc: dict,
                                                    problem: str) -> None:
    """Each entry's fields are checked as the command line writes them, naming the entry
    and the field, rather than read as whatever str() makes of them or met as a
    KeyError."""
    path = env["config"] / "trust.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": 1, **doc}))
    with pytest.raises(TrustError, match=f"{path}: {problem}.*fix the file"):
        trust.load_store()


# --- owner marks --------------------------------------------------------------------------


def test_owner_mark_verifies_only_for_its_owner_and_content(env: dict[str, Path],
                                                             monkeypatch, tmp_path) -> None:
    files = {"build/torch-cpu/__init__.py": "abc="}
    mark = trust.owner_mark("org/x", "c" * 40, files)
    assert mark is not None
    key_file = env["config"] / "owner.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert trust.check_owner_mark(mark, "org/x", "c" * 40, files)
    assert not trust.check_owner_mark(mark, "org/y", "c" * 40, files)
    assert not trust.check_owner_mark(mark, "org/x", "c" * 40, {**files, "extra.py": "x"})
    assert not trust.check_owner_mark(None, "org/x", "c" * 40, files)
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "someone-else"))
    assert not trust.check_owner_mark(mark, "org/x", "c" * 40, files)


def test_an_owner_mark_binds_the_commit_and_every_digit_of_its_mac(env: dict[str, Path]) -> None:
    """A mark made for one commit does not vouch for another commit with the same files
    (a record copied within the hub), nor does a MAC altered in its last digit."""
    files = {"build/torch-cpu/__init__.py": "abc="}
    mark = trust.owner_mark("org/x", "c" * 40, files)
    assert mark is not None and trust.check_owner_mark(mark, "org/x", "c" * 40, files)
    assert not trust.check_owner_mark(mark, "org/x", "d" * 40, files)
    last = "0" if mark["mac"][-1] != "0" else "1"
    assert not trust.check_owner_mark({**mark, "mac": mark["mac"][:-1] + last}, "org/x",
                                      "c" * 40, files)


@pytest.mark.parametrize("text", ["ab" * 16, "ab" * 33, "not hex"])
def test_an_owner_key_of_the_wrong_length_is_corrupt(env: dict[str, Path], text: str) -> None:
    key_file = env["config"] / "owner.key"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(text + "\n")
    key_file.chmod(0o600)
    with pytest.raises(TrustError, match="corrupt owner key"):
        trust.check_owner_mark({"mac": "00"}, "org/x", "c" * 40, {})


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("mode", [0o640, 0o620])
def test_an_owner_key_its_group_can_access_is_refused(env: dict[str, Path], mode: int) -> None:
    files = {"build/torch-cpu/__init__.py": "abc="}
    mark = trust.owner_mark("org/x", "c" * 40, files)
    (env["config"] / "owner.key").chmod(mode)
    with pytest.raises(TrustError, match="owner key is readable or writable by other users"):
        trust.check_owner_mark(mark, "org/x", "c" * 40, files)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_an_owner_key_others_can_read_is_refused(env: dict[str, Path], caplog) -> None:
    files = {"build/torch-cpu/__init__.py": "abc="}
    mark = trust.owner_mark("org/x", "c" * 40, files)
    key_file = env["config"] / "owner.key"
    key_file.chmod(0o644)
    with pytest.raises(TrustError, match=r"owner key is readable or writable by other users.*"
                                         r"chmod 600"):
        trust.check_owner_mark(mark, "org/x", "c" * 40, files)
    # the publish stops with the fix: unmarked, its revision would be refused to its
    # own publisher once the key is fixed
    with pytest.raises(TrustError, match=r"owner key is readable or writable by other users.*"
                                         r"chmod 600"):
        trust.owner_mark("org/x", "d" * 40, files)
    key_file.chmod(0o600)
    assert trust.check_owner_mark(mark, "org/x", "c" * 40, files)


def test_an_owner_key_the_disk_cannot_hold_leaves_nothing_behind(
        env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A full disk while the owner key is first written: no key and no hidden temporary
    (``.owner.key.<hex>.tmp``) stay in the config folder, and the warning names the file,
    what the publish does without it and the fix; the next publish makes the key."""
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    files = {"build/torch-cpu/__init__.py": "abc="}
    key_file = env["config"] / "owner.key"
    with monkeypatch.context() as patched, \
            caplog.at_level(logging.WARNING, logger="kernelforge.trust"):
        patched.setattr(os, "fsync", full)
        assert trust.owner_mark("org/x", "c" * 40, files) is None
    assert list(env["config"].iterdir()) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"kernelforge: {key_file}: cannot write the owner key ({os.strerror(errno.ENOSPC)}); "
        "none was "
        "made, so this revision will load only if signed or allowed; fix: free space on "
        "its disk, or set KERNELFORGE_CONFIG to a directory you can write"]
    mark = trust.owner_mark("org/x", "c" * 40, files)
    assert mark is not None and trust.check_owner_mark(mark, "org/x", "c" * 40, files)
    assert [p.name for p in env["config"].iterdir()] == ["owner.key"]


# --- the policy ---------------------------------------------------------------------------


def request(key: signing.SigningKey | None = None, **kw) -> policy.TrustRequest:
    sig = key.sign_variant("torch-cpu", META, repo_id="org/relu") if key else None
    return policy.TrustRequest("org/relu", "torch-cpu", META, signature=sig, **kw)


def test_policy_matrix(key: signing.SigningKey) -> None:
    unsigned = policy.evaluate(request())
    assert not unsigned.allowed and "no signature" in str(unsigned)
    untrusted = policy.evaluate(request(key))
    assert not untrusted.allowed and "not in the trust store" in str(untrusted)
    assert policy.evaluate(request(key), allow=True).allowed
    assert policy.evaluate(request(), allow=["org/relu"]).allowed
    assert not policy.evaluate(request(), allow=["org/other"]).allowed
    assert policy.evaluate(request(owned=True)).allowed
    assert policy.evaluate(request(pinned="kernelforge.lock")).allowed

    trust.add_key(key.public.text, name="alice", repos=("org/*",))
    signed = policy.evaluate(request(key))
    assert signed.allowed and signed.signer == key.public.key_id and "alice" in signed.reason
    trust.remove(key.public.key_id)  # re-adding would add elsewhere/* to org/*
    trust.add_key(key.public.text, name="alice", repos=("elsewhere/*",))
    scoped = policy.evaluate(request(key))
    assert not scoped.allowed and "trusted only for elsewhere/*" in str(scoped)
    trust.allow_repo("org/*")
    assert policy.evaluate(request()).allowed


def test_a_bad_signature_by_a_trusted_key_is_refused_even_when_allowed(
    key: signing.SigningKey,
) -> None:
    trust.add_key(key.public.text, name="alice")
    sig = key.sign_variant("torch-cpu", META, repo_id="org/relu")
    forged = policy.TrustRequest("org/relu", "torch-cpu", META + b" ", signature=sig)
    with pytest.raises(TrustError, match="metadata.json, or the signature file itself, was "
                                         "changed after it was signed"):
        policy.evaluate(forged, allow=True)


def test_refusal_message_names_the_fixes() -> None:
    req = request(where="Hugging Face Hub")
    with pytest.raises(TrustError) as info:
        policy.require(policy.evaluate(req), req)
    text = str(info.value)
    assert "refusing to load org/relu (variant torch-cpu) from Hugging Face Hub" in text
    for fix in ("kernelforge trust add", "kernelforge trust allow org/relu",
                "trust_remote_code=True", "trust_remote_code=['org/relu'] in Python",
                "--trust-remote-code or --allow org/relu on the command line"):
        assert fix in text


def test_a_signature_of_a_newer_format_is_a_note_that_names_the_upgrade(
        key: signing.SigningKey) -> None:
    """A newer kernelforge publishing to a shared hub may sign in a format this version
    cannot check: that is no tampering, so the load is decided as for an unsigned
    variant (the allow list, a pin), and a refusal says to upgrade, not to republish."""
    trust.add_key(key.public.text, repos=("org/*",))
    doc = json.loads(key.sign_variant("torch-cpu", META, repo_id="org/relu"))
    newer = json.dumps({**doc, "format": "kernelforge-signature/3"}).encode()
    with pytest.raises(TrustError, match="format 'kernelforge-signature/3', written by a "
                                         "newer kernelforge .*; upgrade kernelforge"):
        signing.parse_signature(newer, "org/relu: build/torch-cpu.sig")
    req = policy.TrustRequest("org/relu", "torch-cpu", META, signature=newer)
    decision = policy.evaluate(req)
    assert not decision.allowed
    assert "signed in format kernelforge-signature/3, which only a newer kernelforge " \
           "reads; upgrade kernelforge" in str(decision)
    with pytest.raises(TrustError, match="To load it: upgrade kernelforge .* to check it "
                                         "against a key you trust"):
        policy.require(decision, req)
    assert policy.evaluate(req, allow=["org/relu"]).allowed
    assert policy.evaluate(replace(req, pinned="kernelforge.lock")).allowed
    # a format that is no newer kernelforge's stays a malformed file
    # (a hub may write thousands of digits, which int() refuses: no version either)
    for fmt in ("kernelforge-signature/x", "kernelforge-signature/0", "other/3",
                "kernelforge-signature/" + "9" * 5000, "kernelforge-signature/٣"):
        bad = json.dumps({**doc, "format": fmt}).encode()
        with pytest.raises(TrustError, match="not a valid signature file"):
            policy.evaluate(replace(req, signature=bad))


def test_sigstore_bundle_without_trusted_identity_is_only_a_note() -> None:
    decision = policy.evaluate(request(sigstore_bundle=b"{}"))
    assert not decision.allowed and "no sigstore identity is trusted" in str(decision)


def test_a_sigstore_identity_vouches_only_for_the_repositories_it_is_trusted_for(
    monkeypatch,
) -> None:
    """A bundle that verifies for a trusted identity allows the load only where that
    identity is trusted for the repository (sigstore's verifier is replaced by one that
    accepts any bundle, so only the trust store's scope decides)."""
    pytest.importorskip("sigstore")
    import sigstore.models
    import sigstore.verify

    checked: list[bytes] = []

    class Verifier:
        @classmethod
        def production(cls, offline: bool = False) -> Verifier:
            return cls()

        def verify_artifact(self, data: bytes, bundle: object, check: object) -> None:
            checked.append(data)

    monkeypatch.setattr(sigstore.verify, "Verifier", Verifier)
    monkeypatch.setattr(sigstore.models.Bundle, "from_json", staticmethod(lambda raw: object()))
    workflow = "https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main"
    trust.add_sigstore_identity(workflow, repos=("elsewhere/*",))
    decision = policy.evaluate(request(sigstore_bundle=b"{}"))
    assert not decision.allowed and decision.signer is None, str(decision)
    assert "no sigstore identity is trusted for org/relu" in str(decision)
    assert checked == []
    trust.add_sigstore_identity(workflow, repos=("org/*",))
    decision = policy.evaluate(request(sigstore_bundle=b"{}"))
    assert decision.allowed and decision.signer == workflow, str(decision)
    assert checked == [META]


WORKFLOW_ID = "https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main"
TRUST_KEY = "trust its publisher's key (kernelforge trust add KEY --repo 'ORG/*')"
TRUST_IDENTITY = ("trust the sigstore identity that signed it (kernelforge trust "
                  "add-sigstore IDENTITY --repo 'ORG/*')")
SIGN_IT = ("have its publisher sign it (kernelforge publish --sign) and trust that key "
           "(kernelforge trust add KEY --repo 'ORG/*')")


def _refusal_fix(req: policy.TrustRequest) -> str:
    """The ways to load that a refusal of ``req`` offers before allowing it."""
    with pytest.raises(TrustError) as info:
        policy.require(policy.evaluate(req), req)
    said = str(info.value)
    return said[said.index("To load it: ") + 12:said.index(", allow the repository")]


def test_a_refusal_of_a_build_signed_only_with_sigstore_offers_its_identity(key) -> None:
    """The fix a refusal offers is one that can vouch for what the build carries: a
    sigstore bundle is trusted through its identity ('trust add-sigstore'), never
    through a key it has none of ('trust add KEY')."""
    assert _refusal_fix(request(sigstore_bundle=b"{}")) == TRUST_IDENTITY
    # a .sig by a key not trusted beside it: either way
    assert _refusal_fix(request(key, sigstore_bundle=b"{}")) == f"{TRUST_KEY} or {TRUST_IDENTITY}"
    assert _refusal_fix(request(key)) == TRUST_KEY
    assert _refusal_fix(request()) == SIGN_IT


def test_a_refusal_of_a_sigstore_bundle_a_trusted_identity_cannot_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An identity is trusted for the repository already: without sigstore installed,
    installing it is the fix; a bundle sigstore cannot read is no signature to trust."""
    pytest.importorskip("sigstore")
    trust.add_sigstore_identity(WORKFLOW_ID)
    assert _refusal_fix(request(sigstore_bundle=b'{"not": "a bundle"}')) == SIGN_IT
    monkeypatch.setitem(sys.modules, "sigstore.errors", None)  # not installed
    assert _refusal_fix(request(sigstore_bundle=b"{}")) == (
        "install sigstore (pip install sigstore) to check its sigstore bundle against the "
        "sigstore identity you trust")


def test_invalid_sigstore_bundle_is_reported() -> None:
    pytest.importorskip("sigstore")
    trust.add_sigstore_identity("https://github.com/o/r/.github/workflows/b.yaml@refs/heads/main")
    decision = policy.evaluate(request(sigstore_bundle=b'{"not": "a bundle"}'))
    assert not decision.allowed and "is not a valid bundle" in str(decision)


def test_a_key_is_found_by_its_whole_id_only(key: signing.SigningKey) -> None:
    """A signature file naming part of a trusted key's id (or none) names no trusted key."""
    trust.add_key(key.public.text, name="alice")
    store = trust.load_store()
    assert store.key(key.public.key_id) is not None
    assert store.key(key.public.key_id[:8]) is None and store.key("") is None


def test_allow_argument_is_checked() -> None:
    with pytest.raises(TypeError, match="trust_remote_code"):
        policy.allow_key("org/relu")  # type: ignore[arg-type]
    assert policy.allow_key(["org/b", "org/a"]) == ("org/a", "org/b")


@pytest.mark.parametrize(("entry", "message"), [
    ("org/*", r"trust_remote_code: 'org/\*' is a pattern, but the list takes repository ids "
              r".*: kernelforge trust allow 'org/\*' \(quoted, so that the shell"),
    ("*", r"'\*' is a pattern"),
    ("relu", "trust_remote_code: repo_id: 'relu' is not a valid repository id"),
    (3, "trust_remote_code: repo_id: expected a string"),
])
def test_allow_list_entries_must_be_repository_ids(entry: object, message: str) -> None:
    """A pattern in the trust_remote_code list used to be compared as a literal name and
    so never matched: now it is refused, pointing at the trust store, which takes them."""
    with pytest.raises(ValueError, match=message):
        policy.allow_key(["org/relu", entry])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=message):
        policy.evaluate(request(), allow=[entry])  # type: ignore[list-item]


# --- command line -------------------------------------------------------------------------


def test_cli_keygen_trust_list_remove(env: dict[str, Path], capsys) -> None:
    assert main(["keygen", "--name", "ci", "--repo", "me/*"]) == 0
    out = capsys.readouterr().out
    key_id = out.split("key id:")[1].split()[0]
    public = out.split("public key:")[1].split()[0]
    # the command for others names the repositories the key was made for
    assert f"others trust it with: kernelforge trust add '{public}' --repo 'me/*'\n" in out
    pem = env["config"] / "keys" / "ci.pem"
    assert pem.is_file() and (env["config"] / "keys" / "ci.pub").is_file()
    assert main(["trust", "list"]) == 0
    assert f"{key_id}  ci  repos me/*" in capsys.readouterr().out
    assert main(["trust", "add", str(env["config"] / "keys" / "ci.pub"), "--name", "again"]) == 0
    capsys.readouterr()
    assert main(["trust", "add", str(pem)]) == 0  # the private key: its public half, noted
    assert f"is a private key; trusting its public half {key_id}" in capsys.readouterr().err
    assert main(["trust", "allow", "x/y"]) == 0
    assert "allowed x/y without a signature" in capsys.readouterr().out
    assert main(["trust", "allow", "X/y"]) == 0
    assert "X/y was already allowed without a signature" in capsys.readouterr().out
    assert main(["trust", "remove", "x/y"]) == 0
    assert "removed allowed repository x/y" in capsys.readouterr().out
    assert main(["trust", "remove", "x/y"]) == 1
    assert "is not in the trust store" in capsys.readouterr().err
    assert main(["keygen", "--name", "ci"]) == 1  # exists
    # a key for every repository: others are shown the organisation pattern to fill in
    assert main(["keygen", "--name", "all", "--repo", "x/*", "--repo", "*"]) == 0
    assert "' --repo 'ORG/*'\n" in capsys.readouterr().out
    assert main(["keygen", "--name", "two", "--repo", "x/a", "--repo", "y/*"]) == 0
    assert "' --repo 'x/a' --repo 'y/*'\n" in capsys.readouterr().out


def test_cli_keygen_force_tells_others_the_scope_the_new_key_keeps(
        env: dict[str, Path], capsys) -> None:
    """A key replaced with --force and no --repo keeps its repositories, and the command
    for others names them, as for the key it replaces, not the ORG/* of a key for every
    repository."""
    assert main(["keygen", "--name", "ci", "--repo", "me/*"]) == 0
    capsys.readouterr()
    assert main(["keygen", "--name", "ci", "--force"]) == 0
    out = capsys.readouterr().out
    public = out.split("public key:")[1].split()[0]
    assert "added to your trust store for me/*\n" in out
    assert f"others trust it with: kernelforge trust add '{public}' --repo 'me/*'\n" in out


def test_cli_trust_add_again_merges_and_says_what_changed(env: dict[str, Path],
                                                         capsys) -> None:
    assert main(["keygen", "--name", "ci", "--repo", "me/*"]) == 0
    key_id = capsys.readouterr().out.split("key id:")[1].split()[0]
    pub = str(env["config"] / "keys" / "ci.pub")
    assert main(["trust", "add", pub, "--repo", "team/*"]) == 0
    out = capsys.readouterr().out
    assert f"key {key_id} (ci): trusted for me/* before, now for me/*, team/*" in out
    assert main(["trust", "add", pub]) == 0
    out = capsys.readouterr().out
    assert f"key {key_id} (ci) was already trusted; it stays trusted for me/*, team/* only" in out
    assert "--repo '*' trusts it for all" in out
    assert main(["trust", "add", pub, "--repo", "me/relu", "--name", "bot"]) == 0
    out = capsys.readouterr().out
    assert f"renamed key {key_id}: ci -> bot" in out
    assert (f"key {key_id} (bot): trusted for me/*, team/* before, now for me/*, team/*, "
            "me/relu; me/relu (under me/*) was covered already, so it is trusted for no "
            "more repositories than before") in out
    assert f"'kernelforge trust remove {key_id}', then add it again" in out
    assert trust.load_store().key(key_id).repos == (  # type: ignore[union-attr]
        "me/*", "team/*", "me/relu")
    assert main(["trust", "add", pub, "--repo", "*"]) == 0
    assert (f"key {key_id} (bot): trusted for me/*, team/*, me/relu before, now for me/*, "
            "team/*, me/relu, *\n") in capsys.readouterr().out
    assert main(["trust", "list"]) == 0
    assert f"{key_id}  bot  repos me/*, team/*, me/relu, *  ed25519:" in (
        capsys.readouterr().out)


def test_cli_trust_add_sigstore_again_merges_and_says_what_changed(env: dict[str, Path],
                                                                  capsys) -> None:
    """add-sigstore of a trusted identity behaves as 'trust add' of a trusted key: the
    scope is merged and the message says the old and the new scope."""
    label = f"sigstore identity {WORKFLOW} ({trust.GITHUB_ISSUER})"
    assert main(["trust", "add-sigstore", WORKFLOW, "--repo", "org/*"]) == 0
    assert f"trusted {label} for org/*" in capsys.readouterr().out
    assert main(["trust", "add-sigstore", WORKFLOW, "--repo", "org/other"]) == 0  # narrowed?
    out = capsys.readouterr().out
    assert (f"{label}: trusted for org/* before, now for org/*, org/other; org/other "
            "(under org/*) was covered already") in out
    assert (f"'kernelforge trust remove {WORKFLOW}', then add it again with --issuer "
            f"{trust.GITHUB_ISSUER} --repo, and again for each other issuer") in out
    assert main(["trust", "add-sigstore", WORKFLOW]) == 0  # widened to *?
    out = capsys.readouterr().out
    assert f"{label} was already trusted; it stays trusted for org/*, org/other only" in out
    assert "--repo '*' trusts it for all" in out
    assert trust.load_store().identity(WORKFLOW).repos == (  # type: ignore[union-attr]
        "org/*", "org/other")
    assert main(["trust", "add-sigstore", WORKFLOW, "--repo", "team/*"]) == 0
    assert f"{label}: trusted for org/*, org/other before, now for org/*, org/other, " \
           "team/*\n" in capsys.readouterr().out
    assert main(["trust", "add-sigstore", WORKFLOW, "--repo", "*"]) == 0
    assert f"{label}: trusted for org/*, org/other, team/* before, now for org/*, " \
           "org/other, team/*, *\n" in capsys.readouterr().out
    assert main(["trust", "list"]) == 0
    assert f"  {WORKFLOW}  issuer {trust.GITHUB_ISSUER}  repos org/*, org/other, team/*, *" \
        in capsys.readouterr().out


@pytest.mark.parametrize("name", ["../evil", "a/b", "bad name", ".hidden", "k.pub", "x" * 65])
def test_cli_keygen_names_are_file_names_in_keys(name: str, env: dict[str, Path],
                                                 capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["keygen", "--name", name])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --name: {name!r} is not a key name; use 1 to 64 letters, digits" in err
    assert "pass --out FILE to write elsewhere, and the name is then only a label" in err
    assert not env["config"].exists()  # nothing written, inside keys/ or out of it


@pytest.mark.parametrize("name", ["CI key", "../evil", "k.pub", "x" * 65])
def test_cli_keygen_name_is_only_a_label_with_out(name: str, env: dict[str, Path],
                                                  tmp_path: Path, capsys) -> None:
    """With --out the name names no file, so it need not be a file name."""
    out = tmp_path / "ci.pem"
    assert main(["keygen", "--name", name, "--out", str(out), "--repo", "me/*"]) == 0
    assert out.is_file() and out.with_suffix(".pub").is_file()
    assert not (env["config"] / "keys").exists()  # nothing next to the default location
    key_id = capsys.readouterr().out.split("key id:")[1].split()[0]
    assert trust.load_store().key(key_id).name == name  # type: ignore[union-attr]


@pytest.mark.parametrize("force", [False, True])
def test_cli_keygen_out_a_directory_asks_for_a_file(env: dict[str, Path], tmp_path: Path,
                                                   capsys, force: bool) -> None:
    """--out naming a directory: neither "a key already exists" (it does not) nor, with
    --force, an errno message about a temporary file."""
    (tmp_path / "keys").mkdir()
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--no-trust",
                 *(["--force"] if force else [])]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: --out {tmp_path / 'keys'} is a directory; give the key's file "
                   f"path, e.g. --out {tmp_path / 'keys' / 'NAME.pem'}\n"), err
    assert list((tmp_path / "keys").iterdir()) == []


@pytest.mark.parametrize("out", ["x.pem", "sub/x.pem"])
def test_cli_keygen_out_under_a_file_names_the_file(env: dict[str, Path], tmp_path: Path,
                                                    capsys, out: str) -> None:
    """--out inside a path whose folder is a file: that file is named, not an errno
    message ("File exists", "Not a directory") about a folder that was to be made."""
    (tmp_path / "afile").write_text("x")
    key = tmp_path / "afile" / out
    assert main(["keygen", "--out", str(key), "--no-trust"]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: --out {key}: {tmp_path / 'afile'} is a file, not a directory, "
                   "so the key cannot be written there; fix: give a path in a directory\n"
                   ), err
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("name", ["", "   ", "a\nb", "tab\there", "x" * 101])
@pytest.mark.parametrize("out", [True, False])
def test_cli_keygen_refuses_a_name_that_is_no_label(name: str, out: bool,
                                                    env: dict[str, Path], tmp_path: Path,
                                                    capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["keygen", "--name", name, *(["--out", str(tmp_path / "k.pem")] if out else [])])
    assert info.value.code == 2
    assert (f"argument --name: {name!r} is not a key label; use 1 to 100 printable "
            "characters") in capsys.readouterr().err
    assert not (tmp_path / "k.pem").exists() and not env["config"].exists()


@pytest.mark.parametrize("spaced", [" {key}", "{key}\n", "  {key}  "])
def test_cli_trust_add_takes_a_key_with_space_around_it(spaced: str, env: dict[str, Path],
                                                        key: signing.SigningKey,
                                                        capsys) -> None:
    """The key as pasted, or as ``"$(cat NAME.pub)"`` gives it: read as the key it is,
    as its argument check reads it, not as the name of a key file."""
    assert main(["trust", "add", spaced.format(key=key.public.text)]) == 0
    assert f"key {key.public.key_id}" in capsys.readouterr().out
    assert [k.key_id for k in trust.load_store().keys] == [key.public.key_id]


@pytest.mark.parametrize("text", ["garbage", "", "ed25519:AAAA"])
def test_cli_trust_add_of_a_key_file_holding_no_key_names_the_file(
        text: str, env: dict[str, Path], tmp_path: Path, capsys) -> None:
    pub = tmp_path / "colleague.pub"
    pub.write_text(text)
    assert main(["trust", "add", str(pub), "--repo", "org/*"]) == 1
    assert (f"error: {pub}: public key: {text!r} is not an ed25519 public key"
            in capsys.readouterr().err)
    assert not (env["config"] / "trust.json").exists()


@pytest.mark.parametrize("name", ["", "   ", "evil\n  deadbeefdeadbeef  default  repos *",
                                  "tab\there", "bell\a", "x" * 101])
def test_cli_trust_add_refuses_a_name_that_is_no_label(name: str, env: dict[str, Path],
                                                       key: signing.SigningKey,
                                                       capsys) -> None:
    """trust add --name takes what keygen --name takes: a label with a newline would
    print as extra lines in 'trust list', and an empty one would drop the key's name."""
    assert main(["trust", "add", key.public.text, "--name", "pub"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["trust", "add", key.public.text, "--name", name])
    assert info.value.code == 2
    assert (f"argument --name: {name!r} is not a key label; use 1 to 100 printable "
            "characters") in capsys.readouterr().err
    assert [(k.key_id, k.name) for k in trust.load_store().keys] == [
        (key.public.key_id, "pub")]


@pytest.mark.parametrize("name", ["   ", "evil\n  deadbeefdeadbeef  default  repos *",
                                  "tab\there", "\x1b[31mred", "x" * 101])
def test_add_key_refuses_a_name_trust_add_refuses(name: str, key: signing.SigningKey,
                                                  capsys) -> None:
    """Before: only the command line checked the label, and ``add_key`` stored a name
    that 'kernelforge trust list' then printed as a key entry of its own."""
    trust.add_key(key.public.text, name="pub")
    with pytest.raises(ValueError, match=rf"^name: {re.escape(repr(name))} is not a key "
                                         r"label; use 1 to 100 printable characters"):
        trust.add_key(key.public.text, name=name)
    with pytest.raises(TypeError, match="name: expected a string, got int"):
        trust.add_key(key.public.text, name=3)  # type: ignore[arg-type]
    assert [(k.key_id, k.name) for k in trust.load_store().keys] == [
        (key.public.key_id, "pub")]
    assert main(["trust", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5  # the store, keys:, one key, ...
    # "" is a key without a name, as for a new key added with none
    assert trust.add_key(key.public.text, name="").name == ""
    assert trust.add_key(key.public.text, name="x" * 100).name == "x" * 100


def test_cli_keygen_store_failure_quotes_the_label(env: dict[str, Path], tmp_path: Path,
                                                   monkeypatch, capsys) -> None:
    def fail(*args, **kwargs):
        raise TrustError("the store is locked")

    monkeypatch.setattr(trust, "add_key", fail)
    out = tmp_path / "ci.pem"
    assert main(["keygen", "--name", "CI key", "--out", str(out)]) == 1
    assert f"kernelforge trust add {out.with_suffix('.pub')} --name 'CI key' --repo '*'" in (
        capsys.readouterr().err)


def test_cli_keygen_force_untrusts_the_replaced_key(env: dict[str, Path], capsys) -> None:
    assert main(["keygen", "--repo", "me/*"]) == 0
    old = capsys.readouterr().out.split("key id:")[1].split()[0]
    assert main(["trust", "allow", "x/y"]) == 0  # other entries stay
    assert main(["keygen", "--force"]) == 0
    out = capsys.readouterr().out
    new = out.split("key id:")[1].split()[0]
    assert f"removed the replaced key {old} from your trust store" in out
    store = trust.load_store()
    assert [k.key_id for k in store.keys] == [new] and store.allow == ("x/y",)
    assert store.keys[0].repos == ("me/*",)  # the replaced key's scope, not "*"
    # --no-trust adds nothing, but still untrusts the key it replaces
    assert main(["keygen", "--force", "--no-trust"]) == 0
    assert f"removed the replaced key {new}" in capsys.readouterr().out
    assert trust.load_store().keys == ()


def test_cli_keygen_never_overwrites_a_key_with_its_public_half(
    env: dict[str, Path], tmp_path: Path, capsys
) -> None:
    assert main(["keygen", "--out", str(tmp_path / "alice.pub"), "--no-trust"]) == 1
    assert "must not end in .pub" in capsys.readouterr().err
    assert not (tmp_path / "alice.pub").exists()
    other = tmp_path / "bob.pub"
    other.write_text("somebody else's key\n")
    assert main(["keygen", "--out", str(tmp_path / "bob.pem"), "--no-trust"]) == 1
    err = capsys.readouterr().err
    assert f"{other}: exists and would be overwritten" in err and "--force" in err
    assert other.read_text() == "somebody else's key\n" and not (tmp_path / "bob.pem").exists()
    assert main(["keygen", "--out", str(tmp_path / "bob.pem"), "--no-trust", "--force"]) == 0
    key = signing.load_signing_key(tmp_path / "bob.pem")
    assert other.read_text().strip() == key.public.text


def test_cli_keygen_checks_the_store_before_writing(env: dict[str, Path], monkeypatch,
                                                    capsys) -> None:
    store = env["config"] / "trust.json"
    store.parent.mkdir(parents=True)
    store.write_text('{"format": 1, "keys": [')
    assert main(["keygen"]) == 1
    assert f"{store}: not valid JSON" in capsys.readouterr().err
    assert not (env["config"] / "keys").exists()
    # a failure after the key is written says how to trust it, not "--force"
    store.write_text('{"format": 1}')

    def fail(*args, **kwargs):
        raise TrustError("the store is locked")

    monkeypatch.setattr(trust, "add_key", fail)
    assert main(["keygen", "--repo", "me/*"]) == 1
    err = capsys.readouterr().err
    pub = env["config"] / "keys" / "default.pub"
    assert f"kernelforge trust add {pub} --name default --repo 'me/*'" in err
    assert "--force" not in err and pub.is_file()


def _refused_writes(monkeypatch, code: int) -> None:
    """Make every new file fail as a full disk (naming no file) or a folder one may not
    write (naming the temporary file) does; root writes anywhere, so chmod cannot."""
    import errno

    from kernelforge import _durable

    def refuse(path: Path, data: bytes, **kwargs) -> None:
        if code == errno.ENOSPC:
            raise OSError(code, os.strerror(code))
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(_durable, "write_new", refuse)


@pytest.mark.parametrize("code, fix", [
    (28, "free space on its disk"),  # ENOSPC
    (13, "make {config} writable"),  # EACCES
])
def test_cli_trust_store_that_cannot_be_written_is_named_with_the_fix(
        env: dict[str, Path], monkeypatch, capsys, code: int, fix: str) -> None:
    """A full disk or a read-only configuration directory: one error line naming the
    store (not the temporary file, nor "[Errno 28]" with no file at all) and the fix."""
    assert main(["trust", "allow", "me/a"]) == 0
    capsys.readouterr()
    store = env["config"] / "trust.json"
    before = store.read_bytes()
    _refused_writes(monkeypatch, code)
    assert main(["trust", "allow", "me/b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {store}: cannot write the trust store ("), err
    assert err.endswith(f"); it is unchanged; fix: {fix.format(config=env['config'])}, or "
                        "set KERNELFORGE_CONFIG to a directory you can write\n"), err
    assert "[Errno" not in err and err.count("\n") == 1
    assert store.read_bytes() == before
    assert sorted(p.name for p in env["config"].iterdir()) == ["trust.json", "trust.json.lock"]


def test_cli_keygen_that_cannot_write_its_key_says_none_was_written(
        env: dict[str, Path], monkeypatch, capsys) -> None:
    _refused_writes(monkeypatch, 28)
    assert main(["keygen"]) == 1
    pem = env["config"] / "keys" / "default.pem"
    assert capsys.readouterr().err == (
        f"error: {pem}: cannot write the new key (No space left on device); no key was "
        "written; fix: free space on its disk, or set KERNELFORGE_CONFIG to a directory "
        "you can write\n")
    assert [p.name for p in pem.parent.iterdir()] == [".default.pem.lock"]
    assert not (env["config"] / "trust.json").exists()


def test_cli_keygen_out_that_cannot_be_written_without_a_home_directory(
        env: dict[str, Path], monkeypatch, tmp_path: Path, capsys) -> None:
    """A key written where --out says, with no home directory (so no default
    configuration folder): the error is about the key, not about the home directory."""
    import pwd

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("HOME", "XDG_CONFIG_HOME", "KERNELFORGE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    _refused_writes(monkeypatch, 13)
    pem = tmp_path / "keys" / "k.pem"
    assert main(["keygen", "--out", str(pem), "--no-trust"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {pem}: cannot write the new key (Permission denied"), err
    assert err.endswith(f"); no key was written; fix: make {pem.parent} writable\n"), err


def test_cli_keygen_under_a_file_by_default_points_at_the_config_variable(
        env: dict[str, Path], monkeypatch, tmp_path: Path, capsys) -> None:
    """Without --out the key goes to the configuration directory: an error about it does
    not speak of an --out the user never gave."""
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "afile" / "config"))
    assert main(["keygen"]) == 1
    pem = tmp_path / "afile" / "config" / "keys" / "default.pem"
    assert capsys.readouterr().err == (
        f"error: {pem}: {tmp_path / 'afile'} is a file, not a directory, so the key cannot "
        "be written there; fix: set KERNELFORGE_CONFIG to a directory, or give the key's "
        "path with --out\n")


def _another_key_appears_while_writing(monkeypatch, path: Path) -> bytes:
    """Make a second writer create ``path`` just after this one has written its key to
    a temporary file (the moment two concurrent keygens collide); return its bytes."""
    from kernelforge import _durable

    theirs = b"-----BEGIN PRIVATE KEY-----\nanother run's key\n-----END PRIVATE KEY-----\n"
    write_temp = _durable.write_temp

    def racing(target: Path, data: bytes, **kwargs):
        tmp = write_temp(target, data, **kwargs)
        if target == path and not path.exists():
            path.write_bytes(theirs)
        return tmp

    monkeypatch.setattr(_durable, "write_temp", racing)
    return theirs


def test_generate_key_never_replaces_a_key_written_meanwhile(tmp_path: Path,
                                                            monkeypatch) -> None:
    """The key file is created exclusively: a key written by another run between the
    check and the write stays, and this run is refused, leaving no temporary file."""
    path = tmp_path / "keys" / "k.pem"
    path.parent.mkdir()
    theirs = _another_key_appears_while_writing(monkeypatch, path)
    with pytest.raises(TrustError, match="k.pem: a key already exists; pass "
                                         r"overwrite=True to replace it, or another path"):
        signing.generate_key(path)
    assert path.read_bytes() == theirs
    assert sorted(p.name for p in path.parent.iterdir()) == ["k.pem"]


def test_generate_key_without_hard_links_still_creates_exclusively(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """Where the file system has no hard links, the key is created with O_EXCL: it is
    written, private, and an existing file is still never replaced."""
    import errno

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "k.pem"
    key = signing.generate_key(path)
    assert signing.load_signing_key(path).public == key.public
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["k.pem"]
    other = tmp_path / "other.pem"
    theirs = _another_key_appears_while_writing(monkeypatch, other)
    with pytest.raises(TrustError, match="other.pem: a key already exists"):
        signing.generate_key(other)
    assert other.read_bytes() == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.pem", "other.pem"]


def test_cli_keygen_losing_a_race_says_so_and_trusts_nothing(env: dict[str, Path],
                                                             monkeypatch, capsys) -> None:
    """Two keygens at once: the one whose key file was written first keeps it; the other
    exits 1 saying a key exists, and neither writes a .pub nor trusts its key."""
    pem = env["config"] / "keys" / "default.pem"
    theirs = _another_key_appears_while_writing(monkeypatch, pem)
    assert main(["keygen"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"error: {pem}: a key already exists; pass --force to replace "
                            "it (the replaced key is then removed from your trust store), "
                            "or choose another --name or --out\n")
    assert "private key:" not in captured.out
    assert pem.read_bytes() == theirs and not pem.with_suffix(".pub").exists()
    assert trust.load_store().keys == ()


def _cli_together(tmp_path: Path, argv: list[str], n: int) -> list[tuple[int, str, str]]:
    """``kernelforge ARGV`` in ``n`` processes released at once: (exit status, stdout,
    stderr) of each."""
    go = tmp_path / "go"
    code = ("import os, sys, time\n"
            "from kernelforge.cli import main\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.005)\n"
            f"sys.exit(main({argv!r}))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ})
             for _ in range(n)]
    go.touch()
    return [(p.wait(timeout=120), *p.communicate()) for p in procs]


def test_cli_concurrent_keygens_leave_one_key_and_trust_only_it(env: dict[str, Path],
                                                                tmp_path: Path) -> None:
    """Four keygens started together: one succeeds; the trust store holds exactly the
    key whose private half is on disk."""
    results = _cli_together(tmp_path, ["keygen"], 4)
    assert sorted(rc for rc, _, _ in results) == [0, 1, 1, 1], results
    for rc, _out, err in results:
        assert rc == 0 or "a key already exists" in err, err
    pem = env["config"] / "keys" / "default.pem"
    on_disk = signing.load_signing_key(pem).public
    assert [k.key_id for k in trust.load_store().keys] == [on_disk.key_id]
    assert pem.with_suffix(".pub").read_text().strip() == on_disk.text
    assert sorted(p.name for p in pem.parent.iterdir()) == [
        ".default.pem.lock", "default.pem", "default.pub"]


def test_cli_concurrent_forced_keygens_leave_a_matching_pair_trusted_alone(
        env: dict[str, Path], tmp_path: Path) -> None:
    """Four keygen --force at once over an existing key take turns (a lock beside the
    key file): the .pub is the public half of the .pem on disk, and the trust store
    holds that key only, each replaced one removed."""
    assert main(["keygen"]) == 0
    results = _cli_together(tmp_path, ["keygen", "--force"], 4)
    assert [rc for rc, _, _ in results] == [0, 0, 0, 0], results
    pem = env["config"] / "keys" / "default.pem"
    on_disk = signing.load_signing_key(pem).public
    assert pem.with_suffix(".pub").read_text().strip() == on_disk.text
    assert [k.key_id for k in trust.load_store().keys] == [on_disk.key_id]


@pytest.mark.parametrize("after", ["signing.generate_key", "trust.add_key"])
def test_cli_keygen_force_killed_midway_then_run_again_untrusts_the_replaced_key(
        env: dict[str, Path], tmp_path: Path, capsys, after: str) -> None:
    """A keygen --force killed (SIGKILL) once the new private key is in place, before the
    trust store changed or before the .pub was written: the same command run again ends
    with the trust store holding only the key on disk, in the replaced key's scope, and
    the .pub naming it; the key that was being replaced is no longer trusted."""
    assert main(["keygen", "--repo", "me/*"]) == 0
    first = capsys.readouterr().out.split("key id:")[1].split()[0]
    module, name = after.split(".")
    code = ("import os, signal, sys\n"
            f"from kernelforge import {module} as target\n"
            f"real = target.{name}\n"
            "def killed(*args, **kwargs):\n"
            "    real(*args, **kwargs)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            f"target.{name} = killed\n"
            "from kernelforge.cli import main\n"
            "sys.exit(main(['keygen', '--force']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ}, timeout=120, check=False)
    assert proc.returncode == -9, proc.stderr
    assert main(["keygen", "--force"]) == 0
    pem = env["config"] / "keys" / "default.pem"
    on_disk = signing.load_signing_key(pem).public
    store = trust.load_store()
    assert first not in [k.key_id for k in store.keys]
    assert [k.key_id for k in store.keys] == [on_disk.key_id]
    assert store.keys[0].repos == ("me/*",)
    assert pem.with_suffix(".pub").read_text().strip() == on_disk.text



class _Killed(BaseException):
    """The process dying at this point: nothing after it runs, no cleanup either."""


def _dies_after_its_temporary(monkeypatch, target: Path) -> None:
    """Make the write of ``target`` stop dead once its hidden temporary is written, as a
    process killed before its rename: the temporary stays."""
    from kernelforge import _durable

    write_temp = _durable.write_temp

    def dying(path: Path, data: bytes, **kwargs):
        tmp = write_temp(path, data, **kwargs)
        if path == target:
            raise _Killed
        return tmp

    monkeypatch.setattr(_durable, "write_temp", dying)


def test_a_temporary_a_killed_trust_change_left_is_removed_by_the_next(
        env: dict[str, Path], monkeypatch, tmp_path: Path) -> None:
    """A change of the trust store killed before its rename leaves the store as it was
    and a hidden temporary beside it; the next change removes that temporary (and no
    file of the user's)."""
    from kernelforge import _durable

    first = signing.generate_key(tmp_path / "a.pem").public
    second = signing.generate_key(tmp_path / "b.pem").public
    store = env["config"] / "trust.json"
    write_temp = _durable.write_temp
    _dies_after_its_temporary(monkeypatch, store)
    with pytest.raises(_Killed):
        trust.add_key(first.text, name="a")
    monkeypatch.setattr(_durable, "write_temp", write_temp)
    assert not store.exists() and len(_durable.temp_leftovers(store)) == 1
    mine = env["config"] / ".trust.json.notes.tmp"
    mine.write_text("the user's")

    trust.add_key(second.text, name="b")
    assert _durable.temp_leftovers(store) == []
    assert mine.read_text() == "the user's"
    assert [k.key_id for k in trust.load_store().keys] == [second.key_id]


@pytest.mark.parametrize("dies_writing", ["default.pem", "default.pub"])
def test_a_temporary_a_killed_keygen_left_is_removed_by_the_next(
        env: dict[str, Path], monkeypatch, capsys, dies_writing: str) -> None:
    """A keygen killed before the rename of its private key (whose temporary holds a
    private key) or of its .pub: run again (with --force where the private key is in
    place), it leaves a matching, trusted pair and no temporary."""
    from kernelforge import _durable

    keys = env["config"] / "keys"
    write_temp = _durable.write_temp
    _dies_after_its_temporary(monkeypatch, keys / dies_writing)
    with pytest.raises(_Killed):
        main(["keygen"])
    monkeypatch.setattr(_durable, "write_temp", write_temp)
    assert len(_durable.temp_leftovers(keys / dies_writing)) == 1
    capsys.readouterr()

    again = ["keygen"] if dies_writing.endswith(".pem") else ["keygen", "--force"]
    assert main(again) == 0, capsys.readouterr().err
    pem = keys / "default.pem"
    on_disk = signing.load_signing_key(pem).public
    assert pem.with_suffix(".pub").read_text().strip() == on_disk.text
    assert [k.key_id for k in trust.load_store().keys] == [on_disk.key_id]
    assert sorted(p.name for p in keys.iterdir()) == [
        ".default.pem.lock", "default.pem", "default.pub"]


def test_importing_stays_light() -> None:
    """Importing kernelforge, or any module the command line or a load reaches (the
    builder and signing among them), imports none of the heavy or optional packages:
    they are imported where they are used."""
    code = ("import sys, kernelforge, kernelforge.__main__, kernelforge.cli, "
            "kernelforge.loader, kernelforge.lock, kernelforge.policy, kernelforge.hub.hf, "
            "kernelforge.trust, kernelforge.signing, kernelforge.build, kernelforge.manifest, "
            "kernelforge.variants, kernelforge.scaffold, kernelforge.demo\n"
            "heavy = {'torch', 'huggingface_hub', 'cryptography', 'sigstore', 'httpx'}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ}).stdout
    assert out.strip() == "[]"


def test_a_decision_reads_without_saying_its_verdict_twice() -> None:
    assert str(policy.TrustDecision(True, "allowed by the trust store (t.toml)")) == \
        "trust: allowed by the trust store (t.toml)"
    assert str(policy.TrustDecision(True, "signed by key 3f2a (alice)", notes=("n",))) == \
        "trust: allowed, signed by key 3f2a (alice); n"
    assert str(policy.TrustDecision(False, "not signed")) == "trust: refused, not signed"


# --- walkthrough 2: allow-list merges, removing a key by name, public key or prefix -------


def test_allowing_a_broader_pattern_keeps_the_narrower_entries(
        key: signing.SigningKey) -> None:
    """Each allow-list entry is the user's own: allowing org/* (or *) keeps org/x, so
    removing the broader pattern later leaves org/x allowed; and org/y added under org/*
    is stored too, whichever order they came in. Key scopes keep their patterns alike."""
    assert trust.allow_repo("org/x")
    assert trust.allow_repo("org/*")
    assert trust.allow_repo("*")
    assert trust.allow_repo("org/y")  # covered by org/* and *, and added all the same
    assert not trust.allow_repo("ORG/*")  # the same entry (case aside): nothing changes
    assert trust.load_store().allow == ("org/x", "org/*", "*", "org/y")
    trust.remove("*")
    trust.remove("org/*")
    store = trust.load_store()
    assert store.allow == ("org/x", "org/y")
    assert store.allows("org/x") and store.allows("org/y") and not store.allows("org/z")
    entry = trust.add_key(key.public.text, repos=("org/x",))
    assert trust.add_key(key.public.text, repos=("org/*",)).repos == ("org/x", "org/*")
    assert trust.add_key(key.public.text, repos=("*",)).repos == ("org/x", "org/*", "*")
    assert trust.load_store().key(entry.key_id).covers("any/repo")  # type: ignore[union-attr]


def test_cli_trust_allow_says_what_it_kept_and_warns_for_star(capsys) -> None:
    assert main(["trust", "allow", "my-org/my-relu"]) == 0
    assert capsys.readouterr().out == "allowed my-org/my-relu without a signature\n"
    assert main(["trust", "allow", "my-org/*"]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        "allowed my-org/* without a signature\n"
        "kept the entries it covers, so they stay allowed if my-org/* is removed later: "
        "my-org/my-relu\n")
    assert captured.err == ""
    assert main(["trust", "allow", "my-org/other"]) == 0
    assert capsys.readouterr().out == (
        "allowed my-org/other without a signature (my-org/* allowed it already; this entry "
        "keeps it allowed if that is removed)\n")
    assert main(["trust", "allow", "*"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ("allowed * without a signature\nkept the entries it covers, "
                            "so they stay allowed if * is removed later: my-org/my-relu, "
                            "my-org/*, my-org/other\n")
    assert captured.err == (
        "warning: '*' on the allow list turns off the signature requirement for every "
        "repository: unsigned kernels from any publisher on any hub now load; undo it "
        "with: kernelforge trust remove '*'\n")
    assert main(["trust", "allow", "*"]) == 0  # already there: still warned
    assert "turns off the signature requirement" in capsys.readouterr().err
    assert main(["trust", "remove", "*"]) == 0
    assert main(["trust", "remove", "my-org/*"]) == 0
    capsys.readouterr()
    assert main(["trust", "list"]) == 0
    assert capsys.readouterr().out.endswith(
        "allowed without signature:\n  my-org/my-relu\n  my-org/other\n")


def test_a_key_is_removed_by_its_name_public_key_or_id_prefix(tmp_path: Path) -> None:
    """What 'trust list' shows of a key names it for 'trust remove': its id, the start
    of its id (8 or more hex digits), its name (when one key has it) and its public key.
    A name two keys share, or too short a prefix, is refused with the key ids."""
    keys = [signing.generate_key(tmp_path / "keys" / f"k{i}.pem").public for i in range(4)]
    ci = trust.add_key(keys[0].text, name="ci", repos=("acme/*",))
    lbl = trust.add_key(keys[1].text, name="lbl")
    twin1 = trust.add_key(keys[2].text, name="twin")
    twin2 = trust.add_key(keys[3].text, name="twin")
    assert trust.remove("ci") == f"key {ci.key_id} (ci)"
    assert trust.remove(keys[1].text) == f"key {lbl.key_id} (lbl)"
    with pytest.raises(TrustError, match=(
            f"'twin' is the name of 2 keys in the trust store .*: {twin1.key_id} \\(twin\\), "
            f"{twin2.key_id} \\(twin\\); pass the key id of the one to remove")):
        trust.remove("twin")
    with pytest.raises(TrustError, match=(
            f"'{twin1.key_id[:7]}' is the start of key id {twin1.key_id} in the trust "
            "store .*, but too short to pick a key by: give at least 8 hex digits")):
        trust.remove(twin1.key_id[:7])
    assert trust.remove(twin1.key_id[:8].upper()) == f"key {twin1.key_id} (twin)"
    assert trust.remove("twin") == f"key {twin2.key_id} (twin)"  # the one left
    assert trust.load_store().keys == ()
    with pytest.raises(TrustError, match="'ci' is not in the trust store .*: it is no key "
                       "id \\(or its first 8 or more hex digits\\), key name, public key"):
        trust.remove("ci")
    with pytest.raises(TrustError, match="ed25519"):  # a malformed public key says so
        trust.remove("ed25519:nonsense")


def test_cli_trust_remove_takes_what_trust_list_shows(env: dict[str, Path], capsys) -> None:
    assert main(["keygen", "--name", "ci", "--repo", "acme/*"]) == 0
    out = capsys.readouterr().out
    key_id = out.split("key id:")[1].split()[0]
    public = out.split("public key:")[1].split()[0]
    assert main(["trust", "remove", "ci"]) == 0
    assert capsys.readouterr().out == f"removed key {key_id} (ci)\n"
    for what in (public, key_id[:8]):
        assert main(["trust", "add", public, "--name", "ci"]) == 0
        capsys.readouterr()
        assert main(["trust", "remove", what]) == 0
        assert capsys.readouterr().out == f"removed key {key_id} (ci)\n"


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("out", ["x.pem", "sub/x.pem"])
def test_generate_key_under_a_file_names_the_file(tmp_path: Path, out: str,
                                                  overwrite: bool) -> None:
    """The Python API refuses as the CLI does: a TrustError naming the file in the way,
    not a bare FileExistsError or NotADirectoryError about a folder to be made."""
    (tmp_path / "afile").write_text("x")
    key = tmp_path / "afile" / out
    with pytest.raises(TrustError) as info:
        signing.generate_key(key, overwrite=overwrite)
    assert str(info.value) == (f"{key}: {tmp_path / 'afile'} is a file, not a directory, "
                               "so the key cannot be written there; fix: give a path "
                               "in a directory")
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("overwrite", [False, True])
def test_generate_key_into_a_directory_asks_for_a_file(tmp_path: Path,
                                                       overwrite: bool) -> None:
    """Neither "a key already exists" (it does not) nor, with overwrite, an
    IsADirectoryError about a temporary file."""
    (tmp_path / "keys").mkdir()
    with pytest.raises(TrustError) as info:
        signing.generate_key(tmp_path / "keys", overwrite=overwrite)
    assert str(info.value) == (f"{tmp_path / 'keys'} is a directory; give the key's file "
                               f"path, e.g. {tmp_path / 'keys' / 'NAME.pem'}")
    assert list((tmp_path / "keys").iterdir()) == []


def test_generate_key_over_a_key_names_its_own_argument(tmp_path: Path) -> None:
    """Before: the refusal said "pass --force", an option of 'kernelforge keygen' (which
    says it in a message of its own), not of ``generate_key``."""
    path = tmp_path / "k.pem"
    first = signing.generate_key(path)
    with pytest.raises(TrustError) as info:
        signing.generate_key(path)
    assert str(info.value) == (f"{path}: a key already exists; pass overwrite=True to "
                               "replace it, or another path")
    assert signing.load_signing_key(path).public == first.public
    assert signing.generate_key(path, overwrite=True).public != first.public


@pytest.mark.parametrize("repos, error, message", [
    ("me/*", TypeError, r"repos: expected a tuple of repository patterns, got the string "
                        r"'me/\*'; fix: pass \('me/\*',\)"),
    (["me/*", 3], TypeError, r"repos: 3 is not a repository pattern; expected a string"),
    (("me",), ValueError, r"repos: 'me' is not a repository pattern"),
])
def test_trust_functions_refuse_repos_that_are_no_patterns(
        repos: object, error: type[Exception], message: str,
        key: signing.SigningKey) -> None:
    """Before: a string was read one character at a time ("'m' is not a valid repository
    id" for "me/*"), and a number failed with an AttributeError."""
    for add in (lambda: trust.add_key(key.public.text, repos=repos),  # type: ignore[arg-type]
                lambda: trust.add_sigstore_identity(WORKFLOW, repos=repos)):  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            add()
    with pytest.raises(TypeError, match="3 is not a repository pattern"):
        trust.allow_repo(3)  # type: ignore[arg-type]
    store = trust.load_store()
    assert (store.keys, store.sigstore, store.allow) == ((), (), ())
    assert trust.add_key(key.public.text, repos=["me/*"]).repos == ("me/*",)


@pytest.mark.parametrize("identity, issuer, message", [
    (None, trust.GITHUB_ISSUER, "identity: expected a string, got NoneType"),
    (WORKFLOW, None, "issuer: expected a string, got NoneType"),
])
def test_add_sigstore_identity_refuses_an_identity_or_issuer_that_is_no_text(
        identity: object, issuer: object, message: str) -> None:
    """Before: an AttributeError from inside the check ('NoneType' object has no
    attribute 'strip')."""
    with pytest.raises(TypeError, match=message):
        trust.add_sigstore_identity(identity, issuer=issuer)  # type: ignore[arg-type]
    assert trust.load_store().sigstore == ()
