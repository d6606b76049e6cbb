#!/usr/bin/env python3
"""Generates deploy/grafana/ternflow.json, the Grafana dashboard of ternflow's series, with
grafanalib (PyPI): the same signals the alert rules watch (deploy/prometheus/alerts.yml), one row
per runbook concern. Import the JSON into Grafana with a Prometheus data source named by the
`datasource` variable.

  python3 deploy/grafana/dashboard.py           rewrites ternflow.json
  python3 deploy/grafana/dashboard.py --check   exits 1 when ternflow.json is not what this writes

crates/cli/tests/alerts.rs checks that every series a panel's query names is one `ternflow serve`
exports.
"""

import json
import os
import sys

from grafanalib.core import (
    Dashboard, GridPos, Target, Template, Templating, TimeSeries, RowPanel,
)
from grafanalib._gen import DashboardEncoder

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "ternflow.json")
DS = "${datasource}"
SEL = '{job="ternflow"}'


def q(expr, legend):
    return Target(expr=expr.replace("{SEL}", SEL).replace("{SELX}", SEL[:-1] + ","), legendFormat=legend)


def panel(title, targets, unit="short", x=0, y=0, w=12, h=8, desc=""):
    for i, t in enumerate(targets):
        t.refId = chr(ord("A") + i)
    return TimeSeries(title=title, dataSource=DS, targets=targets, unit=unit, description=desc,
                      gridPos=GridPos(h=h, w=w, x=x, y=y))


ROWS = [
    ("Queue", [
        ("Jobs by state", [
            q("sum(ternflow_queue_ready{SEL})", "ready"),
            q("sum(ternflow_queue_delayed{SEL})", "delayed"),
            q("sum(ternflow_jobs_in_flight{SEL})", "leased"),
            q("sum(ternflow_dead_letters{SEL})", "dead"),
        ], "short", "TernflowQueueStalled, TernflowDeadLettersGrowing"),
        ("Throughput", [
            q("sum(rate(ternflow_jobs_enqueued_total{SEL}[1m]))", "enqueued/s"),
            q("sum(rate(ternflow_jobs_claimed_total{SEL}[1m]))", "leased/s"),
            q("sum(rate(ternflow_jobs_acked_total{SEL}[1m]))", "acked/s"),
        ], "ops", ""),
        ("Job latency, claim to ack", [
            q("histogram_quantile(0.5, sum by (le) (rate(ternflow_job_latency_seconds_bucket{SEL}[5m])))", "p50"),
            q("histogram_quantile(0.99, sum by (le) (rate(ternflow_job_latency_seconds_bucket{SEL}[5m])))", "p99"),
        ], "s", ""),
        ("Retries and dead letters by reason", [
            q('sum by (reason) (rate(ternflow_nacks_by_reason_total{SELX}outcome="retry"}[5m]))', "retry {{reason}}"),
            q("sum(rate(ternflow_leases_expired_total{SEL}[5m]))", "lease expired"),
            q("sum by (reason) (rate(ternflow_dead_letters_by_reason_total{SEL}[5m]))", "dead {{reason}}"),
        ], "ops", "TernflowRetryStorm"),
    ]),
    ("Store", [
        ("Store operation p99, by operation", [
            q("histogram_quantile(0.99, sum by (op, le) (rate(ternflow_store_op_duration_seconds_bucket{SEL}[2m])))", "{{op}}"),
        ], "s", "TernflowStoreLatencySpike"),
        ("Store errors, by operation", [
            q("sum by (op) (rate(ternflow_store_op_errors_total{SEL}[5m]))", "{{op}}"),
        ], "ops", "TernflowStoreFailing"),
    ]),
    ("Locks and cache", [
        ("Single-flight locks", [
            q("sum(rate(ternflow_lock_acquired_total{SEL}[1m]))", "granted/s"),
            q("sum(rate(ternflow_lock_contended_total{SEL}[1m]))", "refused/s"),
            q("sum(rate(ternflow_lock_leaked_total{SEL}[5m]))", "leaked/s"),
            q("sum(rate(ternflow_locks_broken_total{SEL}[5m]))", "broken/s"),
            q("sum(ternflow_locks_held{SEL})", "held"),
        ], "short", "TernflowLockContention, TernflowLocksLeaking"),
        ("Stampede: waiters on one key", [
            q("max(ternflow_lock_waiters_max{SEL})", "most waiters now"),
            q("sum(ternflow_lock_keys_contended{SEL})", "keys with waiters"),
            q("histogram_quantile(0.99, sum by (le) (rate(ternflow_lock_waiters_bucket{SEL}[5m])))", "p99 waiters per episode"),
            q("histogram_quantile(0.99, sum by (le) (rate(ternflow_lock_wait_seconds_bucket{SEL}[5m])))", "p99 wait (s)"),
        ], "short", "TernflowCacheStampede"),
        ("Remote cache hit ratio", [
            q("sum(rate(ternflow_cache_hits_total{SEL}[5m])) / (sum(rate(ternflow_cache_hits_total{SEL}[5m])) + sum(rate(ternflow_cache_misses_total{SEL}[5m])))", "hits"),
        ], "percentunit", ""),
    ]),
    ("Workers and trust", [
        ("Workers", [
            q('count(ternflow_worker_reading{SELX}name="in_flight"})', "reporting"),
            q('count(ternflow_worker_reading{SELX}name="backend_breaker"} >= 1)', "backend breaker open"),
        ], "short", "TernflowBackendBreakerOpen"),
        ("Backend embed", [
            q("sum(rate(ternflow_embed_requests_total{SEL}[1m]))", "requests/s"),
            q("sum(rate(ternflow_embed_rejected_total{SEL}[1m]))", "rejected/s"),
            q("histogram_quantile(0.99, sum by (le) (rate(ternflow_embed_latency_seconds_bucket{SEL}[5m])))", "p99 latency (s)"),
        ], "short", ""),
        ("Verification", [
            q("sum(rate(ternflow_results_verified_total{SEL}[5m]))", "verified/s"),
            q("sum(rate(ternflow_results_mismatched_total{SEL}[5m]))", "mismatched/s"),
            q("sum(increase(ternflow_quarantines_total{SEL}[15m]))", "quarantined (15m)"),
        ], "short", "TernflowVerificationQuarantine"),
        ("Streams and long polls", [
            q("sum(ternflow_sse_clients{SEL})", "SSE clients"),
            q("sum(rate(ternflow_sse_disconnects_total{SEL}[5m]))", "disconnects/s"),
            q("sum(ternflow_claim_long_polls{SEL})", "claims waiting"),
        ], "short", "TernflowSseDisconnectStorm"),
    ]),
]


def build():
    panels, y = [], 0
    for row, items in ROWS:
        panels.append(RowPanel(title=row, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for i, (title, targets, unit, alerts) in enumerate(items):
            desc = f"Alerts: {alerts} (docs/runbook.md)" if alerts else ""
            panels.append(panel(title, targets, unit, x=12 * (i % 2), y=y + 8 * (i // 2), desc=desc))
        y += 8 * ((len(items) + 1) // 2)
    return Dashboard(
        title="ternflow",
        uid="ternflow",
        tags=["ternflow"],
        timezone="utc",
        refresh="30s",
        templating=Templating(list=[Template(name="datasource", query="prometheus", type="datasource", label="Prometheus")]),
        panels=panels,
    ).auto_panel_ids()


def render():
    return json.dumps(build().to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit("deploy/grafana/ternflow.json is not what dashboard.py writes: run python3 deploy/grafana/dashboard.py")
        print("deploy/grafana/ternflow.json is up to date")
    else:
        with open(OUT, "w") as f:
            f.write(text)
        print(f"wrote {OUT}")
