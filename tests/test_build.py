"""Building a real project (the bundled relu kernel, written for Hugging Face's builder)
for this machine's CPU, loading it with our loader and with Hugging Face's `kernels`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kf_testutil import copy_example as copy_project

from kernelforge.build import build_project
from kernelforge.errors import BuildError, ToolchainError

pytestmark = pytest.mark.slow


def cpu_variant(project: Path) -> Path:
    (variant,) = [p for p in (project / "build").iterdir() if "-cpu-" in p.name]
    return variant


def test_variant_directory_has_the_hub_layout(built_relu: Path) -> None:
    variant = cpu_variant(built_relu)
    names = sorted(p.name for p in variant.iterdir())
    meta = json.loads((variant / "metadata.json").read_text())
    ns = meta["id"]  # the op namespace, as Hugging Face's builder writes it
    assert names == sorted(["__init__.py", "_ops.py", f"{ns}.abi3.so", "metadata.json"])
    assert meta["name"] == "relu"
    assert meta["id"].startswith("_relu_cpu_")
    assert meta["backend"]["type"] == "cpu"
    assert set(meta["digest"]["files"]) == {"__init__.py", "_ops.py", f"{ns}.abi3.so"}
    ops = (variant / "_ops.py").read_text()
    assert f"from . import {ns}" in ops
    assert f"ops = torch.ops.{ns}" in ops
    assert f'return f"{ns}::{{op_name}}"' in ops
    assert "kernel-builder" in meta["provenance"]
    assert not list(built_relu.joinpath("build").rglob("*.pyc"))
    assert not list(built_relu.joinpath("build").rglob("__pycache__"))


def test_loads_with_get_local_kernel_and_matches_torch(built_relu: Path) -> None:
    import torch

    from kernelforge import get_local_kernel

    relu = get_local_kernel(built_relu, backend="cpu")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(257, 129).to(dtype)
        assert torch.equal(relu.relu(x), torch.relu(x))
    # as Hugging Face's kernels.get_local_kernel takes them
    assert get_local_kernel(repo_path=built_relu, backend="cpu") is relu
    assert get_local_kernel(built_relu, "cpu") is relu


def test_loads_with_hugging_face_kernels(built_relu: Path) -> None:
    """Hugging Face's loader (PyPI kernels==0.17.2) imports our build and the op works."""
    kernels = pytest.importorskip("kernels", reason="needs PyPI kernels==0.17.2")
    if not hasattr(kernels, "get_local_kernel"):  # the repository's kernels/ folder
        pytest.skip("needs PyPI kernels==0.17.2; only the repository's kernels/ folder imports")
    script = textwrap.dedent(
        f"""
        import warnings, torch
        from pathlib import Path
        import kernels
        assert kernels.__version__ == "0.17.2", kernels.__version__
        relu = kernels.get_local_kernel(Path({str(built_relu)!r}), backend="cpu")
        x = torch.randn(300, 77)
        out = relu.relu(x)
        assert torch.equal(out, torch.relu(x)), "mismatch"
        print("OK", relu.__name__)
        """
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK _relu_cpu_" in proc.stdout


#: Run by Hugging Face's loader: it chooses our variant by itself (no backend=), reads our
#: metadata.json with its own parser, finds its digest right, and loads the build from
#: every place a user may point it at: the project, its build/, a published local-hub
#: revision (laid out as a Hub repository) and a LOCAL_KERNELS entry standing in for a
#: repository.
_THEIR_LOADS = """
import os, sys, torch, kernels
from pathlib import Path
from kernels._rust import Digest, Metadata
from kernels.variants import get_variants_local, resolve_variant

project, revision, expected = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
variant, trace = resolve_variant(get_variants_local(project / "build"))
assert variant is not None and variant.variant_str == expected, trace
meta = Metadata.read_from_file(project / "build" / expected / "metadata.json")
# the digest their verification recomputes (kernels.verify) matches the one we wrote
meta.digest.validate(Digest.hash_variant(meta.digest.algorithm, project / "build" / expected))
ops = (project / "build" / expected / "_ops.py").read_text()
assert f"ops = torch.ops.{meta.id}" in ops, (meta.id, ops)
x = torch.randn(64, 33)
for path in (project, project / "build", revision):
    relu = kernels.get_local_kernel(path)
    assert relu.__name__ == meta.id, (path, relu.__name__)
    assert Path(relu.__file__).parent.name == expected, relu.__file__
    assert torch.equal(relu.relu(x), torch.relu(x)), path
repo = os.environ["LOCAL_KERNELS"].split("=")[0]
assert kernels.has_kernel(repo, version=1)
relu = kernels.get_kernel(repo, version=1)
assert torch.equal(relu.relu(-x), torch.relu(-x))
print("OK", meta.name, meta.version, meta.backend.backend_type)
"""


def test_hugging_face_kernels_chooses_and_loads_our_build_everywhere(
    built_relu: Path, tmp_path: Path
) -> None:
    """Without backend=, their loader picks the variant kernelforge named for this
    machine, and loads it from the project, build/, a local-hub revision and
    LOCAL_KERNELS alike."""
    kernels = pytest.importorskip("kernels", reason="needs PyPI kernels==0.17.2")
    if not hasattr(kernels, "get_local_kernel"):
        pytest.skip("needs PyPI kernels==0.17.2; only the repository's kernels/ folder imports")
    from kernelforge import kernel_info
    from kernelforge.hub.local import LocalHub

    hub = LocalHub(tmp_path / "hub")
    hub.publish("kernels-test/relu", built_relu, version=1)
    published = kernel_info("kernels-test/relu", version=1, hub=hub).path
    assert published is not None
    revision = published.parents[1]  # <hub>/<org>/<name>/objects/<commit>
    assert published == revision / "build" / cpu_variant(built_relu).name
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1",
               LOCAL_KERNELS=f"kernels-test/relu={built_relu}")
    proc = subprocess.run(
        [sys.executable, "-c", _THEIR_LOADS, str(built_relu), str(revision),
         cpu_variant(built_relu).name],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["OK", "relu", "1", "cpu"], proc.stdout


def test_unchanged_project_rebuilds_in_under_two_seconds(built_relu: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "build", str(built_relu),
                           "--backend", "cpu"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout
    assert elapsed < 2.0, f"no-op rebuild took {elapsed:.2f}s"


def test_a_copied_project_is_up_to_date_whatever_its_file_times(
    tmp_path: Path, built_relu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The up-to-date check compares contents, not paths, file times or unrelated
    environment variables: a built project copied elsewhere with its .kernelforge/ is up
    to date there, also once its sources are touched. Its next compile recompiles every
    source, as ninja knows them by their old paths (the README says both)."""
    project = tmp_path / "copied" / "relu"
    shutil.copytree(built_relu, project, symlinks=True)  # file times kept, as by cp -a
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert result.up_to_date and result.path == cpu_variant(project)
    lines: list[str] = []
    (forced,) = build_project(project, backends=["cpu"], force=True, progress=lines.append)
    assert not forced.up_to_date
    compiled = sorted(line.split("] compiled ")[1] for line in lines if "] compiled " in line)
    assert compiled == ["relu_cpu/relu_cpu.cpp", "torch-ext/torch_binding.cpp"], lines
    for source in [*project.glob("relu_cpu/*"), *project.glob("torch-ext/*.*")]:
        source.touch()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("KERNELFORGE_TEST_UNRELATED", "1")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    (again,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert again.up_to_date


def test_tampered_build_is_rebuilt(built_relu: Path) -> None:
    # In place, so ninja finds its objects up to date and only packaging reruns.
    project = built_relu
    results = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert results[0].up_to_date
    init = cpu_variant(project) / "__init__.py"
    init.write_text(init.read_text() + "\n# changed\n")
    results = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not results[0].up_to_date
    assert "# changed" not in (cpu_variant(project) / "__init__.py").read_text()


def tiny_cpu_project(project: Path, binding: str, kernels: str,
                     sources: dict[str, str]) -> Path:
    """A cpu project whose sources do not include torch's headers (compiles in seconds)."""
    name = project.name
    (project / "torch-ext" / name).mkdir(parents=True)
    (project / "torch-ext" / name / "__init__.py").write_text("from ._ops import ops\n")
    (project / "torch-ext" / "torch_binding.cpp").write_text(binding)
    for rel, text in sources.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (project / "build.toml").write_text(textwrap.dedent(f"""
        [general]
        name = "{name}"
        edition = 5
        version = 1
        license = "MIT"
        backends = ["cpu"]

        [torch]
        src = ["torch-ext/torch_binding.cpp"]
    """) + textwrap.dedent(kernels))
    return project


#: A binding that registers the extension and includes nothing of torch's.
BINDING = '#include "registration.h"\nREGISTER_EXTENSION(TORCH_EXTENSION_NAME)\n'


def test_compiler_errors_name_file_and_line(tmp_path: Path) -> None:
    """A syntax error is reported with its file and line (a tiny project, so this
    fails in seconds rather than after compiling torch's headers)."""
    project = tiny_cpu_project(
        tmp_path / "broken", "int ok() { return 0; }\n",
        """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        """,
        {"k/k.cpp": "int f() {\n  return 1;\n  this is not C++;\n}\n"},
    )
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=lambda _: None)
    message = str(info.value)
    assert "k/k.cpp:3: error:" in message, message
    assert "build.log" in message
    # nothing half-written is left where a loader would look
    assert not (project / "build").exists() or not any((project / "build").iterdir())


def test_a_function_declared_but_defined_nowhere_fails_the_build(tmp_path: Path) -> None:
    """The linker leaves a symbol that no source defines for the loader to find, so the
    extension links; the build loads it as an import would and fails, naming the
    symbol, the source that uses it and the fix, instead of writing a variant that
    get_kernel cannot import."""
    project = tiny_cpu_project(
        tmp_path / "undefined",
        BINDING + "int vmul(int);\nint use_vmul(int x) { return vmul(x); }\n",
        """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        """,
        {"k/k.cpp": "int vadd(int x) { return x + 1; }\n"},
    )
    with pytest.raises(BuildError) as info:
        build_project(project, backends=["cpu"], progress=lambda _: None)
    message = str(info.value)
    assert "cannot be loaded" in message, message
    assert "undefined symbol" in message and "vmul" in message, message
    if shutil.which("readelf"):
        assert "used by torch-ext/torch_binding.cpp" in message, message
    assert "fix: define it in a source" in message, message
    assert not (project / "build").exists() or not any((project / "build").iterdir())


def test_an_extension_whose_static_initializer_aborts_here_still_builds(
        tmp_path: Path) -> None:
    """The load that looks for undefined symbols runs the extension's static
    initializers. One that throws on this machine (as one that needs a GPU does on a
    build machine without one) ended the build's driver with SIGABRT, and so the
    build; the load runs in a process of its own now, and that is a note."""
    project = tiny_cpu_project(
        tmp_path / "initabort",
        BINDING + textwrap.dedent("""
            #include <cstdlib>
            #include <stdexcept>
            static int probed = [] {
              if (!std::getenv("KF_TEST_DEVICE")) throw std::runtime_error("no device here");
              return 1;
            }();
            """),
        """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        """,
        {"k/k.cpp": "int vadd(int x) { return x + 1; }\n"},
    )
    lines: list[str] = []
    build_project(project, backends=["cpu"], progress=lines.append)
    notes = [ln for ln in lines if ln.startswith("  note: ") and "not checked" in ln]
    assert len(notes) == 1, lines
    assert "was ended by SIGABRT" in notes[0] and "no device here" in notes[0], notes
    variant = cpu_variant(project)
    script = ("import sys; from kernelforge import get_local_kernel; "
              "print(get_local_kernel(sys.argv[1], backend='cpu').__name__)")
    proc = subprocess.run([sys.executable, "-c", script, str(project)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, KF_TEST_DEVICE="1"))
    assert proc.returncode == 0, proc.stderr
    assert variant.exists()


def test_unbuildable_backend_is_explained(tmp_path: Path) -> None:
    if _has_cuda_torch():
        pytest.skip("the installed torch has CUDA support, so cuda is buildable here")
    project = copy_project(tmp_path / "relu")
    with pytest.raises(ToolchainError, match="cannot build backend 'cuda' here: the installed "
                       "torch has no CUDA support; fix: install a CUDA build of torch here, "
                       "or build for another environment's torch with --python PATH"):
        build_project(project, backends=["cuda"], progress=lambda _: None)


def _has_cuda_torch() -> bool:
    from kernelforge.variants import torch_install_facts

    inst = torch_install_facts()
    return bool(inst and inst.cuda)


def test_two_builds_of_one_kernel_load_side_by_side(tmp_path: Path, built_relu: Path) -> None:
    """A changed source gives a new uid, so a second build registers its ops in its own
    namespace and both builds work in one process."""
    import torch

    from kernelforge import get_kernel
    from kernelforge.hub import LocalHub

    hub = LocalHub(tmp_path / "hub")
    first = hub.publish("me/relu", built_relu / "build", version=1, message="first")
    project = copy_project(tmp_path / "relu2")
    init = project / "torch-ext" / "relu" / "__init__.py"
    init.write_text(init.read_text() + "\nSECOND_BUILD = True\n")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    second = hub.publish("me/relu", project / "build", version=1, message="second")

    old = get_kernel("me/relu", revision=first.commit, backend="cpu", hub=hub.root)
    new = get_kernel("me/relu", revision=second.commit, backend="cpu", hub=hub.root)
    assert old is not new and old.__name__ != new.__name__
    assert not hasattr(old, "SECOND_BUILD") and new.SECOND_BUILD is True
    assert old.ops.name != new.ops.name  # two op namespaces, both registered
    assert old.ops.name.startswith("_relu_cpu_") and new.ops.name.startswith("_relu_cpu_")
    x = torch.randn(4096)
    assert torch.equal(old.relu(x), torch.relu(x))
    assert torch.equal(new.relu(x), torch.relu(x))


def test_builds_are_reproducible_across_directories(
    tmp_path: Path, built_relu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sources built in another, deeper folder, from another working directory,
    with other file times, umask, SOURCE_DATE_EPOCH, time zone and locale, give a
    byte-identical variant directory with the same file modes."""
    import stat

    project = copy_project(tmp_path / "elsewhere" / "deeper" / "relu")
    for path in project.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    monkeypatch.setenv("LC_ALL", "C")
    old = os.umask(0o077)
    try:
        (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    finally:
        os.umask(old)
    first = cpu_variant(built_relu)
    assert result.path.name == first.name
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in result.path.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (result.path / name).read_bytes(), name
    for variant in (first, result.path):
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [variant, *variant.iterdir()]}
        assert modes == {variant.name: 0o755, **{n: 0o755 if n.endswith(".so") else 0o644
                                                 for n in names}}, modes


def test_kernel_sections_compile_with_their_own_flags(tmp_path: Path) -> None:
    """Two sections define the same macro differently; each source asserts its own value
    at compile time, so merged flags would fail the build."""
    sources = {
        f"{name}/{name}.cpp":
            f'static_assert(SECTION == {value}, "section {name} got the wrong flags");\n'
            f"int section_{name}() {{ return SECTION; }}\n"
        for name, value in (("a", 1), ("b", 2))
    }
    project = tiny_cpu_project(
        tmp_path / "flags", BINDING,
        """
        [kernel.a]
        backend = "cpu"
        depends = ["torch"]
        cxx-flags = ["-DSECTION=1"]
        src = ["a/a.cpp"]

        [kernel.b]
        backend = "cpu"
        depends = ["torch"]
        cxx-flags = ["-DSECTION=2"]
        src = ["b/b.cpp"]
        """,
        sources,
    )
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert any(p.name.endswith(".abi3.so") for p in result.path.iterdir())


def test_a_source_many_sections_share_compiles_whatever_their_names(tmp_path: Path) -> None:
    """The folder of a source that sections share is named after them all: for many
    sections with long names, that name is cut to one a file system takes."""
    names = [f"section_with_a_rather_long_name_{i:02d}" for i in range(10)]
    kernels = "".join(f'[kernel.{n}]\nbackend = "cpu"\ndepends = ["torch"]\n'
                      f'src = ["k/common.cpp", "k/{n}.cpp"]\n\n' for n in names)
    sources = {f"k/{n}.cpp": f"int {n}() {{ return 1; }}\n" for n in names}
    sources["k/common.cpp"] = "int common() { return 0; }\n"
    project = tiny_cpu_project(tmp_path / "shared", BINDING, kernels, sources)
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert any(p.name.endswith(".abi3.so") for p in result.path.iterdir())


def tiny_two_section_project(project: Path, extra_source: str = "") -> Path:
    """A cpu project of a binding and two kernel sections that compiles in seconds."""
    return tiny_cpu_project(
        project, BINDING,
        """
        [kernel.a]
        backend = "cpu"
        depends = ["torch"]
        src = ["a/a.cpp"]

        [kernel.b]
        backend = "cpu"
        depends = ["torch"]
        src = ["b/b.cpp"]
        """,
        {"a/a.cpp": extra_source + "int section_a() { return 1; }\n",
         "b/b.cpp": "int section_b() { return 2; }\n"},
    )


def test_sections_and_binding_compile_in_one_parallel_step(tmp_path: Path) -> None:
    """One ninja run covers the binding and every section ([n/3] steps), so -j spreads
    over all of them instead of one section after another."""
    project = tiny_two_section_project(tmp_path / "par")
    lines: list[str] = []
    build_project(project, backends=["cpu"], jobs=2, progress=lines.append)
    steps = [ln.split("]")[0].strip() for ln in lines if ln.strip().startswith("[")]
    assert sorted(steps) == ["[1/3", "[2/3", "[3/3"], lines
    # ninja, writing to a pipe, prints a step when it has finished: "compiled", "linked"
    compiled = sorted(ln.split("] compiled ", 1)[1] for ln in lines if "] compiled " in ln)
    assert compiled == ["a/a.cpp", "b/b.cpp", "torch-ext/torch_binding.cpp"], lines


def test_an_edit_recompiles_only_the_binding_and_the_sources_that_use_the_name(
        tmp_path: Path) -> None:
    """Any edit gives a new uid, and so a new -DTORCH_EXTENSION_NAME; a kernel source that
    does not use the name compiles without it, so ninja keeps its object. A source that
    uses it still gets it (it does not compile otherwise), and an edited one compiles."""
    uses_name = textwrap.dedent("""\
        #ifndef TORCH_EXTENSION_NAME
        #error this source needs the extension's name
        #endif
        #define KF_TEXT(x) #x
        #define KF_NAME_TEXT(x) KF_TEXT(x)
        extern "C" const char section_a_name[] = "kf-name:" KF_NAME_TEXT(TORCH_EXTENSION_NAME);
        """)
    project = tiny_two_section_project(tmp_path / "edit", uses_name)
    namespaces: list[str] = []

    def build_and_compiled() -> list[str]:
        lines: list[str] = []
        (result,) = build_project(project, backends=["cpu"], progress=lines.append)
        (so,) = [p for p in result.path.iterdir() if p.name.endswith(".abi3.so")]
        namespace = so.name.split(".", 1)[0]
        # a/a.cpp holds the name of the build it is linked into, not an earlier one's
        assert b"kf-name:" + namespace.encode() + b"\0" in so.read_bytes()
        namespaces.append(namespace)
        return sorted(ln.split("] compiled ", 1)[1] for ln in lines if "] compiled " in ln)

    assert len(build_and_compiled()) == 3
    (project / "README.md").write_text("an edit that changes the uid\n")
    assert build_and_compiled() == ["a/a.cpp", "torch-ext/torch_binding.cpp"]
    (project / "b" / "b.cpp").write_text("int section_b() { return 3; }\n")
    assert build_and_compiled() == ["a/a.cpp", "b/b.cpp", "torch-ext/torch_binding.cpp"]
    assert len(set(namespaces)) == 3



def test_a_header_edit_recompiles_the_sources_that_include_it(tmp_path: Path) -> None:
    """An edit of a header recompiles the kernel sources that may read it (and the
    binding, whose uid is new), and the build has the new header's value."""
    project = tiny_cpu_project(tmp_path / "headers", BINDING, """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/a.cpp", "k/b.cpp"]
        """, {"k/a.cpp": '#include "a.h"\nextern "C" const char kf_a[] = "conf:" A;\n',
              "k/a.h": '#include "common/deep.h"\n#define A "a" DEEP\n',
              "k/common/deep.h": '#define DEEP "1"\n',
              "k/b.cpp": '#include "b.h"\nextern "C" const char kf_b[] = "other:" B;\n',
              "k/b.h": '#define B "b"\n'})

    def compiled() -> list[str]:
        lines: list[str] = []
        build_project(project, backends=["cpu"], progress=lines.append)
        return sorted(ln.split("] compiled ", 1)[1] for ln in lines if "] compiled " in ln)

    assert compiled() == ["k/a.cpp", "k/b.cpp", "torch-ext/torch_binding.cpp"]
    (project / "k" / "common" / "deep.h").write_text('#define DEEP "2"\n')
    assert compiled() == ["k/a.cpp", "torch-ext/torch_binding.cpp"]
    assert compiled_conf(project) == b"conf:a2"
    (project / "k" / "b.h").write_text('#define B "c"\n')
    assert compiled() == ["k/b.cpp", "torch-ext/torch_binding.cpp"]


SHADOW_SECTION = """
[kernel.k]
backend = "cpu"
depends = ["torch"]
include = ["inc"]
src = ["src/k.cpp"]
"""


def compiled_conf(project: Path, force: bool = False) -> bytes:
    """The string the project's kernel source compiled in: ``conf:...``."""
    (result,) = build_project(project, backends=["cpu"], force=force, progress=lambda _: None)
    (so,) = [p for p in result.path.iterdir() if p.name.endswith(".abi3.so")]
    data = so.read_bytes()
    start = data.index(b"conf:")
    return data[start:data.index(b"\0", start)]


def test_a_new_header_found_first_on_the_include_path_is_compiled_in(tmp_path: Path) -> None:
    """A source compiled without the namespace keeps its object only while nothing it
    could include changed: a new conf.h at the project's top, which comes before inc/ on
    the include path, reaches it as a clean build would (ninja's dependency file names
    only the inc/conf.h it read)."""
    project = tiny_cpu_project(tmp_path / "shadow", BINDING, SHADOW_SECTION, {
        "src/k.cpp": '#include "conf.h"\nextern "C" const char kf_conf[] = "conf:" CONF;\n',
        "inc/conf.h": '#define CONF "old"\n'})
    assert compiled_conf(project) == b"conf:old"
    (project / "conf.h").write_text('#define CONF "new"\n')
    assert compiled_conf(project) == b"conf:new"


def test_a_kept_object_follows_includes_in_every_spelling(tmp_path: Path) -> None:
    """An include after a byte order mark (as editors on Windows save files) still counts:
    a new header found first on the include path reaches the object. A source that
    includes another compiled source through a macro is rebuilt when that source changes,
    as a clean build would make it."""
    project = tiny_cpu_project(tmp_path / "spelt", BINDING, SHADOW_SECTION + """
        [kernel.m]
        backend = "cpu"
        depends = ["torch"]
        src = ["m/a.cpp", "m/b.cpp"]
        """, {"src/k.cpp": '\ufeff#include "conf.h"\n'
                           'extern "C" const char kf_conf[] = "conf:" CONF;\n',
              "inc/conf.h": '#define CONF "old"\n',
              "m/a.cpp": '#define IMPL "b.cpp"\n#define B_ONLY\n#include IMPL\n'
                         'extern "C" const char kf_b[] = "impl:" B_VAL;\n',
              "m/b.cpp": '#ifdef B_ONLY\n#define B_VAL "1"\n#endif\n'})

    def impl() -> bytes:
        (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
        (so,) = [p for p in result.path.iterdir() if p.name.endswith(".abi3.so")]
        data = so.read_bytes()
        start = data.index(b"impl:")
        return data[start:data.index(b"\0", start)]

    assert compiled_conf(project) == b"conf:old"
    (project / "conf.h").write_text('#define CONF "new"\n')
    assert compiled_conf(project) == b"conf:new"
    assert impl() == b"impl:1"
    stamp = (project / "m" / "b.cpp").stat().st_mtime_ns
    (project / "m" / "b.cpp").write_text('#ifdef B_ONLY\n#define B_VAL "2"\n#endif\n')
    os.utime(project / "m" / "b.cpp", ns=(stamp, stamp))  # as rsync -a or tar x leave it
    assert impl() == b"impl:2"


def test_what_a_kept_object_read_is_compared_by_content(tmp_path: Path) -> None:
    """The object of a source compiled without the namespace is kept only while what it
    may read is the same by content: not by file times (a header replaced by an older
    file, a link pointed elsewhere), and whatever the include names (a .txt table)."""
    project = tiny_cpu_project(tmp_path / "content", BINDING, SHADOW_SECTION, {
        "src/k.cpp": '#include "conf.h"\nextern "C" const char kf[] = "conf:" CONF\n'
                     '#include "more.txt"\n;\n',
        "inc/conf_a.h": '#define CONF "a"\n', "inc/conf_b.h": '#define CONF "b"\n',
        "inc/more.txt": '"-1"\n'})
    (project / "inc" / "conf.h").symlink_to("conf_a.h")
    assert compiled_conf(project) == b"conf:a-1"
    (project / "inc" / "conf.h").unlink()
    (project / "inc" / "conf.h").symlink_to("conf_b.h")  # older than the object
    assert compiled_conf(project) == b"conf:b-1"
    stamp = (project / "inc" / "more.txt").stat().st_mtime_ns
    (project / "inc" / "more.txt").write_text('"-2"\n')
    os.utime(project / "inc" / "more.txt", ns=(stamp, stamp))  # as rsync -a or tar x leave it
    assert compiled_conf(project) == b"conf:b-2"
    (project / "more.txt").write_text('"-3"\n')  # found first: the project's top precedes inc/
    assert compiled_conf(project) == compiled_conf(project, force=True) == b"conf:b-3"


def test_a_stale_extension_of_another_uid_is_not_taken(tmp_path: Path) -> None:
    """A `<namespace>_dirty` extension left by an earlier build of the same sources in a
    git work tree with changes does not confuse the clean build (nor a --force one)."""
    project = tiny_two_section_project(tmp_path / "stale")
    (first,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    (built,) = [p for p in first.path.iterdir() if p.name.endswith(".abi3.so")]
    namespace = built.name.split(".", 1)[0]
    lib = project / ".kernelforge" / first.variant / "lib"
    stale = b"\x7fELF stale extension of another uid"
    (lib / f"{namespace}_dirty.abi3.so").write_bytes(stale)
    (again,) = build_project(project, backends=["cpu"], force=True, progress=lambda _: None)
    shipped = sorted(p.name for p in again.path.iterdir() if p.name.endswith(".so"))
    assert shipped == [f"{namespace}.abi3.so"]
    data = (again.path / shipped[0]).read_bytes()
    assert data != stale and data.startswith(b"\x7fELF") and len(data) > 4096


def test_arch_does_not_rebuild_a_cpu_variant(tmp_path: Path) -> None:
    project = tiny_two_section_project(tmp_path / "arch")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    (again,) = build_project(project, backends=["cpu"], archs=["9.0a"], progress=lambda _: None)
    assert again.up_to_date


def test_a_change_of_the_build_rules_rebuilds(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A build made by a builder whose rules differ (same version, same sources) is not
    taken as up to date: what it made may differ from what this builder makes."""
    import kernelforge.build as build

    project = tiny_two_section_project(tmp_path / "rules")
    build_project(project, backends=["cpu"], progress=lambda _: None)
    (same,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert same.up_to_date
    monkeypatch.setattr(build, "BUILD_RULES", build.BUILD_RULES + 1)
    (again,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not again.up_to_date


def test_compiler_flags_come_from_the_manifest_not_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CFLAGS/CXXFLAGS/LDFLAGS are cleared for the compile (a note says so), so the binary
    does not depend on the shell; the compiler choice (CC) is part of the up-to-date check."""
    project = tiny_two_section_project(
        tmp_path / "envflags",
        "#ifdef FROM_THE_ENVIRONMENT\n#error flags from the environment reached the build\n"
        "#endif\n")
    monkeypatch.setenv("CFLAGS", "-DFROM_THE_ENVIRONMENT")
    monkeypatch.setenv("CXXFLAGS", "-DFROM_THE_ENVIRONMENT")
    monkeypatch.setenv("LDFLAGS", "-Wl,--no-such-linker-option")
    lines: list[str] = []
    (result,) = build_project(project, backends=["cpu"], progress=lines.append)
    assert any("ignoring CFLAGS, CXXFLAGS, LDFLAGS from the environment" in ln
               for ln in lines), lines
    assert (result.path / "metadata.json").is_file()
    monkeypatch.setenv("CC", "gcc")
    (again,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not again.up_to_date


def test_a_section_holding_the_binding_keeps_its_flags_to_itself(tmp_path: Path) -> None:
    """With only headers in torch.src, the section that lists the binding source takes
    its place in the extension: its cxx-flags must still not reach the other sections."""
    project = tiny_cpu_project(
        tmp_path / "leak", BINDING,
        "",
        {
            "torch-ext/torch_binding.h": "#pragma once\n",
            "a/inc/only_a.h": "#define ONLY_A 1\n",
            "a/a.cpp": '#include "only_a.h"\nstatic_assert(A_ONLY == 1, "");\n'
                       "int section_a() { return ONLY_A; }\n",
            "b/b.cpp": '#ifdef A_ONLY\n#error "kernel.a\'s cxx-flags reached kernel.b"\n#endif\n'
                       "int section_b() { return 2; }\n",
        },
    )
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace(
        'src = ["torch-ext/torch_binding.cpp"]', 'src = ["torch-ext/torch_binding.h"]'
    ) + textwrap.dedent("""
        [kernel.a]
        backend = "cpu"
        depends = ["torch"]
        cxx-flags = ["-DA_ONLY=1"]
        include = ["a/inc"]
        src = ["torch-ext/torch_binding.cpp", "a/a.cpp"]

        [kernel.b]
        backend = "cpu"
        depends = ["torch"]
        src = ["b/b.cpp"]
    """))
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert any(p.name.endswith(".abi3.so") for p in result.path.iterdir())


def test_metadata_is_the_same_wherever_torch_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two builds against one torch reached at two paths (as in two virtual environments
    at different places) write byte-identical variants: the recorded compiler flags name
    torch's directory (and the project's) by placeholder, not by path."""
    import dataclasses

    from kernelforge import variants

    real = variants.torch_install_facts()
    assert real is not None
    elsewhere = tmp_path / "another-venv" / "lib" / "site-packages"
    elsewhere.mkdir(parents=True)
    (elsewhere / "torch").symlink_to(real.path.parent, target_is_directory=True)
    built = []
    for where, torch_version_py in [("a", real.path), ("b", elsewhere / "torch" / "version.py")]:
        facts = dataclasses.replace(real, path=torch_version_py)
        monkeypatch.setattr(variants, "torch_install_facts", lambda facts=facts: facts)
        project = tiny_two_section_project(tmp_path / where / "tiny")
        (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
        built.append(result.path)
    text = (built[0] / "metadata.json").read_text()
    assert "-ffile-prefix-map=<torch>=torch" in text
    assert str(real.path.parent) not in text and str(tmp_path) not in text
    meta = json.loads(text)
    del meta["digest"]  # base64 digests hold '/' too
    assert "/" not in json.dumps(meta), meta  # no path of this machine anywhere
    names = sorted(p.name for p in built[0].iterdir())
    assert names == sorted(p.name for p in built[1].iterdir())
    for name in names:
        assert (built[0] / name).read_bytes() == (built[1] / name).read_bytes(), name


@pytest.mark.parametrize(("backend", "message"), [
    ("bogus", r"--backend bogus: unknown backend; expected one of cann, cpu, cuda, .*"
              r"\(this project has: cpu, cuda\); fix: use one of this project's backends"),
    ("CPU", r"--backend CPU: unknown backend.*fix: did you mean --backend cpu\?"),
    ("cdua", r"--backend cdua: unknown backend.*fix: did you mean --backend cuda\?"),
    ("cuda,cpu", r"--backend cuda,cpu: unknown backend.*fix: give each backend its own "
                 r"option: --backend cuda --backend cpu$"),
    # a real backend the project has no kernels for keeps its own message
    ("rocm", r"build.toml: backend rocm has no kernels in this project \(it has: cpu, cuda\); "
             r"fix: build one of those, or add a \[kernel.<name>\] section with that backend"),
])
def test_an_unknown_backend_is_named_with_the_likely_one(tmp_path: Path, backend: str,
                                                          message: str) -> None:
    project = copy_project(tmp_path / "relu")
    with pytest.raises(BuildError, match=message):
        build_project(project, backends=["cpu", backend], progress=lambda _: None)
    assert not (project / "build").exists()  # refused before anything was built
