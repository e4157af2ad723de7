"""Integrity on every load: one flipped byte in the .so or in __init__.py, an added file,
a removed file or a swapped metadata.json is refused with the file named, wherever the
tampering happened (the local hub, the remote, the download cache, a locked load)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kf_sharing import SO_NAME, FakeHfApi, isolate, make_variant, uid
from kf_testutil import write_metadata

from kernelforge import loader, signing, trust
from kernelforge.cache import DownloadCache
from kernelforge.cli import main
from kernelforge.digest import b64_sha256
from kernelforge.errors import (
    HubError,
    IntegrityError,
    SignatureMismatchError,
    TrustError,
    UnreadableSignatureError,
)
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub
from kernelforge.lock import download_locked, lock_project, read_lock

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


def _writable(vdir: Path) -> None:
    for dirpath, _dirs, files in os.walk(vdir):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def _tamperable(env, tmp_path: Path, module_id: str) -> tuple[LocalHub, str, Path]:
    """A variant published to the test's local hub: the hub, the commit and the variant
    directory, its files made writable for tampering."""
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    return hub, commit, vdir


def _cached_variant(env, tmp_path: Path, key, module_id: str) -> tuple[FakeHfApi, Path]:
    """A signed variant published to a fake Hugging Face Hub and fetched into the test's
    download cache: the fake API and the cached variant directory, its files made
    writable for tampering."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    fetched = hf.fetch_variant(REPO, commit, "torch-cpu")
    _writable(fetched.path)
    return api, fetched.path

def _flip(path: Path, offset: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _swap_metadata(vdir: Path, other: Path) -> None:
    (vdir / "metadata.json").write_bytes((other / "metadata.json").read_bytes())


# (name, tamper(vdir, other_build_variant_dir), the problem the error must name)
TAMPERS: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("so-byte", lambda v, o: _flip(v / SO_NAME, 100), f"changed: {SO_NAME}"),
    ("init-byte", lambda v, o: _flip(v / "__init__.py"), "changed: __init__.py"),
    ("added", lambda v, o: (v / "evil.py").write_text("import os\n"), "extra: evil.py"),
    ("removed", lambda v, o: (v / "helper.py").unlink(), "missing: helper.py"),
    ("swapped-metadata", _swap_metadata, "metadata.json"),
]
IDS = [t[0] for t in TAMPERS]


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """Another, valid build of the same variant (for the swapped metadata.json)."""
    return make_variant(tmp_path / "other", "torch-cpu", value=99, module_id=uid("other"))


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    k = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(k.public.text, name="ci")
    return k


def _refused(call: Callable[[], object], problem: str, module_id: str,
             kinds: tuple[type[Exception], ...] = (IntegrityError,)) -> None:
    with pytest.raises(kinds) as info:
        call()
    assert problem in str(info.value), str(info.value)
    assert module_id not in sys.modules


@pytest.mark.parametrize(("name", "tamper", "problem"), TAMPERS, ids=IDS)
def test_local_hub(env, tmp_path: Path, other: Path, name, tamper, problem) -> None:
    module_id = uid("local")
    hub, commit, vdir = _tamperable(env, tmp_path, module_id)
    tamper(vdir, other)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), problem, module_id)
    # the hub's copy is the revision itself: the error says how to mend it
    with pytest.raises(IntegrityError) as info:
        loader.get_kernel(REPO, version=1, hub=hub)
    assert str(info.value).endswith(
        "\nthe hub's copy of this revision is damaged: publish the build again (or load "
        "another revision)"), str(info.value)
    assert info.value.where == vdir and any(problem in p for p in info.value.problems)


def test_a_damaged_local_hub_copy_that_a_lock_pins_names_the_fix(
        env, tmp_path: Path, capsys) -> None:
    """A locked load and 'kernelforge download' of a local hub's copy changed after it
    was published say what mends it: a new publish, which is a new revision, so the lock
    file is written again too (fetching again, as for a download cache, cannot help)."""
    module_id = uid("locallock")
    hub, _commit, vdir = _tamperable(env, tmp_path, module_id)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(project, hub=hub).path
    (vdir / "helper.py").write_text("evil = 1\n")
    fix = (f"the hub's copy of this revision is damaged: publish the build again, then run "
           f"'kernelforge lock' again so that {lock} pins the new revision")
    for call in (lambda: loader.load_kernel(REPO, lockfile=lock, hub=hub),
                 lambda: download_locked(lock, hub=hub)):
        with pytest.raises(IntegrityError) as info:
            call()
        assert info.value.problems == ["changed: helper.py"]
        assert str(info.value).endswith(f"\n{fix}"), str(info.value)
    # kernel_info --lock says the same fix, naming the lock file
    said = loader.kernel_info(REPO, lockfile=lock, hub=hub).trust
    assert said.startswith("trust: refused") and said.endswith(f"; {fix}"), said
    assert module_id not in sys.modules
    capsys.readouterr()
    assert main(["download", str(lock), "--hub", str(hub.root)]) == 1
    assert capsys.readouterr().err.rstrip().endswith(fix)


@pytest.mark.parametrize(("name", "tamper", "problem"), TAMPERS, ids=IDS)
def test_remote_source(env, tmp_path: Path, other: Path, key, name, tamper, problem) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("remote")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    tamper(api.tree(REPO, commit) / "build" / "torch-cpu", other)
    # a swapped metadata.json breaks the signature, which names the file
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hf), problem, module_id,
             (IntegrityError, TrustError))
    assert hf.cache.entries() == []  # nothing that failed verification is cached


@pytest.mark.parametrize(("name", "tamper", "problem"), TAMPERS, ids=IDS)
def test_download_cache_offline(env, tmp_path: Path, other: Path, key, monkeypatch,
                                name, tamper, problem) -> None:
    module_id = uid("cache")
    api, cached = _cached_variant(env, tmp_path, key, module_id)
    tamper(cached, other)
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"])),
             problem, module_id)


@pytest.mark.parametrize(("name", "tamper", "problem"), TAMPERS, ids=IDS)
def test_locked_load(env, tmp_path: Path, other: Path, monkeypatch, name, tamper,
                     problem) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("lock")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(project, hub=hf, allow=True).path
    fetched = hf.fetch_variant(REPO, commit, "torch-cpu")
    _writable(fetched.path)
    tamper(fetched.path, other)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _refused(lambda: loader.load_kernel(REPO, lockfile=lock, hub=hf), problem, module_id)


def test_cached_copy_that_fails_verification_is_fetched_again_online(
    env, tmp_path: Path, key, caplog
) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("heal")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    fetched = hf.fetch_variant(REPO, commit, "torch-cpu")
    _writable(fetched.path)
    _flip(fetched.path / SO_NAME)
    before = len(api.fetches())
    assert loader.get_kernel(REPO, version=1, hub=hf).__name__ == module_id
    assert "failed verification" in caplog.text and f"changed: {SO_NAME}" in caplog.text
    assert len(api.fetches()) > before


def _cached_as_served_damaged(env, tmp_path: Path, key, other: Path, *, signed: bool
                              ) -> tuple[FakeHfApi, str, str]:
    """A variant whose copy in the download cache is what a proxy served in its place
    (another build's files with their own metadata.json, fetched before anything read
    the variant's metadata.json, as ``kernelforge download`` fetches): the cached files
    match what was recorded when they were fetched, not the digests of the metadata.json
    the hub publishes. The hub serves the real build again afterwards. Returns the fake
    API, the commit and the real build's module id."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("transit")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key if signed else None).commit
    served = api.tree(REPO, commit) / "build" / "torch-cpu"
    real = {p.name: p.read_bytes() for p in served.iterdir()}
    for name in real:
        api.tamper(REPO, commit, f"build/torch-cpu/{name}", (other / name).read_bytes())
    hf.fetch_variant(REPO, commit, "torch-cpu")
    for name, data in real.items():
        api.tamper(REPO, commit, f"build/torch-cpu/{name}", data)
    return api, commit, module_id


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "allowed"])
def test_a_copy_cached_as_a_proxy_served_it_is_fetched_again_online(
        env, tmp_path: Path, key, other: Path, caplog, signed: bool) -> None:
    """The cached files match the digests recorded when they were fetched, so they did
    not change in the cache; they fail the digests of the metadata.json the trust policy
    saw because they were damaged before they were recorded. Online, the load fetches
    a fresh copy once, signed or not, rather than refusing what the cache holds on every
    load."""
    api, commit, module_id = _cached_as_served_damaged(env, tmp_path, key, other,
                                                       signed=signed)
    before = len(api.fetches())
    hf = HfHub(api=api, cache=env["cache"])
    assert loader.get_kernel(REPO, version=1, hub=hf,
                             trust_remote_code=not signed).__name__ == module_id
    assert "failed verification" in caplog.text and "fetching it again" in caplog.text
    assert f"{REPO}@{commit[:12]}/build/torch-cpu/{SO_NAME}" in api.fetches()[before:]


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "allowed"])
def test_a_copy_cached_as_a_proxy_served_it_is_refused_when_the_fresh_copy_fails_too(
        env, tmp_path: Path, key, other: Path, signed: bool) -> None:
    """Fetched again, the copy must pass every check: a hub still serving other bytes is
    refused, and what it served is not kept."""
    api, commit, module_id = _cached_as_served_damaged(env, tmp_path, key, other,
                                                       signed=signed)
    api.tamper(REPO, commit, f"build/torch-cpu/{SO_NAME}", b"\x7fELF damaged")
    hf = HfHub(api=api, cache=env["cache"])
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=not signed),
             f"changed: {SO_NAME}", module_id)
    assert hf.cache.entries() == []


def test_a_copy_cached_as_a_proxy_served_it_offline_names_the_fix(
        env, tmp_path: Path, key, other: Path, monkeypatch) -> None:
    api, commit, module_id = _cached_as_served_damaged(env, tmp_path, key, other, signed=True)
    loader.kernel_info(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]))
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IntegrityError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]))
    said = str(info.value)
    assert "changed: metadata.json" in said, said
    assert f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said, said
    assert "holds the files as they were served, damaged on their way, and offline it is " \
           "not fetched again" in said, said
    assert module_id not in sys.modules


def _locked_as_served_damaged(env, tmp_path: Path, key, other: Path
                              ) -> tuple[FakeHfApi, str, str, Path]:
    """:func:`_cached_as_served_damaged` of an unsigned build, then locked while the hub
    serves the real build: the lock pins the real files, the cache holds the other
    build as it was served. Returns the fake API, the commit, the real build's module id
    and the lock file."""
    api, commit, module_id = _cached_as_served_damaged(env, tmp_path, key, other,
                                                       signed=False)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    hf = HfHub(api=api, cache=env["cache"])
    return api, commit, module_id, lock_project(project, hub=hf, allow=True).path


def test_download_fetches_a_copy_cached_as_a_proxy_served_it_again(
        env, tmp_path: Path, key, other: Path, caplog, monkeypatch) -> None:
    """``kernelforge download`` judges a cached copy as loads do: kept as it was served
    but unlike the metadata.json the lock pins, it was damaged on its way, and a fresh
    copy is fetched once (rather than blaming the lock file)."""
    api, commit, module_id, lock = _locked_as_served_damaged(env, tmp_path, key, other)
    before = len(api.fetches())
    (fetched,) = download_locked(lock, hub=HfHub(api=api, cache=env["cache"]))
    assert fetched[:2] == (REPO, "torch-cpu")
    assert ("the cached copy of variant torch-cpu failed verification (changed: "
            "metadata.json" in caplog.text and "fetching it again" in caplog.text)
    assert f"{REPO}@{commit[:12]}/build/torch-cpu/{SO_NAME}" in api.fetches()[before:]
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


def test_download_refuses_a_copy_cached_as_a_proxy_served_it_when_the_fresh_copy_fails_too(
        env, tmp_path: Path, key, other: Path) -> None:
    api, commit, _module_id, lock = _locked_as_served_damaged(env, tmp_path, key, other)
    api.tamper(REPO, commit, f"build/torch-cpu/{SO_NAME}", b"\x7fELF damaged")
    hf = HfHub(api=api, cache=env["cache"])
    with pytest.raises(IntegrityError, match=f"changed: {SO_NAME}"):
        download_locked(lock, hub=hf)
    assert hf.cache.entries() == []


def test_download_offline_of_a_copy_cached_as_a_proxy_served_it_names_the_fix(
        env, tmp_path: Path, key, other: Path, monkeypatch) -> None:
    api, commit, _module_id, lock = _locked_as_served_damaged(env, tmp_path, key, other)
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IntegrityError) as info:
        download_locked(lock, hub=HfHub(api=api, cache=env["cache"]))
    said = str(info.value)
    assert "changed: metadata.json" in said, said
    assert "holds the files as they were served, damaged on their way, and offline it is " \
           "not fetched again" in said, said
    assert f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said, said
    assert "kernelforge lock' again" not in said, said


# --- a signature over copies damaged on their way ----------------------------------------

SIGNED = {"metadata": "build/torch-cpu/metadata.json", "sig": "build/torch-cpu.sig"}
#: a load's warning where both were kept (read by an earlier call)
BOTH_FETCHED_AGAIN = ("the signature of variant torch-cpu does not verify over the download "
                      "cache's copies of build/torch-cpu/metadata.json and "
                      "build/torch-cpu.sig; fetching again")
#: the fix of a signature that fails as the hub serves it: only its publisher has one
PUBLISHERS_FIX = "fix: its publisher must publish the kernel again with --sign"


def _publishers_fix_only(said: str) -> None:
    """A refusal of copies as the hub serves them: one paragraph that ends with the
    publisher's fix, and offers neither the cache's nor an allowance, which lifts nothing."""
    assert "\n" not in said and said.endswith(PUBLISHERS_FIX), said
    assert "cache remove" not in said and "trust allow" not in said, said
    assert "republish" not in said, said


def _cache_fix_first(said: str, commit: str) -> None:
    """A refusal offline over copies kept in the download cache: one paragraph whose fix
    is the cache's; the publisher's comes after it, only for fresh copies that fail too."""
    assert "\n" not in said, said
    cache_fix = said.index(f"; fix: 'kernelforge cache remove {REPO} --revision {commit[:12]}")
    assert "--sign" not in said[:cache_fix] and "republish" not in said, said
    assert said.index("then 'kernelforge download' on a locked project, or a load while "
                      "online. Only where the cop") > cache_fix, said
    assert said.endswith("fetched again fail too are the hub's own to blame, and then its "
                         "publisher must publish the kernel again with --sign") or \
        said.endswith("fetched again fails too is the hub's own to blame, and then its "
                      "publisher must publish the kernel again with --sign"), said


def _damaged(path: str, data: bytes) -> bytes:
    """``data`` as a damaged transfer could deliver it, still well-formed: a metadata.json
    with a byte more, a signature with one bit of its signature flipped."""
    if path.endswith("metadata.json"):
        return data + b"\n"
    doc = json.loads(data)
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[0] ^= 0x01
    doc["signature"] = base64.b64encode(bytes(raw)).decode("ascii")
    return json.dumps(doc).encode()


def _signed_copy_damaged_on_its_way(env, tmp_path: Path, key, path: str
                                    ) -> tuple[FakeHfApi, str, str]:
    """A signed variant whose file ``path`` (its metadata.json or signature) the hub
    served damaged to a ``kernel_info``, which kept it in the download cache and was
    refused; the hub serves the real file again afterwards. Returns the fake API, the
    commit and the module id."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("sigway")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    real = (api.tree(REPO, commit) / path).read_bytes()
    api.tamper(REPO, commit, path, _damaged(path, real))
    with pytest.raises(SignatureMismatchError, match="does not verify"):
        loader.kernel_info(REPO, version=1, hub=hf)
    # fetched by that very call: refused as it came, not fetched again
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{path}") == 1
    api.tamper(REPO, commit, path, real)
    return api, commit, module_id


@pytest.mark.parametrize("path", SIGNED.values(), ids=SIGNED.keys())
def test_a_signed_copy_damaged_on_its_way_is_fetched_again_online(
        env, tmp_path: Path, key, caplog, path: str) -> None:
    """The signature fails over the cached copies, not over what the hub serves: a load
    online fetches them again once and loads, rather than refusing on every load."""
    api, commit, module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key, path)
    hf = HfHub(api=api, cache=env["cache"])
    assert loader.get_kernel(REPO, version=1, hub=hf).__name__ == module_id
    assert BOTH_FETCHED_AGAIN in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{path}") == 2
    assert hf.cache.peek_file(REPO, commit, path) == (api.tree(REPO, commit) / path
                                                      ).read_bytes()


@pytest.mark.parametrize("path", SIGNED.values(), ids=SIGNED.keys())
def test_a_signed_copy_damaged_on_its_way_is_refused_when_the_fresh_copy_fails_too(
        env, tmp_path: Path, key, path: str) -> None:
    """Fetched again, the files must pass the signature: a hub still serving them damaged
    (or a forgery) is refused as before, after one download more."""
    api, commit, module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key, path)
    api.tamper(REPO, commit, path, _damaged(path, (api.tree(REPO, commit) / path).read_bytes()))
    hf = HfHub(api=api, cache=env["cache"])
    with pytest.raises(SignatureMismatchError) as info:
        loader.get_kernel(REPO, version=1, hub=hf)
    said = str(info.value)
    assert "does not verify" in said, said
    _publishers_fix_only(said)
    assert info.value.problem == said.removesuffix(
        "; refusing to load it, even where the repository is allowed; " + PUBLISHERS_FIX)
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{path}") == 2
    assert module_id not in sys.modules and hf.cache.entries() == []


def test_a_locked_load_fetches_a_signature_damaged_on_its_way_again(
        env, tmp_path: Path, key, caplog) -> None:
    """A lock pins the metadata.json, not the signature, which a trusted key's failure
    refuses all the same: a locked load online fetches a kept copy of it again too."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("siglock")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(project, hub=hf).path
    _kept_damaged(hf, api, commit, SIGNED["sig"])
    assert loader.get_locked_kernel(REPO, lockfile=lock, hub=hf).__name__ == module_id
    assert BOTH_FETCHED_AGAIN in caplog.text


def test_a_signed_copy_damaged_on_its_way_offline_names_the_fix(
        env, tmp_path: Path, key, monkeypatch) -> None:
    api, commit, module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key,
                                                             SIGNED["sig"])
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SignatureMismatchError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]))
    said = str(info.value)
    assert "does not verify" in said, said
    assert ("the download cache's copies of build/torch-cpu/metadata.json and "
            "build/torch-cpu.sig, kept from an earlier fetch, may be damaged (on their way, "
            "or in the cache), and offline they are not fetched again" in said), said
    _cache_fix_first(said, commit)
    assert said.startswith(info.value.problem + "; the download cache's copies"), said
    assert module_id not in sys.modules


# --- a kept signature file that no longer parses -----------------------------------------

#: ways a kept signature file stops being one: cut short, or its signature field lost
UNREADABLE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda real: real[:len(real) // 2],
    "no-signature": lambda real: json.dumps({**json.loads(real), "signature": None}).encode(),
}


def _signature_kept_unreadable(env, tmp_path: Path, key, damage: Callable[[bytes], bytes]
                               ) -> tuple[FakeHfApi, str, str, bytes]:
    """A signed variant whose signature an earlier ``kernel_info`` kept in the download
    cache, that copy then damaged by ``damage`` (the hub still serves the real one).
    Returns the fake API, the commit, the module id and the real signature."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("sigparse")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    loader.kernel_info(REPO, version=1, hub=hf, trust_remote_code=True)
    _damage_kept_signature(hf, commit, damage)
    return api, commit, module_id, (api.tree(REPO, commit) / SIGNED["sig"]).read_bytes()


def _damage_kept_signature(hf: HfHub, commit: str, damage: Callable[[bytes], bytes]) -> None:
    kept = hf.cache.cached_file(REPO, commit, SIGNED["sig"])
    assert kept is not None
    real = kept.read_bytes()
    kept.chmod(0o644)
    kept.write_bytes(damage(real))
    with pytest.raises(TrustError, match="not a valid signature file"):
        signing.parse_signature(kept.read_bytes(), "kept")


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted-key", "allowed"])
@pytest.mark.parametrize("damage", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_kept_signature_is_fetched_again_online(
        env, tmp_path: Path, caplog, damage, trusted: bool) -> None:
    """A damaged kept signature is the copy's fault, as a damaged kept metadata.json is: a
    load online fetches it again once and judges the fresh one, signed by a trusted key or
    allowed, rather than failing every load with advice to republish."""
    key = signing.generate_key(tmp_path / "k.pem")
    if trusted:
        trust.add_key(key.public.text, name="ci")
    api, commit, module_id, real = _signature_kept_unreadable(env, tmp_path, key, damage)
    hf = HfHub(api=api, cache=env["cache"])
    assert loader.get_kernel(REPO, version=1, hub=hf,
                             trust_remote_code=not trusted).__name__ == module_id
    assert ("the download cache's copy of build/torch-cpu.sig is not a signature file "
            "kernelforge can read; fetching again") in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGNED['sig']}") == 2
    assert hf.cache.peek_file(REPO, commit, SIGNED["sig"]) == real
    info = loader.kernel_info(REPO, version=1, hub=hf, trust_remote_code=not trusted)
    assert ("signed by trusted key" if trusted else "allowed by trust_remote_code") in info.trust


def test_an_unreadable_signature_the_hub_serves_too_is_refused_never_taken_as_unsigned(
        env, tmp_path: Path, key) -> None:
    """Fetched again, the signature must parse: one the hub serves unreadable is refused
    after one download more, even with trust_remote_code=True, which would load an
    unsigned build."""
    api, commit, module_id, real = _signature_kept_unreadable(
        env, tmp_path, key, UNREADABLE["truncated"])
    api.tamper(REPO, commit, SIGNED["sig"], real[:10])
    with pytest.raises(UnreadableSignatureError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]),
                          trust_remote_code=True)
    said = str(info.value)
    assert "build/torch-cpu.sig: not a valid signature file" in said, said
    assert "never taken for an unsigned build" in said and info.value.variant == "torch-cpu"
    _publishers_fix_only(said)
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGNED['sig']}") == 2
    assert module_id not in sys.modules


def test_an_unreadable_kept_signature_offline_names_the_fix(
        env, tmp_path: Path, key, monkeypatch) -> None:
    api, commit, module_id, _real = _signature_kept_unreadable(
        env, tmp_path, key, UNREADABLE["truncated"])
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnreadableSignatureError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]),
                          trust_remote_code=True)
    said = str(info.value)
    assert "not a valid signature file" in said, said
    assert ("the download cache's copy of build/torch-cpu.sig, kept from an earlier fetch, "
            "may be damaged (on its way, or in the cache), and offline it is not fetched "
            "again" in said), said
    _cache_fix_first(said, commit)
    assert "never taken for an unsigned build" not in said, said
    assert module_id not in sys.modules


#: ways a hub serves a signature that no trust lifts: one that does not parse, one that
#: does not verify over the metadata.json (a bit flipped)
SERVED_BAD_SIG: dict[str, Callable[[bytes], bytes]] = {
    "unreadable": lambda real: real[:10],
    "not-verifying": lambda real: _damaged(SIGNED["sig"], real),
}


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted-key", "untrusted-key"])
@pytest.mark.parametrize("served", SERVED_BAD_SIG.values(), ids=SERVED_BAD_SIG.keys())
def test_has_kernel_answers_for_a_build_whose_signature_a_load_refuses(
        env, tmp_path: Path, capsys, monkeypatch, served, trusted: bool) -> None:
    """has_kernel says whether a build for this system exists and judges no trust, as its
    docstring says: a signature a load would refuse (or a trust store it cannot read)
    does not make it raise, and it does not even fetch the signature. get_kernel, and
    ``kernelforge info`` (exit 1), still refuse the build with the full message."""
    key = signing.generate_key(tmp_path / "k.pem")
    if trusted:
        trust.add_key(key.public.text, name="ci")
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("hassig")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    api.tamper(REPO, commit, SIGNED["sig"], served((api.tree(REPO, commit) / SIGNED["sig"]
                                                    ).read_bytes()))
    assert loader.has_kernel(REPO, version=1, hub=hf) is True
    assert loader.has_kernel(REPO, version=1, hub=hf, trust_remote_code=True) is True
    assert f"{REPO}@{commit[:12]}/{SIGNED['sig']}" not in api.fetches()
    store = env["config"] / "trust.json"
    kept = store.read_bytes() if store.exists() else None
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("{not json")
    assert loader.has_kernel(REPO, version=1, hub=hf) is True
    if kept is None:
        store.unlink()
    else:
        store.write_bytes(kept)
    if trusted or served is SERVED_BAD_SIG["unreadable"]:  # refused whatever is allowed
        with pytest.raises((SignatureMismatchError, UnreadableSignatureError)):
            loader.get_kernel(REPO, version=1, hub=hf, trust_remote_code=True)
    else:  # a key not trusted: the build is refused as unsigned ones are, unless allowed
        with pytest.raises(TrustError, match="not signed by a trusted key"):
            loader.get_kernel(REPO, version=1, hub=hf)
    assert module_id not in sys.modules
    _use(monkeypatch, api, env)
    capsys.readouterr()
    assert main(["info", REPO, "--version", "1", "--hub", "hf"]) == 1
    assert "error: " in capsys.readouterr().err


@pytest.mark.parametrize("lockfile", ["kernelforge.lock", "kernels.lock"])
def test_lock_and_download_fetch_an_unreadable_kept_signature_again(
        env, tmp_path: Path, key, caplog, monkeypatch, lockfile: str) -> None:
    """``kernelforge lock`` and ``kernelforge download`` judge the signature as a load
    does: a kept copy that does not parse is fetched again, and the offline load the
    download prepares for then finds a signature it reads."""
    api, commit, module_id, real = _signature_kept_unreadable(
        env, tmp_path, key, UNREADABLE["truncated"])
    hf = HfHub(api=api, cache=env["cache"])
    lock = lock_project(_project(tmp_path), hub=hf).path
    assert hf.cache.peek_file(REPO, commit, SIGNED["sig"]) == real
    if lockfile == "kernels.lock":  # Hugging Face's, which pins the commit only
        lock = lock.with_name(lockfile)
        lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                     "lock": {"commit": commit}}]))
    _damage_kept_signature(hf, commit, UNREADABLE["truncated"])
    caplog.clear()
    ((repo, name, _path),) = download_locked(lock, hub=hf)
    assert (repo, name) == (REPO, "torch-cpu")
    assert "build/torch-cpu.sig is not a signature file kernelforge can read" in caplog.text
    assert hf.cache.peek_file(REPO, commit, SIGNED["sig"]) == real
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


# --- a kept sigstore bundle that no longer parses ----------------------------------------

SIGSTORE = "build/torch-cpu/metadata.json.sigstore"
#: the one bundle the fake sigstore reads; any other bytes are no bundle
BUNDLE = b'{"mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.3"}'
WORKFLOW = "https://github.com/o/r/.github/workflows/build.yaml@refs/heads/main"


@pytest.fixture
def fake_sigstore(monkeypatch) -> None:
    """sigstore's reader and verifier replaced: :data:`BUNDLE` is the one bundle it
    reads, and it verifies for any identity; whatever else it is given it cannot read."""
    pytest.importorskip("sigstore")
    import sigstore.models
    import sigstore.verify

    def from_json(raw: bytes | str) -> object:
        if (raw.encode() if isinstance(raw, str) else raw) != BUNDLE:
            raise ValueError("fake sigstore: not a bundle")
        return object()

    class Verifier:
        @classmethod
        def production(cls, offline: bool = False) -> Verifier:
            return cls()

        def verify_artifact(self, data: bytes, bundle: object, check: object) -> None:
            pass

    monkeypatch.setattr(sigstore.verify, "Verifier", Verifier)
    monkeypatch.setattr(sigstore.models.Bundle, "from_json", staticmethod(from_json))


def _bundle_kept_unreadable(env, tmp_path: Path) -> tuple[FakeHfApi, str, str]:
    """A variant the hub serves with a sigstore bundle (and no signature file), that an
    earlier ``kernel_info`` kept in the download cache, that copy then cut short (the hub
    still serves the real one). Returns the fake API, the commit and the module id."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("sigstore")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    api.tamper(REPO, commit, SIGSTORE, BUNDLE)
    loader.kernel_info(REPO, version=1, hub=hf)
    kept = hf.cache.cached_file(REPO, commit, SIGSTORE)
    assert kept is not None and kept.read_bytes() == BUNDLE
    kept.chmod(0o644)
    kept.write_bytes(BUNDLE[:20])
    return api, commit, module_id


@pytest.mark.usefixtures("fake_sigstore")
def test_an_unreadable_kept_sigstore_bundle_is_fetched_again_online(
        env, tmp_path: Path, caplog) -> None:
    """A kept bundle cut short is the copy's fault, as a kept signature file that does
    not parse is: a load online fetches it again once, and the fresh one vouches for the
    variant, rather than every load being refused as unsigned."""
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-test/*",))
    api, commit, module_id = _bundle_kept_unreadable(env, tmp_path)
    hf = HfHub(api=api, cache=env["cache"])
    assert loader.get_kernel(REPO, version=1, hub=hf).__name__ == module_id
    assert (f"{REPO}: the download cache's copy of {SIGSTORE} is not a sigstore bundle "
            "that can be read; fetching again") in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 2
    # with the metadata.json it vouches for, so that the two are judged as fetched together
    assert api.fetches().count(f"{REPO}@{commit[:12]}/build/torch-cpu/metadata.json") == 2
    assert hf.cache.peek_file(REPO, commit, SIGSTORE) == BUNDLE
    info = loader.kernel_info(REPO, version=1, hub=hf)
    assert info.trust.startswith(f"trust: allowed, sigstore signature by {WORKFLOW}"), info.trust


@pytest.mark.usefixtures("fake_sigstore")
def test_a_kept_sigstore_bundle_no_identity_would_check_is_not_fetched_again(
        env, tmp_path: Path, caplog) -> None:
    """Where no sigstore identity is trusted for the repository the bundle counts for
    nothing, damaged or not: it is not fetched again, and the load is judged as before."""
    api, commit, module_id = _bundle_kept_unreadable(env, tmp_path)
    hf = HfHub(api=api, cache=env["cache"])
    with pytest.raises(TrustError, match="no sigstore identity is trusted"):
        loader.get_kernel(REPO, version=1, hub=hf)
    assert loader.get_kernel(REPO, version=1, hub=hf,
                             trust_remote_code=True).__name__ == module_id
    assert "fetching again" not in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 1


@pytest.mark.usefixtures("fake_sigstore")
def test_an_unreadable_sigstore_bundle_the_hub_serves_too_is_judged_as_none(
        env, tmp_path: Path, caplog) -> None:
    """Fetched again, a bundle that still cannot be read counts for nothing, as before:
    the variant is refused as one no signature vouches for, after one download more, with
    no advice about the cache, and loads where it is allowed."""
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-test/*",))
    api, commit, module_id = _bundle_kept_unreadable(env, tmp_path)
    api.tamper(REPO, commit, SIGSTORE, BUNDLE[:10])
    hf = HfHub(api=api, cache=env["cache"])
    with pytest.raises(TrustError) as info:
        loader.get_kernel(REPO, version=1, hub=hf)
    said = str(info.value)
    assert f"{SIGSTORE} is not a valid bundle: fake sigstore: not a bundle" in said, said
    assert "cache remove" not in said and "not allowed" in said, said
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 2
    assert module_id not in sys.modules
    # allowed all the same, the variant loads without fetching the bundle again: a load
    # that fetched it every time would warn of a damaged cache every time
    caplog.clear()
    assert loader.get_kernel(REPO, version=1, hub=hf,
                             trust_remote_code=True).__name__ == module_id
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 2
    assert "fetching again" not in caplog.text


@pytest.mark.usefixtures("fake_sigstore")
def test_an_unreadable_sigstore_bundle_fetched_by_the_load_itself_is_not_fetched_again(
        env, tmp_path: Path, caplog) -> None:
    """Only a copy kept from an earlier fetch may have been damaged in the cache: a
    bundle that this load fetched fresh and cannot read is judged as none at once, with
    no second download and no word about the cache."""
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-test/*",))
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("freshbundle")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    api.tamper(REPO, commit, SIGSTORE, BUNDLE[:10])
    with pytest.raises(TrustError, match="is not a valid bundle"):
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]))
    assert "fetching again" not in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 1
    assert module_id not in sys.modules


@pytest.mark.usefixtures("fake_sigstore")
def test_an_unreadable_kept_sigstore_bundle_offline_names_the_fix(
        env, tmp_path: Path, monkeypatch) -> None:
    """Offline the kept bundle is not fetched again: the refusal of a variant it would
    have vouched for names the copy and the cache's fix before the ways to allow it,
    ``kernel_info`` says the same, and a load allowed without it still loads."""
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-test/*",))
    api, commit, module_id = _bundle_kept_unreadable(env, tmp_path)
    HfHub(api=api, cache=env["cache"]).fetch_variant(REPO, commit, "torch-cpu")
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf = HfHub(api=api, cache=env["cache"])
    with pytest.raises(TrustError) as info:
        loader.get_kernel(REPO, version=1, hub=hf)
    said = str(info.value)
    kept = (f"the download cache's copy of {SIGSTORE}, kept from an earlier fetch, may be "
            "damaged (on its way, or in the cache), and offline it is not fetched again "
            f"(fix: 'kernelforge cache remove {REPO} --revision {commit[:12]}', then "
            "'kernelforge download' on a locked project, or a load while online)")
    assert "\n" not in said and kept in said, said
    assert said.index(kept) < said.index("To load it:"), said
    assert said.startswith(f"refusing to load {REPO} (variant torch-cpu) from "), said
    assert module_id not in sys.modules
    assert kept in loader.kernel_info(REPO, version=1, hub=hf).trust
    assert loader.get_kernel(REPO, version=1, hub=hf,
                             trust_remote_code=True).__name__ == module_id
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGSTORE}") == 1


@pytest.mark.usefixtures("fake_sigstore")
def test_lock_fetches_an_unreadable_kept_sigstore_bundle_again(
        env, tmp_path: Path, caplog) -> None:
    """``kernelforge lock`` judges the bundle as a load does: a kept copy that cannot be
    read is fetched again, and the lock pins the identity the fresh one names, rather
    than refusing the kernel as unsigned."""
    trust.add_sigstore_identity(WORKFLOW, repos=("kernels-test/*",))
    api, commit, _module_id = _bundle_kept_unreadable(env, tmp_path)
    hf = HfHub(api=api, cache=env["cache"])
    locked = read_lock(lock_project(_project(tmp_path), hub=hf).path).require(REPO)
    assert f"{SIGSTORE} is not a sigstore bundle that can be read; fetching again" \
        in caplog.text
    pinned = locked.variants["torch-cpu"] if locked.variants is not None else None
    assert pinned is not None and pinned.signer == WORKFLOW
    assert hf.cache.peek_file(REPO, commit, SIGSTORE) == BUNDLE

@pytest.mark.parametrize("kind", ["download", "lock-dependency"])
def test_a_signature_the_hub_serves_unreadable_keeps_its_kind_when_restated(
        env, tmp_path: Path, key, kind: str) -> None:
    """A signature the hub itself serves unreadable, fetched fresh, is refused as an
    UnreadableSignatureError by ``kernelforge download`` (of the variant a load here
    takes) and by ``kernelforge lock`` (of a kernel-depends entry) too, not as a bare
    TrustError: each restates the refusal to say which variant, and keeps its kind so
    that a caller tells it from a signature that does not verify. No cache fix is
    offered: the hub's copy is to blame."""
    if kind == "download":
        api, _hf, commit, _module_id, lock = _commit_locked(env, tmp_path, key)
        repo, asked = REPO, NOT_FETCHED_HERE
    else:
        api = FakeHfApi(tmp_path / "remote")
        hf = HfHub(api=api, cache=env["cache"])
        repo = "kernels-test/dep"
        make_variant(tmp_path / "dep", module_id=uid("dep"))
        commit = hf.publish(repo, tmp_path / "dep", version=1, signer=key).commit
        vdir = make_variant(tmp_path / "p", module_id=uid("needsdep"))
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["kernel-depends"] = [{"repo-id": repo, "version": 1}]
        (vdir / "metadata.json").write_text(json.dumps(meta))
        hf.publish(REPO, tmp_path / "p", version=1, signer=key)
        asked = f"{repo} version 1, a kernel-depends entry of {REPO}"
    api.tamper(repo, commit, SIGNED["sig"], b'{"format": "kernelforge-signature/2"')
    cold = HfHub(api=api, cache=tmp_path / "cold")  # nothing kept: the fresh copy fails
    with pytest.raises(UnreadableSignatureError) as info:
        if kind == "download":
            download_locked(lock, hub=cold)
        else:
            lock_project(_project(tmp_path), hub=cold)
    said = str(info.value)
    assert said.startswith(asked) and "not a valid signature file" in said, said
    assert "cache remove" not in said and info.value.variant == "torch-cpu", said
    # the problem without a fix is kept too, for a caller that restates it again
    assert info.value.problem == f"{repo}: {SIGNED['sig']}: not a valid signature file"
    assert api.fetches().count(f"{repo}@{commit[:12]}/{SIGNED['sig']}") == 1


# --- kernelforge lock and download over copies damaged on their way ----------------------


def _project(tmp_path: Path) -> Path:
    """A project that depends on version 1 of the test's kernel."""
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    return root


def _kept_damaged(hf: HfHub, api: FakeHfApi, commit: str, path: str, repo: str = REPO
                  ) -> bytes:
    """Keep in the download cache the file ``path`` of ``repo`` as a damaged transfer
    delivered it, the hub serving the real one again afterwards; returns the real one."""
    real = (api.tree(repo, commit) / path).read_bytes()
    hf.cache.discard_file(repo, commit, path)
    api.tamper(repo, commit, path, _damaged(path, real))
    assert hf.read_file(repo, commit, path) != real  # kept as it came
    api.tamper(repo, commit, path, real)
    return real


@pytest.mark.parametrize("path", SIGNED.values(), ids=SIGNED.keys())
def test_lock_fetches_a_signed_copy_damaged_on_its_way_again(
        env, tmp_path: Path, key, caplog, path: str) -> None:
    """``kernelforge lock`` applies the trust policy to the copies the download cache
    kept, as a load does, and as a load it fetches them again once online where a trusted
    key's signature fails over them, rather than failing every lock."""
    api, commit, _module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key, path)
    hf = HfHub(api=api, cache=env["cache"])
    locked = read_lock(lock_project(_project(tmp_path), hub=hf).path).require(REPO)
    assert BOTH_FETCHED_AGAIN in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{path}") == 2
    served = (api.tree(REPO, commit) / SIGNED["metadata"]).read_bytes()
    pinned = locked.variants["torch-cpu"] if locked.variants is not None else None
    assert pinned is not None and pinned.signer is not None
    assert pinned.files["metadata.json"] == b64_sha256(served)
    assert hf.cache.peek_file(REPO, commit, path) == (api.tree(REPO, commit) / path
                                                      ).read_bytes()


def test_lock_refuses_a_signed_copy_that_fails_again_when_fetched_again(
        env, tmp_path: Path, key) -> None:
    """The fresh copies must pass: a hub serving a signature that does not verify is
    refused after one download more, with no advice about the cache."""
    path = SIGNED["sig"]
    api, commit, _module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key, path)
    api.tamper(REPO, commit, path, _damaged(path, (api.tree(REPO, commit) / path).read_bytes()))
    root = _project(tmp_path)
    with pytest.raises(SignatureMismatchError) as info:
        lock_project(root, hub=HfHub(api=api, cache=env["cache"]))
    said = str(info.value)
    assert "does not verify" in said, said
    _publishers_fix_only(said)
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{path}") == 2
    assert not (root / "kernelforge.lock").exists()


def test_lock_offline_of_a_signed_copy_damaged_on_its_way_names_the_fix(
        env, tmp_path: Path, key, monkeypatch) -> None:
    api, commit, _module_id = _signed_copy_damaged_on_its_way(env, tmp_path, key,
                                                              SIGNED["sig"])
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = _project(tmp_path)
    with pytest.raises(SignatureMismatchError) as info:
        lock_project(root, hub=HfHub(api=api, cache=env["cache"]))
    said = str(info.value)
    assert "does not verify" in said, said
    assert "kept from an earlier fetch, may be damaged" in said, said
    _cache_fix_first(said, commit)
    assert not (root / "kernelforge.lock").exists()


def test_lock_fetches_a_cached_metadata_json_that_does_not_parse_again(
        env, tmp_path: Path, caplog, monkeypatch) -> None:
    """A kept metadata.json that does not parse is fetched again by a lock as by a load;
    offline, the error names the copy and the fix."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("lockparse"))
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    kept = hf.cache.cached_file(REPO, commit, SIGNED["metadata"])
    assert kept is not None
    good = kept.read_bytes()
    kept.chmod(0o644)
    kept.write_bytes(b"{trunc")
    locked = read_lock(lock_project(_project(tmp_path), hub=hf, allow=True).path)
    assert "failed its check" in caplog.text and "fetching it again" in caplog.text
    assert kept.read_bytes() == good
    pinned = locked.require(REPO).variants
    assert pinned is not None and pinned["torch-cpu"].files["metadata.json"] == b64_sha256(good)
    kept.chmod(0o644)
    kept.write_bytes(b"{trunc")
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as info:
        lock_project(_project(tmp_path), hub=HfHub(api=api, cache=env["cache"]), allow=True)
    said = str(info.value)
    assert f"read from the download cache's copy {kept}" in said, said
    assert f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said, said


def _unsigned_locked(env, tmp_path: Path) -> tuple[FakeHfApi, HfHub, str, str, Path]:
    """An unsigned variant published to a fake Hugging Face Hub and locked (allowed):
    the fake API, the hub, the commit, the module id and the lock file."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("dlall")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    return api, hf, commit, module_id, lock_project(_project(tmp_path), hub=hf,
                                                    allow=True).path


def test_download_all_variants_fetches_a_metadata_json_unlike_the_lock_again(
        env, tmp_path: Path, caplog, monkeypatch) -> None:
    """With --all-variants no variant is chosen, so no load's check read the variant's
    kept metadata.json: the download checks it against the lock's pin itself, and a copy
    damaged on its way is fetched again once, before the variant's fetch takes it (the
    error would otherwise blame the lock file)."""
    api, hf, commit, module_id, lock = _unsigned_locked(env, tmp_path)
    real = _kept_damaged(hf, api, commit, SIGNED["metadata"])
    ((repo, name, path),) = download_locked(lock, hub=hf, all_variants=True)
    assert (repo, name) == (REPO, "torch-cpu")
    assert "failed its check" in caplog.text and "fetching it again" in caplog.text
    assert (path / "metadata.json").read_bytes() == real
    assert hf.cache.peek_file(REPO, commit, SIGNED["metadata"]) == real
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


def test_download_all_variants_offline_of_a_metadata_json_unlike_the_lock_names_the_fix(
        env, tmp_path: Path, monkeypatch) -> None:
    api, hf, commit, _module_id, lock = _unsigned_locked(env, tmp_path)
    _kept_damaged(hf, api, commit, SIGNED["metadata"])
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IntegrityError) as info:
        download_locked(lock, hub=HfHub(api=api, cache=env["cache"]), all_variants=True)
    said = str(info.value)
    assert "it differs from the one the lock file pins" in said, said
    assert f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said, said
    assert "kernelforge lock' again" not in said, said


def test_download_all_variants_fetches_a_signature_damaged_on_its_way_again(
        env, tmp_path: Path, key, caplog, monkeypatch) -> None:
    """A lock with digests pins the metadata.json, not the signature, which a load
    judges all the same: --all-variants has a kept signature that does not verify fetched
    again once, as the download of the variant a load here chooses does, so that an
    offline load does not refuse it."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("dlallsig")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    lock = lock_project(_project(tmp_path), hub=hf).path
    _kept_damaged(hf, api, commit, SIGNED["sig"])
    before = len(api.fetches())
    download_locked(lock, hub=hf, all_variants=True)
    assert BOTH_FETCHED_AGAIN in caplog.text
    assert api.fetches()[before:].count(f"{REPO}@{commit[:12]}/{SIGNED['sig']}") == 1
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_download_all_variants_refuses_a_signature_that_does_not_verify(
        env, tmp_path: Path, key, monkeypatch, online: bool) -> None:
    """A lock with digests pins the files, but a trusted key's signature that does not
    verify is refused by a load all the same: --all-variants refuses it too, where the
    hub serves it so (after one fetch more) and, offline, over a kept copy (naming the
    fix), rather than filling the cache with what every load refuses."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("dlallbad"))
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    lock = lock_project(_project(tmp_path), hub=hf).path
    real = _kept_damaged(hf, api, commit, SIGNED["sig"])
    if online:
        api.tamper(REPO, commit, SIGNED["sig"], _damaged(SIGNED["sig"], real))
    else:
        api.go_down()
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(api.fetches())
    with pytest.raises(SignatureMismatchError, match="does not verify") as info:
        download_locked(lock, hub=HfHub(api=api, cache=env["cache"]), all_variants=True)
    said = str(info.value)
    assert ("cache remove" not in said) if online else (
        f"'kernelforge cache remove {REPO} --revision {commit[:12]}" in said), said
    assert api.fetches()[before:] == ([f"{REPO}@{commit[:12]}/{p}" for p in SIGNED.values()]
                                      if online else [])
    assert hf.cache.entries() == []


@pytest.mark.parametrize("path", SIGNED.values(), ids=SIGNED.keys())
def test_download_all_variants_fetches_a_dependency_s_damaged_copy_again(
        env, tmp_path: Path, key, caplog, monkeypatch, path: str) -> None:
    """The kernels a locked kernel's ``kernel-depends`` name are fetched as it is: with
    --all-variants, a kept metadata.json or signature of a pinned dependency that fails
    the lock's pin or a trusted key's signature is fetched again once, so that an
    offline load of the kernel, which loads the dependency, does not refuse it."""
    pytest.importorskip("kernels.deps")
    dep = "kernels-test/dep"
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "dep", module_id=uid("dep"))
    dep_commit = hf.publish(dep, tmp_path / "dep", version=1, signer=key).commit
    module_id = uid("needsdep")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": dep, "version": 1}]
    (vdir / "metadata.json").write_text(json.dumps(meta))
    hf.publish(REPO, tmp_path / "p", version=1, signer=key)
    lock = lock_project(_project(tmp_path), hub=hf).path
    _kept_damaged(hf, api, dep_commit, path, repo=dep)
    before = len(api.fetches())
    got = download_locked(lock, hub=hf, all_variants=True)
    assert [(r, v) for r, v, _ in got] == [(REPO, "torch-cpu"), (dep, "torch-cpu")]
    assert api.fetches()[before:].count(f"{dep}@{dep_commit[:12]}/{path}") == 1
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


def _commit_locked(env, tmp_path: Path, key) -> tuple[FakeHfApi, HfHub, str, str, Path]:
    """A signed variant published to a fake Hugging Face Hub and pinned by a Hugging Face
    ``kernels.lock`` (its commit only): the fake API, the hub, the commit, the module id
    and the lock file."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("dlsig")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1},
                                 "lock": {"commit": commit}}]))
    return api, hf, commit, module_id, lock


@pytest.mark.parametrize("all_variants", [False, True], ids=["chosen", "all-variants"])
def test_download_of_a_lock_without_digests_fetches_a_damaged_signature_again(
        env, tmp_path: Path, key, caplog, monkeypatch, all_variants: bool) -> None:
    """A lock without digests leaves the variant to the trust policy, as a load does: a
    kept signature that fails a trusted key's check is fetched again once, and the
    download warns only about a fresh copy that fails too (never about the kept one,
    which a load online fetches again itself)."""
    api, hf, commit, module_id, lock = _commit_locked(env, tmp_path, key)
    hf.read_file(REPO, commit, SIGNED["metadata"])
    _kept_damaged(hf, api, commit, SIGNED["sig"])
    download_locked(lock, hub=hf, all_variants=all_variants)
    assert "a load will refuse it" not in caplog.text
    assert BOTH_FETCHED_AGAIN in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGNED['sig']}") == 2
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


def test_download_of_a_lock_without_digests_refetches_a_variant_holding_a_damaged_metadata_json(
        env, tmp_path: Path, key, caplog, monkeypatch) -> None:
    """A variant fetched while the kept metadata.json was damaged took that copy: once
    the trust policy had the metadata.json fetched again, the variant is checked against
    the fresh one and fetched again too, so that an offline load finds what it judges."""
    api, hf, commit, module_id, lock = _commit_locked(env, tmp_path, key)
    _kept_damaged(hf, api, commit, SIGNED["metadata"])
    hf.fetch_variant(REPO, commit, "torch-cpu")
    download_locked(lock, hub=hf, all_variants=True)
    assert ("does not verify over the download cache's copy of "
            "build/torch-cpu/metadata.json; fetching again") in caplog.text
    assert "the cached copy of variant torch-cpu failed verification" in caplog.text
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


#: how a download says it fails on the variant a load here takes (torch-cpu, this CPU)
NOT_FETCHED_HERE = (f"{REPO} (variant torch-cpu): not fetched: it is the variant a load on "
                    "this machine takes, and a load refuses it, offline as online: ")
#: the same, offline: a load online would fetch the kept copies again, so only an offline
#: load is known to refuse the variant
NOT_FETCHED_OFFLINE = NOT_FETCHED_HERE.replace("offline as online", "while offline")


def test_download_of_a_lock_without_digests_fails_when_the_fresh_signature_fails_too(
        env, tmp_path: Path, key, caplog) -> None:
    """The variant a load here takes, with a trusted key's signature that fresh copies
    fail too: no key trusted and no allowance lifts the load's refusal, so the download
    fails naming it, and fetches none of its files (before, --all-variants fetched it
    with a warning and exited 0, leaving an offline load that fails)."""
    api, hf, commit, _module_id, lock = _commit_locked(env, tmp_path, key)
    hf.read_file(REPO, commit, SIGNED["metadata"])
    real = _kept_damaged(hf, api, commit, SIGNED["sig"])
    api.tamper(REPO, commit, SIGNED["sig"], _damaged(SIGNED["sig"], real))
    with pytest.raises(SignatureMismatchError) as info:
        download_locked(lock, hub=hf, all_variants=True)
    said = str(info.value)
    assert said.startswith(NOT_FETCHED_HERE) and "does not verify" in said, said
    assert said.endswith(PUBLISHERS_FIX) and "cache remove" not in said, said
    # none is offered
    assert "trust allow" not in said and "trust_remote_code" not in said
    assert "a load will refuse it" not in caplog.text
    assert api.fetches().count(f"{REPO}@{commit[:12]}/{SIGNED['sig']}") == 2
    assert hf.cache.entries() == []


def test_download_offline_of_a_lock_without_digests_names_the_fix_for_a_damaged_signature(
        env, tmp_path: Path, key, monkeypatch) -> None:
    api, hf, commit, _module_id, lock = _commit_locked(env, tmp_path, key)
    download_locked(lock, hub=hf)
    _kept_damaged(hf, api, commit, SIGNED["sig"])
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SignatureMismatchError) as info:
        download_locked(lock, hub=HfHub(api=api, cache=env["cache"]), all_variants=True)
    said = str(info.value)
    assert said.startswith(NOT_FETCHED_OFFLINE), said
    assert "kept from an earlier fetch, may be damaged" in said
    _cache_fix_first(said, commit)


def _served_tampered(api: FakeHfApi, repo: str, commit: str, variant: str) -> None:
    """Have the hub serve ``variant``'s signature with one bit flipped, from now on."""
    path = f"build/{variant}.sig"
    api.tamper(repo, commit, path, _damaged(path, (api.tree(repo, commit) / path
                                                   ).read_bytes()))


def _use(monkeypatch, api: FakeHfApi, env) -> None:
    """``--hub hf`` on the command line gets the fake Hugging Face Hub."""
    monkeypatch.setattr("kernelforge.hub.as_hub",
                        lambda hub: HfHub(api=api, cache=env["cache"]))


@pytest.mark.parametrize("all_variants", [False, True], ids=["chosen", "all-variants"])
def test_download_of_a_kernels_lock_fails_alike_on_the_variant_a_load_here_refuses(
        env, tmp_path: Path, key, capsys, monkeypatch, all_variants: bool) -> None:
    """A kernels.lock's only variant is the one this machine loads, and the hub serves
    a signature by a trusted key that does not verify over it. ``kernelforge download``
    stopped on it while ``download --all-variants`` fetched it with a warning and exited
    0, leaving an offline load that fails: both now fail (exit 1), naming the variant
    and why, and fetch none of its files."""
    api, _hf, commit, _module_id, lock = _commit_locked(env, tmp_path, key)
    _served_tampered(api, REPO, commit, "torch-cpu")
    _use(monkeypatch, api, env)
    argv = ["download", str(lock), "--hub", "hf", *(["--all-variants"] if all_variants
                                                    else [])]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {NOT_FETCHED_HERE}{REPO}: the signature "
                          "build/torch-cpu.sig by trusted key"), err
    assert "does not verify" in err, err
    assert DownloadCache(env["cache"]).entries() == []


@pytest.mark.parametrize("table", ["kernelforge", "kernels"])
def test_download_all_variants_skips_a_refused_variant_this_machine_does_not_load(
        env, tmp_path: Path, key, capsys, caplog, monkeypatch, table: str) -> None:
    """One rule for both lock kinds: with --all-variants, a variant whose signature by a
    trusted key does not verify, and that a load here does not take (torch-cuda on this
    CPU), is skipped, not fetched: the download goes on, exits 0 and says which one it
    skipped and why; this machine's variant is fetched and loads offline. A kernel whose
    variant a load here takes is refused that way fails the download, which then names
    what it fetched, what it skipped and what it did not fetch."""
    other = "kernels-test/zz-other"  # fetched after REPO
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=tmp_path / "lockers-cache")  # locked on another machine
    module_id = uid("skip")
    make_variant(tmp_path / "p", module_id=module_id)
    make_variant(tmp_path / "p", "torch-cuda", module_id=uid("skip"))
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    make_variant(tmp_path / "q", module_id=uid("skip"))
    other_commit = hf.publish(other, tmp_path / "q", version=1, signer=key).commit
    root = _project(tmp_path)
    (root / "pyproject.toml").write_text(
        f'[tool.{table}.dependencies]\n"{REPO}" = 1\n"{other}" = 1\n')
    written = lock_project(root, hub=hf)  # sound when locked
    lock = written.path if table == "kernelforge" else written.hf_path
    assert lock is not None
    _served_tampered(api, REPO, commit, "torch-cuda")
    _use(monkeypatch, api, env)
    capsys.readouterr()
    assert main(["download", str(lock), "--hub", "hf", "--all-variants"]) == 0
    out, err = capsys.readouterr()
    assert f"{REPO} torch-cpu: verified -> " in out and f"{other} torch-cpu: verified" in out
    skipped = (f"{REPO} torch-cuda: skipped, not fetched: a load refuses it ({REPO}: the "
               "signature build/torch-cuda.sig by trusted key")
    assert skipped in out and "does not verify" in out, out
    assert out.rstrip().endswith("and a load on this machine takes variant torch-cpu"), out
    assert err == ""  # (the warning goes to the log pytest captures, not to stderr)
    assert (f"{REPO} (variant torch-cuda): skipped, not fetched: a load refuses it ("
            in caplog.text and "the download goes on" in caplog.text), caplog.text
    assert sorted((r, v) for r, _c, v in DownloadCache(env["cache"]).entries()) == [
        (REPO, "torch-cpu"), (other, "torch-cpu")]
    assert main(["download", str(lock), "--hub", "hf"]) == 0  # this machine's only: fine
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id

    # the variant a load here takes of the kernel fetched second, refused too: it fails
    monkeypatch.delenv("HF_HUB_OFFLINE")
    api.come_up()
    _served_tampered(api, other, other_commit, "torch-cpu")
    DownloadCache(env["cache"]).remove(other)
    capsys.readouterr()
    assert main(["download", str(lock), "--hub", "hf", "--all-variants"]) == 1
    err = capsys.readouterr().err
    assert f"error: {other} (variant torch-cpu): not fetched: it is the variant" in err, err
    assert (f"already fetched and verified: {REPO} (torch-cpu); skipped (a load refuses "
            f"them, and this machine loads none of them): {REPO} (torch-cuda); not fetched: "
            f"{other} (torch-cpu)" in err), err
    assert main(["download", str(lock), "--hub", "hf"]) == 1
    assert f"error: {other} (variant torch-cpu): not fetched" in capsys.readouterr().err


def test_download_all_variants_of_a_kernels_lock_with_an_unreadable_trust_store_fails(
        env, tmp_path: Path, key) -> None:
    """A trust store that cannot be read refuses every variant, and is no variant's
    fault: the download fails naming it before anything is fetched, rather than skip (or,
    before, fetch with a warning and exit 0) each variant in turn."""
    api, hf, _commit, _module_id, lock = _commit_locked(env, tmp_path, key)
    store = trust.load_store().path
    store.write_text("{not json")
    with pytest.raises(TrustError, match=f"^{store}: not valid JSON"):
        download_locked(lock, hub=hf, all_variants=True)
    assert hf.cache.entries() == []


#: what a failed download's error says of the variants it skipped
SKIPPED_THEM = "skipped (a load refuses them, and this machine loads none of them): "


@pytest.mark.parametrize("table", ["kernelforge", "kernels"])
def test_download_all_variants_skips_a_refused_kernel_no_variant_here_fits(
        env, tmp_path: Path, key, capsys, monkeypatch, table: str) -> None:
    """--all-variants fetches a kernel none of whose variants fits here (a torch-cuda
    build on this CPU) for other machines; one refused whatever is trusted is skipped,
    saying that a load here takes none of its variants. A run that then fails having
    fetched nothing still names what it skipped, and what it did not fetch."""
    cuda_only = "kernels-test/a-cuda-only"  # fetched before REPO
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=tmp_path / "lockers-cache")  # locked on another machine
    make_variant(tmp_path / "c", "torch-cuda", module_id=uid("skip"))
    cuda_commit = hf.publish(cuda_only, tmp_path / "c", version=1, signer=key).commit
    make_variant(tmp_path / "p", module_id=uid("skip"))
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    root = _project(tmp_path)
    (root / "pyproject.toml").write_text(
        f'[tool.{table}.dependencies]\n"{cuda_only}" = 1\n"{REPO}" = 1\n')
    written = lock_project(root, hub=hf)
    lock = written.path if table == "kernelforge" else written.hf_path
    assert lock is not None
    _served_tampered(api, cuda_only, cuda_commit, "torch-cuda")
    _use(monkeypatch, api, env)
    capsys.readouterr()
    assert main(["download", str(lock), "--hub", "hf", "--all-variants"]) == 0
    out = capsys.readouterr().out
    assert f"{REPO} torch-cpu: verified -> " in out, out
    assert f"{cuda_only} torch-cuda: skipped, not fetched: a load refuses it (" in out, out
    assert out.rstrip().endswith("and a load on this machine takes none of its variants"), out
    assert [(r, v) for r, _c, v in DownloadCache(env["cache"]).entries()] == [
        (REPO, "torch-cpu")]

    _served_tampered(api, REPO, commit, "torch-cpu")
    DownloadCache(env["cache"]).remove(REPO)
    assert main(["download", str(lock), "--hub", "hf", "--all-variants"]) == 1
    err = capsys.readouterr().err
    assert f"error: {NOT_FETCHED_HERE}" in err, err
    assert err.rstrip().endswith(
        f"already fetched and verified: none; {SKIPPED_THEM}{cuda_only} (torch-cuda); not "
        f"fetched: {REPO} (torch-cpu)"), err
    assert DownloadCache(env["cache"]).entries() == []


def _on_a_gpu(monkeypatch, arch: str) -> None:
    """Present this process as a CUDA 12.8 one with a GPU of compute capability ``arch``."""
    from kernelforge import variants

    gpu = dataclasses.replace(variants.detect_system(), backend="cuda",
                              backend_version=(12, 8), gpu_archs=(arch,))
    monkeypatch.setattr(variants, "detect_system", lambda: gpu)


def test_download_takes_the_variant_a_load_here_takes_by_gpu_and_backend(
        env, tmp_path: Path, key, capsys, monkeypatch) -> None:
    """Whether a refused variant fails the download or is skipped depends on the variant a
    load here takes, chosen as a load chooses it: a CUDA build whose archs do not cover
    this GPU is passed over (ARCH loads torch-universal here), and --backend cpu chooses
    for cpu (REPO's torch-cpu, not its torch-cuda). Both kernels' torch-cuda builds carry
    a signature by a trusted key that does not verify."""
    arch = "kernels-test/arch"  # fetched before REPO
    _on_a_gpu(monkeypatch, "8.0")
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=tmp_path / "lockers-cache")
    commits = {}
    for repo, variants, archs in ((arch, ("torch-cuda", "torch-universal"), ["9.0"]),
                                  (REPO, ("torch-cpu", "torch-cuda"), ["8.0"])):
        project = tmp_path / repo.replace("/", "-")
        for variant in variants:
            vdir = make_variant(project, variant, module_id=uid("gpu"))
            if variant == "torch-cuda":
                write_metadata(vdir, uid("gpu"), archs=archs)
        commits[repo] = hf.publish(repo, project, version=1, signer=key).commit
    root = _project(tmp_path)
    (root / "pyproject.toml").write_text(
        f'[tool.kernelforge.dependencies]\n"{arch}" = 1\n"{REPO}" = 1\n')
    lock = lock_project(root, hub=hf).path  # sound when locked
    for repo, commit in commits.items():
        _served_tampered(api, repo, commit, "torch-cuda")
    _use(monkeypatch, api, env)
    capsys.readouterr()

    # this GPU: ARCH's torch-cuda is skipped (not this GPU's), REPO's fails the download
    assert main(["download", str(lock), "--hub", "hf", "--all-variants"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {REPO} (variant torch-cuda): not fetched: it is the "
                          "variant a load on this machine takes"), err
    assert err.rstrip().endswith(
        f"already fetched and verified: {arch} (torch-universal), {REPO} (torch-cpu); "
        f"{SKIPPED_THEM}{arch} (torch-cuda); not fetched: {REPO} (torch-cuda)"), err
    assert main(["download", str(lock), "--hub", "hf"]) == 1
    assert f"error: {REPO} (variant torch-cuda): not fetched" in capsys.readouterr().err

    # for cpu: neither torch-cuda is the variant a load takes, so both are skipped
    assert main(["download", str(lock), "--hub", "hf", "--all-variants",
                 "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    for repo, here in ((arch, "torch-universal"), (REPO, "torch-cpu")):
        assert f"{repo} {here}: verified -> " in out, out
        line = next(line for line in out.splitlines()
                    if line.startswith(f"{repo} torch-cuda: skipped, not fetched: "))
        assert line.endswith(f"and a load on this machine for backend cpu takes variant "
                             f"{here}"), line
    assert main(["download", str(lock), "--hub", "hf", "--backend", "cpu"]) == 0
    assert "skipped" not in capsys.readouterr().out


@pytest.mark.parametrize("all_variants", [False, True], ids=["chosen", "all-variants"])
@pytest.mark.parametrize("table", ["kernelforge", "kernels"])
def test_lock_and_download_of_sound_copies_fetch_each_file_once(
        env, tmp_path: Path, key, monkeypatch, table: str, all_variants: bool) -> None:
    """The checks that fetch damaged copies again cost nothing where nothing is damaged:
    ``kernelforge lock`` then ``kernelforge download`` (of a ``kernelforge.lock``, and of a
    ``kernels.lock``, whose variants the trust policy judges) fetch each file of the
    revision once, and a download into an empty cache likewise, each enough for an
    offline load."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("sound")
    make_variant(tmp_path / "p", module_id=module_id)
    make_variant(tmp_path / "p", "torch-cuda", module_id=uid("sound"))
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    root = _project(tmp_path)
    (root / "pyproject.toml").write_text(f'[tool.{table}.dependencies]\n"{REPO}" = 1\n')
    written = lock_project(root, hub=hf)
    lock = written.path if table == "kernelforge" else written.hf_path
    assert lock is not None
    at = f"{REPO}@{commit[:12]}/build/"
    signed = {f"{at}{v}{end}" for v in ("torch-cpu", "torch-cuda")
              for end in ("/metadata.json", ".sig")}
    assert sorted(api.fetches()) == sorted(signed)  # locking reads those alone
    fetched = ["torch-cpu", "torch-cuda"] if all_variants else ["torch-cpu"]
    files = {f"{at}{v}/{f}" for v in fetched for f in ("__init__.py", "helper.py", SO_NAME)}
    download_locked(lock, hub=hf, all_variants=all_variants)
    assert sorted(api.fetches()) == sorted(signed | files)
    env["cache"].rename(tmp_path / "earlier-cache")
    before = len(api.fetches())
    download_locked(lock, hub=HfHub(api=api, cache=env["cache"]), all_variants=all_variants)
    assert sorted(api.fetches()[before:]) == sorted(
        files | {f for f in signed if any(f"/{v}" in f for v in fetched)})
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loader.load_kernel(REPO, lockfile=lock, hub=HfHub(api=api, cache=env["cache"])
                              ).__name__ == module_id


def test_a_key_not_trusted_is_no_damage_and_not_fetched_again(env, tmp_path: Path) -> None:
    """Only a signature that does not verify may come from damage: a refusal for a key
    the trust store lacks stands without fetching anything again."""
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("sigkey")
    make_variant(tmp_path / "p", module_id=module_id)
    stranger = signing.generate_key(tmp_path / "stranger.pem")
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=stranger).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    before = api.fetches()
    with pytest.raises(TrustError, match="not in the trust store"):
        loader.get_kernel(REPO, version=1, hub=hf)
    assert [f for f in api.fetches()[len(before):] if f.startswith(f"{REPO}@{commit[:12]}")
            ] == []


def test_a_local_hub_revision_published_by_someone_else_needs_trust(
    env, tmp_path: Path, monkeypatch
) -> None:
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=uid("shared"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    record = hub.commit_path(REPO, commit) / ".commit.json"
    assert json.loads(record.read_text())["owner"]["mac"]
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "colleague"))  # another user
    with pytest.raises(TrustError, match="not published by you"):
        loader.get_kernel(REPO, version=1, hub=hub)
    assert loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=[REPO]).VALUE == 1


def test_a_forged_owner_record_is_not_trusted(env, tmp_path: Path) -> None:
    """Rewriting .commit.json to match tampered files breaks the owner mark."""
    from kernelforge import digest

    module_id = uid("forge")
    hub, commit, vdir = _tamperable(env, tmp_path, module_id)
    (vdir / "helper.py").write_text("def double(x):\n    return 3 * x\n")
    record_path = hub.commit_path(REPO, commit) / ".commit.json"
    record_path.chmod(0o644)
    record = json.loads(record_path.read_text())
    record["files"]["build/torch-cpu/helper.py"] = digest.hash_file(vdir / "helper.py")
    record_path.write_text(json.dumps(record))
    with pytest.raises(TrustError, match="not published by you"):
        loader.get_kernel(REPO, version=1, hub=hub)
    with pytest.raises(IntegrityError, match="changed: helper.py"):  # allowed: still checked
        loader.get_kernel(REPO, version=1, hub=hub, trust_remote_code=True)
    assert module_id not in sys.modules


# --- bytecode: no digest covers it, so no load may run it --------------------------------

EVIL = "PWNED = True\nimport builtins\nbuiltins.KERNELFORGE_TEST_PWNED = True\n"


def _plant_bytecode(vdir: Path, module: str = "__init__") -> str:
    """Compile EVIL into ``__pycache__`` as ``module``'s cached bytecode, marked so that
    Python uses it without looking at the source; return its relative path."""
    import py_compile

    rel = f"__pycache__/{module}.{sys.implementation.cache_tag}.pyc"
    src = vdir.parent / f"{module}-evil.py"
    src.write_text(EVIL)
    (vdir / "__pycache__").mkdir(exist_ok=True)
    py_compile.compile(str(src), cfile=str(vdir / rel), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    src.unlink()
    return rel


@pytest.fixture
def no_evil(monkeypatch):
    import builtins

    monkeypatch.delattr(builtins, "KERNELFORGE_TEST_PWNED", raising=False)
    yield
    assert not hasattr(builtins, "KERNELFORGE_TEST_PWNED"), "planted bytecode ran"


@pytest.mark.parametrize("module", ["__init__", "helper"])
def test_planted_bytecode_in_a_local_hub_never_runs(env, tmp_path: Path, no_evil,
                                                    module: str) -> None:
    """Bytecode in a revision's __pycache__ (planted, or written by an older version's
    loads) is never read: the kernel runs its checked sources, and the revision stays
    verifiable."""
    hub, commit, vdir = _tamperable(env, tmp_path, uid("pyc"))
    _plant_bytecode(vdir, module)
    kernel = loader.get_kernel(REPO, version=1, hub=hub)
    assert kernel.VALUE == 1 and not hasattr(kernel, "PWNED")
    assert kernel.helper.double(4) == 8 and not hasattr(kernel.helper, "PWNED")
    hub.verify(REPO, commit)


def test_sourceless_bytecode_in_a_local_hub_is_refused(env, tmp_path: Path, no_evil) -> None:
    import py_compile

    module_id = uid("hubloose")
    hub, commit, vdir = _tamperable(env, tmp_path, module_id)
    (tmp_path / "evil.py").write_text(EVIL)
    py_compile.compile(str(tmp_path / "evil.py"), cfile=str(vdir / "evil.pyc"), doraise=True)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), "extra: evil.pyc", module_id)
    with pytest.raises(IntegrityError, match="extra: build/torch-cpu/evil.pyc.*delete it"):
        hub.verify(REPO, commit)


def test_planted_bytecode_in_the_download_cache_never_runs(env, tmp_path: Path, key,
                                                           no_evil) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("pycache"))
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    fetched = hf.fetch_variant(REPO, commit, "torch-cpu")
    _plant_bytecode(fetched.path)
    offline = HfHub(api=api, cache=env["cache"], offline=True)
    module = loader.get_kernel(REPO, version=1, hub=offline)
    assert module.VALUE == 1 and not hasattr(module, "PWNED")


def test_planted_bytecode_in_a_locked_download_never_runs(env, tmp_path: Path,
                                                          no_evil) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    make_variant(tmp_path / "p", module_id=uid("pyclock"))
    commit = hf.publish(REPO, tmp_path / "p", version=1).commit
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock = lock_project(project, hub=hf, allow=True).path
    _plant_bytecode(hf.fetch_variant(REPO, commit, "torch-cpu").path)
    module = loader.load_kernel(REPO, lockfile=lock, hub=hf.cache_only())
    assert module.VALUE == 1 and not hasattr(module, "PWNED")


@pytest.mark.parametrize("module", ["__init__", "helper"])
def test_a_local_build_never_runs_its_pycache(tmp_path: Path, no_evil, module: str) -> None:
    """Python and other loaders write __pycache__ into a local build: it is left alone,
    and the kernel is compiled from its checked sources instead."""
    vdir = make_variant(tmp_path / "p", module_id=uid("localpyc"))
    _plant_bytecode(vdir, module)
    kernel = loader.get_local_kernel(tmp_path / "p")
    assert kernel.VALUE == 1 and not hasattr(kernel, "PWNED")
    assert kernel.helper.double(4) == 8 and not hasattr(kernel.helper, "PWNED")


def test_sourceless_bytecode_in_a_local_build_is_refused(tmp_path: Path, no_evil) -> None:
    import py_compile

    module_id = uid("loosepyc")
    vdir = make_variant(tmp_path / "p", module_id=module_id)
    (tmp_path / "evil.py").write_text(EVIL)
    py_compile.compile(str(tmp_path / "evil.py"), cfile=str(vdir / "evil.pyc"), doraise=True)
    _refused(lambda: loader.get_local_kernel(tmp_path / "p"), "extra: evil.pyc", module_id)


def test_loading_writes_no_bytecode(env, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as in a default Python
    hub = LocalHub(env["hub"])
    make_variant(tmp_path / "p", module_id=uid("nowrite"))
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    assert loader.get_kernel(REPO, version=1, hub=hub).helper.double(2) == 4
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    assert not (vdir / "__pycache__").exists()
    hub.verify(REPO, commit)  # so the revision stays verifiable
    local = make_variant(tmp_path / "q", module_id=uid("nowritelocal"))
    assert loader.get_local_kernel(local).helper.double(3) == 6
    assert not (local / "__pycache__").exists()


# --- symbolic links: a local build may hold links to files; hubs and caches may not ------


def _link_to_copy(vdir: Path, name: str = "helper.py") -> None:
    """Replace ``name`` with a link to a copy of itself elsewhere: the same bytes, so only
    the link itself can be objected to."""
    copy = vdir.parent.parent / f"copy-of-{name}"
    copy.write_bytes((vdir / name).read_bytes())
    (vdir / name).unlink()
    (vdir / name).symlink_to(copy)


LINK_REFUSED = "refused: helper.py (a symbolic link; variants hold regular files only)"


def test_a_link_in_a_local_hub_is_refused(env, tmp_path: Path) -> None:
    """The local hub writes regular files: a link there was put there by something else,
    so it is refused even when it leads to the very bytes recorded (a local build, which
    get_local_kernel loads, may hold links: see test_local_hf_layouts.py)."""
    module_id = uid("hublink")
    hub, _commit, vdir = _tamperable(env, tmp_path, module_id)
    _link_to_copy(vdir)
    with pytest.raises(IntegrityError) as info:
        loader.get_kernel(REPO, version=1, hub=hub)
    assert info.value.problems == [LINK_REFUSED]  # once, not also as "missing: helper.py"
    assert module_id not in sys.modules


def test_a_link_in_the_download_cache_is_refused(env, tmp_path: Path, key,
                                                 monkeypatch) -> None:
    module_id = uid("cachelink")
    api, cached = _cached_variant(env, tmp_path, key, module_id)
    _link_to_copy(cached)
    api.go_down()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(IntegrityError) as info:
        loader.get_kernel(REPO, version=1, hub=HfHub(api=api, cache=env["cache"]))
    assert info.value.problems == [LINK_REFUSED]
    assert module_id not in sys.modules
