"""What a source may read: the include scan and the include graph's digests, against
brute force on random graphs."""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

import pytest

from kernelforge.build import includes
from kernelforge.build.includes import IncludeGraph, Scanned, names_read, scan


def graph(n: int, edges: list[set[int]], uses: set[int], opaque: set[int],
          contents: list[bytes]) -> tuple[list[Path], IncludeGraph]:
    paths = [Path(f"/p/f{i}.h") for i in range(n)]
    scanned = {paths[i]: Scanned(i in uses, frozenset(f"f{j}.h" for j in edges[i]),
                                 hashlib.sha256(contents[i]).digest(), opaque=i in opaque)
               for i in range(n)}
    by_base = {f"f{i}.h": [paths[i]] for i in range(n)}
    rel_of = {paths[i]: f"f{i}.h" for i in range(n)}
    return paths, IncludeGraph(scanned, by_base, rel_of, [paths[i] for i in uses])


def closure(edges: list[set[int]], root: int) -> set[int]:
    seen, todo = {root}, [root]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_digests_and_names_follow_exactly_what_each_file_reaches(seed: int) -> None:
    """On random graphs (cycles, self-includes, roots visited in any order): a root's
    digest changes on an edit exactly when the edited file is reachable from it, and it
    may use the name exactly when it reaches a file that does or an opaque one."""
    rng = random.Random(seed)
    for _ in range(400):
        n = rng.randint(1, 14)
        density = rng.choice([0.05, 0.15, 0.3, 0.5])
        edges = [{j for j in range(n) if rng.random() < density} for _ in range(n)]
        uses = {i for i in range(n) if rng.random() < 0.1}
        opaque = {i for i in range(n) if rng.random() < 0.05}
        contents = [b"%d" % i for i in range(n)]
        reach = [closure(edges, i) for i in range(n)]
        paths, g = graph(n, edges, uses, opaque, contents)
        before = {}
        for root in rng.sample(range(n), n):
            assert g.may_use_name([paths[root]]) == bool(reach[root] & (uses | opaque))
            before[root] = g.digest([paths[root]])
        edited = rng.randrange(n)
        contents[edited] = b"edited"
        paths, g = graph(n, edges, uses, opaque, contents)
        for root in rng.sample(range(n), n):
            assert (g.digest([paths[root]]) != before[root]) == (edited in reach[root])


def test_long_chains_and_cycles_need_no_recursion() -> None:
    n = 50_000
    for cycle in (False, True):
        edges = [{i + 1} if i + 1 < n else ({0} if cycle else set()) for i in range(n)]
        paths, g = graph(n, edges, {n - 1}, set(), [b"%d" % i for i in range(n)])
        assert g.may_use_name([paths[0]])
        # in a cycle every file reaches the same files
        assert (g.digest([paths[0]]) == g.digest([paths[1]])) == cycle


@pytest.mark.parametrize("text", [
    b'#include "x.h"\n', b'  #  include <dir/x.h>\n', b'#include_next <x.h>\n',
    b'#import "x.h"\n', b'#embed "x.h"\n', b'import "x.h";\n', b'export import <x.h>;\n',
    b'%:include "x.h"\n', b'/* c */ # /* c */ include /* c */ "x.h"\n',
    b'/* licence\n   text */ #include "x.h"\n', b'# /* a\n */ include "x.h"\n',
    b'#if __has_include(<x.h>)\n#endif\n', b'#if __has_embed("x.h")\n#endif\n',
    b'#include "X.H"\n', b'#include "../up/x.h"\n'])
def test_names_read_in_every_spelling(text: bytes) -> None:
    names, opaque = names_read(text)
    assert set(names) == {"x.h"} and not opaque


@pytest.mark.parametrize("text", [
    b"#include KERNEL_HEADER\n", b"#if __has_include(HEADER)\n#endif\n",
    b'asm(".incbin \\"blob.bin\\"");\n', b'asm(".include \\"m.s\\"");\n'])
def test_a_name_the_scan_cannot_see_makes_the_file_opaque(text: bytes) -> None:
    assert names_read(text)[1]


def test_names_not_read(tmp_path: Path) -> None:
    """A commented-out include names nothing; nor does `defined(__has_include)`."""
    assert names_read(b'// #include "x.h"\n#if defined(__has_include)\n#endif\n') == ([], False)


def test_the_scan_takes_linear_time_on_hostile_lines() -> None:
    """Many comments on one line, or a long line full of the words the scan looks for,
    cost no more than reading them."""
    comments = b"/* a */" * 200 + b" embedding\n"
    long_line = b"x" * 59 + b"embed" + (b"y" * 59 + b"embed") * (1 << 17) + b"\n"
    for text in (comments, long_line):
        started = time.perf_counter()
        names_read(text)
        assert time.perf_counter() - started < 2.0


def test_large_and_binary_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file larger than the scan's limit is digested but opaque; one with NUL bytes
    names nothing."""
    monkeypatch.setattr(includes, "_SCANNED_BYTES", 1000)
    big = tmp_path / "big.h"
    big.write_bytes(b'#include "x.h"\n' * 100)
    found = scan(big)
    assert found.opaque and found.digest == hashlib.sha256(big.read_bytes()).digest()
    data = tmp_path / "data.bin"
    data.write_bytes(b'\0#include "x.h"\n')
    assert scan(data) == Scanned(False, frozenset(), hashlib.sha256(data.read_bytes()).digest())


def test_registration_h_counts_as_an_include_name(tmp_path: Path) -> None:
    """A file uses the namespace when it includes the builder's registration.h (any
    spelling), not when it names another file that ends so."""
    uses = tmp_path / "uses.h"
    for text, expected in [(b'#include "registration.h"\n', True),
                           (b'/* x */ #  include <Registration.h>\n', True),
                           (b'#include <torch/op_registration/op_registration.h>\n', False),
                           (b"// see registration.h\n", False),
                           (b"#define NS TORCH_EXTENSION_NAME\n", True)]:
        uses.write_bytes(text)
        assert scan(uses).mentions_name is expected, text
