"""Loading kernels in one process: threads, a forked child, reloads."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kf_testutil import write_metadata

from kernelforge import get_kernel, get_local_kernel, has_kernel
from kernelforge.hub import LocalHub


def fabricate(vdir: Path, module_id: str, init: str) -> Path:
    """A pure-Python variant directory (``__init__.py`` and ``metadata.json``)."""
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(init)
    write_metadata(vdir, module_id)
    return vdir


@pytest.mark.usefixtures("cpu_system")
def test_sixteen_threads_loading_at_once_import_each_kernel_once(tmp_path: Path) -> None:
    # Threads of a server or a data pipeline asking for kernels at the same moment, cold
    # and then warm: each gets a working module, one per build, imported once.
    hub = LocalHub(tmp_path / "hub")
    log = tmp_path / "imports.log"
    tag = uuid.uuid4().hex[:8]
    ids = {}
    for repo, version in (("kernels-test/a", 1), ("kernels-test/a", 2), ("kernels-test/b", 1)):
        module_id = ids[repo, version] = f"_{repo[-1]}{version}_threads_{tag}"
        vdir = tmp_path / module_id / "build" / "torch-cpu"
        vdir.mkdir(parents=True)
        (vdir / "__init__.py").write_text(textwrap.dedent(f"""\
            import time
            with open({str(log)!r}, "a") as f:
                f.write(__name__ + "\\n")
            time.sleep(0.05)  # other threads arrive meanwhile
            VALUE = {version}
            """))
        write_metadata(vdir, module_id, version=version)
        hub.publish(repo, tmp_path / module_id / "build", version=version)
    local = tmp_path / ids["kernels-test/a", 1]  # the same build, from its project
    calls = [
        lambda: get_kernel("kernels-test/a", version=1, hub=hub),
        lambda: get_kernel("kernels-test/a", version=2, hub=hub),
        lambda: get_kernel("kernels-test/b", version=1, hub=hub),
        lambda: get_local_kernel(local),
        lambda: has_kernel("kernels-test/b", version=1, hub=hub),
    ]
    start = threading.Barrier(16)

    def one(i: int) -> tuple[object, object]:
        start.wait(timeout=30)
        got = calls[i % len(calls)]()
        return got, getattr(got, "VALUE", None)  # read at once: a whole module, not a half

    for _ in ("cold", "warm"):
        with ThreadPoolExecutor(16) as pool:
            got = [f.result(timeout=60) for f in [pool.submit(one, i) for i in range(16)]]
        assert all(answer == (True, None) for answer in got[4::5])
        modules = {id(m): (m, value) for m, value in got if m is not True}
        assert sorted(m.__name__ for m, _ in modules.values()) == sorted(ids.values())
        assert {m.__name__: value for m, value in modules.values()} == {
            module_id: version for (_, version), module_id in ids.items()}
    assert sorted(log.read_text().split()) == sorted(ids.values())  # each imported once


def test_a_forked_child_loads_while_a_parent_thread_was_loading(tmp_path: Path) -> None:
    # A thread of the parent is inside a kernel's import when the process forks (a data
    # loader's workers start, say): the child must still load kernels, that one included,
    # and get it whole, not the half-imported module the dead thread left behind.
    slow = fabricate(tmp_path / "slow", "_slow_fork_k1", textwrap.dedent("""\
        import os, time
        open(os.path.join(os.environ["KF_GATE"], "started"), "w").close()
        while not os.path.exists(os.path.join(os.environ["KF_GATE"], "go")):
            time.sleep(0.01)
        VALUE = 1
        """))
    quick = fabricate(tmp_path / "quick", "_quick_fork_k2", "VALUE = 2\n")
    script = textwrap.dedent(f"""\
        import os, signal, threading, time
        os.environ["KF_GATE"] = {str(tmp_path)!r}
        from kernelforge import load_variant
        thread = threading.Thread(target=load_variant, args=({str(slow)!r},))
        thread.start()
        while not os.path.exists(os.path.join({str(tmp_path)!r}, "started")):
            time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a deadlock ends the child with SIGALRM
            try:
                quick = load_variant({str(quick)!r}).VALUE
                slow = load_variant({str(slow)!r})
                print("child", quick, getattr(slow, "VALUE", "half-imported"), flush=True)
            finally:
                os._exit(0)
        open(os.path.join({str(tmp_path)!r}, "go"), "w").close()
        thread.join()
        _, status = os.waitpid(pid, 0)
        print("status", status)
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["child 2 1", "status 0"], (out.stdout, out.stderr)


def test_a_forked_child_loads_while_a_parent_thread_imported_a_kernel_submodule(
        tmp_path: Path) -> None:
    # The parent's thread is inside the import of a kernel's submodule (its _ops.py, which
    # loads the extension) when the process forks: Python's lock of that submodule is held
    # by a thread the child does not have, and the child's own load of the kernel must
    # not wait on it forever.
    vdir = tmp_path / "sub"
    vdir.mkdir()
    (vdir / "__init__.py").write_text("from ._ops import VALUE\n")
    (vdir / "_ops.py").write_text(textwrap.dedent("""\
        import os, time
        open(os.path.join(os.environ["KF_GATE"], "started"), "w").close()
        while not os.path.exists(os.path.join(os.environ["KF_GATE"], "go")):
            time.sleep(0.01)
        VALUE = 3
        """))
    write_metadata(vdir, "_sub_fork_k5")
    script = textwrap.dedent(f"""\
        import os, signal, threading, time
        os.environ["KF_GATE"] = {str(tmp_path)!r}
        from kernelforge import load_variant
        thread = threading.Thread(target=load_variant, args=({str(vdir)!r},))
        thread.start()
        while not os.path.exists(os.path.join({str(tmp_path)!r}, "started")):
            time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a deadlock ends the child with SIGALRM
            try:
                open(os.path.join({str(tmp_path)!r}, "go"), "w").close()
                print("child", load_variant({str(vdir)!r}).VALUE, flush=True)
            finally:
                os._exit(0)
        thread.join()
        _, status = os.waitpid(pid, 0)
        print("status", status, load_variant({str(vdir)!r}).VALUE)
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["child 3", "status 0 3"], (out.stdout, out.stderr)


def test_a_kernel_with_kernel_depends_reloads(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    # importlib.reload runs the package's __init__ again: its get_kernel_dep calls must
    # find the kernel's dependencies there as at its import.
    pytest.importorskip("kernels.deps")
    dep = fabricate(tmp_path / "dep", "_dep_reload_k3", "VALUE = 7\n")
    monkeypatch.setenv("LOCAL_KERNELS", f"kernels-test/dep={dep}")
    main = fabricate(tmp_path / "main", "_main_reload_k4", "import kernels\n"
                     "VALUE = 2 * kernels.get_kernel_dep('kernels-test/dep').VALUE\n")
    meta = json.loads((main / "metadata.json").read_text())
    meta["kernel-depends"] = [{"repo-id": "kernels-test/dep", "version": 1}]
    (main / "metadata.json").write_text(json.dumps(meta))
    module = get_local_kernel(main)
    assert module.VALUE == 14
    assert importlib.reload(module) is module and module.VALUE == 14
