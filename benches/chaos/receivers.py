"""The receivers the daemon notifies, all on loopback: a Slack-like endpoint (a fake), a real
SMTP server (aiosmtpd) and a real Alertmanager behind a recording proxy; and the parsing of
their messages into (alert id, firing|resolved)."""

import email
import email.policy
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from common import AM_BINARY, RigError, free_port


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
    """A small threaded HTTP server calling `handle(handler, body) -> (status, body)` for the
    `methods` (answered as text/plain); can be stopped (connections refused) and started again
    on the same port. A subclass answers otherwise by overriding `answer`."""

    methods = ("POST", "PUT")

    def __init__(self, handle, port=None):
        self.handle = handle
        self.port = port or free_port()
        self.server = None
        self.up = False

    def answer(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n)
        status, reply = self.handle(h, body)
        h.send_response(status)
        h.send_header("Content-Length", str(len(reply)))
        h.send_header("Content-Type", "text/plain")
        h.end_headers()
        h.wfile.write(reply)

    def start(self):
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                if not outer.up:
                    # Down: a kept-alive connection dies without an answer, as when the
                    # server's process is gone.
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                outer.answer(self)

            def log_message(self, *a):
                pass

        for m in self.methods:
            setattr(H, "do_" + m, H._any)
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
