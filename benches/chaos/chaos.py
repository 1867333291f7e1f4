#!/usr/bin/python3
"""gpuwatch fault campaigns (issue 14): each campaign is one command that prints one summary
line and exits 1 when a check fails (2 when the rig itself could not run).

    benches/chaos/chaos.py kill9   [--trials 50] [--seed S] [--max-run 5]
    benches/chaos/chaos.py outage  [--down 30] [--backlog-after 5s]
    benches/chaos/chaos.py blocked [--episodes 10] [--block 6] [--period 25]
    benches/chaos/chaos.py sighup  [--hups 300] [--max-gap-ms 30] [--seed S]

What each checks, and the figures of our runs: docs/RELIABILITY.md.

Common options: --gpuwatch PATH (default target/release/gpuwatch, else target/debug/...; or
$GPUWATCH_BIN), --lib PATH (libgpuwatch_fake_nvml.so, same search; or $GPUWATCH_FAKE_LIB),
--speed F (GPUWATCH_FAKE_SPEED), --keep (keep the work directory and print it), -v.

The rig (all on loopback, nothing leaves the machine):
- `gpuwatch run` on simulated GPUs: a private copy of the fake NVML library with
  scenarios/chaos-flap.toml (4 GPUs whose utilisation saws 0..100 %, so the rule
  `util_gpu > 50` fires and resolves about 0.7 times a second), GPUWATCH_FAKE_START_MS set once
  per campaign so a restarted daemon finds the GPUs where the scenario is;
- three receivers: a Slack-like HTTP endpoint (a fake: Slack cannot run here; it answers 200
  `ok` like Slack's incoming webhooks), a real SMTP server (aiosmtpd, Debian's
  python3-aiosmtpd) and a real Alertmanager (Debian's prometheus-alertmanager), reached
  through a recording proxy so that what gpuwatch posted is counted at Alertmanager's door,
  and Alertmanager's own webhook output is captured too.

Counting (the point): the database's `notifications` view (the outbox) lists, per receiver,
every transition message in enqueue order; the `alerts` view lists every reported alert.
At the end, after a drain, every (alert, firing|resolved) the outbox holds for a receiver
must have arrived there (lost = those that did not), duplicates are arrivals of an
(alert, state) already seen (Alertmanager's re-sends of a still-firing alert, which gpuwatch
makes by design every `resend_every` and at each start, are counted apart), and within each
notification group the messages must arrive in the outbox's order. Every reported alert in
the `alerts` view must have its firing (and resolved) row queued for every receiver.
"""

import argparse
import email
import email.policy
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AM_BINARY = "/usr/bin/prometheus-alertmanager"
VERBOSE = False


def log(*a):
    if VERBOSE:
        print("[%7.2f]" % (time.monotonic() - T0), *a, file=sys.stderr, flush=True)


T0 = time.monotonic()


class RigError(Exception):
    """The rig could not run (not a gpuwatch failure): exit status 2."""


_HANDED_OUT = set()


def free_port():
    """A free loopback port, never one handed out before (ports are bound later, so the
    kernel could offer the same one twice)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def find_artifact(env, name):
    if os.environ.get(env):
        return os.environ[env]
    roots = [os.environ.get("CARGO_TARGET_DIR"), os.path.join(REPO, "target")]
    for root in filter(None, roots):
        for profile in ("release", "debug"):
            for sub in ("", "deps"):
                p = os.path.join(root, profile, sub, name)
                if os.path.exists(p):
                    return p
    return None


# --------------------------------------------------------------------------- message parsing

ITEM_LINE = re.compile(r"^(FIRING|RESOLVED) (\S+) \[")
STORY = re.compile(r"gpuwatch incident (\d+)")


def items_of_text(text):
    """(alert id, 'firing'|'resolved') of each alert in a plain text (Slack's fallback text or
    the email's plain part); self alerts (no id) as ('self:RULE', state)."""
    out = []
    state = rule = None
    pending_self = None
    for line in text.splitlines():
        m = ITEM_LINE.match(line.strip())
        if m:
            if pending_self:
                out.append(pending_self)
            state, rule = m.group(1).lower(), m.group(2)
            pending_self = ("self:" + rule, state)
        s = STORY.search(line)
        if s and state:
            out.append((int(s.group(1)), state))
            pending_self = None
    if pending_self:
        out.append(pending_self)
    return out


class Log:
    """Arrivals at one receiver: (wall time, [items]) per accepted message."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.messages = []

    def add(self, items):
        with self.lock:
            self.messages.append((time.time(), items))

    def snapshot(self):
        with self.lock:
            return list(self.messages)


# --------------------------------------------------------------------------- receivers


class HttpSink:
    """A small threaded HTTP server calling `handle(handler, body) -> (status, body)`; can be
    stopped (connections refused) and started again on the same port."""

    def __init__(self, handle, port=None):
        self.handle = handle
        self.port = port or free_port()
        self.server = None
        self.up = False

    def start(self):
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                if not outer.up:
                    # Down: a kept-alive connection dies without an answer, as when the
                    # server's process is gone.
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                status, reply = outer.handle(self, body)
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(reply)

            do_PUT = do_POST

            def log_message(self, *a):
                pass

        for _ in range(100):
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", self.port), H)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RigError("cannot bind 127.0.0.1:%d" % self.port)
        self.server.daemon_threads = True
        self.up = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.up = False
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class SlackFake:
    """Slack's incoming webhook as gpuwatch sees it: POST JSON with `text`, answer 200 `ok`."""

    def __init__(self):
        self.log = Log("slack")
        self.sink = HttpSink(self._handle)
        self.url = "http://127.0.0.1:%d/services/T000/B000/chaos" % self.sink.port

    def _handle(self, _h, body):
        try:
            text = json.loads(body).get("text", "")
        except ValueError:
            return 400, b"invalid_payload"
        self.log.add(items_of_text(text))
        return 200, b"ok"

    def start(self):
        self.sink.start()

    def stop(self):
        self.sink.stop()


class Smtp:
    """A real SMTP server (aiosmtpd) keeping the plain part of every accepted message."""

    def __init__(self):
        try:
            from aiosmtpd.controller import Controller
        except ImportError as e:
            raise RigError("aiosmtpd missing (apt install python3-aiosmtpd): %s" % e)
        self.Controller = Controller
        self.log = Log("email")
        self.port = free_port()
        self.ctl = None

    def start(self):
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                msg = email.message_from_bytes(
                    envelope.original_content or envelope.content, policy=email.policy.default
                )
                part = msg.get_body(preferencelist=("plain",))
                outer.log.add(items_of_text(part.get_content() if part else ""))
                return "250 Message accepted for delivery"

        for _ in range(100):
            try:
                self.ctl = self.Controller(Handler(), hostname="127.0.0.1", port=self.port)
                self.ctl.start()
                return
            except (OSError, RuntimeError):
                self.ctl = None
                time.sleep(0.1)
        raise RigError("cannot start SMTP on 127.0.0.1:%d" % self.port)

    def stop(self):
        if self.ctl:
            self.ctl.stop()
            self.ctl = None


class Alertmanager:
    """A real Alertmanager behind a recording proxy. `log` = what gpuwatch posted and
    Alertmanager accepted (counted like the other receivers); `webhook` = what Alertmanager
    itself notified: (alertname, gpu) -> the last status. Alertmanager knows label sets, not
    gpuwatch's episodes (an alert that resolves and fires again within its group_interval
    is one alert there, and an episode shorter than its group_wait + group_interval may never
    be notified at all), so the check is that its last word on every label set it notified
    is `resolved` once gpuwatch resolved everything, and that every label set that fired
    longer than that was notified."""

    def __init__(self, workdir):
        if not os.path.exists(AM_BINARY):
            raise RigError("%s missing (apt install prometheus-alertmanager)" % AM_BINARY)
        self.dir = os.path.join(workdir, "alertmanager")
        os.makedirs(self.dir)
        self.log = Log("alertmanager")
        self.webhook = {}
        self.webhook_lock = threading.Lock()
        self.hook = HttpSink(self._hook)
        self.proxy = HttpSink(self._proxy)
        self.am_port = free_port()
        self.url = "http://127.0.0.1:%d" % self.proxy.port
        self.proc = None

    def _hook(self, _h, body):
        try:
            doc = json.loads(body)
        except ValueError:
            return 400, b"bad json"
        with self.webhook_lock:
            for a in doc.get("alerts", []):
                labels = a.get("labels", {})
                if a.get("annotations", {}).get("gpuwatch_alert_id"):
                    key = (labels.get("alertname"), labels.get("gpu"))
                    self.webhook[key] = a.get("status")
        return 200, b"ok"

    def _proxy(self, h, body):
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.am_port, h.path),
            data=body,
            method=h.command,
            headers={"Content-Type": h.headers.get("Content-Type", "application/json")},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, reply = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, reply = e.code, e.read()
        except OSError as e:
            return 502, str(e).encode()
        if status == 200 and h.path.startswith("/api/v2/alerts"):
            now = time.time()
            items = []
            for a in json.loads(body):
                aid = a.get("annotations", {}).get("gpuwatch_alert_id")
                ends = parse_rfc3339(a.get("endsAt"))
                state = "resolved" if ends is not None and ends < now + 60 else "firing"
                key = int(aid) if aid else "self:" + a.get("labels", {}).get("alertname", "?")
                items.append((key, state))
            self.log.add(items)
        return status, reply

    def start(self):
        self.hook.start()
        self.proxy.start()
        cfg = os.path.join(self.dir, "alertmanager.yml")
        with open(cfg, "w") as f:
            f.write(
                "route:\n  receiver: hook\n  group_by: ['alertname']\n  group_wait: 1s\n"
                "  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n- name: hook\n"
                "  webhook_configs:\n  - url: http://127.0.0.1:%d/hook\n    send_resolved: true\n"
                % self.hook.port
            )
        self.proc = subprocess.Popen(
            [
                AM_BINARY,
                "--config.file=" + cfg,
                "--storage.path=" + os.path.join(self.dir, "data"),
                "--web.listen-address=127.0.0.1:%d" % self.am_port,
                "--cluster.listen-address=",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "alertmanager.log"), "w"),
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(
                    "http://127.0.0.1:%d/-/ready" % self.am_port, timeout=1
                ) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RigError("alertmanager did not become ready (see %s)" % self.dir)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proxy.stop()
        self.hook.stop()


def parse_rfc3339(s):
    if not s:
        return None
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        return None
    import calendar

    t = calendar.timegm(tuple(int(m.group(i)) for i in range(1, 7)))
    if m.group(7):
        t += float(m.group(7))
    tz = m.group(8)
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        t -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t


# --------------------------------------------------------------------------- the rig

RULES = """
[[rule]]
name = "busy"
severity = "warning"
condition = "util_gpu > 50"
summary = "GPU {gpu} busy"
"""


class Rig:
    def __init__(self, args, name):
        self.args = args
        self.gpuwatch = args.gpuwatch or find_artifact("GPUWATCH_BIN", "gpuwatch")
        lib = args.lib or find_artifact("GPUWATCH_FAKE_LIB", "libgpuwatch_fake_nvml.so")
        if not self.gpuwatch or not os.path.exists(self.gpuwatch):
            raise RigError("no gpuwatch binary (cargo build, or --gpuwatch PATH)")
        if not lib or not os.path.exists(lib):
            raise RigError("no libgpuwatch_fake_nvml.so (cargo build -p gpuwatch-fake-nvml, or --lib)")
        self.dir = tempfile.mkdtemp(prefix="gpuwatch-chaos-%s-" % name)
        self.nvml_dir = os.path.join(self.dir, "nvml")
        os.makedirs(self.nvml_dir)
        # A private copy: the loader keeps one instance per path, and a shared build dir's
        # library may be rebuilt under our feet.
        shutil.copy(lib, os.path.join(self.nvml_dir, "libnvidia-ml.so.1"))
        with open(os.path.join(REPO, "scenarios", "chaos-flap.toml")) as f:
            self.scenario_template = f.read()
        self.write_scenario()
        self.db = os.path.join(self.dir, "gpuwatch.db")
        self.start_ms = int(time.time() * 1000)
        self.speed = args.speed
        self.daemon = None
        self.daemon_log = open(os.path.join(self.dir, "daemon.log"), "ab")
        self.http_port = free_port()
        self.slack = SlackFake()
        self.smtp = Smtp()
        self.am = Alertmanager(self.dir)
        self.receivers = [self.slack, self.smtp, self.am]

    def write_scenario(self, flap_until_s=None, extra=""):
        """The campaign's scenario: the template, the flapping ended at `flap_until_s`
        (simulated seconds; GPUs idle after it, so every alert resolves), plus `extra`."""
        text = self.scenario_template
        if flap_until_s is not None:
            text = re.sub(
                r"^(util_gpu = \{ sawtooth .*\})$",
                lambda m: 'to = "%ds"\n%s\n[[gpu.timeline]]\nfrom = "%ds"\nutil_gpu = 0'
                % (flap_until_s, m.group(1), flap_until_s),
                text,
                flags=re.M,
            )
        with open(os.path.join(self.nvml_dir, "gpuwatch-scenario.toml"), "w") as f:
            f.write(text + extra)

    def sim_now_s(self):
        return (time.time() * 1000 - self.start_ms) * self.speed / 1000.0

    def write_config(self, notify_extra=""):
        url_file = os.path.join(self.dir, "slack-url")
        with open(url_file, "w") as f:
            f.write(self.slack.url)
        with open(os.path.join(self.dir, "rules.toml"), "w") as f:
            f.write(RULES)
        self.config = os.path.join(self.dir, "gpuwatch.toml")
        with open(self.config, "w") as f:
            f.write(
                f"""host = "chaos-node"
database = "{self.db}"
nvml_library = "{self.nvml_dir}/libnvidia-ml.so.1"
interval = "200ms"
commit_interval = "1s"

[rules]
default_rules = false
files = ["rules.toml"]

[http]
enabled = true
listen = "127.0.0.1:{self.http_port}"

[notify]
group_by = ["..."]
group_wait = "0s"
group_interval = "1s"
repeat_interval = "24h"
retry_max_backoff = "500ms"
{notify_extra}

[[notify.slack]]
name = "slack"
webhook_url_file = "{url_file}"
min_interval = "0s"
timeout = "2s"

[[notify.email]]
name = "email"
smtp_host = "127.0.0.1"
smtp_port = {self.smtp.port}
tls = "none"
from = "gpuwatch <gpuwatch@chaos.invalid>"
to = ["oncall@chaos.invalid"]
timeout = "3s"

[[notify.alertmanager]]
name = "alertmanager"
urls = ["{self.am.url}"]
resend_every = "1h"
timeout = "3s"
"""
            )
        check = subprocess.run(
            [self.gpuwatch, "run", "--check", "--config", self.config],
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            raise RigError("config refused: %s%s" % (check.stdout, check.stderr))

    def start_receivers(self):
        for r in self.receivers:
            r.start()

    def env(self):
        e = dict(os.environ)
        e.pop("RUST_LOG", None)
        e["GPUWATCH_FAKE_START_MS"] = str(self.start_ms)
        e["GPUWATCH_FAKE_SPEED"] = str(self.speed)
        e["GPUWATCH_FAKE_SCENARIO"] = os.path.join(self.nvml_dir, "gpuwatch-scenario.toml")
        return e

    def start_daemon(self):
        self.daemon_log.write(b"\n==== start at %.3f\n" % time.time())
        self.daemon_log.flush()
        self.daemon = subprocess.Popen(
            [self.gpuwatch, "run", "--config", self.config],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=self.daemon_log,
            stderr=self.daemon_log,
            cwd=self.dir,
        )
        return self.daemon

    def kill9(self):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGKILL)
        if self.daemon:
            self.daemon.wait()

    def sigterm(self, timeout=30):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                return self.daemon.wait(timeout)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
                return None
        return self.daemon.returncode if self.daemon else None

    def query(self, sql, args=()):
        con = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True, timeout=10)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def pending(self):
        return self.query("SELECT count(*) FROM notifications WHERE status = 'pending'")[0][0]

    def drain(self, timeout=90):
        """With the flapping over: waits for every alert to resolve, the outbox to empty and
        the receivers to go quiet (Alertmanager's webhook included)."""
        deadline = time.time() + timeout
        quiet_since = None
        last = None
        while time.time() < deadline:
            if self.daemon.poll() is not None:
                raise RigError("daemon exited during the drain (see %s)" % self.dir)
            try:
                live = self.query("SELECT count(*) FROM alerts WHERE resolved_ms IS NULL")[0][0]
                pend = self.pending()
            except sqlite3.Error:
                time.sleep(0.3)
                continue
            counts = tuple(len(r.log.snapshot()) for r in self.receivers)
            if live == 0 and pend == 0 and counts == last:
                quiet_since = quiet_since or time.time()
                if time.time() - quiet_since > 3:
                    return True
            else:
                quiet_since = None
            last = counts
            time.sleep(0.3)
        return False

    def close(self):
        self.kill9()
        with open(os.path.join(self.dir, "arrivals.json"), "w") as f:
            json.dump({r.log.name: r.log.snapshot() for r in self.receivers}, f)
        for r in self.receivers:
            try:
                r.stop()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        self.daemon_log.close()
        if self.args.keep:
            print("work directory kept: %s" % self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------------------- counting

    def expected(self):
        """receiver -> [(alert id, kind)] in outbox order, and the problems between the alerts
        table and the outbox (a reported transition without its message)."""
        # The `outbox` table, not the `notifications` view: the order promise is per group.
        rows = self.query(
            "SELECT id, alert_id, receiver, kind, status, group_key FROM outbox "
            "WHERE alert_id IS NOT NULL AND kind IN ('firing', 'resolved') ORDER BY id"
        )
        per = {}
        statuses = {}
        self.group_of = {}
        for _nid, aid, recv, kind, status, group in rows:
            per.setdefault(recv, []).append((aid, kind))
            self.group_of[(recv, aid, kind)] = group
            statuses[status] = statuses.get(status, 0) + 1
        problems = []
        alerts = self.query(
            "SELECT alert_id, fired_ms, resolved_ms FROM alerts WHERE reported = 1 "
            "AND fired_ms IS NOT NULL"
        )
        for recv in ("slack", "email", "alertmanager"):
            have = set(per.get(recv, []))
            for aid, _f, resolved in alerts:
                if (aid, "firing") not in have:
                    problems.append("%s: alert %d fired but no firing message queued" % (recv, aid))
                if resolved is not None and (aid, "resolved") not in have:
                    problems.append("%s: alert %d resolved but no resolved message queued" % (recv, aid))
        return per, statuses, problems, len(alerts)

    def count(self, windows=None):
        """Compares arrivals with the outbox. `windows`: [(start, end)] wall times of trials,
        to attribute duplicate messages to trials."""
        per, statuses, problems, n_alerts = self.expected()
        res = {
            "alerts": n_alerts,
            "transitions": sum(len(v) for v in per.values()),
            "lost": 0,
            "dups": 0,
            "dup_msgs": 0,
            "am_resends": 0,
            "max_dup_per_trial": 0,
            "order_ok": True,
            "problems": list(problems),
            "statuses": statuses,
        }
        if statuses.get("pending") or statuses.get("dead"):
            res["problems"].append("outbox not drained: %s" % statuses)
        per_trial = {}
        for r in self.receivers:
            want = per.get(r.log.name, [])
            wanted = set(want)
            seen = {}
            first = []
            fresh = []  # per message, the items arriving for the first time
            for t, items in r.log.snapshot():
                dup_in_msg = False
                fresh.append([])
                for it in items:
                    if isinstance(it[0], str):
                        continue
                    if it not in wanted:
                        res["problems"].append("%s: got %s, which the outbox never queued" % (r.log.name, it))
                        continue
                    seen[it] = seen.get(it, 0) + 1
                    if seen[it] == 1:
                        first.append(it)
                        fresh[-1].append(it)
                    elif r is self.am and it[1] == "firing" and (it[0], "resolved") not in seen:
                        # Alertmanager gets every firing alert again each `resend_every` and
                        # at each start (state re-asserted; identical alerts merge there):
                        # by design, counted apart.
                        res["am_resends"] += 1
                    else:
                        res["dups"] += 1
                        dup_in_msg = True
                        if it[1] == "firing" and (it[0], "resolved") in seen:
                            res["order_ok"] = False
                            res["problems"].append(
                                "%s: alert %d firing again after its resolved" % (r.log.name, it[0])
                            )
                if dup_in_msg:
                    res["dup_msgs"] += 1
                    trial = None
                    for i, (a, b) in enumerate(windows or []):
                        if a <= t < b:
                            trial = i
                    key = (trial, r.log.name)
                    per_trial[key] = per_trial.get(key, 0) + 1
            lost = [it for it in want if it not in seen]
            res["lost"] += len(lost)
            for it in lost[:5]:
                res["problems"].append("%s: lost %s" % (r.log.name, it))
            # Per group, messages leave in enqueue order: a message's place is its earliest
            # new row (the group's later rows may ride in it: one message carries a group's
            # changes, firing first), so those places must rise message after message within
            # a group. Across groups each group's `group_interval` decides (as in
            # Alertmanager), so no order is promised there.
            index = {it: i for i, it in enumerate(want)}
            last_place = {}
            for new_items in fresh:
                new = [index[it] for it in new_items]
                if not new:
                    continue
                place = min(new)
                group = self.group_of.get((r.log.name,) + want[place])
                if place < last_place.get(group, -1):
                    res["order_ok"] = False
                    res["problems"].append(
                        "%s: a message with outbox row %s arrived after one with row %s "
                        "of the same group" % (r.log.name, want[place], want[last_place[group]])
                    )
                last_place[group] = place
            # Per alert: its firing before its resolved.
            pos = {it: i for i, it in enumerate(first)}
            for aid, kind in want:
                if kind == "resolved" and (aid, "firing") in pos and (aid, "resolved") in pos:
                    if pos[(aid, "resolved")] < pos[(aid, "firing")]:
                        res["order_ok"] = False
                        res["problems"].append("%s: alert %d resolved before firing" % (r.log.name, aid))
        res["max_dup_per_trial"] = max(per_trial.values(), default=0)
        res["per_trial"] = per_trial
        for (trial, recv), n in sorted(per_trial.items(), key=str):
            log("duplicates: trial %s, %s: %d message(s)" % (trial, recv, n))
        # Alertmanager's own word: every label set it notified ends `resolved`, and every
        # label set gpuwatch kept firing longer than Alertmanager's group_wait + group_interval
        # (1 s + 1 s here) was notified. An episode shorter than that may fire and resolve
        # between two of its flushes, and Alertmanager then never notifies it (nothing to say:
        # it was resolved before anyone was told) - that is its design, not a loss. It may
        # lag: its group timers run on a loaded machine too, so wait up to 30 s; a pass
        # returns as soon as the condition holds.
        all_sets = set(
            self.query(
                "SELECT DISTINCT rule, CAST(gpu_index AS TEXT) FROM alerts "
                "WHERE reported = 1 AND fired_ms IS NOT NULL"
            )
        )
        long_sets = set(
            self.query(
                "SELECT DISTINCT rule, CAST(gpu_index AS TEXT) FROM alerts "
                "WHERE reported = 1 AND fired_ms IS NOT NULL "
                "AND (resolved_ms IS NULL OR resolved_ms - fired_ms > 2500)"
            )
        )
        deadline = time.time() + 30
        while True:
            with self.am.webhook_lock:
                hook = dict(self.am.webhook)
            missing = sorted(
                k
                for k in all_sets
                if (k in hook and hook[k] != "resolved") or (k in long_sets and k not in hook)
            )
            if not missing or time.time() > deadline:
                break
            time.sleep(0.2)
        res["am_webhook_missing"] = len(missing)
        if missing:
            res["problems"].append(
                "alertmanager's webhook: %d label set(s) not notified or not last notified resolved, e.g. %s"
                % (len(missing), missing[:5])
            )
        return res


def panics(rig):
    with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return [l for l in text.splitlines() if "panicked" in l]


def verdict(ok, res):
    """The campaign's exit status; on a failure, its problems on stderr."""
    if not ok:
        for p in res["problems"][:20]:
            print("  " + p, file=sys.stderr)
    return 0 if ok else 1


# --------------------------------------------------------------------------- campaigns


def campaign_kill9(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "kill9")
    try:
        rig.start_receivers()
        rig.write_config()
        windows = []
        kills_at = []
        for i in range(args.trials):
            t0 = time.time()
            rig.start_daemon()
            wait = rng.uniform(0, args.max_run)
            time.sleep(wait)
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited by itself in trial %d (see %s)" % (i, rig.dir))
            rig.kill9()
            kills_at.append(wait)
            windows.append((t0, time.time() + 0.5))
            log("trial %d: killed after %.2fs" % (i, wait))
        # The last run: flapping ends a little ahead, then everything resolves and drains.
        rig.write_scenario(flap_until_s=int(rig.sim_now_s()) + 3)
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count(windows)
        rig.sigterm()
        bad = panics(rig)
        res["problems"] += ["daemon panicked: " + b for b in bad[:3]]
        ok = (
            drained
            and res["lost"] == 0
            and res["max_dup_per_trial"] <= 1
            and res["order_ok"]
            and not res["problems"]
            and res["transitions"] > 0
        )
        print(
            "chaos kill9: %d trials (seed %d), %d alerts, %d transitions x receivers, %d lost, "
            "%d duplicates (max %d/trial/receiver), order %s%s, "
            "%d alertmanager re-sends of firing alerts: %s"
            % (
                args.trials,
                args.seed,
                res["alerts"],
                res["transitions"],
                res["lost"],
                res["dup_msgs"],
                res["max_dup_per_trial"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                res["am_resends"],
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()


def self_alerts(log_):
    out = []
    for _t, items in log_.snapshot():
        out += [(k, s) for k, s in items if isinstance(k, str)]
    return out


def campaign_outage(args):
    rig = Rig(args, "outage")
    try:
        rig.start_receivers()
        rig.write_config('backlog_alert_after = "%s"' % args.backlog_after)
        rig.start_daemon()
        time.sleep(args.before)
        rig.slack.stop()
        rig.smtp.stop()
        down_at = time.time()
        log("slack and smtp down")
        time.sleep(args.down)
        # Backlog measured while down: Slack's and email's oldest pending message.
        backlog = rig.query(
            "SELECT receiver, count(*) FROM notifications WHERE status = 'pending' GROUP BY receiver"
        )
        rig.slack.start()
        rig.smtp.start()
        up_at = time.time()
        log("slack and smtp up; backlog %s" % backlog)
        time.sleep(args.after)
        rig.write_scenario(flap_until_s=int(rig.sim_now_s()) + 3)
        rig.sigterm()
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count()
        rig.sigterm()
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]
        am_self = self_alerts(rig.am.log)
        fired = ("self:gpuwatch_notify_backlog", "firing") in am_self
        resolved = ("self:gpuwatch_notify_backlog", "resolved") in am_self
        if not fired:
            res["problems"].append("gpuwatch_notify_backlog never fired on alertmanager: %s" % am_self)
        if not resolved:
            res["problems"].append("gpuwatch_notify_backlog never resolved on alertmanager: %s" % am_self)
        backlog_peak = sum(n for r, n in backlog if r in ("slack", "email"))
        ok = (
            drained
            and res["lost"] == 0
            and res["dups"] == 0
            and res["order_ok"]
            and fired
            and resolved
            and backlog_peak > 0
            and not res["problems"]
        )
        print(
            "chaos outage: slack+smtp down %.0fs wall (%.0fs simulated), %d messages backlogged, "
            "%d alerts, %d transitions x receivers, %d lost, %d duplicates, order %s%s, "
            "backlog alert %s on alertmanager: %s"
            % (
                up_at - down_at,
                (up_at - down_at) * rig.speed,
                backlog_peak,
                res["alerts"],
                res["transitions"],
                res["lost"],
                res["dups"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                "fired+resolved" if fired and resolved else ("fired" if fired else "MISSING"),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()


def thread_names(pid):
    """name -> count of a process's threads (lanes as `gpuwatch-lane`)."""
    names = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                n = f.read().strip()
        except OSError:
            continue
        n = "gpuwatch-lane" if n.startswith("gpuwatch-lane") else n
        names[n] = names.get(n, 0) + 1
    return names


def proc_figures(pid, spread=2.0, lanes_settle=20.0):
    """(threads, lanes, RSS in KiB) of a process, from /proc. Waits up to `lanes_settle` s for
    the NVML lanes to be one again (a lane split off by a stall, or by a scheduling hiccup of
    a loaded machine, merges back after 60 ticks in time), then counts the other threads at
    their most over `spread` s (some come and go: HTTP connections)."""
    end = time.time() + lanes_settle
    while thread_names(pid).get("gpuwatch-lane", 0) > 1 and time.time() < end:
        time.sleep(0.2)
    others, lanes = 0, 0
    end = time.time() + spread
    while True:
        names = thread_names(pid)
        lanes = max(lanes, names.get("gpuwatch-lane", 0))
        others = max(others, sum(v for k, v in names.items() if k != "gpuwatch-lane"))
        if time.time() >= end:
            break
        time.sleep(0.1)
    log("threads now: %s" % sorted(names.items()))
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return others + lanes, lanes, rss


class Prober:
    """Polls /healthz and /metrics every 0.25 s in a thread: answers, failures, worst latency."""

    def __init__(self, port):
        self.port = port
        self.stop_flag = threading.Event()
        self.results = []  # (wall time, path, ok, seconds)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_flag.is_set():
            for path in ("/healthz", "/metrics"):
                t = time.time()
                try:
                    with urllib.request.urlopen(
                        "http://127.0.0.1:%d%s" % (self.port, path), timeout=2
                    ) as r:
                        r.read()
                        ok = r.status == 200
                except urllib.error.HTTPError as e:
                    # /healthz answers 503 when no tick completed lately: an answer, but a
                    # failed check here (the other GPUs keep ticking).
                    ok = False
                    e.read()
                except OSError:
                    ok = False
                self.results.append((t, path, ok, time.time() - t))
            self.stop_flag.wait(0.25)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_flag.set()
        self.thread.join()


def campaign_blocked(args):
    rig = Rig(args, "blocked")
    try:
        # Episode k: GPU 3's NVML calls made in [lead + k*period, +1s) of scenario time
        # block `block` wall seconds, then answer.
        lead, period = 6.0, args.period
        windows_sim = [(lead + k * period, lead + k * period + 1.0) for k in range(args.episodes)]
        faults = "".join(
            '\n[[fault]]\ngpu = 3\nsymbol = "*"\nfrom = "%gs"\nuntil = "%gs"\nblock = "%gs"\n'
            % (a, b, args.block)
            for a, b in windows_sim
        )
        rig.write_scenario(extra=faults)
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        pid = rig.daemon.pid
        deadline = time.time() + 20
        while True:  # the prober starts once the daemon serves
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % rig.http_port, timeout=1):
                    break
            except OSError:
                if time.time() > deadline or rig.daemon.poll() is not None:
                    raise RigError("the daemon never answered /healthz (see %s)" % rig.dir)
                time.sleep(0.1)
        prober = Prober(rig.http_port)
        prober.start()
        wall = lambda t_sim: rig.start_ms / 1000.0 + t_sim / rig.speed  # noqa: E731
        figures = []
        for k, (a, _b) in enumerate(windows_sim):
            # Measure just before each episode (the previous one long over).
            time.sleep(max(0.0, wall(a) - 2.5 - time.time()))
            if time.time() > wall(a) - 1.0:
                raise RigError("episode %d began before its measurement: --period too short" % k)
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited (see %s)" % rig.dir)
            figures.append(proc_figures(pid, lanes_settle=0.0))
            log("episode %d: threads %d (lanes %d), RSS %d KiB" % (k, *figures[-1]))
        # After the last block: its split-off lane merges back after MERGE_AFTER (60) ticks
        # answered in time (12 s at 200 ms).
        time.sleep(max(0.0, wall(windows_sim[-1][0]) + args.block + 12 + 2 - time.time()))
        figures.append(proc_figures(pid))
        log("after the last: threads %d (lanes %d), RSS %d KiB" % figures[-1])
        end_wall = time.time()
        prober.stop()
        rig.write_scenario(flap_until_s=int(rig.sim_now_s()) + 3, extra=faults)
        rig.sigterm()
        rig.start_daemon()
        drained = rig.drain()
        res = rig.count()
        rig.sigterm()
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]

        start_ms = rig.start_ms
        end_ms = int(end_wall * 1000)
        # Other GPUs: every tick ok while GPU 3 is blocked, no hole between ticks. (Missed
        # ticks outside the blocks are reported: on a loaded machine a debug build can miss
        # one for every GPU.)
        others_bad = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            others_bad += rig.query(
                "SELECT count(*) FROM gpu_samples WHERE gpu_index < 3 AND status != 'ok' "
                "AND ts_ms BETWEEN ? AND ?",
                (lo, lo + int(args.block * 1000) + 1000),
            )[0][0]
        others_bad_all = rig.query(
            "SELECT count(*) FROM gpu_samples WHERE gpu_index < 3 AND status != 'ok' "
            "AND ts_ms BETWEEN ? AND ?",
            (start_ms, end_ms),
        )[0][0]
        worst_hole = 0
        for g in range(3):
            ts = [
                t
                for (t,) in rig.query(
                    "SELECT ts_ms FROM gpu_samples WHERE gpu_index = ? AND ts_ms BETWEEN ? AND ? "
                    "ORDER BY ts_ms",
                    (g, start_ms, end_ms),
                )
            ]
            worst_hole = max([b - a for a, b in zip(ts, ts[1:])] + [worst_hole])
        # GPU 3: a gap recorded in each episode (deadline_missed rows after its start).
        gaps = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            hi = lo + int(args.block * 1000) + 2000
            n = rig.query(
                "SELECT count(*) FROM gpu_samples WHERE gpu_index = 3 AND status = 'deadline_missed' "
                "AND ts_ms BETWEEN ? AND ?",
                (lo, hi),
            )[0][0]
            gaps += 1 if n > 0 else 0
        # Alerts evaluated during the blocks: transitions of GPUs 0-2 inside the blocked spans.
        during = 0
        for a, _b in windows_sim:
            lo = int(wall(a) * 1000)
            hi = lo + int(args.block * 1000)
            during += rig.query(
                "SELECT (SELECT count(*) FROM alerts WHERE gpu_index < 3 AND fired_ms BETWEEN ?1 AND ?2)"
                " + (SELECT count(*) FROM alerts WHERE gpu_index < 3 AND resolved_ms BETWEEN ?1 AND ?2)",
                (lo, hi),
            )[0][0]
        answers = [x for x in prober.results if x[0] < end_wall]
        failed = [x for x in answers if not x[2]]
        slowest = max((x[3] for x in answers), default=0.0)
        # The baseline: before the second episode (the first warms up: the RSS of the start
        # is given back after 30 ticks, SQLite's cache fills), or the first if only one.
        base_threads, _base_lanes, base_rss = figures[1] if len(figures) > 2 else figures[0]
        last_threads, last_lanes, last_rss = figures[-1]
        thread_growth = last_threads - base_threads
        rss_growth = last_rss - base_rss
        ok = (
            drained
            and res["lost"] == 0
            and res["order_ok"]
            and not res["problems"]
            and others_bad <= args.max_missed_per_episode * 3 * args.episodes
            and worst_hole <= args.max_hole_ms
            and gaps == args.episodes
            and during > 0
            and answers
            and not failed
            and thread_growth <= 0
            and last_lanes == 1
            and rss_growth <= args.max_rss_growth_kib
        )
        print(
            "chaos blocked: %d episodes of GPU 3 blocked %gs, other GPUs %d missed ticks during "
            "the blocks (%d in the whole run; longest gap between ticks %d ms), gaps recorded %d/%d, %d transitions during the "
            "blocks, %d lost, http %d/%d answered (slowest %.0f ms), threads %d -> %d, "
            "RSS %d -> %d KiB: %s"
            % (
                args.episodes,
                args.block,
                others_bad,
                others_bad_all,
                worst_hole,
                gaps,
                args.episodes,
                during,
                res["lost"],
                len(answers) - len(failed),
                len(answers),
                slowest * 1000,
                base_threads,
                last_threads,
                base_rss,
                last_rss,
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        for x in failed[:5] if not ok else []:
            print("  %s failed at %.1f s" % (x[1], x[0] - rig.start_ms / 1000.0), file=sys.stderr)
        return verdict(ok, res)
    finally:
        rig.close()


RULES_HOT = RULES + """
[[rule]]
name = "hot"
severity = "critical"
condition = "util_gpu > 90"
summary = "GPU {gpu} flat out"
"""

RULES_BROKEN = RULES + """
[[rule]]
name = "broken"
severity = "warning"
condition = "util_gpu >"
"""


def campaign_sighup(args):
    rng = random.Random(args.seed)
    rig = Rig(args, "sighup")
    rules = os.path.join(rig.dir, "rules.toml")
    try:
        rig.start_receivers()
        rig.write_config()
        rig.start_daemon()
        deadline = time.time() + 20
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % rig.http_port, timeout=1):
                    break
            except OSError:
                if time.time() > deadline or rig.daemon.poll() is not None:
                    raise RigError("the daemon never answered /healthz (see %s)" % rig.dir)
                time.sleep(0.1)
        prober = Prober(rig.http_port)
        prober.start()
        time.sleep(args.before)
        storm_start = time.time()
        kinds = {"hot": 0, "plain": 0, "broken": 0}
        for _ in range(args.hups):
            # The rules file changes under the daemon, written in place (a reload may read a
            # torn file: it must keep the last good rules), then SIGHUP.
            kind = rng.choice(["hot", "plain", "broken"])
            kinds[kind] += 1
            text = {"hot": RULES_HOT, "plain": RULES, "broken": RULES_BROKEN}[kind]
            with open(rules, "w") as f:
                f.write(text)
            if rig.daemon.poll() is not None:
                break
            rig.daemon.send_signal(signal.SIGHUP)
            time.sleep(rng.uniform(0, args.max_gap_ms / 1000.0))
        storm_end = time.time()
        alive_after_storm = rig.daemon.poll() is None
        # Then for sure (the storm's reloads take whatever file is there at the next commit):
        # `busy` alone, then a broken file, which is refused (`busy` alone stays: `hot` must
        # not fire in between), then both rules (`hot` must fire).
        for text in (RULES, RULES_BROKEN):
            with open(rules, "w") as f:
                f.write(text)
            if alive_after_storm:
                rig.daemon.send_signal(signal.SIGHUP)
            if text is RULES:
                plain_hup = time.time()
            time.sleep(2.5 if text is RULES else 4.0)
        # The last word: both rules, one more SIGHUP; `hot` must fire after it.
        with open(rules, "w") as f:
            f.write(RULES_HOT)
        final_hup = time.time()
        if alive_after_storm:
            rig.daemon.send_signal(signal.SIGHUP)
        time.sleep(args.after)
        prober.stop()
        hot_after = 0
        res_extra = []
        if alive_after_storm and rig.daemon.poll() is None:
            hot_after = rig.query(
                "SELECT count(*) FROM alerts WHERE rule = 'hot' AND fired_ms > ?",
                (int(final_hup * 1000) + 1500,),
            )[0][0]
            hot_while_off = rig.query(
                "SELECT count(*) FROM alerts WHERE rule = 'hot' AND fired_ms BETWEEN ? AND ?",
                # A reload is taken at the next commit and evaluates the ticks held for it
                # (up to `commit_interval`, 1 s): the margins are 1.5 s.
                (int(plain_hup * 1000) + 1500, int(final_hup * 1000) - 1500),
            )[0][0]
            if hot_while_off:
                res_extra.append(
                    "`hot` fired %d time(s) while the last good rules were `busy` alone"
                    % hot_while_off
                )
            # The scenario is read at NVML init: a restart takes the end of the flapping.
            rig.write_scenario(flap_until_s=int(rig.sim_now_s()) + 3)
            rig.sigterm()
            rig.start_daemon()
            drained = rig.drain()
        else:
            drained = False
        res = rig.count()
        rig.sigterm()
        res["problems"] += res_extra
        res["problems"] += ["daemon panicked: " + b for b in panics(rig)[:3]]
        with open(os.path.join(rig.dir, "daemon.log"), "rb") as f:
            text = f.read().decode("utf-8", "replace")
        reloaded = text.count("rules reloaded")
        refused = text.count("rule reload failed")
        missed = rig.query(
            "SELECT count(*) FROM gpu_samples WHERE status != 'ok' AND ts_ms BETWEEN ? AND ?",
            (int(storm_start * 1000), int(storm_end * 1000)),
        )[0][0]
        answers = [x for x in prober.results]
        failed = [x for x in answers if not x[2]]
        ok = (
            alive_after_storm
            and drained
            and res["lost"] == 0
            and res["dups"] == 0
            and res["order_ok"]
            and not res["problems"]
            and hot_after > 0
            and reloaded > 0
            and refused > 0
            and missed == 0
            and answers
            and not failed
        )
        print(
            "chaos sighup: %d SIGHUPs in %.1fs (rules file rewritten before each: %d with `hot`, "
            "%d without, %d broken), %d reloads, %d refused, daemon %s, %d missed ticks, "
            "`hot` fired %d time(s) after the last reload, %d alerts, %d lost, %d duplicates, "
            "order %s%s, http %d/%d answered: %s"
            % (
                args.hups,
                storm_end - storm_start,
                kinds["hot"],
                kinds["plain"],
                kinds["broken"],
                reloaded,
                refused,
                "alive" if alive_after_storm else "DEAD",
                missed,
                hot_after,
                res["alerts"],
                res["lost"],
                res["dups"],
                "kept" if res["order_ok"] else "BROKEN",
                "" if drained else ", NOT DRAINED",
                len(answers) - len(failed),
                len(answers),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        rig.close()


def main():
    global VERBOSE
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="campaign", required=True)

    def common(sp):
        sp.add_argument("--gpuwatch")
        sp.add_argument("--lib")
        sp.add_argument("--speed", type=float, default=1.0)
        sp.add_argument("--keep", action="store_true")
        sp.add_argument("-v", "--verbose", action="store_true")

    k = sub.add_parser("kill9", help="kill -9 at random moments, restart, count at the receivers")
    common(k)
    k.add_argument("--trials", type=int, default=50)
    k.add_argument("--max-run", type=float, default=5.0, help="kill uniformly in [0, this] s after the start")
    k.add_argument("--seed", type=int, default=None)

    o = sub.add_parser("outage", help="Slack and SMTP down for a stretch while alerts flap")
    common(o)
    o.add_argument("--before", type=float, default=5.0)
    o.add_argument("--down", type=float, default=30.0)
    o.add_argument("--after", type=float, default=5.0)
    o.add_argument("--backlog-after", default="5s")

    b = sub.add_parser("blocked", help="GPU 3's NVML calls block for a while, episode after episode")
    common(b)
    b.add_argument("--episodes", type=int, default=10)
    b.add_argument("--block", type=float, default=6.0, help="wall seconds each blocked call sleeps")
    b.add_argument(
        "--period",
        type=float,
        default=25.0,
        help="simulated seconds between episodes (25: the split-off lane merges back in between)",
    )
    b.add_argument("--max-hole-ms", type=int, default=1000, help="longest allowed gap between two ticks of another GPU")
    b.add_argument("--max-rss-growth-kib", type=int, default=2048)
    b.add_argument(
        "--max-missed-per-episode",
        type=int,
        default=0,
        help="missed ticks allowed to each other GPU per episode (the tick the stall is found "
        "in can miss on a loaded machine: the others are asked again on a new lane)",
    )

    h = sub.add_parser("sighup", help="a storm of SIGHUPs while the rules file changes")
    common(h)
    h.add_argument("--hups", type=int, default=300)
    h.add_argument("--max-gap-ms", type=float, default=30.0)
    h.add_argument("--before", type=float, default=3.0)
    h.add_argument("--after", type=float, default=12.0)
    h.add_argument("--seed", type=int, default=None)

    args = p.parse_args()
    VERBOSE = args.verbose
    if getattr(args, "seed", 0) is None:
        args.seed = random.SystemRandom().randrange(1 << 32)
        print("seed %d" % args.seed, file=sys.stderr)
    try:
        campaigns = {
            "kill9": campaign_kill9,
            "outage": campaign_outage,
            "blocked": campaign_blocked,
            "sighup": campaign_sighup,
        }
        return campaigns[args.campaign](args)
    except RigError as e:
        print("chaos %s: rig failed: %s" % (args.campaign, e), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
