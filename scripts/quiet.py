#!/usr/bin/env python3
"""The quiet run: the README's demo and the chaos run under the real alert rules, which must
page nobody. The counterpart of scripts/drills.py (each alert fires when its cause is real):
here the causes are only what a healthy deployment meets (a cold start, a stampede that the
single-flight lock absorbs, workers coming and going, a Redis restart the servers ride out).

Starts Debian's Prometheus (scrape every 1 s, rules every 2 s: deploy/prometheus/alerts.yml as
is) and Alertmanager, then runs each command in turn; every `ternflow serve` a command starts
is found in /proc (its `--addr` and `--insecure-dev-token`) and scraped while the command runs
(a server the command kills and restarts on the same address stays a target, so a server that
stays down would page). After each command it waits `--settle` seconds (alerts with a `for`
window need that long to fire) and prints every alert that fired; exits 1 when any did.

  scripts/quiet.py [--bin target/debug/ternflow] [--settle 90] [--only demo|demo-redis|chaos]

Commands: the README's main command, `scripts/demo.sh --bin BIN` (3 000 sentences, a Web Worker
per core), on the embedded store and with `--redis` (two servers on a Redis this script starts),
then `node scripts/chaos.mjs --short --jobs 3000 --workers 2` (workers terminated and restarted,
Redis killed -9 and restarted, a server stopped for 5 s). Each is checked to have been seen: a
run whose acks Prometheus did not count fails. Needs what scripts/drills.py needs, plus the demo's and chaos run's own
(pkg/ built, Chromium, redis-server).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from drills import (ROOT, RULES, Alerts, Procs, free_port, http_json, now,  # noqa: E402
                    prometheus_config, say, wait_http)


def servers():
    """Every running `ternflow serve` with an address and a dev token: {addr: token}."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "serve" not in args or "--addr" not in args or "--insecure-dev-token" not in args:
            continue
        try:
            addr = args[args.index("--addr") + 1]
            token = args[args.index("--insecure-dev-token") + 1]
        except IndexError:
            continue
        found[addr] = token
    return found


class Targets:
    """Prometheus' scrape jobs, one per server found (each its own token), reloaded on change."""

    def __init__(self, tmp, prom_url, am_port):
        self.tmp, self.prom_url, self.am_port = tmp, prom_url, am_port
        self.known = {}
        self.lock = threading.Lock()
        self.write()

    def write(self):
        jobs = []
        for i, (addr, token) in enumerate(sorted(self.known.items())):
            cred = os.path.join(self.tmp, f"token-{i}")
            with open(cred, "w") as f:
                f.write(token)
            # One scrape job per server (each has its own token), all labelled job="ternflow" as
            # the rules expect.
            jobs.append(f"""  - job_name: ternflow-{i}
    authorization: {{credentials_file: {cred}}}
    static_configs: [{{targets: ["{addr}"]}}]
    relabel_configs: [{{target_label: job, replacement: ternflow}}]
""")
        with open(os.path.join(self.tmp, "prom.yml"), "w") as f:
            f.write(prometheus_config(self.am_port, "".join(jobs)))

    def reload(self):
        self.write()
        http_json("POST", f"{self.prom_url}/-/reload")

    def add_running(self):
        new = {a: t for a, t in servers().items() if a not in self.known}
        if new:
            with self.lock:
                self.known.update(new)
                self.reload()
            say(f"scraping {', '.join(sorted(new))}")

    def clear(self):
        """The command ended and took its servers with it: their targets go, and so do the `up`
        samples of their last scrapes (one may have found a server already gone, and without a
        staleness marker that `up == 0` would count for five minutes: a run that ended is not a
        server down). Everything else they reported stays for the windowed alerts."""
        with self.lock:
            gone = list(self.known)
            self.known.clear()
            self.reload()
            time.sleep(2)
            for addr in gone:
                q = urllib.parse.quote(f'up{{job="ternflow",instance="{addr}"}}')
                http_json("POST", f"{self.prom_url}/api/v1/admin/tsdb/delete_series?match[]={q}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "ternflow"))
    ap.add_argument("--settle", type=float, default=90)
    ap.add_argument("--only", choices=["demo", "demo-redis", "chaos"])
    args = ap.parse_args()
    ternflow = os.path.abspath(args.bin)
    for tool in ("prometheus", "prometheus-alertmanager", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"quiet: {tool} is not installed (apt-get install prometheus prometheus-alertmanager)")
    commands = [
        ("demo", [os.path.join(ROOT, "scripts", "demo.sh"), "--bin", ternflow]),
        ("demo-redis", [os.path.join(ROOT, "scripts", "demo.sh"), "--bin", ternflow, "--redis", "REDIS"]),
        ("chaos", ["node", os.path.join(ROOT, "scripts", "chaos.mjs"), "--bin", ternflow, "--model",
                   os.path.join(ROOT, "models", "ternlight-int4.bin"), "--short", "--jobs", "3000",
                   "--workers", "2"]),
    ]
    if args.only:
        commands = [c for c in commands if c[0] == args.only]
    tmp = tempfile.mkdtemp(prefix="ternflow-quiet-")
    procs = Procs(tmp)
    failed = False
    try:
        redis_port = free_port()
        procs.start("redis", ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"])
        commands = [(n, [f"redis://127.0.0.1:{redis_port}/0" if a == "REDIS" else a for a in c]) for n, c in commands]
        am_port, prom_port = free_port(), free_port()
        with open(os.path.join(tmp, "am.yml"), "w") as f:
            f.write("route: {receiver: none}\nreceivers: [{name: none}]\n")
        procs.start("alertmanager", ["prometheus-alertmanager", f"--config.file={tmp}/am.yml",
                                     f"--storage.path={tmp}/am", f"--web.listen-address=127.0.0.1:{am_port}",
                                     "--cluster.listen-address="])
        prom_url = f"http://127.0.0.1:{prom_port}"
        targets = Targets(tmp, prom_url, am_port)
        procs.start("prometheus", ["prometheus", f"--config.file={tmp}/prom.yml", f"--storage.tsdb.path={tmp}/prom",
                                   f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-lifecycle",
                                   "--web.enable-admin-api"])
        am_url = f"http://127.0.0.1:{am_port}"
        wait_http(f"{am_url}/-/ready", "Alertmanager")
        wait_http(f"{prom_url}/-/ready", "Prometheus")
        alerts = Alerts(am_url)
        threading.Thread(target=alerts.poll, daemon=True).start()
        say(f"Prometheus :{prom_port} (rules {os.path.relpath(RULES, ROOT)}), Alertmanager :{am_port}")
        rows = []
        for name, cmd in commands:
            with alerts.lock:
                before = {n: len(v) for n, v in alerts.seen.items()}
            t0 = now()
            say(f"{name}: $ {' '.join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)}")
            log = open(os.path.join(tmp, f"{name}.log"), "w")
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            while p.poll() is None:
                targets.add_running()
                time.sleep(0.5)
            log.close()
            with open(os.path.join(tmp, f"{name}.log")) as f:
                last = (f.read().strip().splitlines() or [""])[-1]
            say(f"{name}: exit {p.returncode} after {now() - t0:.0f} s: {last}")
            if p.returncode != 0:
                failed = True
            # Not a vacuous pass: what Prometheus saw of the run (each server's acks counter).
            span = f"{max(60, int(now() - t0) + 30)}s"
            _, r = http_json("GET", f"{prom_url}/api/v1/query?query=max_over_time(ternflow_jobs_acked_total"
                                    f"%7Bjob%3D%22ternflow%22%7D%5B{span}%5D)")
            series = (r or {}).get("data", {}).get("result", [])
            seen = (len(series), int(sum(float(x["value"][1]) for x in series)))
            say(f"{name}: Prometheus scraped {seen[0]} servers, {seen[1]} acks counted")
            if seen[0] == 0 or seen[1] == 0:
                say(f"{name}: FAILED: Prometheus saw nothing of the run")
                failed = True
            # The command's servers are gone: their targets go (a finished demo is not a server
            # down), then the rules run on for `--settle` s over what was scraped (the windowed
            # alerts still see the run; a gauge's alert is judged while the run is live).
            targets.clear()
            time.sleep(args.settle)
            with alerts.lock:
                fired = [(n, f, r) for n, v in alerts.seen.items() for (f, r) in v[before.get(n, 0):]]
            rows.append((name, p.returncode, seen, fired))
            for n, f, r in fired:
                say(f"{name}: {n} fired at {f - t0:.0f} s" + (f", resolved at {r - t0:.0f} s" if r else ""))
            if fired:
                failed = True
        alerts.stop = True
        print()
        print("| run | exit | servers scraped | acks Prometheus counted | alerts fired |")
        print("|---|---|---|---|---|")
        for name, code, seen, fired in rows:
            print(f"| {name} | {code} | {seen[0]} | {seen[1]} | {', '.join(sorted({n for n, _, _ in fired})) or 'none'} |")
    finally:
        procs.stop()
    say("quiet: FAILED" if failed else "quiet: ok (no alert fired)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
