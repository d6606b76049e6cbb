#!/usr/bin/env python3
"""The alert drills: each alert of deploy/prometheus/alerts.yml caused for real, seen firing in a
real Alertmanager, fixed the way docs/runbook.md says, and seen resolving.

Runs six `ternflow serve` (SQLite; Redis with DEBUG enabled so the store can be made slow; one
with no model, the backend that goes down; one on a Redis of its own, to be shut down; one to be
killed; one with the model, verifying workers' results), Debian's Prometheus (scrape every 1 s,
rules every 2 s: the real rule file) and Alertmanager (a webhook to this script, which runs the
stampede's recovery command itself, as an operator's hook would), then the drills side by side:

  poison       12 jobs nobody can run dead-lettered  -> TernflowDeadLettersGrowing; fix: ternflow dlq redrive --reason
  stampede     12 callers on one key a gone worker holds -> TernflowCacheStampede; fix (webhook): ternflow locks release --stale
  leak         a worker holding 8 locks killed -9     -> TernflowLocksLeaking; resolves when no new leak for its window
  slow-store   Redis blocked by DEBUG SLEEP           -> TernflowStoreLatencySpike; fix: the load on Redis stops
  no-workers   the redriven jobs ready, nobody claims -> TernflowQueueStalled; fix: a worker claims
  backend-down WASI workers (backend-only) on a server with no model -> TernflowBackendBreakerOpen and
               TernflowRetryStorm; fix: the server restarted with --model
  store-down   Redis shut down under a claiming worker -> TernflowStoreFailing; fix: Redis started again
  server-down  a server killed -9                     -> TernflowServerDown; fix: started again
  contention   5 workers asking for a key a stuck worker keeps renewing -> TernflowLockContention;
               fix: ternflow locks release --stale
  sse-storm    a client whose stream a proxy cuts every 0.25 s reconnects in a loop
               -> TernflowSseDisconnectStorm; fix: the cut stops (one long stream stays)
  liar         a worker acking a vector that is not the model's -> TernflowVerificationQuarantine;
               left quarantined (the runbook: a liar stays), resolves after its 15-minute window

and prints, per alert, when it fired (seconds from its cause) and resolved (seconds from its fix),
and every other alert that fired (none should).

  scripts/drills.py [--bin target/release/ternflow] [--timeout-min 24]

Needs: prometheus, prometheus-alertmanager, redis-server (Debian), a built `ternflow`, Wasmtime
(.tools/wasmtime from scripts/setup.sh, or $TERNFLOW_WASMTIME) and the WASI components
(scripts/build-wasi.sh).
"""

import argparse
import base64
import http.server
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "deploy", "prometheus", "alerts.yml")
MODEL = os.path.join(ROOT, "models", "ternlight-int4.bin")
WASI_BACKEND = os.path.join(ROOT, "target", "wasi", "ternflow-wasi-worker-backend.wasm")
_PINNED = os.path.join(ROOT, ".tools", "wasmtime")
WASMTIME = os.environ.get("TERNFLOW_WASMTIME", _PINNED if os.path.exists(_PINNED) else "wasmtime")
ADMIN, WORKER, PRODUCER, LIAR = "drill-admin", "drill-worker", "drill-producer", "drill-liar"
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
            if not raw:
                return r.status, None
            try:
                return r.status, json.loads(raw)
            except ValueError:  # /metrics is text
                return r.status, raw.decode(errors="replace")
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


def model_id(base):
    """The id of the model a server runs (the ETag of its GET /v1/model)."""
    req = urllib.request.Request(f"{base}/v1/model", method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["etag"].strip('"')


def prometheus_config(am_port, scrape_configs):
    """Prometheus' configuration for the drills and the quiet run: scrapes every 1 s, the real
    rules every 2 s, alerts to the Alertmanager on `am_port`; `scrape_configs` is the YAML list's
    items (empty: none)."""
    return f"""global:
  scrape_interval: 1s
  evaluation_interval: 2s
rule_files: [{RULES}]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["127.0.0.1:{am_port}"]}}]
scrape_configs:{chr(10) + scrape_configs if scrape_configs else " []" + chr(10)}"""


class Procs:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, name, cmd, env=None):
        log = open(os.path.join(self.tmp, f"{name}.log"), "a")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})}, cwd=self.tmp)
        self.procs.append((name, p))
        return p

    def get(self, name):
        """The latest process started under `name`."""
        return [p for n, p in self.procs if n == name][-1]

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
    ap.add_argument("--timeout-min", type=float, default=24)
    args = ap.parse_args()
    ternflow = os.path.abspath(args.bin)
    for tool in ("prometheus", "prometheus-alertmanager", "redis-server", "redis-cli"):
        if not shutil.which(tool):
            sys.exit(f"drills: {tool} is not installed (apt-get install prometheus prometheus-alertmanager redis-server)")
    if not os.access(ternflow, os.X_OK):
        sys.exit(f"drills: no ternflow binary at {ternflow} (cargo build --release -p ternflow-cli, or --bin)")
    if not shutil.which(WASMTIME) and not os.access(WASMTIME, os.X_OK):
        sys.exit(f"drills: no wasmtime ({WASMTIME}): scripts/setup.sh puts it in .tools/wasmtime")
    if not os.path.exists(WASI_BACKEND):
        sys.exit(f"drills: no {WASI_BACKEND}: run scripts/build-wasi.sh")

    tmp = tempfile.mkdtemp(prefix="ternflow-drills-")
    procs = Procs(tmp)
    tokens = f"{ADMIN}:admin,{WORKER}:worker,{PRODUCER}:producer,{LIAR}:worker"
    env = {"TERNFLOW_TOKENS": tokens, "RUST_LOG": "warn,ternflow::audit=warn"}
    try:
        redis_port, redis2_port = free_port(), free_port()
        procs.start("redis", ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no",
                              "--enable-debug-command", "yes"])
        redis2_cmd = ["redis-server", "--port", str(redis2_port), "--save", "", "--appendonly", "no"]
        procs.start("redis2", redis2_cmd)
        s1, s2, s3, s4, s5, s6 = (free_port() for _ in range(6))

        def serve_cmd(port, data, *extra):
            return [ternflow, "serve", "--addr", f"127.0.0.1:{port}", "--data-dir", os.path.join(tmp, data), *extra]

        procs.start("server-sqlite", serve_cmd(s1, "d1", "--max-attempts", "1"), env)
        time.sleep(0.5)
        procs.start("server-redis", serve_cmd(s2, "d2", "--store", f"redis://127.0.0.1:{redis_port}/0",
                                              "--redis-prefix", "drills"), env)
        # The backend that goes down: no model (the drills run in a folder without models/), so
        # its POST /v1/embed answers 503; jobs keep their attempts (a retry storm, not deaths).
        backend_cmd = serve_cmd(s3, "d3", "--max-attempts", "1000")
        procs.start("server-backend", backend_cmd, env)
        procs.start("server-store", serve_cmd(s4, "d4", "--store", f"redis://127.0.0.1:{redis2_port}/0"), env)
        down_cmd = serve_cmd(s5, "d5")
        procs.start("server-down", down_cmd, env)
        procs.start("server-verify", serve_cmd(s6, "d6", "--model", MODEL), env)
        base1, base2, base3, base4, base5, base6 = (f"http://127.0.0.1:{p}" for p in (s1, s2, s3, s4, s5, s6))
        for b, what in ((base1, "SQLite"), (base2, "Redis"), (base3, "backend"), (base4, "store"), (base5, "down"),
                        (base6, "verify")):
            wait_http(f"{b}/healthz", f"the {what} server")

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
        targets = ", ".join(f'"127.0.0.1:{p}"' for p in (s1, s2, s3, s4, s5, s6))
        with open(os.path.join(tmp, "prom.yml"), "w") as f:
            f.write(prometheus_config(am_port, f"""  - job_name: ternflow
    authorization: {{credentials_file: {token_file}}}
    static_configs: [{{targets: [{targets}]}}]
"""))
        procs.start("prometheus", ["prometheus", f"--config.file={tmp}/prom.yml", f"--storage.tsdb.path={tmp}/prom",
                                   f"--web.listen-address=127.0.0.1:{prom_port}"])
        am_url = f"http://127.0.0.1:{am_port}"
        wait_http(f"{am_url}/-/ready", "Alertmanager")
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", "Prometheus")
        alerts = Alerts(am_url)
        alerts_box["a"] = alerts
        threading.Thread(target=alerts.poll, daemon=True).start()
        say(f"stack up in {tmp}: servers :{s1} (SQLite) :{s2} (Redis) :{s3} (backend) :{s4} (store) :{s5} (down) "
            f":{s6} (verify), Prometheus :{prom_port}, Alertmanager :{am_port}")
        # Prometheus applies its targets a few seconds after it starts: the drills begin once it
        # has scraped every server a few times (a counter first seen at its value after a cause
        # would show no increase).
        end = time.monotonic() + 60
        while time.monotonic() < end:
            _, r = http_json("GET", f"http://127.0.0.1:{prom_port}/api/v1/query?query=count_over_time(up%5B1m%5D)")
            got = [int(x["value"][1]) for x in (r or {}).get("data", {}).get("result", []) if x["value"][1] != "0"]
            if len(got) == 6 and min(got) >= 3:
                break
            time.sleep(0.5)
        else:
            sys.exit("drills: Prometheus never scraped every server")
        say("Prometheus has scraped every server 3 times: the drills begin")

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
            # The worker that came back runs their model: it finishes them (else they would be
            # ready again with no claimer, and stall the queue once more).
            vec = base64.b64encode(struct.pack("<4f", 0.5, 0.5, 0.5, 0.5)).decode()
            acked = sum(http_json("POST", f"{base1}/v1/jobs/{j['id']}/ack", WORKER, {
                "token": j["lease"]["token"], "worker": "drill-back",
                "result": {"model_id": j["model_id"], "vector": vec, "source": "engine"}})[0] == 200
                for j in claimed["jobs"])
            say(f"no-workers: the worker acked {acked} of {len(claimed['jobs'])}")
            results["TernflowQueueStalled"] = (cause, fired, fix, resolved, "a worker claims")

        # -- server down: a server killed -9; the runbook's fix is to start it again.
        def server_down():
            victim = procs.get("server-down")
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            cause = now()
            say("server-down: the server was killed -9")
            fired = alerts.wait("TernflowServerDown", True, deadline)
            fix = now()
            procs.start("server-down", down_cmd, env)
            wait_http(f"{base5}/healthz", "the restarted server")
            resolved = alerts.wait("TernflowServerDown", False, deadline)
            results["TernflowServerDown"] = (cause, fired, fix, resolved, "`ternflow serve` started again")

        # -- store down: the Redis of a server with a claiming worker shut down; started again.
        def store_down():
            done = threading.Event()

            def claimer():
                while not done.is_set():
                    http_json("POST", f"{base4}/v1/jobs/claim", WORKER, {"worker": "drill-store", "max": 1}, timeout=30)
                    time.sleep(0.5)

            threading.Thread(target=claimer, daemon=True).start()
            time.sleep(5)
            subprocess.run(["redis-cli", "-p", str(redis2_port), "SHUTDOWN", "NOSAVE"], capture_output=True)
            procs.get("redis2").wait()
            cause = now()
            code, body = http_json("GET", f"{base4}/readyz")
            say(f"store-down: Redis shut down; /readyz -> {code} {str(body)[:120]}")
            for _ in range(3):
                t = time.monotonic()
                try:
                    mcode = http_json("GET", f"{base4}/metrics", ADMIN, timeout=10)[0]
                except OSError as e:
                    mcode = f"no answer ({e})"
                say(f"store-down: /metrics -> {mcode} in {time.monotonic() - t:.2f} s")
            fired = alerts.wait("TernflowStoreFailing", True, deadline)
            fix = now()
            procs.start("redis2", redis2_cmd)
            end = time.monotonic() + 60
            while time.monotonic() < end and http_json("GET", f"{base4}/readyz")[0] != 200:
                time.sleep(0.5)
            say(f"store-down: Redis started again; /readyz 200 after {now() - fix:.1f} s")
            resolved = alerts.wait("TernflowStoreFailing", False, deadline)
            done.set()
            results["TernflowStoreFailing"] = (cause, fired, fix, resolved, "Redis started again (the server reconnects)")

        # -- contention: a stuck worker keeps renewing a key; 5 others ask for it every 0.5 s.
        def contention():
            key = "drill:contended"
            _, held = http_json("POST", f"{base6}/v1/locks/{key}", WORKER, {"ttl_ms": 10000})
            assert held and "token" in held, held
            got = []

            def stuck():
                while not stop.is_set():
                    time.sleep(3)
                    code, _ = http_json("POST", f"{base6}/v1/locks/{key}/renew", WORKER,
                                        {"token": held["token"], "ttl_ms": 10000})
                    if code != 200:
                        say(f"contention: the stuck holder's renewal refused ({code}): it lost the key")
                        return

            def asker(i):
                # Each asker is one job's worker: its requests carry the job's traceparent, as
                # the worker's do (the server tells waiters apart by it).
                tp = f"00-{0xc0 + i:032x}-{0xc0 + i:016x}-01"
                while not stop.is_set():
                    code, g = http_json("POST", f"{base6}/v1/locks/{key}", WORKER, {"ttl_ms": 5000},
                                        headers={"traceparent": tp})
                    if code == 200:
                        got.append(i)
                        http_json("DELETE", f"{base6}/v1/locks/{key}", WORKER, {"token": g["token"]})
                        return
                    time.sleep(0.5)

            threading.Thread(target=stuck, daemon=True).start()
            askers = [threading.Thread(target=asker, args=(i,), daemon=True) for i in range(5)]
            for a in askers:
                a.start()
            cause = now()
            fired = alerts.wait("TernflowLockContention", True, deadline)
            fix = now()
            cli("locks", "release", "--stale", "--stale-after-ms", "60000", base=base6)
            for a in askers:
                a.join(timeout=60)
            say(f"contention: {len(got)} of 5 askers got the key after the release")
            resolved = alerts.wait("TernflowLockContention", False, deadline)
            results["TernflowLockContention"] = (cause, fired, fix, resolved,
                                                 "ternflow locks release --stale --stale-after-ms 60000")

        # -- SSE storm: a proxy cuts a client's stream every 0.25 s and it reconnects; another
        #    client's stream stays open throughout.
        def sse_storm():
            cutting = threading.Event()
            cutting.set()
            cuts = [0]

            def opened(token):
                req = urllib.request.Request(f"{base1}/v1/events", headers={
                    "authorization": f"Bearer {token}", "accept": "text/event-stream"})
                return urllib.request.urlopen(req, timeout=30)

            def steady():
                try:
                    with opened(WORKER) as r:
                        while not stop.is_set():
                            if not r.readline():
                                return
                except OSError:
                    return

            def cut_loop():
                while cutting.is_set():
                    try:
                        r = opened(PRODUCER)
                        r.close()
                        cuts[0] += 1
                    except OSError:
                        pass
                    time.sleep(0.25)

            threading.Thread(target=steady, daemon=True).start()
            threading.Thread(target=cut_loop, daemon=True).start()
            cause = now()
            fired = alerts.wait("TernflowSseDisconnectStorm", True, deadline)
            fix = now()
            cutting.clear()
            say(f"sse-storm: the cuts stopped after {cuts[0]} reconnects")
            resolved = alerts.wait("TernflowSseDisconnectStorm", False, deadline)
            results["TernflowSseDisconnectStorm"] = (cause, fired, fix, resolved, "the proxy stops cutting streams")

        # -- liar: a worker acks another text's vector for its job; the server, which runs the
        #    model, recomputes it (probation) and quarantines the identity.
        def liar():
            model = model_id(base6)
            _, real = http_json("POST", f"{base6}/v1/embed", WORKER, {"texts": ["what the liar sends instead"]})
            lie = real["vectors"][0]
            http_json("POST", f"{base6}/v1/jobs", PRODUCER,
                      {"jobs": [{"id": "liar-0", "text": "a job the liar takes", "model_id": model}]})
            _, claimed = http_json("POST", f"{base6}/v1/jobs/claim", LIAR, {"worker": "drill-liar", "max": 1})
            j = claimed["jobs"][0]
            code, body = http_json("POST", f"{base6}/v1/jobs/{j['id']}/ack", LIAR, {
                "token": j["lease"]["token"], "worker": "drill-liar",
                "result": {"model_id": model, "vector": lie, "source": "engine"}})
            cause = now()
            say(f"liar: its ack -> {code} {str(body)[:100]}")
            fired = alerts.wait("TernflowVerificationQuarantine", True, deadline)
            fix = now()
            out = cli("quarantine", "list", base=base6)
            say(f"liar: quarantined: {out.stdout.strip().splitlines()[-1:] if out.stdout.strip() else out.stdout}")
            # An honest worker does the job the liar's result was undone for.
            _, honest = http_json("POST", f"{base6}/v1/embed", WORKER, {"texts": ["a job the liar takes"]})
            _, claimed = http_json("POST", f"{base6}/v1/jobs/claim", WORKER, {"worker": "drill-honest", "max": 1})
            for j in claimed["jobs"]:
                code, _ = http_json("POST", f"{base6}/v1/jobs/{j['id']}/ack", WORKER, {
                    "token": j["lease"]["token"], "worker": "drill-honest",
                    "result": {"model_id": model, "vector": honest["vectors"][0], "source": "engine"}})
                say(f"liar: an honest worker did {j['id']} again: ack -> {code}")
            resolved = alerts.wait("TernflowVerificationQuarantine", False, deadline)
            results["TernflowVerificationQuarantine"] = (cause, fired, fix, resolved,
                                                         "left quarantined (a liar); resolves after its 15-minute window")

        # -- backend down: backend-only WASI workers on a server with no model (its /v1/embed
        #    answers 503): their breakers open and the jobs they nack come back. The runbook's
        #    fix: the server restarted with --model. Runs once the no-workers drill is over (its
        #    claims would keep that one from firing: the rules sum over the fleet).
        def backend_down():
            while "TernflowQueueStalled" not in results and not stop.is_set():
                time.sleep(1)
            model = model_id(base6)
            jobs = [{"id": f"bd-{i}", "text": f"backend drill sentence number {i}", "model_id": model}
                    for i in range(300)]
            http_json("POST", f"{base3}/v1/jobs", PRODUCER, {"jobs": jobs})
            for i in range(2):
                procs.start(f"wasi-backend-{i}", [
                    WASMTIME, "run", "-S", "http", "--env", f"TERNFLOW_SERVER={base3}", "--env",
                    f"TERNFLOW_TOKEN={WORKER}", "--env", 'TERNFLOW_CONFIG={"workerId":"drill-wasi-%d"}' % i,
                    WASI_BACKEND])
            cause = now()
            say("backend-down: 300 jobs, 2 backend-only WASI workers, a server with no model")
            fired_b = alerts.wait("TernflowBackendBreakerOpen", True, deadline)
            fired_r = alerts.wait("TernflowRetryStorm", True, deadline)
            fix = now()
            p = procs.get("server-backend")
            p.terminate()
            p.wait()
            procs.start("server-backend", backend_cmd + ["--model", MODEL], env)
            wait_http(f"{base3}/healthz", "the backend server restarted with --model")
            say("backend-down: the server restarted with --model")
            resolved_b = alerts.wait("TernflowBackendBreakerOpen", False, deadline)
            resolved_r = alerts.wait("TernflowRetryStorm", False, deadline)
            _, st = http_json("POST", f"{base3}/v1/jobs/status", PRODUCER, {"ids": [j["id"] for j in jobs]})
            states = {}
            for x in (st or {}).get("jobs", []):
                states[x.get("state")] = states.get(x.get("state"), 0) + 1
            say(f"backend-down: the 300 jobs now: {states}")
            how = "the server restarted with --model"
            results["TernflowBackendBreakerOpen"] = (cause, fired_b, fix, resolved_b, how)
            results["TernflowRetryStorm"] = (cause, fired_r, fix, resolved_r, how)

        drills = [threading.Thread(target=f, daemon=True)
                  for f in (poison, stampede, leak, slow_store, stalled, server_down, store_down, contention,
                            sse_storm, liar, backend_down)]
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
    "TernflowServerDown": "a server killed -9",
    "TernflowStoreFailing": "the Redis of a server with a claiming worker shut down",
    "TernflowLockContention": "5 workers asking every 0.5 s for a key a stuck worker keeps renewing",
    "TernflowSseDisconnectStorm": "a client's stream cut every 0.25 s, reconnecting",
    "TernflowVerificationQuarantine": "a worker acking another text's vector",
    "TernflowBackendBreakerOpen": "2 backend-only WASI workers, 300 jobs, a server with no model",
    "TernflowRetryStorm": "the same: every job nacked backend_unavailable and retried",
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
