"""The Prometheus campaign: the Prometheus holding the training metrics goes down, then
answers slowly, while the GPUs show a hang's signature and the job keeps training.

The rig: a training job's exporter (the harness: `training_step{job="llm",gpu="N"}` for the
four GPUs, two steps a second, always advancing), a real Prometheus (Debian's `prometheus`)
scraping it every second, and a proxy in front of Prometheus that gpuwatch queries
(`[prometheus] url`, polled every second, timeout --timeout: default 10 s, the daemon's). The proxy goes `down`
(connections refused) for --down s, and later `slow` (every answer delayed --delay s) for
--slow s. During both, the simulated GPUs show the NCCL-hang signature (utilisation 100 % at
92 W instead of ~600 W) while the steps keep advancing in Prometheus: a daemon that read the
missing points as a stopped step counter would raise a false `training_hang`. Rules: the
default `training_hang` and `training_metrics_unavailable` (rules/training.toml), the
latter's `for` set by --unavailable-for (default: the file's).

Checks: no `training_hang`; `training_metrics_unavailable` fires in each fault (within its
`for` plus 7 s when down: a poll, a commit and the evaluator's read of the sources' status
every 5 s; plus two poll timeouts when slow: a poll asks for the step, then the loss) and resolves after it; the evaluator is never blocked:
every GPU has a row every tick through the faults (no hole over --max-hole-ms), /healthz and
/metrics answer every time (polled every 0.25 s); after a drain every transition reached the
three receivers (0 lost, 0 duplicates, order kept).
"""

import os
import re
import subprocess
import time
import urllib.error
import urllib.request

from blocked import Prober
from common import REPO, RigError, free_port, log
from counting import delivery, panics, verdict
from receivers import HttpSink
from rig import Rig

PROMETHEUS = "/usr/bin/prometheus"

SCENARIO = """
[scenario]
name = "chaos-prometheus"
tick_ms = 250
duration = "2h"
seed = 14
"""


def scenario(windows, flap_until):
    text = SCENARIO
    for g in range(4):
        text += '\n[[gpu]]\nmodel = "H100-SXM-80GB"\nuuid = "GPU-c4a05000-0000-4000-8000-00000000000%d"\n' % g
        text += "[[gpu.timeline]]\nto = \"%ds\"\nutil_gpu = { value = 94, noise = 3 }\n" % flap_until
        for a, b in windows:
            text += '[[gpu.timeline]]\nfrom = "%ds"\nto = "%ds"\nutil_gpu = 100\npower_w = 92\n' % (a, b)
        text += '[[gpu.timeline]]\nfrom = "%ds"\nutil_gpu = 0\n' % flap_until
    for g in range(4):
        text += '\n[[process]]\npid = %d\nname = "python"\ngpus = [%d]\nmem_mib = 60000\nend = "%ds"\n' % (
            4000001 + g,
            g,
            flap_until,
        )
    return text


def default_rule(name, for_=None):
    with open(os.path.join(REPO, "rules", "training.toml")) as f:
        text = f.read()
    blocks = re.split(r"(?m)^(?=\[\[rule\]\])", text)
    for b in blocks:
        if re.search(r'(?m)^name = "%s"$' % name, b):
            # The rules it mutes are not loaded here.
            b = re.sub(r"(?m)^inhibits = .*\n", "", b)
            if for_:
                b = re.sub(r'(?m)^for = ".*"$', 'for = "%s"' % for_, b)
            return b
    raise RigError("rule %s not in rules/training.toml" % name)


class Server(HttpSink):
    """The rig's HTTP server (`HttpSink`) answering GET and POST with
    `handle(handler) -> (status, headers, body)`; `down` refuses connections."""

    methods = ("GET", "POST")

    def answer(self, h):
        try:
            status, headers, body = self.handle(h)
            h.send_response(status)
            for k, v in headers:
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        except OSError:
            h.close_connection = True


class PromRig:
    """The exporter, Prometheus and the proxy."""

    def __init__(self, workdir):
        self.t0 = time.time()
        self.exporter = Server(self._metrics)
        self.prom_port = free_port()
        self.proxy = Server(self._forward)
        self.mode = "up"
        self.delay = 0.0
        self.dir = os.path.join(workdir, "prometheus")
        os.makedirs(self.dir)
        self.proc = None
        self.forwarded = 0

    def _metrics(self, _h):
        step = int((time.time() - self.t0) * 2)
        body = "# TYPE training_step gauge\n" + "".join(
            'training_step{job="llm",gpu="%d"} %d\n' % (g, step) for g in range(4)
        )
        return 200, [("Content-Type", "text/plain; version=0.0.4")], body.encode()

    def _forward(self, h):
        if self.mode == "slow":
            time.sleep(self.delay)
        n = int(h.headers.get("Content-Length") or 0)
        data = h.rfile.read(n) if n else None
        req = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.prom_port, h.path), data=data, method=h.command
        )
        for k in ("Content-Type", "Accept"):
            if h.headers.get(k):
                req.add_header(k, h.headers[k])
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                body, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as e:
            body, status, ctype = e.read(), e.code, "application/json"
        self.forwarded += 1
        return status, [("Content-Type", ctype)], body

    def start(self):
        if not os.path.exists(PROMETHEUS):
            raise RigError("no %s (apt-get install prometheus)" % PROMETHEUS)
        self.exporter.start()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                "- job_name: exporter\n  static_configs:\n  - targets: ['127.0.0.1:%d']\n"
                "  metric_relabel_configs:\n  - target_label: job\n    replacement: llm\n" % self.exporter.port
            )
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                "--config.file=" + cfg,
                "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                "--web.listen-address=127.0.0.1:%d" % self.prom_port,
            ],
            stdout=self.log,
            stderr=self.log,
        )
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.prom_port, timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RigError("prometheus not ready (see %s)" % self.dir)
            time.sleep(0.2)
        self.proxy.start()

    def set_mode(self, mode, delay=0.0):
        log("prometheus proxy: %s" % mode)
        if mode == "down":
            self.proxy.stop()
        elif self.mode == "down":
            self.proxy.start()
        self.mode, self.delay = mode, delay

    def stop(self):
        self.proxy.stop()
        self.exporter.stop()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def campaign_prometheus(args):
    rig = Rig(args, "prometheus")
    prom = PromRig(rig.dir)
    problems = []
    try:
        # Scenario seconds (speed 1, anchored at the rig's start): warm-up, down, recovery,
        # slow, recovery; the job ends (memory freed, GPUs idle) after that, then the drain.
        down = (args.before, args.before + args.down)
        slow = (down[1] + args.between, down[1] + args.between + args.slow)
        end = slow[1] + args.after
        with open(os.path.join(rig.nvml_dir, "gpuwatch-scenario.toml"), "w") as f:
            f.write(scenario([down, slow], int(end)))
        prom.start()
        rig.start_receivers()
        rules = default_rule("training_hang") + default_rule("training_metrics_unavailable", args.unavailable_for)
        rig.write_config(rules=rules)
        with open(rig.config, "a") as f:
            f.write(
                '\n[prometheus]\nurl = "http://127.0.0.1:%d"\npoll_interval = "1s"\nquery_step = "1s"\ntimeout = "%gs"\n'
                % (prom.proxy.port, args.timeout)
            )
        check = subprocess.run([rig.gpuwatch, "run", "--check", "--config", rig.config], capture_output=True, text=True)
        if check.returncode != 0:
            raise RigError("config refused: %s%s" % (check.stdout, check.stderr))
        rig.start_daemon()
        wall = lambda t_sim: rig.start_ms / 1000.0 + t_sim  # noqa: E731
        rig.wait_serving()  # the prober starts once the daemon serves
        prober = Prober(rig.http_port)
        prober.start()
        for at, mode in ((down[0], "down"), (down[1], "up"), (slow[0], "slow"), (slow[1], "up")):
            time.sleep(max(0.0, wall(at) - time.time()))
            if rig.daemon.poll() is not None:
                raise RigError("daemon exited (see %s)" % rig.dir)
            prom.set_mode(mode, args.delay)
        time.sleep(max(0.0, wall(end) - time.time()))
        prober.stop()
        drained = rig.drain()
        res = rig.count()
        alerts = rig.query("SELECT rule, fired_ms, resolved_ms FROM alerts WHERE fired_ms IS NOT NULL ORDER BY fired_ms")
        rig.sigterm()
        problems += res["problems"]
        problems += ["daemon panicked: " + b for b in panics(rig)[:3]]
        hangs = [a for a in alerts if a[0] == "training_hang"]
        if hangs:
            problems.append("training_hang fired %d time(s): %s" % (len(hangs), hangs[:3]))
        unavailable = [a for a in alerts if a[0] == "training_metrics_unavailable"]
        for_s = float(args.unavailable_for.rstrip("s")) if args.unavailable_for else 60.0
        timely = 0
        # Detection takes a poll (1 s), a commit (1 s) and the evaluator's read of the sources'
        # status (every 5 s); against a slow Prometheus also two timeouts (a poll asks for the
        # step, then the loss series).
        for name, (a, b), extra in (("down", down, 7), ("slow", slow, 7 + 2 * args.timeout)):
            lo, hi = wall(a) * 1000, wall(b) * 1000
            got = [u for u in unavailable if lo <= u[1] <= hi + 5000]
            if len(got) != 1:
                problems.append("%s: training_metrics_unavailable fired %d time(s)" % (name, len(got)))
                continue
            late = (got[0][1] - lo) / 1000.0
            if not (for_s <= late <= for_s + extra):
                problems.append("%s: training_metrics_unavailable fired %.1f s after the fault began" % (name, late))
            # A tick is evaluated up to commit_interval (1 s) after its time, with the sources'
            # status as read then: a resolution may carry a tick time just before the end.
            elif got[0][2] is None or got[0][2] < hi - 2000:
                problems.append("%s: training_metrics_unavailable did not resolve after the fault" % name)
            else:
                timely += 1
        worst_hole = 0
        bad = 0
        for g in range(4):
            rows = rig.query(
                "SELECT ts_ms, status FROM gpu_samples WHERE gpu_index = ? AND ts_ms BETWEEN ? AND ? ORDER BY ts_ms",
                (g, int(wall(down[0]) * 1000), int(wall(slow[1]) * 1000)),
            )
            bad += sum(1 for _t, s in rows if s != "ok")
            ts = [t for t, _s in rows]
            worst_hole = max([b - a for a, b in zip(ts, ts[1:])] + [worst_hole])
        if worst_hole > args.max_hole_ms:
            problems.append("a hole of %d ms between two ticks" % worst_hole)
        if bad:
            problems.append("%d row(s) not ok during the faults" % bad)
        answers = prober.results
        failed = [r for r in answers if not r[2]]
        if failed:
            problems.append("%d of %d HTTP probes failed" % (len(failed), len(answers)))
        res["problems"] = problems
        ok = drained and not problems and res["lost"] == 0 and res["dups"] == 0 and res["order_ok"]
        print(
            "chaos prometheus: down %gs, then answers delayed %gs for %gs, GPUs showing a hang's "
            "signature meanwhile; training_hang fired %d time(s), training_metrics_unavailable fired "
            "and resolved in %d/2 faults, longest gap between ticks %d ms, http %d/%d answered (slowest "
            "%.0f ms), %s: %s"
            % (
                args.down,
                args.delay,
                args.slow,
                len(hangs),
                timely,
                worst_hole,
                len(answers) - len(failed),
                len(answers),
                max((r[3] for r in answers), default=0) * 1000,
                delivery(res, drained),
                "PASS" if ok else "FAIL",
            ),
            flush=True,
        )
        return verdict(ok, res)
    finally:
        prom.stop()
        rig.close()
