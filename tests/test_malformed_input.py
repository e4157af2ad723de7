"""Malformed files from users and hubs give kernelforge's errors, naming the file: never
an exception of the parser or of the code that reads the parsed values."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kernelforge.errors import HubError, LockError, ManifestError, TrustError

#: Nested deeper than the standard parsers recurse (they raise RecursionError).
DEEP = "[" * 100_000
COMMIT = "a" * 40


def _manifest(tmp_path: Path) -> None:
    from kernelforge.manifest import load_manifest

    (tmp_path / "build.toml").write_text(f'[general]\nname = "x"\nbackends = {DEEP}\n')
    load_manifest(tmp_path)


def _pyproject(tmp_path: Path) -> None:
    from kernelforge.lock import read_requirements

    (tmp_path / "pyproject.toml").write_text(f"[tool.kernelforge]\ndependencies = {DEEP}\n")
    read_requirements(tmp_path)


def _lock_file(tmp_path: Path) -> None:
    from kernelforge.lock import read_lock

    (tmp_path / "kernelforge.lock").write_text(DEEP)
    read_lock(tmp_path / "kernelforge.lock")


def _trust_store(tmp_path: Path) -> None:
    from kernelforge.trust import load_store

    (tmp_path / "trust.json").write_text(DEEP)
    load_store(tmp_path / "trust.json")


def _signature(tmp_path: Path) -> None:
    from kernelforge.signing import parse_signature

    parse_signature(DEEP.encode(), "build/torch-cpu.sig")


def _metadata(tmp_path: Path) -> None:
    from kernelforge.hub._staging import parse_metadata

    parse_metadata(DEEP.encode(), "build/torch-cpu/metadata.json")


def _kernel_status(tmp_path: Path) -> None:
    from kernelforge.revisions import parse_status

    parse_status(f"kind = {DEEP}", "kernel-status.toml")


def _commit_record(tmp_path: Path) -> None:
    from kernelforge.hub import LocalHub

    repo = tmp_path / "hub" / "org" / "name"
    (repo / "refs" / "heads").mkdir(parents=True)
    (repo / "refs" / "heads" / "v1").write_text(COMMIT)
    (repo / "objects" / COMMIT).mkdir(parents=True)
    (repo / "objects" / COMMIT / ".commit.json").write_text(DEEP)
    LocalHub(tmp_path / "hub").log("org/name", "v1")


@pytest.mark.parametrize(
    ("read", "error", "match"),
    [
        (_manifest, ManifestError, r"build\.toml: not valid TOML: values are nested too deeply"),
        (_pyproject, LockError, r"pyproject\.toml: cannot be read as TOML \(values are nested"),
        (_lock_file, LockError, r"kernelforge\.lock: not a readable JSON lock file \(values"),
        (_trust_store, TrustError, r"trust\.json: not valid JSON \(values are nested too"),
        (_signature, TrustError, r"torch-cpu\.sig: not a valid signature file"),
        (_metadata, HubError, r"metadata\.json: not valid JSON \(values are nested too deeply"),
        (_kernel_status, HubError, r"kernel-status\.toml: not valid TOML \(values are nested"),
        (_commit_record, HubError, r"\.commit\.json: unreadable commit record \(values are"),
    ],
    ids=lambda v: getattr(v, "__name__", "").strip("_") or None,
)
def test_a_document_nested_too_deeply_is_refused_naming_the_file(
        tmp_path: Path, read, error, match) -> None:
    with pytest.raises(error, match=match):
        read(tmp_path)


def test_a_cache_entry_record_nested_too_deeply_is_damage(tmp_path: Path) -> None:
    from kernelforge.cache import _entry_record

    (tmp_path / "entry.json").write_text(DEEP)
    assert _entry_record(tmp_path / "entry.json") == (None, "its entry.json is not valid JSON",
                                                      None)


def _trust_store_latin1(tmp_path: Path) -> None:
    from kernelforge.trust import load_store

    (tmp_path / "trust.json").write_bytes(b'{"format": 1, "allow": ["caf\xe9/x"]}')
    load_store(tmp_path / "trust.json")


def _owner_key_latin1(tmp_path: Path) -> None:
    from kernelforge.trust import OWNER_KEY_FILE, _owner_key

    (tmp_path / OWNER_KEY_FILE).write_bytes(b"\xe9" * 64)
    (tmp_path / OWNER_KEY_FILE).chmod(0o600)
    _owner_key(create=False)


def _pyproject_latin1(tmp_path: Path) -> None:
    from kernelforge.lock import read_requirements

    (tmp_path / "pyproject.toml").write_bytes(
        b'[tool.kernelforge.dependencies]\n"org/relu" = 1  # caf\xe9\n')
    read_requirements(tmp_path)


def _manifest_latin1(tmp_path: Path) -> None:
    from kernelforge.manifest import load_manifest

    (tmp_path / "build.toml").write_bytes(b'[general]\nname = "relu"\n# caf\xe9 au lait\n')
    load_manifest(tmp_path)


def _manifest_latin1_after_utf8(tmp_path: Path) -> None:
    from kernelforge.manifest import load_manifest

    # 'naïve' in UTF-8 (its 'ï' two bytes), then a Latin-1 'é' (one byte)
    (tmp_path / "build.toml").write_bytes(b'[general]\n# na\xc3\xafve caf\xe9\n')
    load_manifest(tmp_path)


@pytest.mark.parametrize(
    ("read", "error", "match"),
    [
        (_trust_store_latin1, TrustError, r"trust\.json: not a UTF-8 text file \(.*\); fix or "
                                          r"remove the file"),
        (_owner_key_latin1, TrustError, r"owner\.key: corrupt owner key; delete it"),
        # hand-written files: where the byte is, as an editor counts lines and columns
        (_pyproject_latin1, LockError, r"pyproject\.toml: cannot be read as TOML \('utf-8' "
                                       r"codec can't decode.*; at line 2, column 22\); save "
                                       r"it as UTF-8$"),
        (_manifest_latin1, ManifestError, r"build\.toml: not UTF-8 text at line 3, column 6 "
                                          r"\('utf-8' codec can't decode.*fix: save the file "
                                          r"as UTF-8"),
        # columns are characters, not bytes: the 'ï' before the byte counts once
        (_manifest_latin1_after_utf8, ManifestError, r"build\.toml: not UTF-8 text at line "
                                                     r"2, column 12 "),
    ],
    ids=lambda v: getattr(v, "__name__", "").strip("_") or None,
)
def test_a_file_that_is_not_utf8_is_refused_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read, error, match) -> None:
    from kernelforge.trust import CONFIG_ENV

    monkeypatch.setenv(CONFIG_ENV, str(tmp_path))
    with pytest.raises(error, match=match):
        read(tmp_path)


# '~user' of a user this system does not have: pathlib's expanduser raises RuntimeError
# for it, the shell and os.path leave it as written.
NO_USER = "~no-such-user-kf/x"


@pytest.mark.parametrize(
    ("env", "argv", "code", "match"),
    [
        ({"KERNELFORGE_HUB": NO_USER}, ["info", "org/name"], 1,
         f"KERNELFORGE_HUB={NO_USER} chose the local hub {NO_USER}: .*the hub directory "
         f"{NO_USER} does not exist"),
        ({}, ["versions", "org/name", "--hub", NO_USER], 1,
         f"the hub directory {NO_USER} does not exist"),
        ({"KERNELFORGE_CACHE": NO_USER}, ["cache", "list"], 0, ""),
        ({}, ["cache", "list", "--cache", NO_USER], 0, ""),
        ({"KERNELFORGE_CONFIG": NO_USER}, ["trust", "list"], 0, ""),
        ({"LOCAL_KERNELS": f"org/name={NO_USER}"}, ["info", "org/name"], 1,
         f"LOCAL_KERNELS entry org/name={NO_USER}: {NO_USER} does not exist"),
    ],
)
def test_a_tilde_of_no_such_user_is_left_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        env: dict[str, str], argv: list[str], code: int, match: str) -> None:
    from kernelforge.cli import main

    monkeypatch.chdir(tmp_path)
    for var in ("KERNELFORGE_HUB", "KERNELFORGE_CACHE", "KERNELFORGE_CONFIG"):
        monkeypatch.setenv(var, str(tmp_path / var))
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert main(argv) == code
    err = capsys.readouterr().err
    if match:
        assert re.search(match, err), err
    assert "Traceback" not in err


def test_a_hub_path_too_long_in_the_environment_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.cli import main

    long = str(tmp_path / ("y" * 300))
    monkeypatch.setenv("KERNELFORGE_HUB", long)
    monkeypatch.setenv("KERNELFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    assert main(["info", "org/name"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: KERNELFORGE_HUB={long} chose the local hub {long}: the hub "
                          f"path '{long}' cannot be used (File name too long)"), err


@pytest.mark.parametrize("via", ["argument", "LOCAL_KERNELS"])
def test_a_local_kernel_path_too_long_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], via: str) -> None:
    from kernelforge import get_local_kernel
    from kernelforge.cli import main

    long = str(tmp_path / ("x" * 300))
    if via == "argument":
        with pytest.raises(HubError, match=rf"path: {re.escape(long)} cannot be used \(File "
                                           r"name too long\)"):
            get_local_kernel(long)
        return
    monkeypatch.setenv("LOCAL_KERNELS", f"org/name={long}")
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "config"))
    assert main(["info", "org/name"]) == 1
    assert capsys.readouterr().err == (f"error: LOCAL_KERNELS entry org/name={long}: {long} "
                                       "cannot be used (File name too long)\n")


@pytest.mark.usefixtures("cpu_system")
@pytest.mark.parametrize("kind", ["local", "hf"])
def test_a_metadata_json_too_big_to_read_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A load reads each variant's metadata.json whole before the trust policy judges
    anything: one bigger than the hub's small files may be is refused, unread and (from
    the Hugging Face Hub) not kept, rather than filling this process's memory."""
    from kf_sharing import FakeHfApi, isolate, make_variant, uid

    from kernelforge import loader
    from kernelforge.hub import LocalHub, base
    from kernelforge.hub.hf import HfHub

    env = isolate(monkeypatch, tmp_path)
    monkeypatch.setattr(base, "SMALL_FILE_MAX", 64 * 1024)
    repo = "hostile-org/relu"
    vdir = make_variant(tmp_path / "p", module_id=uid("big"))
    meta = vdir / "metadata.json"
    meta.write_text(meta.read_text()[:-1] + ', "padding": "' + "x" * 65 * 1024 + '"}')
    api = FakeHfApi(tmp_path / "remote")
    hub = LocalHub(env["hub"]) if kind == "local" else HfHub(api=api, cache=env["cache"])
    commit = hub.publish(repo, tmp_path / "p", version=1).commit
    read: list[Path] = []
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        # kernelforge's reads that find a file (the fake hub's and its client's are the
        # Hub's; the cache looks for a copy it does not have)
        if (sys._getframe(1).f_globals.get("__name__", "").startswith("kernelforge")
                and self.exists()):
            read.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    size = meta.stat().st_size
    with pytest.raises(HubError, match=rf"{repo} at {commit[:12]} \(.*\): "
                                       rf"build/torch-cpu/metadata.json is {size} bytes, more "
                                       r"than the 65536 such a file may have; refusing"):
        loader.get_kernel(repo, version=1, hub=hub, trust_remote_code=True)
    assert not [p for p in read if p.name == "metadata.json"], read
    if isinstance(hub, HfHub):
        assert hub.cache.peek_file(repo, commit, "build/torch-cpu/metadata.json") is None
        # the Hub's file list gave its size: it was not even downloaded
        assert not [f for f in api.fetches() if f.endswith("/metadata.json")], api.fetches()


@pytest.mark.parametrize("path", ["build/torch-cpu/metadata.json", "build/torch-cpu.sig",
                                  "kernel-status.toml"])
def test_a_small_file_the_hubs_listing_shows_too_big_is_refused_before_its_download(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Each file a load reads whole: refused, with the words of a refusal after the
    download, on the size the Hub's file list gives (the list a load fetches anyway), so
    the Hub sends none of it. Where the list came from the download cache (an earlier
    process fetched it), the size is known only once the file is downloaded."""
    from kf_sharing import FakeHfApi, isolate, make_variant, uid

    from kernelforge.hub import base
    from kernelforge.hub.hf import HfHub

    env = isolate(monkeypatch, tmp_path)
    monkeypatch.setattr(base, "SMALL_FILE_MAX", 64 * 1024)
    repo = "hostile-org/relu"
    make_variant(tmp_path / "p", module_id=uid("listed"))
    api = FakeHfApi(tmp_path / "remote")
    commit = HfHub(api=api, cache=tmp_path / "publisher").publish(
        repo, tmp_path / "p", version=1).commit
    api.tamper(repo, commit, path, b"x" * (64 * 1024 + 1))
    refusal = (rf"^{repo} at {commit[:12]} \(Hugging Face Hub\): {path} is 65537 bytes, more "
               r"than the 65536 such a file may have; refusing to read it")
    hub = HfHub(api=api, cache=env["cache"])
    with pytest.raises(HubError, match=refusal):
        hub.read_file(repo, commit, path)
    assert not [f for f in api.fetches() if f.endswith(path)], api.fetches()
    assert hub.cache.peek_file(repo, commit, path) is None
    with pytest.raises(HubError, match=refusal):  # the listing now from the cache
        HfHub(api=api, cache=env["cache"]).read_file(repo, commit, path)
    assert [f for f in api.fetches() if f.endswith(path)] == [f"{repo}@{commit[:12]}/{path}"]
    assert hub.cache.peek_file(repo, commit, path) is None


@pytest.mark.parametrize(("extra", "refused"), [(0, False), (1, True)])
def test_the_small_file_limit_is_16_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        extra: int, refused: bool) -> None:
    """The limit as the README gives it: a metadata.json of 16 MiB is read, one byte more
    is refused (the test above lowers the limit, so it cannot tell what the limit is)."""
    import os

    from kf_sharing import isolate, make_variant, uid

    from kernelforge.hub import LocalHub

    env = isolate(monkeypatch, tmp_path)
    make_variant(tmp_path / "p", module_id=uid("limit"))
    hub = LocalHub(env["hub"])
    repo, rel = "org/relu", "build/torch-cpu/metadata.json"
    commit = hub.publish(repo, tmp_path / "p", version=1).commit
    stored = hub.commit_path(repo, commit) / rel
    os.chmod(stored, 0o644)
    os.truncate(stored, (16 << 20) + extra)  # sparse: nothing written but the size
    if refused:
        with pytest.raises(HubError, match=rf"{rel} is {(16 << 20) + 1} bytes, more than "
                                           rf"the {16 << 20} such a file may have"):
            hub.read_file(repo, commit, rel)
    else:
        data = hub.read_file(repo, commit, rel)
        assert data is not None and len(data) == 16 << 20
