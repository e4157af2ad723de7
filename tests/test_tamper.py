"""Integrity on every load: one flipped byte in the .so or in __init__.py, an added file,
a removed file or a swapped metadata.json is refused with the file named, wherever the
tampering happened (the local hub, the remote, the download cache, a locked load)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kf_sharing import SO_NAME, FakeHfApi, isolate, make_variant, uid

from kernelforge import loader, signing, trust
from kernelforge.errors import IntegrityError, TrustError
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub
from kernelforge.lock import lock_project

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


def _writable(vdir: Path) -> None:
    for dirpath, _dirs, files in os.walk(vdir):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


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
    hub = LocalHub(env["hub"])
    module_id = uid("local")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
    tamper(vdir, other)
    _refused(lambda: loader.get_kernel(REPO, version=1, hub=hub), problem, module_id)


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
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    module_id = uid("cache")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hf.publish(REPO, tmp_path / "p", version=1, signer=key).commit
    loader.kernel_info(REPO, version=1, hub=hf)
    fetched = hf.fetch_variant(REPO, commit, "torch-cpu")
    _writable(fetched.path)
    tamper(fetched.path, other)
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

    hub = LocalHub(env["hub"])
    module_id = uid("forge")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = hub.publish(REPO, tmp_path / "p", version=1).commit
    vdir = hub.variant_path(REPO, commit, "torch-cpu")
    _writable(vdir)
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
