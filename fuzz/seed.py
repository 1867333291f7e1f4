#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the repository's tests and examples and
from ../shared/data (real captures; see fuzz/README.md for the sources). Small slices only:
at most MAX_FILES files of at most MAX_BYTES bytes per target. Run from the repository root:
`python3 fuzz/seed.py`. Existing seeds are kept (file names are content hashes)."""

import glob
import hashlib
import os
import re
import sys
import tomllib

SHARED = os.environ.get("GPUWATCH_SHARED_DATA", "../shared/data")
MAX_FILES = 100
MAX_BYTES = 8192

seeds = {}


def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    data = data[:MAX_BYTES]
    if not data.strip():
        return
    seeds.setdefault(target, [])
    if data not in seeds[target] and len(seeds[target]) < MAX_FILES:
        seeds[target].append(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def lines_of(path):
    return read(path).decode("utf-8", "replace").splitlines(keepends=True)


def chunks(lines, size, limit):
    for i in range(0, min(len(lines), size * limit), size):
        yield "".join(lines[i : i + size])


def rule_toml(path):
    try:
        doc = tomllib.loads(read(path).decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return
    for rule in doc.get("rule", []):
        if not isinstance(rule, dict):
            continue
        for key in ("condition", "critical", "resolve"):
            if isinstance(rule.get(key), str):
                add("rule_expr", rule[key])
        values = rule.get("values")
        if isinstance(values, dict):
            for v in values.values():
                if isinstance(v, str):
                    add("rule_expr", v)


# --- rule language and rule files ---
rule_files = sorted(glob.glob("rules/*.toml") + glob.glob("tests/rules_check/*.toml"))
for p in rule_files:
    rule_toml(p)
    add("rules_file", read(p))
for p in sorted(glob.glob("tests/rules/*.toml")):
    rule_toml(p)
for p in sorted(glob.glob("src/rules/parse/tests.rs")):
    for m in re.finditer(r'parse_(?:expr|condition)\(\s*"((?:[^"\\]|\\.)*)"', read(p).decode()):
        add("rule_expr", m.group(1).encode().decode("unicode_escape"))

# --- config: the example, whole and one section at a time ---
example = read("examples/gpuwatch.toml").decode()
add("config", example)
sections = re.split(r"(?m)^(?=\[)", example)
for s in sections:
    add("config", s)
for p in sorted(glob.glob("docs/*.md")):
    for m in re.finditer(r"```toml\n(.*?)```", read(p).decode(), re.S):
        add("config", m.group(1))

# --- nvidia-smi CSV: the import fixtures and CSV sections of real captures ---
for p in sorted(glob.glob("tests/import/*.csv")):
    add("nvidia_smi_csv", "".join(lines_of(p)[:40]))
for p in sorted(glob.glob(f"{SHARED}/nvidia-smi-captures-multiformat/*.txt")):
    lines = lines_of(p)
    for i, line in enumerate(lines):
        if line.startswith("timestamp,") or line.startswith("pid,"):
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("#"):
                j += 1
            add("nvidia_smi_csv", "".join(lines[i : min(j, i + 6)]))

# --- OpenMetrics / Prometheus text ---
for p in sorted(glob.glob("tests/openmetrics/*")):
    add("openmetrics", read(p))
for p in sorted(glob.glob(f"{SHARED}/nvidia-smi-captures-multiformat/*.metrics")):
    for c in chunks(lines_of(p), 40, 6):
        add("openmetrics", c)
        add("openmetrics", c + "# EOF\n")

# --- Prometheus JSON answers: the test fixtures ---
for p in ["tests/gpuwatch/training_fetch_errors.rs", "src/training/response.rs"] + sorted(
    glob.glob("tests/gpuwatch/training_support/*.rs")
):
    if os.path.exists(p):
        for m in re.finditer(r'r#"(\{.*?)"#', read(p).decode(), re.S):
            if '"status"' in m.group(1):
                add("prom_json", m.group(1))

# --- /proc/PID/cgroup ---
ID = "a" * 64
UID = "3f8a9c1e_7b2d_4e6f_9a1b_2c3d4e5f6a7b"
for text in [
    "0::/\n",
    f"0::/system.slice/docker-{ID}.scope\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID}.slice/cri-containerd-{ID}.scope\n",
    f"0::/kubepods.slice/kubepods-pod{UID}.slice/cri-containerd-{ID}.scope\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
    f"12:memory:/docker/{ID}\n11:cpuset:/docker/{ID}\n0::/\n",
    f"0::/machine.slice/libpod-{ID}.scope/container\n",
    "0::/../../etc\n",
]:
    add("cgroup", text)

# --- kernel-log lines: dmesg fixtures, real logs, and the same lines as /dev/kmsg records ---
kernel = sorted(glob.glob("tests/dmesg/*")) + sorted(
    glob.glob(f"{SHARED}/gpud-xid-dmesg-and-smi-q/*.log*")
)
for p in kernel:
    lines = lines_of(p)
    nv = [l for l in lines if "NVRM" in l]
    add("kernel_log", "".join(lines[:30]))
    for c in chunks(nv, 10, 4):
        add("kernel_log", c)
        kmsg = []
        for k, l in enumerate(c.splitlines(keepends=True)):
            text = l.split("] ", 1)[-1]
            kmsg.append(f"4,{1000 + k},{12345678901 + k * 1000},-;{text}")
        add("kernel_log", "".join(kmsg))

# --- the SQL guard of `gpuwatch query` ---
sql = []
for p in ["tests/gpuwatch/postmortem_query.rs", "src/store/query.rs"]:
    for m in re.finditer(r'"((?:SELECT|PRAGMA|WITH|INSERT|UPDATE|DELETE|ATTACH|VACUUM|CREATE|DROP|--|/\*)(?:[^"\\]|\\.)*)"', read(p).decode()):
        sql.append(m.group(1).replace("\\n", "\n").replace('\\"', '"').replace("\\\n", " "))
for p in sorted(glob.glob("docs/*.md")) + ["README.md"]:
    for m in re.finditer(r'gpuwatch query "([^"]+)"', read(p).decode()):
        sql.append(m.group(1))
sql += [
    "SELECT * FROM gpu_inventory",
    "PRAGMA query_only = 0",
    "PRAGMA table_info(samples)",
    "ATTACH 'x.db' AS x",
    "VACUUM INTO '/tmp/x.db'",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "SELECT name FROM sqlite_master WHERE type = 'view'",
    "/* comment */ SELECT 1; -- trailing",
]
for s in sql:
    add("sql_guard", s)

for target, items in sorted(seeds.items()):
    d = os.path.join("fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    for data in items:
        name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print(f"{target}: {len(items)} seeds", file=sys.stderr)
