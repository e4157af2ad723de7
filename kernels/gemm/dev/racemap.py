"""Map racecheck's kernel offsets to SASS: dumps the 2x1-cluster kernel of the built
extension and prints the instructions around each offset a racecheck log names.

    python kernels/gemm/dev/racemap.py RACECHECK_LOG SO OUT_SASS
"""

from __future__ import annotations

import re
import subprocess
import sys

log, so, out = sys.argv[1], sys.argv[2], sys.argv[3]
offsets = sorted({int(h, 16) for h in re.findall(r"\)\+0x([0-9a-f]+)", open(log).read())})
print("offsets:", [hex(o) for o in offsets])
sass = subprocess.run(["cuobjdump", "-sass", so], capture_output=True, text=True).stdout
blocks = re.split(r"\n\s*Function : ", sass)
for b in blocks[1:]:
    name = b.split("\n", 1)[0].strip()
    if "SM90_TMA_LOAD_MULTICAST" not in name or "device_kernel" not in name:
        continue  # only the cluster variant multicasts
    open(out, "w").write(b)
    lines = b.split("\n")
    at = {}
    for i, ln in enumerate(lines):
        m = re.search(r"/\*([0-9a-f]{4,})\*/", ln)
        if m:
            at[int(m.group(1), 16)] = i
    for o in offsets:
        i = at.get(o)
        print(f"--- +{o:#x}")
        if i is None:
            print("  (offset not found)")
            continue
        for ln in lines[max(0, i - 24): i + 6]:
            print(("=> " if ln is lines[i] else "   ") + ln.strip()[:150])
    break
else:
    print("cluster kernel not found")
