#!/usr/bin/env python3
"""Figures of the WASI components (crates/wasi) under Wasmtime, against a real `ternflow serve`:
the WASI 0.2 builds and the WASI 0.3 (p3) builds side by side, in one run.

    scripts/build-wasi.sh && cargo build --release -p ternflow-cli
    python3 scripts/wasi-figures.py [--instances 8] [--jobs 600] [--idle-secs 30] [--requests 400]

Prints, per worker instance (WASI 0.2 with the engine, backend-only, WASI 0.3 with the engine):
linear memory after start (and how much of it is the model); proportional set size (PSS) of each
`wasmtime run` process; how many instances fit in 1 GiB; start-up time (spawn to ready, and the
instance's own init); jobs/s of one instance; CPU used by an idle worker over `--idle-secs`.
Then the HTTP handler under `wasmtime serve` (WASI 0.2 and 0.3): requests/s and p50/p99 latency
with 1 and 16 requests at once, distinct texts (every request embeds), how many instances served
them and how many requests one instance had in flight at most, and the PSS of the serve process.
Starts its own server on a free port with a temporary embedded store, and kills everything it
started on exit. Standard library only.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
WASI_DIR = os.environ.get("TERNFLOW_WASI_DIR", os.path.join(TARGET, "wasi"))
_PINNED = os.path.join(ROOT, ".tools", "wasmtime")  # scripts/setup.sh puts the pinned one here
WASMTIME = os.environ.get("TERNFLOW_WASMTIME", _PINNED if os.path.exists(_PINNED) else "wasmtime")
MODEL = os.path.join(ROOT, "models", "ternlight-int4.bin")
TOKEN = "figures-admin"
GIB = 1 << 30


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ternflow_bin():
    for kind in ("release", "debug"):
        p = os.path.join(TARGET, kind, "ternflow")
        if os.path.exists(p):
            return p, kind
    sys.exit("no ternflow binary: cargo build --release -p ternflow-cli")


def api(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="GET" if body is None else "POST")
    req.add_header("authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


class Worker:
    """One `wasmtime run` of a worker component; its JSON stdout lines are collected."""

    def __init__(self, wasm, base, config, flags=()):
        p3 = ["-S", "p3"] if wasm.endswith("-p3") else []
        cmd = [WASMTIME, "run", "-S", "http", *p3,
               "--env", "TERNFLOW_SERVER=" + base, "--env", "TERNFLOW_TOKEN=" + TOKEN,
               "--env", "TERNFLOW_CONFIG=" + json.dumps(config),
               "--dir", os.path.join(ROOT, "models") + "::/models",
               "--env", "TERNFLOW_MODEL=/models/ternlight-int4.bin",
               os.path.join(WASI_DIR, wasm + ".wasm"), *flags]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.events = {}
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            ev = json.loads(line)
            with self.cv:
                self.events[ev["event"]] = (time.monotonic(), ev)
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait(self, name, secs=180):
        with self.cv:
            ok = self.cv.wait_for(lambda: name in self.events or self.proc.poll() is not None, secs)
            if name not in self.events:
                sys.exit(f"worker: no {name!r} event (exit {self.proc.poll()}, waited {ok})")
            return self.events[name]

    def stop(self):
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def pss_bytes(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jobs_per_s(base, wasm, n, tag):
    texts = [f"figures {tag} {os.getpid()} {i}: the quick brown fox jumps over the lazy dog {i * 7919}" for i in range(n)]
    w = Worker(wasm, base, {"concurrency": 16, "claimWaitMs": 500}, ["--idle-exit-ms", "2000"])
    try:
        w.wait("ready")
        t0 = time.monotonic()
        ids = [j["id"] for j in api(base, "/v1/jobs", {"jobs": [{"text": t} for t in texts]})["jobs"]]
        while True:
            st = api(base, "/v1/jobs/status", {"ids": ids})["jobs"]
            if sum(1 for s in st if s["state"] in ("done", "dead")) == n:
                break
            time.sleep(0.05)
        secs = time.monotonic() - t0
        w.wait("stopped", 60)
        return n / secs, secs
    finally:
        w.kill()


def handler_figures(base, wasm, requests, at_once):
    """`wasmtime serve` of a handler build: `requests` POSTs of one distinct text each, `at_once`
    in flight; (requests/s, p50 ms, p99 ms, instances, most in flight on one instance, PSS)."""
    port = free_port()
    p3 = ["-S", "p3", "--max-instance-concurrent-reuse-count", "16"] if wasm.endswith("-p3") else []
    proc = subprocess.Popen([WASMTIME, "serve", "-S", "cli", "-O", "pooling-allocator=n", *p3,
                             "--max-instance-reuse-count", "100000", "--addr", f"127.0.0.1:{port}",
                             "--env", "TERNFLOW_SERVER=" + base, "--env", "TERNFLOW_TOKEN=" + TOKEN,
                             os.path.join(WASI_DIR, wasm + ".wasm")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    tag = f"{wasm} {at_once} {os.getpid()} {time.time()}"

    def post(i):
        body = json.dumps({"texts": [f"handler {tag} {i}: a sentence to embed, number {i * 7919}"]}).encode()
        req = urllib.request.Request(url, data=body, method="POST")
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            h = r.headers
            return (time.monotonic() - t0, int(h["x-ternflow-instance-requests"]),
                    int(h["x-ternflow-instance-in-flight"]))

    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(at_once) as pool:
            warm = list(pool.map(post, range(-at_once, 0)))  # instances started, pipelines built
            t0 = time.monotonic()
            out = list(pool.map(post, range(requests)))
            secs = time.monotonic() - t0
        pss = pss_bytes(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    lat = sorted(o[0] for o in out)
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1000
    instances = sum(1 for o in warm + out if o[1] == 1)  # an instance's first request served 1
    return requests / secs, q(0.5), q(0.99), max(o[2] for o in out), pss, instances


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--idle-secs", type=int, default=30)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    for name in ("ternflow-wasi-worker", "ternflow-wasi-worker-backend", "ternflow-wasi-worker-p3",
                 "ternflow-wasi-handler", "ternflow-wasi-handler-p3"):
        if not os.path.exists(os.path.join(WASI_DIR, name + ".wasm")):
            sys.exit(f"{name}.wasm missing in {WASI_DIR}: run scripts/build-wasi.sh")
    if not shutil.which(WASMTIME):
        sys.exit("no wasmtime: scripts/setup.sh installs it")
    bin_, kind = ternflow_bin()
    version = subprocess.run([WASMTIME, "--version"], capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="wasi-figures-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, TERNFLOW_TOKENS=f"{TOKEN}:admin", RUST_LOG="warn")
    server = subprocess.Popen([bin_, "serve", "--addr", f"127.0.0.1:{port}", "--store", "embedded",
                               "--data-dir", os.path.join(tmp, "data"), "--model", MODEL],
                              env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        print(f"# WASI worker figures ({version}, ternflow serve {kind} build, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start)")
        sizes = {n: os.path.getsize(os.path.join(WASI_DIR, n + ".wasm"))
                 for n in ("ternflow-wasi-worker", "ternflow-wasi-worker-backend", "ternflow-wasi-worker-p3",
                           "ternflow-wasi-handler", "ternflow-wasi-handler-p3")}
        print("component sizes: " + ", ".join(f"{n} {s / 1024:.0f} KiB" for n, s in sizes.items()))

        rows = {}
        for wasm, label in (("ternflow-wasi-worker", "WASI 0.2, engine"), ("ternflow-wasi-worker-backend", "WASI 0.2, backend-only"), ("ternflow-wasi-worker-p3", "WASI 0.3, engine")):
            # The first alone (its start-up is not shared with the others), then the rest.
            ws = [Worker(wasm, base, {"claimWaitMs": 10000}, ["--stop-on-eof"])]
            workers += ws
            t_first = ws[0].wait("ready")[0] - ws[0].t0
            more = [Worker(wasm, base, {"claimWaitMs": 10000}, ["--stop-on-eof"]) for _ in range(args.instances - 1)]
            workers += more
            ws += more
            ready = [w.wait("ready") for w in ws]
            time.sleep(1.0)  # settled: every instance waits in its long-poll claim
            started = [ev["started"] for _, ev in ready]
            pss = [pss_bytes(w.proc.pid) for w in ws]
            rows[label] = {
                "linear": max(s["memory_bytes"] for s in started),
                "before_model": max(s["memory_before_model"] for s in started),
                "model": started[0]["model_bytes"],
                "init_ms": started[0]["init_ms"],
                "startup_s": t_first,
                "pss": sum(pss) / len(pss),
            }
            for w in ws:
                w.stop()
        print(f"\nper instance, {args.instances} instances each, after start (idle in a claim):")
        print("| build | linear memory | of it the model file | PSS of one `wasmtime run` | in 1 GiB (processes) | in 1 GiB (linear memory, one host) | start-up, first instance alone: spawn → ready (incl. compiling) | of it the instance's own init |")
        print("|---|---|---|---|---|---|---|---|")
        for label, r in rows.items():
            print(f"| {label} | {r['linear'] / 1024:,.0f} KiB | {r['model'] / 1024:,.0f} KiB "
                  f"| {r['pss'] / 1024:,.0f} KiB | {GIB // int(r['pss'])} | {GIB // r['linear']} "
                  f"| {r['startup_s'] * 1000:,.0f} ms | {r['init_ms']:.1f} ms |")
        eng = rows["WASI 0.2, engine"]
        print(f"engine build: linear memory before the model loaded {eng['before_model'] / 1024:,.0f} KiB; "
              f"the model (file {eng['model'] / 1024:,.0f} KiB, used in place) and its decoded weights take the other "
              f"{(eng['linear'] - eng['before_model']) / 1024:,.0f} KiB")

        print(f"\nthroughput of one instance, {args.jobs} distinct texts, concurrency 16, 0 % cache hits:")
        for wasm, label in (("ternflow-wasi-worker", "WASI 0.2, engine"), ("ternflow-wasi-worker-backend", "WASI 0.2, backend-only"), ("ternflow-wasi-worker-p3", "WASI 0.3, engine")):
            rate, secs = jobs_per_s(base, wasm, args.jobs, label.replace(",", "").replace(" ", "-"))
            print(f"  {label}: {rate:.1f} jobs/s ({args.jobs} jobs in {secs:.2f} s)")
        print("  (the browser worker on this machine: `node bench/worker.mjs --n 600`, quoted in the README)")

        print(f"\nidle worker (empty queue, claim long-poll 10 s), CPU of the whole wasmtime process over {args.idle_secs} s:")
        for wasm, label in (("ternflow-wasi-worker", "WASI 0.2"), ("ternflow-wasi-worker-p3", "WASI 0.3")):
            w = Worker(wasm, base, {"claimWaitMs": 10000}, ["--stop-on-eof"])
            workers.append(w)
            w.wait("ready")
            time.sleep(2.0)
            c0, t0 = cpu_secs(w.proc.pid), time.monotonic()
            time.sleep(args.idle_secs)
            c1, t1 = cpu_secs(w.proc.pid), time.monotonic()
            used = c1 - c0
            print(f"  {label}: {used * 1000:.0f} ms over {t1 - t0:.1f} s = {100 * used / (t1 - t0):.3f} % of one core")
            w.stop()

        print(f"\nHTTP handler under `wasmtime serve`, {args.requests} requests of one distinct text each "
              f"(every one embedded), after a warm-up:")
        print("| build | at once | requests/s | p50 | p99 | instances | most in flight on one instance | PSS of `wasmtime serve` |")
        print("|---|---|---|---|---|---|---|---|")
        for wasm, label in (("ternflow-wasi-handler", "WASI 0.2"), ("ternflow-wasi-handler-p3", "WASI 0.3")):
            for at_once in (1, 16):
                rps, p50, p99, most, pss, inst = handler_figures(base, wasm, args.requests, at_once)
                print(f"| {label} | {at_once} | {rps:.1f} | {p50:.1f} ms | {p99:.1f} ms | {inst} | {most} | {pss / 1024:,.0f} KiB |")
    finally:
        for w in workers:
            w.kill()
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
