"""Versions, revisions and redirects (kernelforge.revisions), and `kernelforge info`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd
from kf_sharing import FakeHfApi, isolate, make_variant, uid

from kernelforge import loader, revisions
from kernelforge.cli import main
from kernelforge.errors import HubError
from kernelforge.hub import LocalHub
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"
NEW = "kernels-test/relu2"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture
def hub(env: dict[str, Path]) -> LocalHub:
    return LocalHub(env["hub"])


def publish(hub, repo: str, root: Path, version: int, value: int) -> str:
    make_variant(root, "torch-cpu", version=version, value=value, module_id=uid("r"))
    return hub.publish(repo, root, version=version).commit


def test_versions_and_the_newer_major_warning(hub: LocalHub, tmp_path: Path, caplog) -> None:
    c1 = publish(hub, REPO, tmp_path / "a", 1, 1)
    c2 = publish(hub, REPO, tmp_path / "b", 2, 2)
    caplog.set_level(logging.INFO, logger="kernelforge")
    sel = revisions.select(hub, REPO, version=1)
    assert (sel.repo_id, sel.branch, sel.commit) == (REPO, "v1", c1)
    assert "a newer version exists: 2" in sel.notes
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "version 2 is available" in warned[0].getMessage()
    caplog.clear()
    sel = revisions.select(hub, REPO)
    assert (sel.branch, sel.commit) == ("v2", c2)
    # an unpinned load says which version it took (and how to pin it), and no more
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "version 2" in warned[0] and "version=2 to pin it" in warned[0]
    assert revisions.select(hub, REPO, revision=c1[:9]).commit == c1
    assert revisions.select(hub, REPO, revision="v1").branch == "v1"


def test_local_redirect_is_followed_with_the_callers_version(hub: LocalHub, tmp_path: Path,
                                                             caplog) -> None:
    publish(hub, REPO, tmp_path / "old", 1, 1)
    c_new = publish(hub, NEW, tmp_path / "new", 1, 7)
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{NEW}"\n')
    caplog.set_level(logging.WARNING, logger="kernelforge")
    sel = revisions.select(hub, REPO, version=1)
    assert (sel.repo_id, sel.commit) == (NEW, c_new)
    assert f"{REPO} redirects to {NEW} (kernel-status.toml)" in sel.notes
    assert any("redirected" in r.getMessage() for r in caplog.records)
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 7
    assert revisions.select(hub, REPO, follow_redirects=False).repo_id == REPO
    hub.set_status(REPO, None)  # removing the status ends the redirect; the card stays
    assert revisions.select(hub, REPO, version=1).repo_id == REPO


def test_only_a_load_or_a_lock_logs_a_redirect(hub: LocalHub, tmp_path: Path, caplog,
                                               capsys) -> None:
    """kernel_info and has_kernel load nothing, so they log no WARNING about the redirect
    (kernel_info's notes say it, and `kernelforge info` shows it once, among them); a load
    and `kernelforge lock`, which shows no notes, still say it."""
    from kernelforge.lock import lock_project

    publish(hub, REPO, tmp_path / "old", 1, 1)
    publish(hub, NEW, tmp_path / "new", 1, 7)
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{NEW}"\n')
    caplog.set_level(logging.INFO, logger="kernelforge")
    info = loader.kernel_info(REPO, version=1, hub=hub)
    assert info.repo == NEW and f"{REPO} redirects to {NEW} (kernel-status.toml)" in info.notes
    assert loader.has_kernel(REPO, version=1, hub=hub)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert main(["info", REPO, "--version", "1", "--hub", str(hub.root)]) == 0
    out, err = capsys.readouterr()
    assert f"  {REPO} redirects to {NEW} (kernel-status.toml)" in out, out
    assert "redirect" not in err, err
    redirected = f"kernelforge: {REPO} is redirected to {NEW} (kernel-status.toml on main)"
    assert loader.get_kernel(REPO, version=1, hub=hub).VALUE == 7
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        redirected]
    caplog.clear()
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "app"\nversion = "0"\n'
        f'[tool.kernelforge.dependencies]\n"{REPO}" = 1\n')
    lock_project(project, hub=hub)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        redirected]


def test_redirect_revision_applies_when_none_is_asked(hub: LocalHub, tmp_path: Path) -> None:
    publish(hub, REPO, tmp_path / "old", 1, 1)
    c1 = publish(hub, NEW, tmp_path / "n1", 1, 1)
    publish(hub, NEW, tmp_path / "n2", 2, 2)
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{NEW}"\nrevision = "v1"\n')
    assert revisions.select(hub, REPO).commit == c1
    assert revisions.select(hub, REPO, version=2).branch == "v2"


def test_redirect_loops_and_bad_status_files(hub: LocalHub, tmp_path: Path) -> None:
    publish(hub, REPO, tmp_path / "a", 1, 1)
    publish(hub, NEW, tmp_path / "b", 1, 1)
    hub.set_status(REPO, f'kind = "redirect"\ndestination = "{NEW}"\n')
    hub.set_status(NEW, f'kind = "redirect"\ndestination = "{REPO}"\n')
    with pytest.raises(HubError, match="loop"):
        revisions.select(hub, REPO)
    for text, problem in [("kind = 'moved'", "only kind known is 'redirect'"),
                          ("kind = 'redirect'", "'destination' must be a repository id"),
                          ("not toml [", "not valid TOML"),
                          (f'kind = "redirect"\ndestination = "{NEW}"\nrevision = '
                           '"v1\\u001b[2K\\rerror: all good"',
                           r"'revision' must be a branch, tag or commit string \(no spaces or "
                           r"control characters\), got 'v1\\x1b\[2K\\rerror: all good'"),
                          (f'kind = "redirect"\ndestination = "{NEW}"\nrevision = "v1 main"',
                           "'revision' must be a branch, tag or commit string")]:
        with pytest.raises(HubError, match=problem):
            hub.set_status(REPO, text)


def test_remote_redirect(tmp_path: Path, env) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    publish(hf, REPO, tmp_path / "a", 1, 1)
    c_new = publish(hf, NEW, tmp_path / "b", 1, 5)
    api.create_commit(REPO, [CommitOperationAdd(
        path_in_repo="kernel-status.toml",
        path_or_fileobj=f'kind = "redirect"\ndestination = "{NEW}"\n'.encode())],
        commit_message="moved", repo_type="kernel", revision="main")
    sel = revisions.select(hf, REPO, version=1)
    assert (sel.repo_id, sel.commit) == (NEW, c_new)


def test_info_command_explains_the_choice(hub: LocalHub, tmp_path: Path, capsys,
                                          monkeypatch) -> None:
    c1 = publish(hub, REPO, tmp_path / "a", 1, 1)
    publish(hub, REPO, tmp_path / "b", 2, 2)
    assert main(["info", REPO, "--version", "1", "--hub", str(hub.root)]) == 0
    out = capsys.readouterr().out
    for line in (f"repository: {REPO}", f"hub:        local hub {hub.root}",
                 "branch:     v1", f"commit:     {c1}", "variant:    torch-cpu",
                 "version 1 requested: branch v1", "a newer version exists: 2",
                 "torch-cpu: accepted, pure-Python build for cpu",
                 "trust: allowed, published to this local hub by you"):
        assert line in out, out
    assert main(["info", "nobody/here", "--hub", str(hub.root)]) == 1
    assert "not found in hub" in capsys.readouterr().err
    # Under another user (no owner mark of theirs, nothing signed or allowed) the load
    # would be refused: info says why, and fails as the load would.
    monkeypatch.setenv("KERNELFORGE_CONFIG", str(tmp_path / "someone-else"))
    assert main(["info", REPO, "--version", "1", "--hub", str(hub.root)]) == 1
    assert "trust: refused" in capsys.readouterr().out
    assert main(["info", REPO, "--version", "1", "--hub", str(hub.root),
                 "--allow", REPO]) == 0


def test_info_command_does_not_say_it_loads(hub: LocalHub, tmp_path: Path, capsys,
                                            caplog) -> None:
    c1 = publish(hub, REPO, tmp_path / "a", 1, 1)
    caplog.set_level(logging.WARNING, logger="kernelforge")
    assert main(["info", REPO, "--hub", str(hub.root)]) == 0
    assert f"no version requested: newest version 1 (branch v1) -> commit {c1[:12]}" in (
        capsys.readouterr().out)
    assert not [r for r in caplog.records if "loading" in r.getMessage()]


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_a_commit_prefix_too_short_is_said_to_be_too_short(hub: LocalHub, tmp_path: Path,
                                                           digits: int) -> None:
    c1 = publish(hub, REPO, tmp_path / "a", 1, 1)
    with pytest.raises(HubError, match=rf"not a branch \(v1\), a tag \(none\) or a commit; "
                                       rf"'{c1[:digits]}' is too short for a commit prefix: a "
                                       rf"prefix needs at least 4 hex digits of the commit id "
                                       rf"\({digits} given\)"):
        loader.get_kernel(REPO, revision=c1[:digits], hub=hub)
    assert loader.get_kernel(REPO, revision=c1[:4], hub=hub).VALUE == 1  # 4 will do
    with pytest.raises(HubError) as info:  # not hex: no word about prefixes
        revisions.select(hub, REPO, revision="zz")
    assert "too short" not in str(info.value)
    from kernelforge.hub.base import PREFIX_RE

    assert PREFIX_RE.match("a" * revisions.MIN_COMMIT_PREFIX)
    assert not PREFIX_RE.match("a" * (revisions.MIN_COMMIT_PREFIX - 1))


def test_a_short_prefix_on_the_hf_hub_is_said_to_be_too_short(tmp_path: Path, env) -> None:
    api = FakeHfApi(tmp_path / "remote")
    hf = HfHub(api=api, cache=env["cache"])
    c1 = publish(hf, REPO, tmp_path / "a", 1, 1)
    with pytest.raises(HubError, match=rf"revision '{c1[:3]}' not found in {REPO} on the "
                                       r"Hugging Face Hub: not a branch \(main, v1\), a tag "
                                       rf"\(none\) or a commit; '{c1[:3]}' is too short"):
        revisions.select(hf, REPO, revision=c1[:3])  # not asked of the Hub, which might take it
    assert revisions.select(hf, REPO, revision=c1[:4]).commit == c1
    short = next(c for c in "0123456789abcdef" if not c1.startswith(c)) * 2  # matches nothing
    offline = hf.cache_only()
    with pytest.raises(HubError, match=f"not in the download cache .*'{short}' is too short"):
        revisions.select(offline, REPO, revision=short)
