"""build.toml -> Manifest: every edition, and one error per failure mode."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from kernelforge.errors import ManifestError, one_line
from kernelforge.manifest import Manifest, check_project, load_manifest

PROJECTS = Path(__file__).resolve().parents[1] / "src" / "kernelforge" / "examples"

# The build.toml of the seed guide ("Step 2"), unchanged.
GUIDE_BUILD_TOML = """\
[general]
name = "gemm"
universal = false

[torch]
src = [
  "torch-ext/torch_binding.cpp",
  "torch-ext/torch_binding.h",
]

[kernel.gemm]
backend = "rocm"
rocm-archs = [
    "gfx942",
]

depends = ["torch"]

src = [
  "include/clangd_workaround.h",
  "include/gpu_libs.h",
  "include/gpu_types.h",
  "include/timer.h",
  "gemm/gemm_kernel.h",
  "gemm/gemm_kernel_legacy.h",
  "gemm/gemm_launcher.hip",
  "gemm/transpose_kernel.h",
  "src/utils/arithmetic.h",
  "src/utils/timer.hip",
  "tests/checker/metrics.h",
]

include = ["include"]
"""

GENERAL5 = """\
[general]
name = "relu"
version = 1
edition = 5
license = "Apache-2.0"
backends = ["cpu", "cuda", "rocm"]
"""
TORCH = """
[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]
"""
KERNELS = """
[kernel.relu]
backend = "cuda"
depends = ["torch"]
src = ["relu_cuda/relu.cu"]

[kernel.relu_rocm]
backend = "rocm"
depends = ["torch"]
src = ["relu_cuda/relu.cu"]
"""
GOOD5 = GENERAL5 + TORCH + KERNELS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "build.toml"
    path.write_text(textwrap.dedent(text))
    return path


def replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


GENERAL4 = GENERAL5.replace("edition = 5\n", "")

# (id, build.toml text, dotted key at fault (None: the whole file), message regex)
BAD = [
    ("not-toml", "[general\nname = 'relu'\n", None, r"not valid TOML: .*line 1"),
    ("no-general", TORCH + KERNELS, "general", "missing the \\[general\\] section"),
    ("unknown-section", GOOD5 + "\n[kernels.x]\nbackend = 'cuda'\n", "kernels",
     "unknown key 'kernels'.*did you mean 'kernel'\\?"),
    ("typo-general-key", replace(GOOD5, "license", "licence"), "general.licence",
     "unknown key 'licence'.*did you mean 'license'\\?"),
    ("typo-kernel-key",
     replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
             'cuda-capabilites = ["9.0"]\n'),
     "kernel.relu.cuda-capabilites", "did you mean 'cuda-capabilities'\\?"),
    ("typo-torch-key", replace(GOOD5, "[torch]\n", "[torch]\ninclude-dirs = []\n"),
     "torch.include-dirs", "unknown key 'include-dirs'.*expected one of"),
    ("missing-version", replace(GOOD5, "version = 1\n", ""), "general.version",
     "missing required key 'version'"),
    ("missing-license", replace(GOOD5, 'license = "Apache-2.0"\n', ""), "general.license",
     "missing required key 'license'"),
    ("version-type", replace(GOOD5, "version = 1", 'version = "1"'), "general.version",
     "is a string '1'.*expected a non-negative integer; fix: write version = 1"),
    ("bad-name", replace(GOOD5, 'name = "relu"', 'name = "Relu_Kernel"'), "general.name",
     "'Relu_Kernel' is not a valid kernel name.*fix: use 'relu-kernel'"),
    ("camel-name", replace(GOOD5, 'name = "relu"', 'name = "MyRelu"'), "general.name",
     "'MyRelu' is not a valid kernel name.*fix: use 'my-relu'"),
    ("name-trailing-dash", replace(GOOD5, 'name = "relu"', 'name = "relu-"'),
     "general.name", "not a valid kernel name"),
    ("unknown-backend", replace(GOOD5, '"cpu", "cuda"', '"cpu", "cdua"'),
     "general.backends", "unknown backend 'cdua'.*did you mean 'cuda'\\?"),
    ("empty-backends", replace(GOOD5, '["cpu", "cuda", "rocm"]', "[]"), "general.backends",
     "is empty"),
    ("unknown-kernel-backend", replace(GOOD5, 'backend = "cuda"', 'backend = "gpu"'),
     "kernel.relu.backend", "unknown kernel backend 'gpu'"),
    ("kernel-backend-in-capitals", replace(GOOD5, 'backend = "cuda"', 'backend = "CUDA"'),
     "kernel.relu.backend", "unknown kernel backend 'CUDA'.*did you mean 'cuda'\\?"),
    ("bad-cuda-capability",
     replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
             'cuda-capabilities = ["99999.0"]\n'),
     "kernel.relu.cuda-capabilities", "unknown CUDA capability '99999\\.0'.*valid: .*9\\.0"
     ".*expected CUDA capabilities such as"),
    ("sm-style-capability",
     replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
             'cuda-capabilities = ["sm90"]\n'),
     "kernel.relu.cuda-capabilities", "write it as '9\\.0'"),
    ("empty-cuda-capabilities",
     replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
             "cuda-capabilities = []\n"),
     "kernel.relu.cuda-capabilities", "empty list"),
    ("bad-rocm-arch", GOOD5 + 'rocm-archs = ["gfx99999"]\n', "kernel.relu_rocm.rocm-archs",
     "unknown ROCm arch 'gfx99999'.*valid: .*gfx942.*expected ROCm archs such as"),
    ("cuda-key-on-rocm-kernel", GOOD5 + 'cuda-capabilities = ["9.0"]\n',
     "kernel.relu_rocm.cuda-capabilities",
     "'cuda-capabilities' applies to cuda kernels.*backend = \"rocm\".*"
     "fix: use 'rocm-archs'"),
    ("rocm-key-on-cpu-kernel",
     GOOD5 + '\n[kernel.relu_cpu]\nbackend = "cpu"\ndepends = []\nsrc = ["k.cpp"]\n'
     'hip-flags = ["-O3"]\n', "kernel.relu_cpu.hip-flags", "applies to rocm kernels"),
    ("missing-kernel-src", replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', "", ),
     "kernel.relu.src", "missing required key 'src' for a cuda kernel"),
    ("empty-kernel-src", replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', "src = []\n"),
     "kernel.relu.src", "is an empty list: a kernel section needs at least one source, "
     "and Hugging Face's builder stops on one without"),
    ("missing-kernel-backend", replace(GOOD5, 'backend = "cuda"\n', ""),
     "kernel.relu.backend", "missing required key 'backend'"),
    ("src-not-a-list", replace(GOOD5, 'src = ["relu_cuda/relu.cu"]', 'src = "relu.cu"'),
     "kernel.relu.src", "is a string 'relu.cu'.*expected a list of strings"),
    ("unknown-depends", replace(GOOD5, 'depends = ["torch"]', 'depends = ["cutlass_3_7"]'),
     "kernel.relu.depends", "unknown dependency 'cutlass_3_7'.*did you mean"),
    ("absolute-src", replace(GOOD5, '["relu_cuda/relu.cu"]', '["/tmp/relu.cu"]'),
     "kernel.relu.src", "'/tmp/relu.cu' is not a relative path"),
    ("src-outside-project", replace(GOOD5, '["relu_cuda/relu.cu"]', '["../x/relu.cu"]'),
     "kernel.relu.src", "points outside the project"),
    ("kernel-without-name", GENERAL5 + TORCH + '\n[kernel]\nbackend = "cuda"\n',
     "kernel.backend", "not a table.*\\[kernel.<name>\\]"),
    ("unknown-edition", replace(GOOD5, "edition = 5", "edition = 6"), "general.edition",
     "unknown edition 6.*expected 5"),
    ("edition-type", replace(GOOD5, "edition = 5", 'edition = "5"'), "general.edition",
     "is a string '5'.*expected the integer 5"),
    ("explicit-edition-4", replace(GOOD5, "edition = 5", "edition = 4"), "general.edition",
     "edition 4 files have no 'edition' key"),
    ("two-frameworks", GOOD5 + "\n[torch-noarch]\n", "torch-noarch",
     "more than one framework section: \\[torch\\], \\[torch-noarch\\]"),
    ("no-framework", GENERAL5 + KERNELS, "torch", "no framework section"),
    ("tvm-ffi", GENERAL5 + '\n[tvm-ffi]\nsrc = ["b.cpp"]\n', "tvm-ffi",
     "tvm-ffi kernels are not supported"),
    ("noarch-with-kernels", GENERAL5 + "\n[torch-noarch]\n" + KERNELS, "kernel.relu",
     "\\[torch-noarch\\] kernel compiles nothing"),
    ("noarch-unknown-key", GENERAL5 + '\n[torch-noarch]\npyexts = ["py"]\n',
     "torch-noarch.pyexts", "did you mean 'pyext'\\?"),
    ("noarch-bad-arch", GENERAL5 + '\n[torch-noarch]\nrocm-archs = ["gfx9"]\n',
     "torch-noarch.rocm-archs", "unknown ROCm arch 'gfx9'"),
    ("torch-minver-float", replace(GOOD5, "[torch]\n", "[torch]\nminver = 2.10\n"),
     "torch.minver", "is the number 2\\.1, not a version: TOML reads an unquoted version as "
     "a number and drops its trailing zeros.*fix: quote the version as you meant it, e\\.g\\. "
     "minver = \"2\\.1\" or minver = \"2\\.10\""),
    ("torch-minver-integer", replace(GOOD5, "[torch]\n", "[torch]\nminver = 2\n"),
     "torch.minver", "2 is not a version.*fix: write minver = \"2\\.0\""),
    ("kernel-depends-needs-version",
     replace(GOOD5, "backends =", 'kernel-depends = [{repo-id = "org/a"}]\nbackends ='),
     "general.kernel-depends", "needs exactly one of 'version' and 'revision'"),
    # metadata.json carries these to every loader, which cannot fetch them
    ("kernel-depends-repo-id-without-org",
     replace(GOOD5, "backends =", 'kernel-depends = [{repo-id = "relu", version = 1}]\n'
             "backends ="),
     "general.kernel-depends", "the dependency 'relu' is not a hub repository id; expected "
     "'<org>/<name>'"),
    ("kernel-depends-empty-revision",
     replace(GOOD5, "backends =", 'kernel-depends = [{repo-id = "org/a", revision = " "}]\n'
             "backends ="),
     "general.kernel-depends", "the dependency on 'org/a' has an empty revision"),
    ("kernel-depends-in-edition-4",
     replace(GENERAL4, "backends =", 'kernel-depends = [{repo-id = "org/a", version = 1}]'
             "\nbackends =") + TORCH + KERNELS,
     "general.kernel-depends", "fix: 'kernel-depends' needs edition 5"),
    ("stable-abi-table-in-edition-4", GENERAL4 + TORCH + '[torch.stable-abi]\ncuda = "2.9"\n'
     + KERNELS, "torch.stable-abi", "is a table.*expected a torch version"),
    ("universal-in-edition-5", replace(GOOD5, "edition = 5\n", "edition = 5\nuniversal = false\n"),
     "general.universal", "belongs to the legacy layout"),
    ("bad-repo-id", GOOD5 + '\n[general.hub]\nrepo-id = "relu"\n', "general.hub.repo-id",
     "'relu' is not a hub repository id"),
    # refused by publish (every hub): refused by check, before a build
    ("repo-id-ending-in-a-dot", GOOD5 + '\n[general.hub]\nrepo-id = "org/relu."\n',
     "general.hub.repo-id", r"'org/relu\.' is not a hub repository id; expected '<org>/<name>'"
     r".*e\.g\. 'kernels-community/relu'; fix: write repo-id = \"<org>/<name>\""),
    ("bad-upstream", replace(GOOD5, "backends =", 'upstream = "not a url"\nbackends ='),
     "general.upstream", "is not a git URL"),
    ("legacy-universal-type", GUIDE_BUILD_TOML.replace("universal = false", 'universal = "no"'),
     "general.universal", "is a string 'no'.*expected true or false"),
    ("legacy-universal-with-kernels",
     GUIDE_BUILD_TOML.replace("universal = false", "universal = true"), "torch.src",
     "a universal kernel compiles nothing"),
    ("legacy-unknown-key", GUIDE_BUILD_TOML.replace("universal = false", "version = 1"),
     "general.version", "unknown key 'version' \\(legacy layout\\).*fix: 'version' is not "
     "part of the legacy layout"),
    ("bad-kernel-section-name",
     GENERAL5 + TORCH + '\n[kernel."relu kernel"]\nbackend = "cuda"\ndepends = []\nsrc = ["k"]\n',
     "kernel.relu kernel", "'relu kernel' is not a valid kernel section name"),
    ("noarch-in-legacy-layout", '[general]\nname = "norm"\n\n[torch-noarch]\n', "torch-noarch",
     "unknown key 'torch-noarch' \\(legacy layout\\).*fix: 'torch-noarch' is not part of "
     "the legacy layout"),
    # a flag the compile line cannot hold as written: an empty argument (read as a file
    # name), a line break (ends the ninja file's line)
    ("empty-flag", GOOD5 + 'cxx-flags = ["-O2", " "]\n', "kernel.relu_rocm.cxx-flags",
     r"entry 2 \(' '\) is empty.*fix: remove the empty entry"),
    ("flag-with-a-newline", replace(GOOD5, "[torch]\n", '[torch]\ncxx-flags = ["-DA\\n-DB"]\n'),
     "torch.cxx-flags", r"entry 1 \('-DA\\n-DB'\) holds a line break"),
    ("name-with-a-trailing-newline", replace(GOOD5, 'name = "relu"', 'name = "relu\\n"'),
     "general.name", r"'relu\\n' is not a valid kernel name"),
    ("kernel-name-with-a-trailing-newline",
     GENERAL5 + TORCH + '\n[kernel."relu\\n"]\nbackend = "cuda"\ndepends = []\nsrc = ["k"]\n',
     "kernel.relu\n", r"'relu\\n' is not a valid kernel section name"),
    ("repo-id-with-a-trailing-newline",
     GOOD5 + '\n[general.hub]\nrepo-id = "org/relu\\n"\n', "general.hub.repo-id",
     r"'org/relu\\n' is not a hub repository id"),
    ("legacy-kernels-without-torch",
     GUIDE_BUILD_TOML.replace('[torch]\nsrc = [\n  "torch-ext/torch_binding.cpp",\n'
                              '  "torch-ext/torch_binding.h",\n]\n', ""),
     "kernel.gemm", "kernel sections need a \\[torch\\] section"),
    ("kernel-depends-entry-a-string",
     replace(GOOD5, 'backends = ["cpu", "cuda", "rocm"]\n',
             'backends = ["cpu", "cuda", "rocm"]\nkernel-depends = ["kernels-community/relu"]\n'),
     "general.kernel-depends", r"key 'general.kernel-depends': the entry "
     r"\"kernels-community/relu\" is not a table; .*fix: write kernel-depends "
     r"= \[\{repo-id = \"kernels-community/relu\", version = 1\}\]"),
    ("version-beyond-64-bits", replace(GOOD5, "version = 1\n", "version = 99999999999999999999\n"),
     "general.version", r"key 'general.version': 99999999999999999999 is too large; expected "
     r"an integer below 2\*\*63"),
    ("unquoted-number-in-a-list",
     replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n\n[kernel.relu_rocm]',
             'src = ["relu_cuda/relu.cu"]\ncuda-capabilities = ["8.0", 9.0]\n\n[kernel.relu_rocm]'),
     "kernel.relu.cuda-capabilities", r"key 'kernel.relu.cuda-capabilities': entry 2 \(9.0\) is "
     r"not a string; expected a list of strings; fix: quote it: \"9.0\""),
]


@pytest.mark.parametrize(("text", "key", "match"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_bad_manifest(tmp_path, text, key, match):
    path = write(tmp_path, text)
    with pytest.raises(ManifestError, match=match) as info:
        load_manifest(tmp_path)
    err = info.value
    assert err.file == path
    assert err.key == key
    assert str(path) in str(err)
    if key is not None:  # shown on one line, as the attributes are not
        assert one_line(f"key '{key}'") in str(err)
    assert err.problem and err.expected and err.fix
    assert one_line(f"expected {err.expected}") in str(err)
    assert one_line(f"fix: {err.fix}") in str(err)
    # One mistake, one problem: none reported only because of another (a misspelt
    # required key is not also reported missing, a section that cannot be read does
    # not make a rule about missing sections fire).
    assert err.errors == [err], str(err)


def test_bad_cases_are_distinct():
    ids = [case[0] for case in BAD]
    assert len(ids) == len(set(ids)) >= 16
    assert len({case[1] for case in BAD}) == len(BAD)


def test_missing_build_toml(tmp_path):
    with pytest.raises(ManifestError, match="no such file") as info:
        load_manifest(tmp_path)
    assert info.value.file == tmp_path / "build.toml"
    assert info.value.key is None


def test_a_folder_inside_a_project_names_the_project(tmp_path, monkeypatch):
    # kernelforge build run from torch-ext/, or publish given the project's build/
    (tmp_path / "proj").mkdir()
    project = make_guide_project(tmp_path / "proj")
    (project / "build" / "torch213-cxx11-cpu-x86_64-linux").mkdir(parents=True)
    with pytest.raises(ManifestError, match="no such file") as info:
        load_manifest(project / "build")
    assert info.value.fix == (f"{project / 'build'} is inside a kernel project: pass the "
                              f"project directory {project} (or its build.toml)")
    monkeypatch.chdir(project / "torch-ext")
    with pytest.raises(ManifestError) as info:
        load_manifest(".")
    assert info.value.fix == ("the current directory is inside a kernel project: pass the "
                              "project directory .. (or its build.toml)")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError) as info:
        load_manifest("proj/build/torch213-cxx11-cpu-x86_64-linux")
    assert "pass the project directory proj (or its build.toml)" in info.value.fix
    # a directory in no project keeps the plain advice
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ManifestError) as info:
        load_manifest("elsewhere")
    assert info.value.fix == ("pass a kernel project directory that holds build.toml (to "
                              "start one, run 'kernelforge init NAME')")


def test_a_project_path_that_does_not_exist_is_named_as_such(tmp_path, monkeypatch):
    """A project's name mistyped (``kernelforge build my-rleu``) is no file and no folder:
    the error says so, and names the project beside it that was likely meant."""
    for name in ("my-relu", "other"):
        (tmp_path / name).mkdir()
        make_guide_project(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError) as info:
        load_manifest("my-rleu")
    assert info.value.file == Path("my-rleu") and info.value.key is None
    assert str(info.value) == (
        "my-rleu: no such file or directory; expected a kernel project directory (or its "
        "build.toml); fix: did you mean my-relu?")
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "zzz")
    assert info.value.fix == ("pass a kernel project directory that holds build.toml (in "
                              f"{tmp_path}: my-relu, other)")
    # a path inside a project that is not there names the project
    with pytest.raises(ManifestError) as info:
        load_manifest("my-relu/torch-ext/nowhere")
    assert "no such file or directory" in str(info.value)
    assert info.value.fix == "pass the project directory my-relu (or its build.toml)"
    # a link whose folder is gone is no name mistyped: it is named as a link, with no
    # project suggested in its place (my-relu is as close to my-relu-link's name)
    (tmp_path / "my-relu-link").symlink_to(tmp_path / "gone")
    with pytest.raises(ManifestError) as info:
        load_manifest("my-relu-link")
    assert str(info.value) == (
        f"my-relu-link: a link to {tmp_path / 'gone'}, which does not exist; expected a "
        "kernel project directory (or its build.toml); fix: point the link at a kernel "
        "project, or pass the project directory itself")
    # a folder without build.toml is still told apart from a path that does not exist
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError) as info:
        load_manifest("empty")
    assert str(info.value).startswith(f"{Path('empty', 'build.toml')}: no such file;")


def test_the_folder_above_projects_names_them(tmp_path, monkeypatch):
    """`kernelforge build` run where `kernelforge init` was, a folder above the project:
    the fix names the projects of its subfolders (hidden ones left out)."""
    for name in ("b-proj", "a-proj", ".hidden"):
        (tmp_path / name).mkdir()
        make_guide_project(tmp_path / name)
    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError, match="no such file") as info:
        load_manifest(".")
    assert info.value.fix == ("pass a kernel project directory that holds build.toml (in "
                              "the current directory: a-proj, b-proj)")
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.fix.endswith(f"build.toml (in {tmp_path}: a-proj, b-proj)")
    for n in range(5):
        (tmp_path / f"k{n}").mkdir()
        (tmp_path / f"k{n}" / "build.toml").touch()
    with pytest.raises(ManifestError) as info:
        load_manifest(".")
    assert info.value.fix.endswith("(in the current directory: a-proj, b-proj, k0, k1, k2 "
                                   "and 2 more)")


def test_the_projects_named_are_found_past_an_unreadable_folder_and_few_are_looked_at(
        tmp_path, monkeypatch):
    """A subfolder this user may not enter leaves the projects beside it named; a folder
    of many entries is looked at in part, so that its error comes at once."""
    from kernelforge import manifest

    for name in ("a-proj", "locked", "z-proj"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "build.toml").touch()
    is_file = Path.is_file

    def refused(path: Path) -> bool:
        if path.parent.name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return is_file(path)

    monkeypatch.setattr(Path, "is_file", refused)
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.fix.endswith(f"build.toml (in {tmp_path}: a-proj, z-proj)")
    monkeypatch.setattr(manifest, "_PROJECTS_LOOKED_AT", 2)
    looked_at: list[Path] = []
    monkeypatch.setattr(Path, "is_file", lambda p: looked_at.append(p) or is_file(p))
    with pytest.raises(ManifestError):
        load_manifest(tmp_path)
    assert len([p for p in looked_at if p.parent.parent == tmp_path]) == 2, looked_at


def make_guide_project(root: Path) -> Path:
    (root / "build.toml").write_text(GUIDE_BUILD_TOML)
    listed = re.findall(r'"([\w/.-]+\.(?:h|hip|cpp))"', GUIDE_BUILD_TOML)
    for name in listed + ["torch-ext/gemm/__init__.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


def test_guide_build_toml_passes_check_project(tmp_path):
    m = check_project(make_guide_project(tmp_path))
    assert (m.edition, m.name, m.python_name) == (3, "gemm", "gemm")
    assert (m.version, m.license) == (None, None)
    assert m.backends == ("rocm",)
    assert (m.noarch, m.universal) == (False, False)
    assert m.torch is not None
    assert m.torch.src == ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h")
    assert m.torch.pyext == ("py", "pyi")
    gemm = m.kernels["gemm"]
    assert (gemm.backend, gemm.rocm_archs, gemm.include) == ("rocm", ("gfx942",), ("include",))
    assert gemm.depends == ("torch",)
    assert len(gemm.src) == 11 and gemm.cuda_capabilities is None
    assert m.path == tmp_path / "build.toml" and m.root == tmp_path


@pytest.mark.parametrize(
    ("missing", "key"),
    [
        ("gemm/gemm_launcher.hip", "kernel.gemm.src"),
        ("torch-ext/torch_binding.h", "torch.src"),
        ("torch-ext/gemm/__init__.py", "general.name"),
    ],
)
def test_check_project_names_the_missing_file(tmp_path, missing, key):
    make_guide_project(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(ManifestError, match=re.escape(missing)) as info:
        check_project(tmp_path / "build.toml")
    assert info.value.key == key
    assert info.value.file == tmp_path / "build.toml"
    assert "fix: " in str(info.value)


@pytest.mark.parametrize(
    ("folders", "fix"),
    [
        # the package under another name: the rename, or the name that matches it
        (["gemm2"], "rename torch-ext/gemm2/ to torch-ext/gemm/, or set general.name = "
                    '"gemm2"'),
        (["Gemm"], "rename torch-ext/Gemm/ to torch-ext/gemm/"),
        (["a", "b"], "create torch-ext/gemm/__init__.py, or correct general.name"),
    ],
)
def test_a_package_not_named_after_the_kernel_is_pointed_at(tmp_path, folders, fix):
    make_guide_project(tmp_path)
    (tmp_path / "torch-ext" / "gemm" / "__init__.py").unlink()
    for folder in folders:
        (tmp_path / "torch-ext" / folder).mkdir()
        (tmp_path / "torch-ext" / folder / "__init__.py").touch()
    (tmp_path / "torch-ext" / "csrc").mkdir()  # a folder that is no package: not named
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    assert info.value.key == "general.name"
    holds = ", ".join(f"{f}/" for f in folders)
    assert info.value.problem.endswith(f"does not exist (torch-ext/ holds {holds})")
    assert info.value.fix == fix


@pytest.mark.parametrize(
    ("listed", "key", "problem", "fix"),
    [
        # a folder where a source is meant: it exists, so "create it" would mislead
        ("gemm", "kernel.gemm.src", "is a directory, not a file",
         "list the source files themselves (kernel.gemm.src takes files, not folders), or "
         "remove 'gemm' from it"),
        ("gemm/gemm_kernel.h", "kernel.gemm.include", "is not a directory",
         "list the folder that holds the headers (include takes folders), or remove "
         "'gemm/gemm_kernel.h' from kernel.gemm.include"),
    ],
)
def test_a_listed_path_of_the_wrong_kind_is_said_to_be_so(tmp_path, listed, key, problem,
                                                          fix):
    make_guide_project(tmp_path)
    text = GUIDE_BUILD_TOML.replace('"gemm/gemm_launcher.hip",', f'"{listed}",')
    if key.endswith("include"):
        text = GUIDE_BUILD_TOML.replace('include = ["include"]', f'include = ["{listed}"]')
    (tmp_path / "build.toml").write_text(text)
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    assert info.value.key == key
    assert info.value.problem == f"lists '{listed}', but {tmp_path / listed} {problem}"
    assert info.value.fix == fix


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_source_that_is_a_pipe_is_not_said_to_be_a_folder(tmp_path):
    make_guide_project(tmp_path)
    (tmp_path / "gemm" / "gemm_launcher.hip").unlink()
    os.mkfifo(tmp_path / "gemm" / "gemm_launcher.hip")
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    assert info.value.key == "kernel.gemm.src"
    assert info.value.problem.endswith("gemm_launcher.hip is not a regular file")
    assert info.value.fix == ("replace gemm/gemm_launcher.hip with the source file it stands "
                              "for, or remove it from kernel.gemm.src")


@pytest.mark.parametrize(
    ("missing", "others", "suggested"),
    [
        # the binding's header is listed beside it: not a file to list in its place
        ("torch-ext/torch_binding.cpp", (), None),
        # a header where a source was meant would leave nothing to compile
        ("gemm/gemm_launcher.hip", ("gemm/gemm_launcher.h",), None),
        # a misspelt or miscased source is still suggested
        ("gemm/gemm_launcher.hip", ("gemm/Gemm_launcher.hip",), "gemm/Gemm_launcher.hip"),
        ("torch-ext/torch_binding.h", ("torch-ext/torch_bindings.h",),
         "torch-ext/torch_bindings.h"),
    ],
)
def test_a_missing_source_is_not_said_to_be_another_file(tmp_path, missing, others,
                                                           suggested):
    make_guide_project(tmp_path)
    (tmp_path / missing).unlink()
    for name in others:
        (tmp_path / name).touch()
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    fix = info.value.fix or ""
    if suggested is None:
        assert "did you mean" not in fix, fix
        assert fix.startswith(f"create {missing} or remove it from "), fix
    else:
        assert fix.startswith(f"did you mean '{suggested}'?"), fix


def test_check_project_needs_include_dirs(tmp_path):
    make_guide_project(tmp_path)
    for f in (tmp_path / "include").iterdir():
        f.unlink()
    (tmp_path / "include").rmdir()
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    # The first listed source is in include/, so the src check fires first.
    assert info.value.key in ("kernel.gemm.src", "kernel.gemm.include")


def test_relu_fixture_project():
    m = check_project(PROJECTS / "relu")
    assert (m.edition, m.name, m.version, m.license) == (5, "relu", 1, "Apache-2.0")
    assert m.backends == ("cpu", "cuda")
    assert (m.noarch, m.universal) == (False, False)
    assert m.hub_repo_id == "kernels-community/relu"
    assert set(m.kernels) == {"relu", "relu_cpu"}
    assert m.kernels["relu_cpu"].src == ("relu_cpu/relu_cpu.cpp",)
    assert m.kernels["relu"].src == ("relu_cuda/relu_cuda.cu",)
    assert [k.name for k in m.kernels_for("cuda")] == ["relu"]
    assert m.kernels["relu"].cuda_capabilities is None
    init = (PROJECTS / "relu" / "torch-ext" / "relu" / "__init__.py").read_text()
    assert "from ._ops import ops" in init and "ops.relu(out, x)" in init


def test_relu_fixture_sources_are_real_kernels():
    root = PROJECTS / "relu"
    cpu = (root / "relu_cpu" / "relu_cpu.cpp").read_text()
    assert "AT_DISPATCH_FLOATING_TYPES_AND2" in cpu and "for (int64_t i" in cpu
    assert "clamp" not in cpu
    cuda = (root / "relu_cuda" / "relu_cuda.cu").read_text()
    assert "__global__ void relu_kernel" in cuda and "<<<" in cuda
    binding = (root / "torch-ext" / "torch_binding.cpp").read_text()
    for needle in ['#include "registration.h"', "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)",
                   'ops.def("relu(Tensor! out, Tensor input) -> ()")', "at::kCPU",
                   "at::kCUDA", "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)"]:
        assert needle in binding


def test_edition5_full(tmp_path):
    text = GOOD5.replace('src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
                         'cuda-capabilities = ["9.0a", "8.0", "12.1+PTX", "8.0"]\n'
                         'cuda-flags = ["-lineinfo"]\ncuda-minver = "12.8"\n', 1)
    text = text.replace("backends =", 'upstream = "https://github.com/org/relu"\n'
                        'python-depends = ["einops"]\n'
                        'kernel-depends = [{repo-id = "org/a", version = 2}, '
                        '{repo-id = "org/b", revision = "main"}]\nbackends =')
    text += ('\n[general.hub]\nrepo-id = "org/relu"\nbranch = "dev"\n'
             '\n[general.cuda]\nminver = "12.6"\npython-depends = ["nvidia-cutlass-dsl"]\n'
             '\n[torch.stable-abi]\ncuda = "2.11"\nxpu = "2.11"\n')
    text = text.replace("[torch]\n", '[torch]\nminver = "2.9"\ncxx-flags = ["-DX"]\n'
                        'pyext = ["py", "json"]\n')
    m = load_manifest(write(tmp_path, text))
    relu = m.kernels["relu"]
    assert relu.cuda_capabilities == ("9.0a", "8.0", "12.1+PTX")
    assert (relu.cuda_flags, relu.cuda_minver) == (("-lineinfo",), "12.8")
    assert m.kernels["relu_rocm"].rocm_archs is None
    assert (m.upstream, m.python_depends) == ("https://github.com/org/relu", ("einops",))
    assert [(d.repo_id, d.version, d.revision) for d in m.kernel_depends] == [
        ("org/a", 2, None), ("org/b", None, "main")]
    assert [d.as_dict() for d in m.kernel_depends] == [
        {"repo-id": "org/a", "version": 2}, {"repo-id": "org/b", "revision": "main"}]
    assert (m.hub_repo_id, m.hub_branch, m.cuda_minver, m.cuda_maxver) == (
        "org/relu", "dev", "12.6", None)
    assert m.backend_python_depends == {"cuda": ("nvidia-cutlass-dsl",)}
    assert m.torch is not None
    assert (m.torch.minver, m.torch.cxx_flags, m.torch.pyext) == ("2.9", ("-DX",),
                                                                  ("py", "json"))
    assert m.pyext == ("py", "json")
    # xpu is not among the declared backends: its entry is ignored.
    assert m.torch.stable_abi == {"cuda": "2.11"}
    assert (m.torch.stable_abi_for("cuda"), m.torch.stable_abi_for("rocm")) == ("2.11", None)


def test_edition4_project(tmp_path):
    text = (GENERAL4 + TORCH.replace("[torch]\n", '[torch]\nstable-abi = "2.9"\n') + KERNELS
            + '\n[general.cuda]\nmaxver = "12.9"\n')
    m = load_manifest(write(tmp_path, text))
    assert (m.edition, m.version, m.license) == (4, 1, "Apache-2.0")
    assert m.backends == ("cpu", "cuda", "rocm")
    assert m.cuda_maxver == "12.9"
    assert m.torch is not None and m.torch.stable_abi_for("rocm") == "2.9"
    assert not m.noarch


def test_torch_noarch_project(tmp_path):
    text = (GENERAL5.replace('"cpu", "cuda", "rocm"', '"cuda", "rocm", "xpu"')
            + '\n[torch-noarch]\npyext = ["py", "json"]\ncuda-capabilities = ["9.0", "10.0"]\n'
            'rocm-archs = ["gfx942"]\n')
    m = load_manifest(write(tmp_path, text))
    assert (m.edition, m.noarch, m.universal, m.torch, m.kernels) == (5, True, False, None, {})
    assert m.pyext == ("py", "json")
    assert m.noarch_cuda_capabilities == ("9.0", "10.0")
    assert m.noarch_rocm_archs == ("gfx942",)
    assert m.backends == ("cuda", "rocm", "xpu")


def test_torch_noarch_accepts_the_builders_underscore_keys(tmp_path):
    # Their builder reads [torch-noarch] keys with underscores; the docs use dashes.
    text = GENERAL5 + '\n[torch-noarch]\ncuda_capabilities = ["8.0"]\nrocm_archs = ["gfx90a"]\n'
    m = load_manifest(write(tmp_path, text))
    assert (m.noarch_cuda_capabilities, m.noarch_rocm_archs) == (("8.0",), ("gfx90a",))
    assert m.notes == ()
    # The dashed keys are read too, with a note: their reader refuses them.
    dashed = load_manifest(write(tmp_path, text.replace("_", "-")))
    assert (dashed.noarch_cuda_capabilities, dashed.noarch_rocm_archs) == (
        ("8.0",), ("gfx90a",))
    assert dashed.notes == tuple(
        f"torch-noarch.{key}: Hugging Face's kernel-builder refuses '{key}' in [torch-noarch] "
        f"(it reads '{key.replace('-', '_')}', with '_', though its documentation writes "
        f"'-'); kernelforge reads both; fix: write {key.replace('-', '_')} for a file both "
        "build" for key in ("cuda-capabilities", "rocm-archs"))
    both = text + 'cuda-capabilities = ["8.0"]\n'
    with pytest.raises(ManifestError, match="both") as info:
        load_manifest(write(tmp_path, both))
    assert info.value.key == "torch-noarch.cuda_capabilities"


def test_legacy_universal_project(tmp_path):
    m = load_manifest(write(tmp_path, '[general]\nname = "triton_norm"\nuniversal = true\n'))
    assert (m.edition, m.noarch, m.universal, m.torch) == (3, True, True, None)
    assert "cuda" in m.backends and "rocm" in m.backends
    assert m.python_name == "triton_norm"


def test_legacy_project_with_backends_and_no_framework_is_noarch(tmp_path):
    m = load_manifest(write(tmp_path, '[general]\nname = "norm"\nbackends = ["cuda"]\n'))
    assert (m.edition, m.noarch, m.universal, m.version) == (3, True, False, None)


def test_legacy_guide_layout_cuda_versions(tmp_path):
    text = GUIDE_BUILD_TOML.replace("universal = false", 'cuda-minver = "12.4"\n'
                                    'cuda-maxver = "12.9"')
    m = load_manifest(write(tmp_path, text))
    assert (m.cuda_minver, m.cuda_maxver) == ("12.4", "12.9")


def test_manifest_is_frozen_and_uses_tuples(tmp_path):
    m = load_manifest(write(tmp_path, GOOD5))
    assert isinstance(m, Manifest)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "other"  # type: ignore[misc]
    for spec in m.kernels.values():
        assert isinstance(spec.src, tuple) and isinstance(spec.depends, tuple)
    assert isinstance(m.backends, tuple)


def test_load_accepts_the_file_or_its_directory(tmp_path):
    path = write(tmp_path, GOOD5)
    assert load_manifest(path) == load_manifest(tmp_path)
    assert load_manifest(str(tmp_path)).path == path


def test_check_buildable_passes_the_bundled_example_and_refuses_an_empty_range(
        tmp_path: Path) -> None:
    from kf_testutil import EXAMPLE_RELU, copy_example

    from kernelforge.manifest import check_buildable

    assert check_buildable(check_project(EXAMPLE_RELU)) == []
    project = copy_example(tmp_path / "relu")
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace(
        "[torch]\n", '[torch]\nminver = "2.8"\nmaxver = "2.7.1"\n'))
    m = check_project(project)  # the manifest itself is valid
    with pytest.raises(ManifestError, match=r"key 'torch\.maxver': is 2\.7\.1, lower than "
                                            r"torch\.minver 2\.8.*fix: raise torch\.maxver"):
        check_buildable(m)
    # maxver bounds the torch major.minor (the build admits torch 2.8.1 with these)
    toml.write_text(toml.read_text().replace('minver = "2.8"\nmaxver = "2.7.1"',
                                             'minver = "2.8.1"\nmaxver = "2.8"'))
    notes = check_buildable(check_project(project))
    assert [n.partition(":")[0] for n in notes] == ["torch.minver"], notes  # not major.minor


@pytest.mark.parametrize("typo", ["cutlass_9_9", "cutlass_3_7", "cutlas_3_9", "cutlass3_8",
                                  "torhc"])
def test_an_unknown_dependency_suggests_only_names_the_builder_resolves(tmp_path, typo):
    """Hugging Face's names include CUTLASS versions kernelforge cannot resolve
    (cutlass_3_9): suggesting one would lead to the next error."""
    from kernelforge.build.toolchain import BUILTIN_DEPENDS, HEADER_PACKAGES

    text = replace(GOOD5, 'depends = ["torch"]', f'depends = ["torch", "{typo}"]')
    with pytest.raises(ManifestError, match=f"unknown dependency '{typo}'") as info:
        load_manifest(write(tmp_path, text))
    suggested = re.fullmatch(r"did you mean '(.+)'\?", info.value.fix or "")
    assert suggested, info.value.fix
    assert suggested.group(1) in BUILTIN_DEPENDS | HEADER_PACKAGES.keys()
    assert "kernelforge builds with: torch, cutlass_3_5" in str(info.value)


@pytest.mark.parametrize("name", ["x", "ab", "a1", "a-b", "a-", "1a", "A", "a_b"])
def test_init_and_the_manifest_agree_on_the_name_rule(tmp_path, name):
    """`kernelforge init` refuses exactly the names build.toml refuses, and says the
    rule the name breaks (a one-letter name was refused as if it broke another)."""
    from kernelforge.errors import KernelforgeError
    from kernelforge.scaffold import init_project

    text = GOOD5.replace('name = "relu"', f'name = "{name}"')
    try:
        load_manifest(write(tmp_path, text))
        valid = True
    except ManifestError as err:
        assert "at least 2 characters" in str(err)
        valid = False
    if valid:
        assert init_project(name, tmp_path / "p") == tmp_path / "p"
        return
    with pytest.raises(KernelforgeError, match=f"invalid kernel name '{name}'") as info:
        init_project(name, tmp_path / "p")
    assert "at least 2 characters" in str(info.value)


@pytest.mark.parametrize("repo_id", [
    "org/relu", "o/r", "kernels-community/relu_v2.1", "org/relu.", "org/-relu", "_org/relu",
    "org/re..lu", "org/relu_", "org/" + "r" * 96, "org/" + "r" * 97, "org/relu/x", "org/"])
def test_check_and_publish_agree_on_the_repo_id_rule(tmp_path, repo_id):
    """`[general.hub] repo-id` passes `check` exactly when the hubs' validator (what
    publish runs) takes it: one that passes would otherwise fail only at publish."""
    from kernelforge.hub.base import validate_repo_id

    text = GOOD5 + f'\n[general.hub]\nrepo-id = "{repo_id}"\n'
    try:
        validate_repo_id(repo_id)
    except ValueError:
        with pytest.raises(ManifestError, match="is not a hub repository id") as info:
            load_manifest(write(tmp_path, text))
        assert info.value.key == "general.hub.repo-id"
        return
    assert load_manifest(write(tmp_path, text)).hub_repo_id == repo_id


@pytest.mark.parametrize(("hub", "noarch", "noted"), [
    ('branch = "main"', False, True),
    ('branch = "main"', True, True),
    ('branch = "v1"', False, False),  # what publish writes anyway
    ('repo-id = "org/relu"', False, False),
])
def test_check_notes_a_hub_branch_that_publish_ignores(tmp_path, hub, noarch, noted):
    """Hugging Face's `kernel-builder upload` sends builds to [general.hub] branch;
    kernelforge publishes to v<version>, the branch `version=` loads. The key stays
    valid (their projects carry it) and `check` says it has no effect."""
    from kernelforge.manifest import check_buildable, hub_branch_note

    text = (GENERAL5 + "\n[torch-noarch]\n") if noarch else GOOD5.replace(
        '"cpu", "cuda", "rocm"', '"cuda", "rocm"')
    (tmp_path / "torch-ext" / "relu").mkdir(parents=True)
    (tmp_path / "torch-ext" / "relu" / "__init__.py").touch()
    for name in ("torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h",
                 "relu_cuda/relu.cu"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    m = check_project(write(tmp_path, text + f"\n[general.hub]\n{hub}\n"))
    notes = check_buildable(m)
    if not noted:
        assert hub_branch_note(m) is None and notes == []
        return
    assert notes == [hub_branch_note(m)]
    assert notes[0].startswith("general.hub.branch = 'main' is ignored: kernelforge publish "
                               "writes the builds to branch v1")
    assert "kernel-builder upload" in notes[0]


def _touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()


CPU5 = GENERAL5.replace('"cpu", "cuda", "rocm"', '"cpu"')


def test_torch_src_may_be_left_out_like_in_their_reader(tmp_path):
    """Hugging Face's reader defaults [torch] src to an empty list: a kernel section may
    list the binding itself."""
    _touch(tmp_path, "torch-ext/relu/__init__.py", "torch-ext/binding.cpp", "cpu/relu.cpp")
    text = CPU5 + '\n[torch]\npyext = ["py"]\n\n[kernel.relu_cpu]\nbackend = "cpu"\n' \
        'depends = ["torch"]\nsrc = ["torch-ext/binding.cpp", "cpu/relu.cpp"]\n'
    from kernelforge.manifest import check_buildable

    m = check_project(write(tmp_path, text))
    assert m.torch is not None and m.torch.src == () and m.torch.pyext == ("py",)
    assert (m.noarch, m.edition) == (False, 5)
    assert check_buildable(m) == []


def test_a_torch_section_without_src_and_nothing_to_compile_is_refused(tmp_path):
    from kernelforge.manifest import check_buildable

    _touch(tmp_path, "torch-ext/relu/__init__.py", "cpu/relu.h")
    text = CPU5 + '\n[torch]\n\n[kernel.relu_cpu]\nbackend = "cpu"\n' \
        'depends = ["torch"]\nsrc = ["cpu/relu.h"]\n'
    m = check_project(write(tmp_path, text))
    with pytest.raises(ManifestError, match="backend 'cpu' has nothing to compile") as info:
        check_buildable(m)
    assert info.value.key == "kernel.relu_cpu.src" and info.value.fix


def test_a_source_shared_by_kernel_sections_is_accepted(tmp_path):
    """Hugging Face's builder compiles a source that two [kernel.*] sections list once,
    with both sections' settings; `check` must not refuse such a project."""
    from kernelforge.manifest import check_buildable

    _touch(tmp_path, "torch-ext/relu/__init__.py", "torch-ext/binding.cpp", "cpu/common.cpp",
           "cpu/plain.cpp", "cpu/wide.cpp")
    text = CPU5 + '\n[torch]\nsrc = ["torch-ext/binding.cpp"]\n'
    for name, extra in (("plain", ""), ("wide", 'cxx-flags = ["-DWIDE"]\n')):
        text += (f'\n[kernel.{name}]\nbackend = "cpu"\ndepends = ["torch"]\n{extra}'
                 f'src = ["cpu/common.cpp", "cpu/{name}.cpp"]\n')
    assert check_buildable(check_project(write(tmp_path, text))) == []
    # Listed twice in one section, it is still a mistake with its fix.
    write(tmp_path, text.replace('"cpu/common.cpp", "cpu/wide.cpp"',
                                 '"cpu/common.cpp", "cpu/wide.cpp", "./cpu/common.cpp"'))
    with pytest.raises(ManifestError, match="lists the source 'cpu/common.cpp' "
                       "\\(as './cpu/common.cpp'\\) twice") as info:
        check_buildable(check_project(tmp_path))
    assert info.value.key == "kernel.wide.src"
    assert info.value.fix == "remove the second './cpu/common.cpp'"


# --- every problem at once -------------------------------------------------------------------


def test_independent_problems_are_reported_together(tmp_path):
    """An unknown section, a misspelt key in one kernel section and an unknown backend in
    another: one error lists the three, so that one run shows what to fix."""
    text = replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
                   'cuda-capabilites = ["9.0"]\n')
    text = replace(text, 'backend = "rocm"', 'backend = "rcom"') + "\n[kernels.x]\n"
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    err = info.value
    assert [e.key for e in err.errors] == [
        "kernels", "kernel.relu.cuda-capabilites", "kernel.relu_rocm.backend"]
    assert all(e.errors == [e] and e.file == path for e in err.errors)
    # The attributes describe the first problem, as they did when it was the only one.
    assert (err.file, err.key, err.problem) == (path, "kernels", err.errors[0].problem)
    assert (err.expected, err.fix) == (err.errors[0].expected, "did you mean 'kernel'?")
    lines = str(err).splitlines()
    assert lines[0] == f"{path}: 3 problems:"
    assert lines[1:] == [f"  - {str(e).removeprefix(f'{path}: ')}" for e in err.errors]
    assert lines[2].startswith("  - key 'kernel.relu.cuda-capabilites': unknown key")
    assert lines[2].endswith("fix: did you mean 'cuda-capabilities'?")
    assert lines[3] == ("  - key 'kernel.relu_rocm.backend': unknown kernel backend 'rcom'; "
                        "expected one of cpu, cuda, metal, rocm, xpu; fix: did you mean "
                        "'rocm'?")
    assert str(err).count(str(path)) == 1


def test_every_unknown_key_of_a_section_is_listed(tmp_path):
    text = replace(GOOD5, 'depends = ["torch"]\n', 'depend = ["torch"]\ncxxflags = []\n')
    write(tmp_path, replace(text, "version = 1", "versoin = 1"))
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    # The misspelt required keys are not reported missing as well.
    assert [(e.key, e.fix) for e in info.value.errors] == [
        ("general.versoin", "did you mean 'version'?"),
        ("kernel.relu.depend", "did you mean 'depends'?"),
        ("kernel.relu.cxxflags", "did you mean 'cxx-flags'?"),
    ]


def test_a_broken_kernel_section_does_not_hide_the_next(tmp_path):
    write(tmp_path, GENERAL5 + TORCH + '\n[kernel.a]\nbackend = "cuda"\ndepends = ["torch"]\n'
          'src = "a.cu"\n\n[kernel.b]\nbackend = "cuda"\ndepends = ["troch"]\nsrc = ["b.cu"]\n')
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert [e.key for e in info.value.errors] == ["kernel.a.src", "kernel.b.depends"]
    assert "2 problems" in str(info.value) and "unknown dependency 'troch'" in str(info.value)


@pytest.mark.parametrize(("text", "key", "match"), [
    # [general] cannot be read: nothing else is checked (the layout depends on it).
    ("general = 5\n" + TORCH + KERNELS + "\n[kernels.x]\n", "general", "not a table"),
    # Not TOML: nothing else can be read (the parser stops at [general declared again).
    ("[kernels.x]\n" + GOOD5 + "[general\n", "general", "not valid TOML"),
    # The unknown section may be the framework section, misspelt: "no framework section"
    # would follow from it.
    (GENERAL5 + TORCH.replace("[torch]", "[troch]") + KERNELS, "troch", "did you mean 'torch'"),
    # A misspelt `universal` of the legacy layout: "it builds nothing" would follow from it.
    ('[general]\nname = "norm"\nunivresal = true\n', "general.univresal",
     "did you mean 'universal'"),
    # general.backends unknown: whether the kernels' backends are listed in it is not.
    (replace(GOOD5, '"cpu", "cuda", "rocm"', '"cpu", "cdua"'), "general.backends",
     "unknown backend 'cdua'"),
], ids=["general-not-a-table", "not-toml", "misspelt-framework", "misspelt-universal",
        "unknown-backend"])
def test_a_problem_that_follows_from_another_is_not_reported(tmp_path, text, key, match):
    write(tmp_path, text)
    with pytest.raises(ManifestError, match=match) as info:
        load_manifest(tmp_path)
    assert [e.key for e in info.value.errors] == [key]
    assert info.value.errors == [info.value]


def test_the_message_of_a_single_problem_is_one_line(tmp_path):
    path = write(tmp_path, replace(GOOD5, 'backend = "rocm"', 'backend = "rcom"'))
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert str(info.value) == (
        f"{path}: key 'kernel.relu_rocm.backend': unknown kernel backend 'rcom'; expected one "
        "of cpu, cuda, metal, rocm, xpu; fix: did you mean 'rocm'?")
    assert info.value.errors == [info.value]


XPU_KERNEL = """
[kernel.relu_xpu]
backend = "xpu"
depends = ["torch"]
src = ["relu_xpu/relu.cpp"]
"""


@pytest.mark.parametrize("flag, problem", [
    ("", r"entry 2 \(''\) is empty"),
    ("-DA\r-DB", r"entry 2 \('-DA\\r-DB'\) holds a line break"),
])
@pytest.mark.parametrize("section, key", [
    ("relu", "cxx-flags"), ("relu", "cuda-flags"), ("relu_rocm", "hip-flags"),
    ("relu_xpu", "sycl-flags"),
])
def test_every_flag_list_refuses_an_entry_the_compile_line_cannot_hold(
        tmp_path, section, key, flag, problem):
    """Each compiler's flag list is checked as cxx-flags is: an empty entry would reach
    the compiler as a file name, a carriage return ends the ninja file's line as a
    newline does."""
    text = replace(GENERAL5, '"rocm"]', '"rocm", "xpu"]') + TORCH + KERNELS + XPU_KERNEL
    value = f'{key} = ["-O2", "{flag}"]\n'
    text = replace(text, f"[kernel.{section}]\n", f"[kernel.{section}]\n{value}")
    write(tmp_path, text.replace("\r", "\\r"))
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.key == f"kernel.{section}.{key}"
    assert re.search(problem, info.value.problem), info.value.problem


def test_a_line_break_in_a_key_or_value_stays_inside_its_problems_line(tmp_path):
    """A newline or tab in a quoted name of build.toml is written as an escape: each
    problem keeps its one line, and a value cannot start a line that reads as another."""
    text = replace(GOOD5, '"rocm"]', '"rocm", "c\\nerror: all good"]')
    write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert "\n" not in str(info.value)
    assert "unknown backend 'c\\nerror: all good'" in str(info.value)
    write(tmp_path, text + '\n[kernel."a\\tb"]\nbackend = "cpu"\ndepends = []\nsrc = ["k.cpp"]\n')
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    lines = str(info.value).splitlines()
    assert len(lines) == 3 and lines[0].endswith("2 problems:"), lines
    assert "fix: rename [kernel.a\\tb], e.g. to [kernel.a_b]" in lines[2], lines


def test_check_project_lists_every_missing_file(tmp_path):
    make_guide_project(tmp_path)
    for missing in ("gemm/gemm_launcher.hip", "torch-ext/torch_binding.h",
                    "torch-ext/gemm/__init__.py"):
        (tmp_path / missing).unlink()
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    err = info.value
    assert [e.key for e in err.errors] == ["torch.src", "kernel.gemm.src", "general.name"]
    assert "torch-ext/torch_binding.h" in err.errors[0].problem
    assert "gemm/gemm_launcher.hip" in err.errors[1].problem
    assert str(err).startswith(f"{tmp_path / 'build.toml'}: 3 problems:\n")
    assert err.key == "torch.src"


def test_check_project_reports_the_manifest_problems_first(tmp_path):
    """Files are checked against a valid manifest only."""
    make_guide_project(tmp_path)
    (tmp_path / "gemm" / "gemm_launcher.hip").unlink()
    toml = tmp_path / "build.toml"
    toml.write_text(toml.read_text().replace("universal = false", "universal = 0"))
    with pytest.raises(ManifestError) as info:
        check_project(tmp_path)
    assert [e.key for e in info.value.errors] == ["general.universal"]


def test_check_buildable_lists_every_broken_rule(tmp_path):
    from kernelforge.manifest import check_buildable

    _touch(tmp_path, "torch-ext/relu/__init__.py", "torch-ext/binding.cpp", "cpu/relu.cpp",
           "cuda/relu.cu")
    text = GENERAL5 + '\n[torch]\nsrc = ["torch-ext/binding.cpp", "torch-ext/binding.cpp"]\n' \
        'minver = "2.9"\nmaxver = "2.7"\n' \
        '\n[kernel.relu_cpu]\nbackend = "cpu"\ndepends = ["torch"]\nsrc = ["cpu/relu.cpp"]\n' \
        '\n[kernel.relu]\nbackend = "cuda"\ndepends = ["cutlass_3_9"]\nsrc = ["cuda/relu.cu"]\n'
    m = check_project(write(tmp_path, text))
    with pytest.raises(ManifestError) as info:
        check_buildable(m)
    # torch.src lists a source twice for the cpu and the cuda build: said once.
    assert [e.key for e in info.value.errors] == [
        "torch.maxver", "torch.src", "kernel.relu.depends", "general.backends"]
    assert "lists 'rocm'" in info.value.errors[3].problem
    assert str(info.value).startswith(f"{m.path}: 4 problems:\n")


def test_combined_errors_are_flattened_and_listed_once():
    one = ManifestError("b.toml", "a", "is wrong", expected="right", fix="fix it")
    two = ManifestError("b.toml", None, "cannot read it")
    both = ManifestError.combine([one, two])
    assert both.errors == [one, two]
    assert ManifestError.combine([both, one, two]).errors == [one, two]
    assert ManifestError.combine([one, one]) is one
    assert str(both) == ("b.toml: 2 problems:\n"
                         "  - key 'a': is wrong; expected right; fix: fix it\n"
                         "  - cannot read it")


def test_an_unknown_architecture_beside_known_ones_is_left_out_with_a_note(tmp_path):
    """As Hugging Face's builder builds the architectures of a list it knows (dropping
    the others without a word), a well-formed unknown one is left out, and said; a list
    of unknown ones only, or a malformed one, stays an error."""
    text = replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
                   'cuda-capabilities = ["9.0", "11.8", "12.0"]\n')
    text += 'rocm-archs = ["gfx942", "gfx99999"]\n'
    m = load_manifest(write(tmp_path, text))
    assert m.kernels["relu"].cuda_capabilities == ("9.0", "12.0")
    assert m.kernels["relu_rocm"].rocm_archs == ("gfx942",)
    assert len(m.notes) == 2
    assert m.notes[0].startswith("kernel.relu.cuda-capabilities: unknown CUDA capability "
                                 "'11.8'") and "it is left out" in m.notes[0]
    assert "fix: remove it from the list" in m.notes[0]
    assert "unknown ROCm arch 'gfx99999'" in m.notes[1]
    malformed = replace(text, '"11.8"', '"sm_118"')
    with pytest.raises(ManifestError, match="kernel.relu.cuda-capabilities"):
        load_manifest(write(tmp_path, malformed))
    assert load_manifest(write(tmp_path, GOOD5)).notes == ()


def test_check_names_each_dependency_once_and_the_backends_it_does_not_build(
        tmp_path, monkeypatch):
    from kernelforge.build import toolchain
    from kernelforge.errors import ToolchainError
    from kernelforge.manifest import check_buildable

    dep = sorted(toolchain.HEADER_PACKAGES)[0]

    def missing(name):
        raise ToolchainError(f"{name} needs headers that are not installed here")

    monkeypatch.setattr(toolchain, "resolve_dependency", missing)
    root = tmp_path / "p"
    (root / "torch-ext" / "relu").mkdir(parents=True)
    (root / "torch-ext" / "relu" / "__init__.py").write_text("")
    (root / "relu_cuda").mkdir()
    (root / "relu_cuda" / "relu.cu").write_text("")
    (root / "torch-ext" / "torch_binding.cpp").write_text("")
    (root / "torch-ext" / "torch_binding.h").write_text("")
    text = replace(GOOD5, '"cpu", "cuda", "rocm"', '"cuda", "metal", "xpu"')
    text = text[:text.index("[kernel.relu_rocm]")].replace(
        'depends = ["torch"]', f'depends = ["torch", "{dep}"]')
    text += (f'[kernel.second]\nbackend = "cuda"\ndepends = ["{dep}"]\n'
             'src = ["relu_cuda/relu.cu"]\n')
    (root / "build.toml").write_text(text)
    notes = check_buildable(check_project(root))
    assert ("general.backends lists metal, xpu, which kernelforge checks but does not "
            "build: 'kernelforge build' skips them") in notes
    assert [n for n in notes if dep in n] == [
        f"kernel.relu, kernel.second: {dep} needs headers that are not installed here"]


@pytest.mark.parametrize(("text", "problems"), [
    (GENERAL5.replace("version = 1", 'version = "1"') + KERNELS,
     ["general.version", "torch"]),
    ('[general]\nname = "relu"\nuniversal = true\n\n[torch]\n'
     'src = ["torch-ext/torch_binding.cpp"]\ninclude = 3\n',
     ["torch.include", "torch.src"]),
], ids=["version-and-no-framework", "universal-with-sources-and-bad-include"])
def test_a_problem_read_later_does_not_hide_a_rule_of_an_earlier_part(tmp_path, text,
                                                                       problems):
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, text))
    assert [e.key for e in info.value.errors] == problems


def test_an_unknown_architecture_listed_twice_is_noted_once(tmp_path):
    text = replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\n'
                   'cuda-capabilities = ["9.0", "11.8", "11.8"]\n')
    assert len(load_manifest(write(tmp_path, text)).notes) == 1


def test_a_file_given_instead_of_the_project_is_said_to_be_no_build_toml(tmp_path,
                                                                        monkeypatch):
    """`kernelforge check some/file.cpp`: the file is not a build.toml, and the fix is to
    pass the project (named, where a directory above the file holds a build.toml), not
    to fix its TOML syntax; a build.toml with a syntax error still gets that fix."""
    project = tmp_path / "p"
    (project / "relu_cpu").mkdir(parents=True)
    (project / "build.toml").write_text(GOOD5)
    (project / "relu_cpu" / "relu.cpp").write_text("#include <x>\nint relu() {}\n")
    (project / "relu_cpu" / "relu.so").write_bytes(b"\x7fELF\x80\x81\xff")
    (project / "relu_cpu" / "__init__.py").write_text("")  # valid (empty) TOML
    monkeypatch.chdir(tmp_path)
    for name in ("relu.cpp", "relu.so", "__init__.py"):
        given = Path("p", "relu_cpu", name)
        with pytest.raises(ManifestError, match="is not a build.toml") as info:
            load_manifest(given)
        err = info.value
        assert (err.file, err.key, err.errors) == (given, None, [err])
        assert err.fix == "pass the project directory p (or its build.toml)", name
        assert "fix the syntax" not in str(err) and "add [general]" not in str(err)
    with pytest.raises(ManifestError) as info:  # given as an absolute path: shown so
        load_manifest(project / "relu_cpu" / "relu.cpp")
    assert info.value.fix == f"pass the project directory {project} (or its build.toml)"
    lone = tmp_path / "lone" / "main.cpp"
    lone.parent.mkdir()
    lone.write_text("int main() {}\n")
    with pytest.raises(ManifestError, match="not valid TOML") as info:
        load_manifest(lone)
    assert "is not a build.toml" in str(info.value)
    assert info.value.fix.startswith("pass the kernel project directory")
    # A .toml file may be a manifest under another name: both fixes are given.
    (project / "other.toml").write_text("[general\n")
    with pytest.raises(ManifestError, match="not valid TOML: ") as info:
        load_manifest(project / "other.toml")
    assert info.value.fix.startswith("if it is the project's manifest, fix the syntax")
    (project / "build.toml").write_text("[general\n")
    with pytest.raises(ManifestError, match="not valid TOML: ") as info:
        load_manifest(project)
    assert info.value.fix == "fix the syntax at the position shown"


HUB_ABOVE_BACKENDS = GOOD5.replace('backends = ["cpu", "cuda", "rocm"]\n',
                                   '\n[general.hub]\nrepo-id = "org/relu"\n'
                                   'backends = ["cpu", "cuda", "rocm"]\n')


@pytest.mark.parametrize("text", [HUB_ABOVE_BACKENDS,
                                  HUB_ABOVE_BACKENDS.replace("edition = 5\n", "")],
                         ids=["edition-5", "edition-4"])
def test_backends_written_below_a_subtable_header_is_said_to_be_misplaced(tmp_path, text):
    """`[general.hub]` inserted above `backends = [...]` makes it general.hub.backends:
    the fix is to move it above the header (not to remove the list), and the missing
    general.backends points to it; without 'edition' the layout stays edition 4 (the
    file is not read as the legacy layout for it)."""
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, text))
    errors = {e.key: e for e in info.value.errors}
    assert list(errors) == ["general.backends", "general.hub.backends"], str(info.value)
    moved = errors["general.hub.backends"]
    assert moved.problem == "unknown key 'backends'"
    assert moved.fix is not None and "remove it" not in moved.fix
    assert moved.fix.startswith("'backends' belongs to [general]: move it above the "
                                "[general.hub] header")
    missing = errors["general.backends"]
    assert missing.problem.startswith("missing required key 'backends'")
    assert missing.fix == ("it is written under [general.hub] (as general.hub.backends): "
                           "move it above the [general.hub] header, into [general]")


@pytest.mark.parametrize(("text", "key", "fix"), [
    (replace(GOOD5, 'license = "Apache-2.0"\n', '\n[general.cuda]\nminver = "12.6"\n'
             'license = "Apache-2.0"\n'), "general.cuda.license",
     "'license' belongs to [general]: move it above the [general.cuda] header"),
    (replace(GOOD5, "[torch]\n", '[torch]\n[torch.stable-abi]\ncuda = "2.11"\n'),
     "torch.stable-abi.src", "'src' belongs to [torch]: move it above the "
     "[torch.stable-abi] header"),
    (HUB_ABOVE_BACKENDS.replace("\n[general.hub]", 'backends = ["cuda"]\n[general.hub]'),
     "general.hub.backends", "'backends' belongs to [general], which has its own "
     "backends: keep one of the two"),
    (replace(GOOD5, 'src = ["relu_cuda/relu.cu"]\n\n[kernel.relu_rocm]',
             '[kernel.relu.extra]\nsrc = ["relu_cuda/relu.cu"]\n\n[kernel.relu_rocm]'),
     "kernel.relu.extra", "remove the [kernel.relu.extra] header, so that the keys below "
     "it (src) are read as part of [kernel.relu]"),
], ids=["general-cuda", "torch-stable-abi", "given-twice", "unknown-subtable"])
def test_a_key_of_a_table_written_below_its_subtable_is_said_to_be_misplaced(
        tmp_path, text, key, fix):
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, text))
    errors = {e.key: e for e in info.value.errors}
    assert key in errors, str(info.value)
    assert errors[key].fix is not None and errors[key].fix.startswith(fix), errors[key].fix
    assert all(e.fix != "remove it" for e in errors.values()), str(info.value)


@pytest.mark.parametrize(("name", "suggested"), [
    ("übung", "ubung"), ("Café", "cafe"), ("ÜbungKernel", "ubung-kernel"),
    ("straße", "strasse"), ("résumé_ok", "resume-ok"), ("MyRelu", "my-relu"),
    ("my_relu", "my-relu"), ("2-relu", "relu"), ("日本", "my-kernel"),
])
def test_suggest_name_keeps_accented_letters_without_their_accents(name, suggested):
    from kernelforge.manifest import suggest_name

    assert suggest_name(name) == suggested


def test_the_name_error_and_init_suggest_a_name_without_accents(tmp_path):
    from kernelforge.errors import KernelforgeError
    from kernelforge.scaffold import init_project

    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, replace(GOOD5, 'name = "relu"', 'name = "übung"')))
    assert info.value.fix == "use 'ubung'"
    with pytest.raises(KernelforgeError, match=r"\(did you mean 'ubung'\?\)"):
        init_project("übung", tmp_path / "p")


def _with_python_depends(general: str | None, **per_backend: str) -> str:
    text = GOOD5
    if general is not None:
        text = replace(text, "backends =", f"python-depends = {general}\nbackends =")
    for backend, names in per_backend.items():
        text += f"\n[general.{backend}]\npython-depends = {names}\n"
    return text


def test_python_depends_hugging_face_knows_get_no_note(tmp_path):
    text = _with_python_depends('["einops", "helion", "tvm-ffi"]',
                                cuda='["nvidia-cutlass-dsl", "einops"]')
    m = load_manifest(write(tmp_path, text))
    assert m.notes == ()
    assert m.python_depends == ("einops", "helion", "tvm-ffi")  # accepted as before
    only_cuda = replace(_with_python_depends('["nvidia-cutlass-dsl"]'),
                        '"cpu", "cuda", "rocm"', '"cuda"')
    assert load_manifest(write(tmp_path, only_cuda.split("[kernel.relu_rocm]")[0])
                         ).notes == ()


def test_python_depends_hugging_face_does_not_know_are_accepted_with_a_note(tmp_path):
    """kernelforge loads any name (as the package and module name), but Hugging Face's
    kernels loader refuses a variant whose metadata lists a name outside its table."""
    m = load_manifest(write(tmp_path, _with_python_depends(
        '["einops", "packaging", "triton", "packaging"]', cuda='["my-lib"]')))
    assert m.python_depends == ("einops", "packaging", "triton", "packaging")
    assert m.backend_python_depends == {"cuda": ("my-lib",)}
    assert len(m.notes) == 2, m.notes
    first, second = m.notes
    assert first.startswith("general.python-depends: 'packaging', 'triton' are not names "
                            "that Hugging Face's kernels know (they know einops, helion, "
                            "tvm-ffi; nvidia-cutlass-dsl for cuda, nki for neuron, onednn "
                            "for xpu)")
    assert "load with kernelforge" in first
    assert "Hugging Face's kernels loader refuses them" in first
    assert second.startswith("general.cuda.python-depends: 'my-lib' is not a name")


def test_a_python_depends_name_of_another_backend_is_noted_per_backend(tmp_path):
    """The table is per backend: a variant lists [general] python-depends and its
    backend's; a name Hugging Face knows for one backend only is refused in the
    variants of the others."""
    m = load_manifest(write(tmp_path, _with_python_depends(
        '["nvidia-cutlass-dsl"]', cuda='["nki", "nvidia-cutlass-dsl"]',
        xpu='["anything"]')))  # xpu is not built: no variant lists it
    assert m.notes == (
        "general.python-depends: Hugging Face's kernels know 'nvidia-cutlass-dsl' for "
        "cuda only, and the cpu, rocm builds list it: it loads with kernelforge, but "
        "Hugging Face's kernels loader refuses it; fix: move 'nvidia-cutlass-dsl' to "
        "[general.cuda] python-depends",
        "general.cuda.python-depends: Hugging Face's kernels know 'nki' for neuron only, "
        "and the cuda build lists it: it loads with kernelforge, but Hugging Face's "
        "kernels loader refuses it; fix: move 'nki' to [general.neuron] python-depends, "
        "or remove it (general.backends does not list neuron)",
    )


def test_a_manifest_without_python_depends_is_read_without_the_loader(tmp_path):
    """The python-depends table is the loader's; a project that lists no names is read,
    as every check and build reads it, without importing the loader and the hub code it
    brings."""
    import subprocess
    import sys

    path = write(tmp_path, _with_python_depends(None, xpu='["anything"]'))  # xpu: not built
    code = ("import sys\n"
            "from kernelforge.manifest import load_manifest\n"
            f"m = load_manifest({str(path)!r})\n"
            "print(m.name, m.notes, 'kernelforge.loader' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "relu () False"


def test_the_python_depends_table_is_hugging_faces():
    """The loader's names, with the backends of manifest.py, are those of Hugging Face's
    kernels (their python_depends.json, where `kernels` is installed)."""
    import importlib.util
    import json

    from kernelforge.loader import _PYTHON_DEPENDS
    from kernelforge.manifest import _PYTHON_DEPENDS_BACKEND

    assert set(_PYTHON_DEPENDS_BACKEND) <= set(_PYTHON_DEPENDS)
    spec = importlib.util.find_spec("kernels")
    if spec is None or spec.origin is None:
        pytest.skip("Hugging Face's kernels is not installed")
    data = json.loads((Path(spec.origin).parent / "python_depends.json").read_text())
    assert set(data["general"]) == set(_PYTHON_DEPENDS) - set(_PYTHON_DEPENDS_BACKEND)
    assert {n: b for b, names in data["backends"].items() for n in names} \
        == _PYTHON_DEPENDS_BACKEND


def test_a_kernel_section_name_may_start_with_a_digit(tmp_path: Path) -> None:
    """[kernel.2d_conv], [kernel.4bit_gemm]: Hugging Face's builder takes them."""
    m = load_manifest(write(tmp_path, replace(GOOD5, "[kernel.relu]", "[kernel.2d_conv]")))
    assert "2d_conv" in m.kernels
    with pytest.raises(ManifestError, match="'2d conv' is not a valid kernel section name"):
        load_manifest(write(tmp_path, replace(GOOD5, "[kernel.relu]", '[kernel."2d conv"]')))



#: upstream/source values, and whether Hugging Face's kernel metadata takes each (its
#: loader refuses a build whose metadata.json holds one it does not).
GIT_URLS = [
    ("https://github.com/org/repo", True), ("HTTPS://github.com/org/repo", True),
    ("HtTp://x.org/r", True), ("git@github.com:org/repo.git", True),
    ("user@gitlab.com:group/project.git", True), ("ssh://git@github.com/org/repo.git", True),
    ("git+https://github.com/org/repo.git", True), ("git://github.com/org/repo.git", True),
    ("https:github.com/org/repo", True), ("http://[::1]/x", True),
    ("https://github.com:443/org/x", True), ("ssh:foo", True),
    ("github.com:org/relu.git", False), ("https://", False), ("gitlab:org/repo", False),
    ("https://github.com:org/repo", False), ("http://[::1", False), ("ftp://host/x", False),
    ("/local/path", False), ("relu", False), ("host:/abs", False),
    ("https://github.com:99999/x", False), ("git@host:", False), (":path", False),
    ("a b:c/d", False), ("git+ssh://git@github.com:org/repo.git", False),
    ("git@git hub.com:o/r", False), ("git@[::1]:o/r", False), ("https://user@/x", False),
    ("https://exa mple.com/x", False), ("https://256.0.0.1/org/na", False),
    ("http://[fe80::1%25eth0]/x", False), ("https://[v1.x]/x", False),
    ("https://h%20/x", False), ("ssh://git@/org/x", False), ("git://:22/org/x", False),
    ("https://u:p@github.com/org/x", True), ("ssh://git@[::1]:22/org/x", True),
    ("https://1.2.3.4/org/x", True),
]


@pytest.mark.parametrize(("url", "valid"), GIT_URLS, ids=[u for u, _ in GIT_URLS])
def test_git_urls_are_read_as_hugging_faces_metadata_reads_them(tmp_path, url, valid):
    """A URL build.toml takes goes into metadata.json, which Hugging Face's loader must
    read: the same URLs are taken and refused (their parser checks the table where it is
    installed)."""
    text = GOOD5.replace("[general]\n", f"[general]\nupstream = {json.dumps(url)}\n", 1)
    if valid:
        assert load_manifest(write(tmp_path, text)).upstream == url
    else:
        with pytest.raises(ManifestError, match="general.upstream.*is not a git URL"):
            load_manifest(write(tmp_path, text))
    try:
        from kernels._rust import Metadata
    except ImportError:
        return
    meta = {"id": "_relu_cpu_0123456", "name": "relu", "version": 1, "license": "MIT",
            "python-depends": [], "backend": {"type": "cpu"}, "upstream": url}
    try:
        Metadata.from_bytes(json.dumps(meta).encode())
        theirs = True
    except ValueError:
        theirs = False
    assert theirs == valid


@pytest.mark.parametrize(("old", "new", "key", "value"), [
    ("[torch]\n", '[torch]\nminver = "2.7.1"\n', "torch.minver", "2.7.1"),
    ("[torch]\n", '[torch]\nmaxver = "2"\n', "torch.maxver", "2"),
    ("[torch]\n", '[torch]\nstable-abi = "2.11.0"\n', "torch.stable-abi", "2.11.0"),
    ("[torch]\n", '[general.cuda]\nminver = "12.8.1"\n\n[torch]\n', "general.cuda.minver",
     "12.8.1"),
    ('src = ["relu_cuda/relu.cu"]\n', 'src = ["relu_cuda/relu.cu"]\ncuda-minver = "13"\n',
     "kernel.relu.cuda-minver", "13"),
])
def test_a_version_that_is_not_major_minor_is_noted(tmp_path, old, new, key, value):
    """Hugging Face's reader (kernels 0.17) refuses a version of other than two parts
    ("Version has 3 components, expected 2"): kernelforge reads it, and says so."""
    text = replace(GOOD5, old, new)
    m = load_manifest(write(tmp_path, text))
    parts = value.split(".")
    two = ".".join((parts + ["0"])[:2])
    assert [n for n in m.notes if n.startswith(f"{key}: ")] == [
        f"{key}: '{value}' has {len(parts)} part{'s' if len(parts) > 1 else ''}: Hugging "
        "Face's kernel-builder reads versions as major.minor and refuses it (kernelforge "
        f"reads it as written); fix: write {key.split('.')[-1]} = \"{two}\" for a file "
        "both build"], m.notes
    text = replace(text, f'"{value}"', f'"{two}"')
    assert not [n for n in load_manifest(write(tmp_path, text)).notes if key in n]


def test_an_empty_src_is_refused_only_in_a_section_that_is_built(tmp_path):
    """Their builder stops on a kernel section without sources when it builds the
    section's backend; a section of a backend general.backends does not list is not
    built there, nor here."""
    text = GOOD5[:GOOD5.rindex("src = ")] + "src = []\n"  # [kernel.relu_rocm]'s
    with pytest.raises(ManifestError, match="is an empty list") as info:
        load_manifest(write(tmp_path, text))
    assert info.value.key == "kernel.relu_rocm.src"
    m = load_manifest(write(tmp_path, replace(text, '"cpu", "cuda", "rocm"', '"cuda"')))
    assert "relu_rocm" not in m.kernels


def test_a_kernel_section_of_a_backend_not_listed_is_not_built(tmp_path):
    """As in Hugging Face's builder: general.backends says what is built; a section for
    another backend is left out, with a note, not refused."""
    path = write(tmp_path, replace(GOOD5, '"cpu", "cuda", "rocm"', '"cuda"'))
    m = load_manifest(path)
    assert m.backends == ("cuda",)
    assert "relu_rocm" not in m.kernels  # its files are not checked, nor part of the build
    assert any("[kernel.relu_rocm] is for backend 'rocm', which general.backends (cuda) "
               "does not list: it is not built" in n for n in m.notes), m.notes
    try:
        from kernels._rust import Build
    except ImportError:
        return
    Build.open(str(path.parent))  # their reader takes it too


def test_a_guide_layout_name_with_underscores_is_written_with_dashes(tmp_path):
    """The guide's older layout allows '_' in the name; metadata.json gets the name with
    '-' (Hugging Face's loader refuses '_'), and the Python package keeps its name."""
    m = load_manifest(write(tmp_path, '[general]\nname = "triton_norm"\nuniversal = true\n'))
    assert (m.name, m.python_name) == ("triton-norm", "triton_norm")
    assert any("'triton_norm' is written 'triton-norm' in metadata.json" in n
               and n.endswith("the Python package stays triton_norm") for n in m.notes)
    mixed = load_manifest(write(tmp_path, '[general]\nname = "my-relu_op"\nuniversal = true\n'))
    assert (mixed.name, mixed.python_name) == ("my-relu-op", "my_relu_op")
    assert any(n.endswith("the Python package stays my_relu_op") for n in mixed.notes)
    try:
        from kernels._rust import KernelName
    except ImportError:
        return
    assert KernelName(m.name).python_name == m.python_name


def test_a_byte_order_mark_is_read_as_hugging_face_reads_it(tmp_path):
    # Editors on Windows may save UTF-8 with a BOM; their builder reads such a file.
    (tmp_path / "build.toml").write_text(GOOD5, encoding="utf-8-sig")
    m = load_manifest(tmp_path)
    assert (m.name, m.edition, m.backends) == ("relu", 5, ("cpu", "cuda", "rocm"))


def test_a_rocm_target_id_with_features_is_left_out_and_its_base_arch_suggested(tmp_path):
    """gfx90a:xnack- is no arch their builder compiles for (it drops it from a list):
    left out beside known archs, refused alone, suggesting gfx90a (not gfx90c)."""
    text = GOOD5 + 'rocm-archs = ["gfx90a:xnack-", "gfx942"]\n'
    m = load_manifest(write(tmp_path, text))
    assert m.kernels["relu_rocm"].rocm_archs == ("gfx942",)
    assert len(m.notes) == 1 and "did you mean 'gfx90a'?" in m.notes[0]
    assert "it is left out" in m.notes[0]
    alone = GOOD5 + 'rocm-archs = ["gfx90a:xnack-"]\n'
    with pytest.raises(ManifestError, match=r"kernel.relu_rocm.rocm-archs.*target "
                                            r"features.*did you mean 'gfx90a'\?"):
        load_manifest(write(tmp_path, alone))


def _line_of_last(text: str, start: str) -> int:
    return text.count("\n", 0, text.rindex(start)) + 1


DUPLICATE_SRC = GOOD5 + 'src = ["relu_cuda/other.cu"]\n'
# the value spans lines, and the file ends without a newline
DUPLICATE_LONG_SRC = GOOD5 + 'src = [\n  "-DX=1",\n  "relu_cuda/other.cu",\n]'


@pytest.mark.parametrize(("text", "key", "message"), [
    (DUPLICATE_SRC, "kernel.relu_rocm.src",
     rf"line {_line_of_last(DUPLICATE_SRC, 'src =')} sets 'src' in \[kernel.relu_rocm\], "
     r"which already has it.*fix: keep one 'src' in \[kernel.relu_rocm\]"),
    (DUPLICATE_LONG_SRC, "kernel.relu_rocm.src",
     rf"line {_line_of_last(DUPLICATE_LONG_SRC, 'src =')} sets 'src' in \[kernel.relu_rocm\]"),
    (GOOD5 + "\n[kernel.relu]\n", "kernel.relu", r"the table \[kernel.relu\] is defined twice"),
    (replace(GOOD5, "[torch]\n", 'hub = {repo-id = "a/b"}\nhub.branch = "v1"\n\n[torch]\n'),
     "general.hub", r"general.hub is written as a value .*fix: write all of general.hub"),
], ids=["key", "multi-line-value-at-the-end", "table", "inline-table"])
def test_a_key_or_table_defined_twice_is_named(tmp_path, text, key, message):
    with pytest.raises(ManifestError, match=message) as info:
        load_manifest(write(tmp_path, text))
    assert info.value.key == key


@pytest.mark.parametrize(("listed", "meant"), [
    ("Relu_Cuda/relu.cu", "relu_cuda/relu.cu"),  # written on a file system ignoring case
    ("relu_cuda\\\\relu.cu", "relu_cuda/relu.cu"),  # Windows' separator
    ("relu_cuda/rleu.cu", "relu_cuda/relu.cu"),  # a typo
], ids=["case", "backslash", "typo"])
def test_a_missing_source_suggests_the_file_it_likely_means(tmp_path, listed, meant):
    root = tmp_path / "p"
    for name in ("relu_cuda/relu.cu", "torch-ext/torch_binding.cpp",
                 "torch-ext/torch_binding.h", "torch-ext/relu/__init__.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    (root / "build.toml").write_text(replace(GOOD5, '"relu_cuda/relu.cu"]\n\n',
                                             f'"{listed}"]\n\n'))
    with pytest.raises(ManifestError) as info:
        check_project(root)
    assert info.value.key == "kernel.relu.src"
    assert info.value.fix is not None and info.value.fix.startswith(
        f"did you mean '{meant}'?"), info.value.fix


def test_check_refuses_a_source_name_the_build_cannot_compile(tmp_path):
    """torch's ninja files cannot express '$' in a source's path: the build refuses
    such a source, and check says so first."""
    from kernelforge.manifest import check_buildable

    root = tmp_path / "p"
    for name in ("relu_cuda/re$lu.cu", "torch-ext/torch_binding.cpp",
                 "torch-ext/torch_binding.h", "torch-ext/relu/__init__.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    (root / "build.toml").write_text(GOOD5.replace("relu_cuda/relu.cu", "relu_cuda/re$lu.cu"))
    with pytest.raises(ManifestError, match=r"'relu_cuda/re\$lu.cu' contains '\$'") as info:
        check_buildable(check_project(root))
    # listed by two sections (cuda, rocm), each said once
    assert [e.key for e in info.value.errors if "$" in e.problem] == [
        "kernel.relu.src", "kernel.relu_rocm.src"]


# A path longer than the file system takes (ENAMETOOLONG) is the manifest's problem, named
# with its key, not an OSError of its own.
@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('"gemm/gemm_launcher.hip"', f'"gemm/{"x" * 300}.hip"', "kernel.gemm.src"),
        ('include = ["include"]', f'include = ["{"i" * 300}"]', "kernel.gemm.include"),
        ('name = "gemm"', f'name = "{"g" * 300}"', "general.name"),
    ],
)
def test_check_project_names_a_path_too_long(tmp_path, old, new, key):
    make_guide_project(tmp_path)
    toml = tmp_path / "build.toml"
    toml.write_text(replace(toml.read_text(), old, new))
    with pytest.raises(ManifestError, match=r"cannot be looked up|cannot look up") as info:
        check_project(tmp_path)
    assert [e.key for e in info.value.errors] == [key]
    assert "File name too long" in str(info.value)


def test_cli_check_names_a_package_name_too_long(tmp_path, capsys):
    from kernelforge.cli import main

    make_guide_project(tmp_path)
    toml = tmp_path / "build.toml"
    toml.write_text(replace(toml.read_text(), 'name = "gemm"', f'name = "{"g" * 300}"'))
    assert main(["check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "key 'general.name'" in err and "cannot be looked up" in err
    assert "Traceback" not in err
