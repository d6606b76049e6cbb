#!/usr/bin/env python3
"""The alert drills: each alert of deploy/prometheus/alerts.yml caused for real, seen firing in a
real Alertmanager, fixed the way docs/runbook.md says, and seen resolving.

Runs two `ternflow serve` (SQLite, and Redis with DEBUG enabled so the store can be made slow),
Debian's Prometheus (scrape every 1 s, rules every 2 s: the real rule file) and Alertmanager (a
webhook to this script, which runs the stampede's recovery command itself, as an operator's hook
would), then the drills side by side:

  poison     12 jobs nobody can run dead-lettered  -> TernflowDeadLettersGrowing; fix: ternflow dlq redrive --reason
  stampede   12 callers on one key a gone worker holds -> TernflowCacheStampede; fix (webhook): ternflow locks release --stale
  leak       a worker holding 8 locks killed -9     -> TernflowLocksLeaking; resolves when no new leak for its window
  slow-store Redis blocked by DEBUG SLEEP           -> TernflowStoreLatencySpike; fix: the load on Redis stops
  no-workers the redriven jobs ready, nobody claims -> TernflowQueueStalled; fix: a worker claims

and prints, per alert, when it fired (seconds from its cause) and resolved (seconds from its fix),
and every other alert that fired (none should).

  scripts/drills.py [--bin target/release/ternflow] [--timeout-min 16]

Needs: prometheus, prometheus-alertmanager, redis-server (Debian), a built `ternflow`.
"""

import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "deploy", "prometheus", "alerts.yml")
ADMIN, WORKER, PRODUCER = "drill-admin", "drill-worker", "drill-producer"
T0 = time.monotonic()


def now():
    return time.monotonic() - T0


def say(msg):
    print(f"[{now():6.1f}s] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method, url, token=None, body=None, headers=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def wait_http(url, what, secs=30):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"drills: {what} did not come up at {url}")


class Procs:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, name, cmd, env=None):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})}, cwd=self.tmp)
        self.procs.append((name, p))
        return p

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


class Alerts:
    """Alertmanager's view, polled every 0.5 s, and the webhook's notifications."""

    def __init__(self, am_url):
        self.am_url = am_url
        self.active = {}  # alertname -> first seen active (s)
        self.seen = {}  # alertname -> [(fired, resolved or None)]
        self.lock = threading.Lock()
        self.hooks = {}  # alertname -> fn, run once on its first firing notification
        self.notified = []
        self.stop = False

    def poll(self):
        while not self.stop:
            code, alerts = http_json("GET", f"{self.am_url}/api/v2/alerts?active=true&silenced=false&inhibited=false")
            if code == 200:
                names = {a["labels"]["alertname"] for a in alerts if a["status"]["state"] == "active"}
                t = now()
                with self.lock:
                    for n in names - set(self.active):
                        self.active[n] = t
                        self.seen.setdefault(n, []).append([t, None])
                        say(f"Alertmanager: {n} FIRING")
                    for n in set(self.active) - names:
                        del self.active[n]
                        self.seen[n][-1][1] = t
                        say(f"Alertmanager: {n} resolved")
            time.sleep(0.5)

    def wait(self, name, firing, secs):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            with self.lock:
                if (name in self.active) == firing:
                    return now()
            time.sleep(0.25)
        return None

    def webhook(self, payload):
        for a in payload.get("alerts", []):
            name = a["labels"].get("alertname")
            self.notified.append((now(), name, a.get("status")))
            hook = self.hooks.pop(name, None) if a.get("status") == "firing" else None
            if hook:
                threading.Thread(target=hook, daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "ternflow"))
    ap.add_argument("--timeout-min", type=float, default=16)
    args = ap.parse_args()
    ternflow = os.path.abspath(args.bin)
    for tool in ("prometheus", "prometheus-alertmanager", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"drills: {tool} is not installed (apt-get install prometheus prometheus-alertmanager redis-server)")
    if not os.access(ternflow, os.X_OK):
        sys.exit(f"drills: no ternflow binary at {ternflow} (cargo build --release -p ternflow-cli, or --bin)")

    tmp = tempfile.mkdtemp(prefix="ternflow-drills-")
    procs = Procs(tmp)
    tokens = f"{ADMIN}:admin,{WORKER}:worker,{PRODUCER}:producer"
    env = {"TERNFLOW_TOKENS": tokens, "RUST_LOG": "warn,ternflow::audit=warn"}
    try:
        redis_port = free_port()
        procs.start("redis", ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no",
                              "--enable-debug-command", "yes"])
        s1, s2 = free_port(), free_port()
        procs.start("server-sqlite", [ternflow, "serve", "--addr", f"127.0.0.1:{s1}", "--data-dir",
                                      os.path.join(tmp, "d1"), "--max-attempts", "1"], env)
        time.sleep(0.5)
        procs.start("server-redis", [ternflow, "serve", "--addr", f"127.0.0.1:{s2}", "--data-dir",
                                     os.path.join(tmp, "d2"), "--store", f"redis://127.0.0.1:{redis_port}/0",
                                     "--redis-prefix", "drills"], env)
        base1, base2 = f"http://127.0.0.1:{s1}", f"http://127.0.0.1:{s2}"
        wait_http(f"{base1}/healthz", "the SQLite server")
        wait_http(f"{base2}/healthz", "the Redis server")

        # The webhook receiver.
        alerts_box = {}

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.end_headers()
                alerts_box["a"].webhook(json.loads(body))

            def log_message(self, *a):
                pass

        hook_port = free_port()
        hook_srv = http.server.ThreadingHTTPServer(("127.0.0.1", hook_port), Hook)
        threading.Thread(target=hook_srv.serve_forever, daemon=True).start()

        am_port, prom_port = free_port(), free_port()
        with open(os.path.join(tmp, "am.yml"), "w") as f:
            f.write(f"""route:
  receiver: hook
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:{hook_port}/
        send_resolved: true
""")
        procs.start("alertmanager", ["prometheus-alertmanager", f"--config.file={tmp}/am.yml",
                                     f"--storage.path={tmp}/am", f"--web.listen-address=127.0.0.1:{am_port}",
                                     "--cluster.listen-address="])
        token_file = os.path.join(tmp, "admin-token")
        with open(token_file, "w") as f:
            f.write(ADMIN)
        with open(os.path.join(tmp, "prom.yml"), "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 2s
rule_files: [{RULES}]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["127.0.0.1:{am_port}"]}}]
scrape_configs:
  - job_name: ternflow
    authorization: {{credentials_file: {token_file}}}
    static_configs: [{{targets: ["127.0.0.1:{s1}", "127.0.0.1:{s2}"]}}]
""")
        procs.start("prometheus", ["prometheus", f"--config.file={tmp}/prom.yml", f"--storage.tsdb.path={tmp}/prom",
                                   f"--web.listen-address=127.0.0.1:{prom_port}"])
        am_url = f"http://127.0.0.1:{am_port}"
        wait_http(f"{am_url}/-/ready", "Alertmanager")
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", "Prometheus")
        alerts = Alerts(am_url)
        alerts_box["a"] = alerts
        threading.Thread(target=alerts.poll, daemon=True).start()
        say(f"stack up in {tmp}: servers :{s1} (SQLite) :{s2} (Redis), Prometheus :{prom_port}, Alertmanager :{am_port}")
        # Prometheus applies its targets a few seconds after it starts: the drills begin once it
        # has scraped both servers a few times (a counter first seen at its value after a cause
        # would show no increase).
        end = time.monotonic() + 60
        while time.monotonic() < end:
            _, r = http_json("GET", f"http://127.0.0.1:{prom_port}/api/v1/query?query=count_over_time(up%5B1m%5D)")
            got = [int(x["value"][1]) for x in (r or {}).get("data", {}).get("result", []) if x["value"][1] != "0"]
            if len(got) == 2 and min(got) >= 3:
                break
            time.sleep(0.5)
        else:
            sys.exit("drills: Prometheus never scraped both servers")
        say("Prometheus has scraped both servers 3 times: the drills begin")

        def cli(*a, base=base1):
            out = subprocess.run([ternflow, *a, "--server", base, "--token", ADMIN], capture_output=True, text=True)
            say(f"$ ternflow {' '.join(a)} -> {out.returncode}: {(out.stdout + out.stderr).strip().splitlines()[-1:]}")
            return out

        results = {}
        stop = threading.Event()
        deadline = args.timeout_min * 60

        # -- poison: 12 jobs of a model nobody runs, each failing its only attempt.
        def poison():
            jobs = [{"id": f"poison-{i}", "text": f"poison {i}", "model_id": "drill-nobody-runs"} for i in range(12)]
            http_json("POST", f"{base1}/v1/jobs", PRODUCER, {"jobs": jobs})
            _, claimed = http_json("POST", f"{base1}/v1/jobs/claim", WORKER, {"worker": "drill-w", "max": 12})
            for j in claimed["jobs"]:
                http_json("POST", f"{base1}/v1/jobs/{j['id']}/nack", WORKER,
                          {"token": j["lease"]["token"], "error": {"code": "engine_failed", "message": "drill"}})
            cause = now()
            fired = alerts.wait("TernflowDeadLettersGrowing", True, deadline)
            fix = now()
            cli("dlq", "redrive", "--reason", "engine_failed")
            resolved = alerts.wait("TernflowDeadLettersGrowing", False, deadline)
            results["TernflowDeadLettersGrowing"] = (cause, fired, fix, resolved, "ternflow dlq redrive --reason engine_failed")

        # -- stampede: a worker took the hot key and went away; 12 callers wait on it.
        def stampede():
            _, held = http_json("POST", f"{base1}/v1/locks/drill:hot", WORKER, {"ttl_ms": 120000})
            assert held and "token" in held, held
            cause = now()
            got = []

            def waiter(i):
                tp = f"00-{i + 1:032x}-{i + 1:016x}-01"
                while not stop.is_set():
                    code, g = http_json("POST", f"{base1}/v1/locks/drill:hot", WORKER, {"ttl_ms": 5000},
                                        headers={"traceparent": tp})
                    if code == 200:
                        got.append(i)
                        http_json("DELETE", f"{base1}/v1/locks/drill:hot", WORKER, {"token": g["token"]})
                        return
                    time.sleep(0.25)

            fixed_at = {}

            def recovery():
                fixed_at["t"] = now()
                cli("locks", "release", "--stale", "--stale-after-ms", "1000")

            alerts.hooks["TernflowCacheStampede"] = recovery
            ws = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(12)]
            for w in ws:
                w.start()
            fired = alerts.wait("TernflowCacheStampede", True, deadline)
            for w in ws:
                w.join(timeout=60)
            resolved = alerts.wait("TernflowCacheStampede", False, deadline)
            say(f"stampede: {len(got)} of 12 waiters got the key after the recovery")
            results["TernflowCacheStampede"] = (cause, fired, fixed_at.get("t"), resolved,
                                                "the webhook ran ternflow locks release --stale")

        # -- leak: a worker holding 8 locks (1 s TTL) is killed -9.
        def leak():
            code = ("import json,sys,time,urllib.request\n"
                    "for i in range(8):\n"
                    f"  r=urllib.request.Request('{base1}/v1/locks/drill:leak-'+str(i),data=b'{{\"ttl_ms\":1000}}',method='POST',"
                    f"headers={{'authorization':'Bearer {WORKER}','content-type':'application/json'}})\n"
                    "  urllib.request.urlopen(r)\n"
                    "print('holding',flush=True)\n"
                    "time.sleep(3600)\n")
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            p.stdout.readline()
            p.send_signal(signal.SIGKILL)
            p.wait()
            cause = now()
            fired = alerts.wait("TernflowLocksLeaking", True, deadline)
            fix = now()
            out = cli("locks", "list", "--stale")
            resolved = alerts.wait("TernflowLocksLeaking", False, deadline)
            results["TernflowLocksLeaking"] = (cause, fired, fix, resolved,
                                               "nothing left to release (`locks list --stale`: "
                                               f"{out.stdout.count(chr(10))} locks); resolves after its 10-minute window")

        # -- slow store: claims on the Redis server while Redis is blocked by DEBUG SLEEP.
        def slow_store():
            slow = threading.Event()
            done = threading.Event()

            def claimer():
                while not done.is_set():
                    http_json("POST", f"{base2}/v1/jobs/claim", WORKER, {"worker": "drill-slow", "max": 1}, timeout=30)
                    time.sleep(0.2)

            def blocker():
                while slow.is_set():
                    subprocess.run(["redis-cli", "-p", str(redis_port), "DEBUG", "SLEEP", "0.4"],
                                   capture_output=True)

            threading.Thread(target=claimer, daemon=True).start()
            time.sleep(5)
            slow.set()
            threading.Thread(target=blocker, daemon=True).start()
            cause = now()
            fired = alerts.wait("TernflowStoreLatencySpike", True, deadline)
            fix = now()
            slow.clear()
            say("slow-store: the load on Redis stopped")
            resolved = alerts.wait("TernflowStoreLatencySpike", False, deadline)
            done.set()
            results["TernflowStoreLatencySpike"] = (cause, fired, fix, resolved, "the DEBUG SLEEP load stopped")

        # -- no workers: after the poison drill's redrive its 12 jobs are ready; nobody claims.
        def stalled():
            while "TernflowDeadLettersGrowing" not in results and not stop.is_set():
                time.sleep(1)
            cause = results["TernflowDeadLettersGrowing"][2]  # the redrive made them ready
            fired = alerts.wait("TernflowQueueStalled", True, deadline)
            fix = now()
            _, claimed = http_json("POST", f"{base1}/v1/jobs/claim", WORKER, {"worker": "drill-back", "max": 12})
            say(f"no-workers: a worker came back and claimed {len(claimed['jobs'])} jobs")
            resolved = alerts.wait("TernflowQueueStalled", False, deadline)
            for j in claimed["jobs"]:
                http_json("POST", f"{base1}/v1/jobs/{j['id']}/release", WORKER, {"token": j["lease"]["token"]})
            results["TernflowQueueStalled"] = (cause, fired, fix, resolved, "a worker claims")

        drills = [threading.Thread(target=f, daemon=True) for f in (poison, stampede, leak, slow_store, stalled)]
        for d in drills:
            d.start()
        for d in drills:
            d.join(timeout=deadline)
        stop.set()
        alerts.stop = True

        print()
        print("| alert | caused by | fired after (s) | fixed by | resolved after the fix (s) |")
        print("|---|---|---|---|---|")
        expected = set(results)
        ok = True
        for name, (cause, fired, fix, resolved, how) in results.items():
            f = f"{fired - cause:.1f}" if fired is not None else "NOT FIRED"
            r = f"{resolved - fix:.1f}" if (resolved is not None and fix is not None) else "NOT RESOLVED"
            ok &= fired is not None and resolved is not None
            print(f"| {name} | {name_cause(name)} | {f} | {how} | {r} |")
        others = sorted(set(alerts.seen) - expected)
        print()
        print(f"other alerts that fired: {', '.join(others) if others else 'none'}")
        print(f"webhook notifications: {len(alerts.notified)} "
              f"({sum(1 for n in alerts.notified if n[2] == 'firing')} firing, "
              f"{sum(1 for n in alerts.notified if n[2] == 'resolved')} resolved)")
        print("rules evaluated every 2 s, targets scraped every 1 s")
        ok &= not others
        print("drills: ok" if ok else "drills: FAILED")
        return 0 if ok else 1
    finally:
        procs.stop()
        shutil.rmtree(tmp, ignore_errors=True)


CAUSES = {
    "TernflowDeadLettersGrowing": "12 jobs nobody runs, each failing its only attempt",
    "TernflowCacheStampede": "12 callers on a key a gone worker holds",
    "TernflowLocksLeaking": "a worker holding 8 locks killed -9",
    "TernflowStoreLatencySpike": "Redis blocked by DEBUG SLEEP 0.4 in a loop",
    "TernflowQueueStalled": "12 jobs ready, no worker claims",
}


def name_cause(name):
    return CAUSES.get(name, "")


if __name__ == "__main__":
    sys.exit(main())
