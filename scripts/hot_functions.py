#!/usr/bin/env python3
"""The functions the running daemon executes, for the linker's --symbol-ordering-file
(scripts/hot-functions.sh).

usage: hot_functions.py probes LINK_MAP EXE GROUP > uprobe definitions
       hot_functions.py pageout PID EXE
       hot_functions.py order LINK_MAP BEFORE,AFTER[,FAULTS] ... [--then LIST] > order

`probes` prints one uprobe per function section of the link map (lld's -Map output), at the
function's offset in EXE, named GROUP/f<N> with N the section's place in the map's order: the
lines tracefs's `uprobe_events` takes. A uprobe counts a function's calls, which misses the
loops that were called at start-up and run ever since (each thread's main loop): `pageout`
pages the code of EXE out of process PID (`process_madvise(MADV_PAGEOUT)`) of a run without
probes, so that the first page of code it runs next faults, and the faults' addresses
(`perf record -e page-faults -d`, FAULTS) name those loops. `order` reads each phase's snapshots
of `uprobe_profile` (each line: file, event, hits) taken before and after it, and its faults,
and prints the functions that ran within the phases: the first phase's (those its faults
name, then the rest most often called first), then those that only a later phase ran,
likewise; `--then LIST` appends the functions of an earlier list not printed yet (they keep
their order behind the hot ones). Each name is the symbol the linker's
--symbol-ordering-file takes (a function section `.text.NAME` defines the symbol NAME).
"""
import bisect
import ctypes
import os
import re
import struct
import sys

PREFIXES = ("unlikely.", "hot.", "startup.", "exit.")


def text_sections(map_path):
    """(start, end, symbol) of every function section in the map, sorted by start, one per
    start address."""
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
    seen, unique = set(), []
    for s in out:
        if s[0] not in seen:
            seen.add(s[0])
            unique.append(s)
    return unique


def load_segments(exe):
    """(vaddr, file offset, size) of the ELF64 file's PT_LOAD segments."""
    with open(exe, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            sys.exit(f"{exe}: not a 64-bit ELF file")
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        segs = []
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack("<IIQQQQ", f.read(40))
            if p_type == 1:
                segs.append((p_vaddr, p_offset, p_filesz))
    return segs


def probes(map_path, exe, group):
    segs = load_segments(exe)
    for n, (start, _end, _name) in enumerate(text_sections(map_path)):
        for vaddr, offset, size in segs:
            if vaddr <= start < vaddr + size:
                print(f"p:{group}/f{n} {exe}:0x{start - vaddr + offset:x}")
                break


def hits(path):
    """event number -> hits, from a uprobe_profile snapshot."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1][:1] == "f" and parts[1][1:].isdigit():
                out[int(parts[1][1:])] = int(parts[2])
    return out


def faulted(path, sections):
    """Indexes of the sections holding each faulting address of a recording of page faults
    (`perf script -F addr`: one hex address per line), in the order of the faults. A fault
    on a page of code is at the instruction that was fetched: the function is exact."""
    starts = [s for s, _, _ in sections]
    out, seen = [], set()
    with open(path) as f:
        for line in f:
            try:
                addr = int(line.split()[-1], 16)
            except (ValueError, IndexError):
                continue
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0 and addr < sections[i][1] and i not in seen:
                seen.add(i)
                out.append(i)
    return out


def order(map_path, phases, then):
    sections = text_sections(map_path)
    seen, names = set(), []

    def add(name):
        if name and name not in seen:
            seen.add(name)
            names.append(name)

    for phase in phases:
        files = phase.split(",")
        b, a = hits(files[0]), hits(files[1])
        for n in faulted(files[2], sections) if len(files) > 2 else []:
            add(sections[n][2])
        ran = {n: a[n] - b.get(n, 0) for n in a if a[n] > b.get(n, 0)}
        for n, _ in sorted(ran.items(), key=lambda kv: (-kv[1], kv[0])):
            add(sections[n][2])
    if then:
        with open(then) as f:
            for line in f:
                add(line.strip())
    print("\n".join(names))


def pageout(pid, exe):
    """MADV_PAGEOUT on PID's executable mappings of EXE, from outside (process_madvise)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    pidfd = os.pidfd_open(pid)
    exe = os.path.realpath(exe)
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == exe and "x" in parts[1]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                iov = Iovec(lo, hi - lo)
                # process_madvise(pidfd, iovec, 1, MADV_PAGEOUT, 0): x86_64 and aarch64 440.
                if libc.syscall(440, pidfd, ctypes.byref(iov), 1, 21, 0) < 0:
                    sys.exit(f"process_madvise: {os.strerror(ctypes.get_errno())}")
    os.close(pidfd)


def main():
    args = sys.argv[1:]
    if len(args) == 4 and args[0] == "probes":
        probes(args[1], args[2], args[3])
        return
    if len(args) == 3 and args[0] == "pageout":
        pageout(int(args[1]), args[2])
        return
    if len(args) >= 3 and args[0] == "order":
        then = None
        if "--then" in args:
            i = args.index("--then")
            then = args[i + 1]
            args = args[:i] + args[i + 2:]
        if any(len(p.split(",")) not in (2, 3) for p in args[2:]):
            sys.exit("order: each phase is BEFORE,AFTER[,FAULTS]")
        order(args[1], args[2:], then)
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
