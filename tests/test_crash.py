"""Crash safety: a publish and a download, each killed with SIGKILL at every rename,
flush, link or permission change; afterwards the last good revision loads, no partial
state is visible, and the next publish leaves no revision that no ref reaches. And
eight processes cold-loading one kernel fetch it once."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kf_sharing import TESTS, FakeHfApi, child_script, isolate, make_variant, uid

from kernelforge import loader, signing, trust
from kernelforge.cache import is_intact
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"

# Kills the process with SIGKILL at the N-th rename, replace, fsync, link or chmod (argv[1]):
# the steps that publish or commit files, so every state a crash can leave is visited.
KILLER = """
import os, signal, sys
_n, _count = int(sys.argv[1]), [0]
def _tick():
    _count[0] += 1
    if _count[0] == _n:
        os.kill(os.getpid(), signal.SIGKILL)
def _wrap(owner, name):
    orig = getattr(owner, name)
    def wrapped(*args, **kwargs):
        _tick()
        return orig(*args, **kwargs)
    setattr(owner, name, wrapped)
for _name in ("rename", "replace", "fsync", "link", "chmod"):
    _wrap(os, _name)
"""


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


def run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), cwd=TESTS, check=False)


@pytest.mark.slow
def test_publish_killed_at_every_step_leaves_the_last_good_revision(
    tmp_path: Path, env
) -> None:
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="ci")
    old_id = uid("old")
    make_variant(tmp_path / "old", module_id=old_id, value=1)
    steps = 0
    for n in range(1, 200):
        hub = LocalHub(tmp_path / f"hub{n}")
        good = hub.publish(REPO, tmp_path / "old", version=1, signer=key).commit
        new_id = uid("new")
        new = tmp_path / f"new{n}"
        make_variant(new, module_id=new_id, value=2)
        proc = run(KILLER + (
            "from kernelforge.hub import LocalHub\n"
            "from kernelforge.signing import load_signing_key\n"
            f"LocalHub({str(hub.root)!r}).publish({REPO!r}, {str(new)!r}, version=1, "
            f"signer=load_signing_key({str(tmp_path / 'k.pem')!r}), card='# relu')\n"
            "print('DONE')\n"), str(n))
        head = hub.branches(REPO)["v1"]
        # whatever v1 points at is complete: every file matches the publish record
        for branch, commit in hub.branches(REPO).items():
            hub.verify(REPO, commit)
            assert hub.log(REPO, branch)
        module = loader.get_kernel(REPO, version=1, hub=hub)  # no allowance needed
        expected = (new_id, 2) if head != good else (old_id, 1)
        assert (module.__name__, module.VALUE) == expected
        # the next publish clears whatever the crash left in tmp/, and a revision it
        # wrote that no ref names
        hub.publish(REPO, tmp_path / "old", version=1)
        assert not list((hub.root / REPO / "tmp").iterdir())
        reached = {r.commit for branch in hub.branches(REPO) for r in hub.log(REPO, branch)}
        assert {p.name for p in (hub.root / REPO / "objects").iterdir()} == reached
        if proc.returncode == 0:
            steps = n
            break
        assert proc.returncode == -9, proc.stderr
    assert steps > 10, "the publish was killed at too few points to mean anything"


@pytest.mark.slow
def test_a_new_version_killed_at_every_step_never_leaves_a_branch_without_a_build(
    tmp_path: Path, env
) -> None:
    # the local hub moves a version branch only to a revision it has written whole, so
    # it never holds the empty version branch a Hugging Face Hub publish can leave
    # (kernelforge.revisions.holds_build takes a local hub at its word)
    make_variant(tmp_path / "old", module_id=uid("old"), value=1)
    steps = 0
    for n in range(1, 200):
        hub = LocalHub(tmp_path / f"hub{n}")
        hub.publish(REPO, tmp_path / "old", version=1, card="# relu")
        new = tmp_path / f"new{n}"
        make_variant(new, module_id=uid("new"), value=2, version=2)
        proc = run(KILLER + (
            "from kernelforge.hub import LocalHub\n"
            f"LocalHub({str(hub.root)!r}).publish({REPO!r}, {str(new)!r}, version=2, "
            "card='# relu v2')\n"), str(n))
        versions = hub.versions(REPO)
        assert all(hub.variants(REPO, commit) for commit in versions.values()), n
        assert loader.kernel_info(REPO, hub=hub).branch == f"v{max(versions)}"
        if proc.returncode == 0:
            steps = n
            break
        assert proc.returncode == -9, proc.stderr
    assert steps > 10, "the publish was killed at too few points to mean anything"


@pytest.mark.slow
def test_download_killed_at_every_step_leaves_no_partial_entry(tmp_path: Path, env) -> None:
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="ci")
    remote = tmp_path / "remote"
    api = FakeHfApi(remote)
    module_id = uid("dl")
    make_variant(tmp_path / "p", module_id=module_id)
    commit = HfHub(api=api, cache=tmp_path / "pubcache").publish(
        REPO, tmp_path / "p", version=1, signer=key).commit
    steps = 0
    for n in range(1, 200):
        cache = tmp_path / f"cache{n}"
        proc = run(KILLER + child_script(remote, cache, (
            "from kernelforge import loader\n"
            f"m = loader.get_kernel({REPO!r}, version=1, hub=hub)\n"
            "print('DONE', m.VALUE)\n")), str(n))
        hub = HfHub(api=api, cache=cache)
        for entry in hub.cache.entries():  # visible entries are complete and intact
            found = hub.cache.entry(*entry)
            assert found is not None and is_intact(found.path, found.files), entry
        assert all(not p.name.startswith(".") for p in cache.rglob("*.json")
                   if "tmp" not in p.parts)
        module = loader.get_kernel(REPO, version=1, hub=hub)  # completes the download
        assert module.__name__ == module_id
        assert hub.cache.entries() == [(REPO, commit, "torch-cpu")]
        if proc.returncode == 0:
            steps = n
            break
        assert proc.returncode == -9, proc.stderr
    assert steps > 10, "the download was killed at too few points to mean anything"


def test_eight_processes_cold_load_one_kernel_and_fetch_it_once(tmp_path: Path, env) -> None:
    key = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(key.public.text, name="ci")
    remote, cache = tmp_path / "remote", tmp_path / "cache"
    api = FakeHfApi(remote)
    module_id = uid("many")
    make_variant(tmp_path / "p", module_id=module_id, value=8)
    HfHub(api=api, cache=tmp_path / "pubcache").publish(REPO, tmp_path / "p", version=1,
                                                        signer=key)
    go = tmp_path / "go"
    code = child_script(remote, cache, (
        "import time\n"
        f"open({str(tmp_path)!r} + '/ready-' + sys.argv[1], 'w').close()\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.002)\n"
        "from kernelforge import loader\n"
        f"m = loader.get_kernel({REPO!r}, version=1, hub=hub)\n"
        "print(m.__name__, m.VALUE)\n"))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for i in range(8)]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.write_text("")
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert out.split() == [module_id, "8"]
    counts = collections.Counter(api.fetches())
    assert counts and set(counts.values()) == {1}, counts  # every file fetched once
    assert len(HfHub(api=api, cache=cache).cache.entries()) == 1
