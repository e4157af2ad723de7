"""Publishing to the Hugging Face Hub (kernelforge.hub.hf) when the Hub or the network
fails: a commit whose answer is lost (a timeout, a connection cut off, a 5xx) may have
been made all the same, and the branch's head tells whether it was (a head holding
exactly this publish's files is the publish's commit); only a commit found not made is
tried again, as creating the repository and the branch are, with the waits of the reads
that huggingface_hub makes once."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import CommitOperationAdd
from kf_sharing import SO_NAME, FakeHfApi, hub_error, isolate, make_variant, uid

from kernelforge import signing, trust
from kernelforge.errors import HubError
from kernelforge.hub.hf import HfHub

pytestmark = pytest.mark.usefixtures("cpu_system")

REPO = "kernels-test/relu"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path: Path) -> dict[str, Path]:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The waits between tries, recorded, not slept."""
    slept: list[float] = []
    monkeypatch.setattr("kernelforge.hub.hf._sleep", slept.append)
    return slept


@pytest.fixture
def key(tmp_path: Path) -> signing.SigningKey:
    k = signing.generate_key(tmp_path / "k.pem")
    trust.add_key(k.public.text, name="ci", repos=("kernels-test/*",))
    return k


def _client_error(name: str, text: str) -> Exception:
    """An error of the HTTP client huggingface_hub uses, by its class name."""
    from huggingface_hub import errors as hf_errors

    client = importlib.import_module(hf_errors.HTTPError.__module__.split(".")[0])
    return getattr(client, name)(text)


def _commit_error(remote: FakeHfApi, status: int, branch: str = "v1") -> Exception:
    return hub_error("POST", f"{remote.endpoint}/api/kernels/{REPO}/commit/{branch}", status)


LOST = {
    "timeout": lambda r: _client_error("ReadTimeout", "The read operation timed out"),
    "cut": lambda r: _client_error("RemoteProtocolError", "Server disconnected without "
                                                          "sending a response."),
    "504": lambda r: _commit_error(r, 504),
}


def _project(root: Path, *variants: str, tag: str, version: int = 1) -> Path:
    for variant in variants:
        make_variant(root, variant, module_id=uid(tag), version=version)
    return root


def _answer_lost(remote: FakeHfApi, monkeypatch, err: Exception, *,
                 change: str | None = None) -> list[str]:
    """Make the next commit on a version branch land on the fake Hub and then fail with
    ``err``, as a commit whose answer was lost; ``change``: the commit that lands holds
    something else than was sent (``.so``: another library; ``.py``: another source;
    ``extra``: one more file; ``kept``: another ``.gitattributes``, a file the publish
    leaves as it is), as another publish's would. Returns the commits made."""
    commit = remote.create_commit
    made: list[str] = []

    def lost(repo_id: str, operations: Any, **kwargs: Any) -> Any:
        if made or kwargs.get("revision") == "main":
            return commit(repo_id, operations, **kwargs)
        operations = list(operations)
        if change in (".so", ".py"):
            operations = [CommitOperationAdd(path_in_repo=op.path_in_repo,
                                             path_or_fileobj=b"other bytes")
                          if getattr(op, "path_in_repo", "").endswith(change) else op
                          for op in operations]
        if change == "extra":
            operations.append(CommitOperationAdd(path_in_repo="build/extra.txt",
                                                 path_or_fileobj=b"extra"))
        if change == "kept":
            operations.append(CommitOperationAdd(
                path_in_repo=".gitattributes",
                path_or_fileobj=b"*.so filter=lfs diff=lfs merge=lfs -text\n*.bin -text\n"))
        made.append(commit(repo_id, operations, **kwargs).oid)
        raise err

    monkeypatch.setattr(remote, "create_commit", lost)
    return made


@pytest.mark.parametrize("lost", sorted(LOST))
def test_a_commit_whose_answer_was_lost_but_that_landed_is_published(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, lost: str, caplog,
        waits: list[float], monkeypatch) -> None:
    """The commit landed (with its signatures, the card, and the deletion of a variant no
    longer built) but its answer did not come back: the branch's head holds exactly what
    the publish sent, so the publish is done, with a WARNING; the card on main follows,
    and the same publish run again finds nothing to commit."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", "torch-cuda", tag="l1"),
                    version=1, signer=key).commit
    project = _project(tmp_path / "p2", "torch-cpu", tag="l2")
    made = _answer_lost(remote, monkeypatch, LOST[lost](remote))
    with caplog.at_level(logging.WARNING, logger="kernelforge"):
        rev = hf.publish(REPO, project, version=1, signer=key, card="# relu\n")
    assert made == [rev.commit] == [hf.branches(REPO)["v1"]] and rev.parent == c1
    assert hf.variants(REPO, rev.commit) == ["torch-cpu"]
    [said] = [r for r in caplog.records if "answer to the commit" in r.getMessage()]
    assert said.levelname == "WARNING" and said.getMessage() == (
        f"kernelforge: {REPO}: the Hub's answer to the commit on v1 was lost ({LOST[lost](remote)}"
        .splitlines()[0] + f"), but the branch's head {rev.commit[:12]} holds exactly this "
        "publish's files: it is this publish's commit")
    assert hf.read_file(REPO, hf.branches(REPO)["main"], "README.md") == b"# relu\n"
    assert waits == []  # the commit that landed is not tried again
    again = hf.publish(REPO, project, version=1, signer=key, card="# relu\n")
    assert again.commit == again.parent == rev.commit


@pytest.mark.parametrize("change", [".so", ".py", "extra", "kept"])
def test_a_lost_answer_and_a_head_holding_other_files_says_it_cannot_tell(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, change: str, waits: list[float],
        monkeypatch) -> None:
    """A head that differs from what was sent in one large file (compared by the sha256
    the Hub keeps for it), one small file (by its git blob id), one file more or a file
    the publish did not change is not this publish's commit: the error says the commit
    may have been made and to run the publish again, which then commits the build where
    the head lacks it."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="o1"), version=1).commit
    project = _project(tmp_path / "p2", "torch-cpu", tag="o2")
    made = _answer_lost(remote, monkeypatch, _commit_error(remote, 502), change=change)
    with pytest.raises(HubError) as info:
        hf.publish(REPO, project, version=1)
    assert made == [hf.branches(REPO)["v1"]] and made != [c1] and waits == []
    assert str(info.value) == (
        f"publishing branch v1 for {REPO} on the Hugging Face Hub failed: "
        f"{_commit_error(remote, 502)}; the Hub's answer was lost, so the commit may have "
        f"been made all the same, and the branch's head is now {made[0][:12]}, which holds "
        "other files than this publish's (another publish's, made after it or instead of "
        "it): run the same publish again (it makes no second commit of what the branch "
        "holds)")
    rev = hf.publish(REPO, project, version=1)  # a head holding the build is kept
    assert rev.parent == made[0] and (rev.commit == made[0]) == (change == "kept")
    assert hf.read_file(REPO, rev.commit, f"build/torch-cpu/{SO_NAME}") == (
        project / "build" / "torch-cpu" / SO_NAME).read_bytes()


def test_a_lost_answer_whose_head_cannot_be_read_says_it_cannot_tell(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float],
        monkeypatch) -> None:
    """Where the head cannot be read after the lost answer, nothing can be told: the
    error says so, the branch is left as the Hub has it, and running the publish again
    finds the build there."""
    hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="u1"), version=1)
    project = _project(tmp_path / "p2", "torch-cpu", tag="u2")
    made = _answer_lost(remote, monkeypatch, LOST["timeout"](remote))
    refs = remote.list_repo_refs

    def down_after_the_commit(*args: Any, **kwargs: Any) -> Any:
        if made:
            raise _client_error("ConnectError", "[Errno -3] Temporary failure in name "
                                                "resolution")
        return refs(*args, **kwargs)

    monkeypatch.setattr(remote, "list_repo_refs", down_after_the_commit)
    with pytest.raises(HubError) as info:
        hf.publish(REPO, project, version=1)
    said = str(info.value)
    assert said.startswith(f"publishing branch v1 for {REPO} on the Hugging Face Hub "
                           "failed: The read operation timed out; the Hub's answer was "
                           "lost, so the commit may have been made all the same, and the "
                           "branch's head could not be read to tell (listing refs for "), said
    assert said.endswith("): run the same publish again (it makes no second commit of what "
                         "the branch holds)"), said
    assert waits == []  # not tried again: the failed try may have made the commit
    monkeypatch.setattr(remote, "list_repo_refs", refs)
    again = hf.publish(REPO, project, version=1)
    assert again.commit == again.parent == made[0]


# --- trying again --------------------------------------------------------------------------


def _commits(remote: FakeHfApi) -> int:
    """How many commits the fake Hub holds for REPO."""
    return sum(1 for c in (remote.root / "repos" / REPO / "commits").iterdir()
               if not c.name.startswith("."))


@pytest.mark.parametrize(("lost", "waited"), [
    *((name, [1.0]) for name in sorted(LOST)),
    ("429", [5.0]),
    ("503-retry-after", [30.0]),
])
def test_a_failed_commit_that_made_nothing_is_tried_again(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], lost: str,
        waited: list[float], caplog) -> None:
    """A commit refused for now (a rate limit, for as long as the Hub asks) or whose
    answer was lost with the branch's head unchanged made nothing: it is tried again,
    with a WARNING for the wait, and the publish makes exactly one commit."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="r1"), version=1).commit
    before = _commits(remote)
    url = f"{remote.endpoint}/api/kernels/{REPO}/commit/v1"
    err = (hub_error("POST", url, 429, headers={"Retry-After": "5"}) if lost == "429" else
           hub_error("POST", url, 503, headers={"Retry-After": "30"})
           if lost == "503-retry-after" else LOST[lost](remote))
    remote.fail_next("create_commit", err)
    with caplog.at_level(logging.WARNING, logger="kernelforge.hub.hf"):
        rev = hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="r2"), version=1)
    assert rev.parent == c1 and rev.commit == hf.branches(REPO)["v1"] != c1
    assert _commits(remote) == before + 1 and waits == waited
    [said] = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert said.startswith(f"kernelforge: publishing branch v1 for {REPO} on the Hugging Face "
                           "Hub failed (")
    assert said.endswith(f"trying again in {waited[0]:.0f} s (try 2 of 6)")


def test_a_commit_that_keeps_failing_is_tried_six_times_and_leaves_no_new_branch(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float]) -> None:
    """Six tries over 23 s, each after the head showed the last made nothing; then one
    error that says how often it was tried, and the new version's branch goes."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="k1"), version=1).commit
    before = _commits(remote)
    remote.fail_next("create_commit", *[_commit_error(remote, 503, "v2") for _ in range(6)])
    with pytest.raises(HubError) as info:
        hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="k2", version=2),
                   version=2)
    assert str(info.value).startswith(f"publishing branch v2 for {REPO} on the Hugging Face "
                                      "Hub failed: ")
    assert "(tried 6 times over 23 s); the Hub is busy or down: try again later" in str(
        info.value)
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0] and _commits(remote) == before
    assert hf.branches(REPO) == {"main": hf.branches(REPO)["main"], "v1": c1}


@pytest.mark.parametrize("make", [
    lambda r: _client_error("ConnectError", "[Errno -3] Temporary failure in name resolution"),
    lambda r: hub_error("POST", f"{r.endpoint}/api/kernels/{REPO}/commit/v1", 429,
                        headers={"Retry-After": "3600"}),
    lambda r: hub_error("POST", f"{r.endpoint}/api/kernels/{REPO}/commit/v1", 400,
                        message="Invalid commit"),
], ids=["no-network", "429-an-hour", "400"])
def test_a_commit_that_trying_again_cannot_help_fails_at_once(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], make) -> None:
    hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="n1"), version=1)
    remote.fail_next("create_commit", make(remote))
    with pytest.raises(HubError, match="publishing branch v1") as info:
        hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="n2"), version=1)
    assert "tried" not in str(info.value) and waits == []


def _made_then_lost(remote: FakeHfApi, method: str, monkeypatch) -> None:
    """Make the next call of ``method`` (create_repo, create_branch) do its work on the
    fake Hub and then lose its answer to a timeout."""
    real = getattr(remote, method)
    calls: list[str] = []

    def lost(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        calls.append(method)
        if len(calls) == 1:
            raise _client_error("ReadTimeout", "The read operation timed out")
        return answer

    monkeypatch.setattr(remote, method, lost)


def test_a_branch_made_by_a_try_whose_answer_was_lost_is_the_publishs_own(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float],
        monkeypatch) -> None:
    """Creating the branch is tried again after a lost answer; the branch the lost try
    made then answers "exists already", and it is still this publish's new branch: a
    commit that fails deletes it, so that no empty version is the newest."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="b1"), version=1).commit
    _made_then_lost(remote, "create_branch", monkeypatch)
    remote.fail_next("create_commit", hub_error(
        "POST", f"{remote.endpoint}/api/kernels/{REPO}/commit/v2", 400, message="Invalid"))
    with pytest.raises(HubError, match="publishing branch v2"):
        hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="b2", version=2),
                   version=2)
    assert waits == [1.0]
    assert hf.branches(REPO) == {"main": hf.branches(REPO)["main"], "v1": c1}
    # and where the commit goes through, the version is published once
    _made_then_lost(remote, "create_branch", monkeypatch)
    rev = hf.publish(REPO, _project(tmp_path / "p3", "torch-cpu", tag="b3", version=2),
                     version=2)
    assert hf.branches(REPO)["v2"] == rev.commit


def test_an_existing_version_branch_is_kept_when_a_lost_answer_comes_before_its_409(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float],
        monkeypatch) -> None:
    """Publishing a version again: the answer to creating its branch, which exists, is
    lost, and the next try's "exists already" is the branch published before, not this
    publish's: a commit that then fails leaves it, and the version it holds, in place."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="e1"), version=1).commit
    create_branch = remote.create_branch
    tries: list[str] = []

    def lost_once(*args: Any, **kwargs: Any) -> Any:
        tries.append("create_branch")
        if len(tries) == 1:
            raise _client_error("ReadTimeout", "The read operation timed out")
        return create_branch(*args, **kwargs)

    monkeypatch.setattr(remote, "create_branch", lost_once)
    remote.fail_next("create_commit", _commit_error(remote, 400))
    with pytest.raises(HubError, match="publishing branch v1"):
        hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="e2"), version=1)
    assert tries == ["create_branch"] * 2 and waits == [1.0]
    assert hf.branches(REPO) == {"main": hf.branches(REPO)["main"], "v1": c1}


def test_a_repository_made_by_a_try_whose_answer_was_lost_is_said_to_be_created(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], monkeypatch,
        caplog) -> None:
    """Creating the repository is tried again after a lost answer; the "exists already"
    that follows is, as far as can be told, the lost try's repository, so its visibility
    is said as for one this publish created."""
    _made_then_lost(remote, "create_repo", monkeypatch)
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        rev = hf.publish(REPO, _project(tmp_path / "p", "torch-cpu", tag="c"), version=1)
    assert hf.branches(REPO)["v1"] == rev.commit and waits == [1.0]
    [said] = [r for r in caplog.records if "as far as can be told" in r.getMessage()]
    assert said.levelname == "WARNING" and said.getMessage().startswith(
        f"kernelforge: {REPO} did not exist, as far as can be told (the Hub's answer to "
        "creating it was lost, and trying again found it): created it on the Hugging Face Hub "
        "as a public repository")


def test_a_repository_published_to_before_is_not_said_created_after_a_lost_answer(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, waits: list[float], monkeypatch,
        caplog) -> None:
    """The answer to creating a repository that exists is lost, and the next try's
    "exists already" is of a repository holding a version: it was there before, so no
    WARNING says that this publish created it, public."""
    hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="x1"), version=1)
    create_repo = remote.create_repo
    tries: list[str] = []

    def lost_once(*args: Any, **kwargs: Any) -> Any:
        tries.append("create_repo")
        if len(tries) == 1:
            raise _client_error("ReadTimeout", "The read operation timed out")
        return create_repo(*args, **kwargs)

    monkeypatch.setattr(remote, "create_repo", lost_once)
    caplog.clear()  # the first publish did create it
    with caplog.at_level(logging.INFO, logger="kernelforge"):
        rev = hf.publish(REPO, _project(tmp_path / "p2", "torch-cpu", tag="x2", version=2),
                         version=2)
    assert tries == ["create_repo"] * 2 and waits == [1.0]
    assert hf.branches(REPO)["v2"] == rev.commit
    assert not [r for r in caplog.records if "created it" in r.getMessage()], caplog.text


def test_the_card_on_main_is_tried_again(hf: HfHub, remote: FakeHfApi, tmp_path: Path,
                                        waits: list[float], monkeypatch) -> None:
    """The card's commit on main is tried again after a busy Hub: a card that landed
    would make the next try a commit of nothing, which the Hub does not make."""
    commit = remote.create_commit
    failed: list[str] = []

    def main_busy_once(repo_id: str, operations: Any, **kwargs: Any) -> Any:
        if kwargs.get("revision") == "main" and not failed:
            failed.append("main")
            raise _commit_error(remote, 503, "main")
        return commit(repo_id, operations, **kwargs)

    monkeypatch.setattr(remote, "create_commit", main_busy_once)
    rev = hf.publish(REPO, _project(tmp_path / "p", "torch-cpu", tag="card"), version=1,
                     card="# relu\n")
    assert failed == ["main"] and waits == [1.0]
    assert hf.read_file(REPO, hf.branches(REPO)["main"], "README.md") == b"# relu\n"
    assert hf.read_file(REPO, rev.commit, "README.md") == b"# relu\n"

