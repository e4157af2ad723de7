"""Publishing to the Hugging Face Hub (kernelforge.hub.hf) when the commit's answer is
lost: a timeout, a connection cut off or a 5xx after which the commit may have been made
all the same. The branch's head then tells whether it was: a head holding exactly this
publish's files is the publish's commit."""

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
def remote(tmp_path: Path) -> FakeHfApi:
    return FakeHfApi(tmp_path / "remote")


@pytest.fixture
def hf(remote: FakeHfApi, env: dict[str, Path]) -> HfHub:
    return HfHub(api=remote, cache=env["cache"])


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


def _project(root: Path, *variants: str, tag: str) -> Path:
    for variant in variants:
        make_variant(root, variant, module_id=uid(tag))
    return root


def _answer_lost(remote: FakeHfApi, monkeypatch, err: Exception, *,
                 change: str | None = None) -> list[str]:
    """Make the next commit on a version branch land on the fake Hub and then fail with
    ``err``, as a commit whose answer was lost; ``change``: the commit that lands holds
    something else than was sent (``.so``: another library; ``.py``: another source;
    ``extra``: one more file), as another publish's would. Returns the commits made."""
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
        made.append(commit(repo_id, operations, **kwargs).oid)
        raise err

    monkeypatch.setattr(remote, "create_commit", lost)
    return made


@pytest.mark.parametrize("lost", sorted(LOST))
def test_a_commit_whose_answer_was_lost_but_that_landed_is_published(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, key, lost: str, caplog,
        monkeypatch) -> None:
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
        f"{REPO}: the Hub's answer to the commit on v1 was lost ({LOST[lost](remote)}"
        .splitlines()[0] + f"), but the branch's head {rev.commit[:12]} holds exactly this "
        "publish's files: it is this publish's commit")
    assert hf.read_file(REPO, hf.branches(REPO)["main"], "README.md") == b"# relu\n"
    again = hf.publish(REPO, project, version=1, signer=key, card="# relu\n")
    assert again.commit == again.parent == rev.commit


@pytest.mark.parametrize("change", [".so", ".py", "extra"])
def test_a_lost_answer_and_a_head_holding_other_files_says_it_cannot_tell(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, change: str, monkeypatch) -> None:
    """A head that differs from what was sent in one large file (compared by the sha256
    the Hub keeps for it), one small file (by its git blob id) or one file more is not
    this publish's commit: the error says the commit may have been made and to run the
    publish again, which then commits the build."""
    c1 = hf.publish(REPO, _project(tmp_path / "p1", "torch-cpu", tag="o1"), version=1).commit
    project = _project(tmp_path / "p2", "torch-cpu", tag="o2")
    made = _answer_lost(remote, monkeypatch, _commit_error(remote, 502), change=change)
    with pytest.raises(HubError) as info:
        hf.publish(REPO, project, version=1)
    assert made == [hf.branches(REPO)["v1"]] and made != [c1]
    assert str(info.value) == (
        f"publishing branch v1 for {REPO} on the Hugging Face Hub failed: "
        f"{_commit_error(remote, 502)}; the Hub's answer was lost, so the commit may have "
        f"been made all the same, and the branch's head is now {made[0][:12]}, which holds "
        "other files than this publish's (another publish's, made after it or instead of "
        "it): run the same publish again (it makes no second commit of what the branch "
        "holds)")
    rev = hf.publish(REPO, project, version=1)
    assert rev.parent == made[0] and rev.commit != made[0]
    assert hf.read_file(REPO, rev.commit, f"build/torch-cpu/{SO_NAME}") == (
        project / "build" / "torch-cpu" / SO_NAME).read_bytes()


def test_a_lost_answer_whose_head_cannot_be_read_says_it_cannot_tell(
        hf: HfHub, remote: FakeHfApi, tmp_path: Path, monkeypatch) -> None:
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
    monkeypatch.setattr(remote, "list_repo_refs", refs)
    again = hf.publish(REPO, project, version=1)
    assert again.commit == again.parent == made[0]
