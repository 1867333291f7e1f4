#!/usr/bin/env python3
"""Maps page-fault addresses to the functions laid out on those pages (scripts/hot-functions.sh).

usage: hot_functions.py LINK_MAP FAULTS

LINK_MAP is lld's -Map output; FAULTS is `perf script -F time,event,addr` (and `trace`) of major
faults and `madvise` calls. Faults before the last `MADV_PAGEOUT` (behavior
0x15: the daemon's page-out after start-up, which dropped every page it had mapped) are
start-up's and are ignored; so the recording must end before the next page-out (ten minutes).
Prints one symbol per line, in the order their pages first faulted: the names the linker's
--symbol-ordering-file takes (a function section `.text.NAME` defines the symbol NAME).
"""
import bisect
import re
import sys

PAGE = 4096
PREFIXES = ("unlikely.", "hot.", "startup.", "exit.")


def text_sections(map_path):
    """(start, end, symbol) of every function section in the map, sorted by start."""
    out = []
    pat = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+\S.*:\((\.text\.[^)]+)\)\s*$")
    with open(map_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = pat.match(line)
            if not m:
                continue
            start, size, section = int(m.group(1), 16), int(m.group(2), 16), m.group(3)
            if size == 0:
                continue
            name = section[len(".text."):]
            for p in PREFIXES:
                if name.startswith(p):
                    name = name[len(p):]
            out.append((start, start + size, name))
    out.sort()
    return out


def main():
    map_path, faults_path = sys.argv[1], sys.argv[2]
    faults, released = [], None
    with open(faults_path) as f:
        for line in f:
            parts = line.replace(":", " ").split()
            if len(parts) < 2:
                continue
            try:
                t = float(parts[0])
            except ValueError:
                continue
            if "madvise" in line:
                if "behavior: 0x00000015" in line:
                    released = t
            elif "major-faults" in line:
                try:
                    faults.append((t, int(parts[-1], 16)))
                except ValueError:
                    continue
    if released is None:
        sys.exit("no MADV_PAGEOUT in the recording: did the daemon run past its first page-out?")
    sections = text_sections(map_path)
    starts = [s for s, _, _ in sections]
    lo, hi = (sections[0][0], sections[-1][1]) if sections else (0, 0)
    seen, order = set(), []
    for t, addr in faults:
        if t < released or not lo <= addr < hi:
            continue
        page = addr - addr % PAGE
        i = max(bisect.bisect_right(starts, page) - 1, 0)
        while i < len(sections) and sections[i][0] < page + PAGE:
            s, e, name = sections[i]
            if e > page and name not in seen:
                seen.add(name)
                order.append(name)
            i += 1
    print("\n".join(order))


if __name__ == "__main__":
    main()
