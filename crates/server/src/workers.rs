//! A tenant's worker table: the latest snapshot each of its workers pushed (`POST /v1/metrics`),
//! for the dashboard, `GET /v1/stats` and `GET /metrics`.
//!
//! One table per tenant (it lives with the tenant, `tenants::TenantUsage`), so one tenant's
//! workers can neither see nor push out another's. A signed tenant's table is bounded twice
//! ([`Bounds::visitors`]): at most `max_workers` rows (an operator's quota; a new name beyond it
//! is refused with 429 `quota_exceeded` once no quiet row can make room) and at most
//! [`MAX_NAMES_PER_SUB`] names per identity (a `sub` that invents names replaces its own
//! oldest, nobody else's). The operator's own tenant, whose static tokens a whole fleet may
//! share, keeps up to `max_workers` rows, the least recently heard making room
//! ([`Bounds::fleet`]). Names and series are client-chosen, so they are checked
//! ([`crate::identity::is_clean`]) before they are kept.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use ternflow_core::protocol::WorkerMetrics;

use crate::metrics::runtime_of;

/// A worker that has not reported for this long drops out of the table (ms).
pub const WORKER_QUIET_MS: u64 = 5 * 60_000;
/// Most worker names one identity (`sub`) holds in its tenant's table.
pub const MAX_NAMES_PER_SUB: usize = 16;
const MAX_SERIES_PER_WORKER: usize = 64;

/// A worker's latest snapshot, when it came, its runtime and who sent it.
#[derive(Debug, Clone)]
struct Entry {
    snap: WorkerMetrics,
    seen: u64,
    runtime: String,
    sub: String,
}

/// One row of the dashboard's worker table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct WorkerRow {
    /// The latest snapshot.
    #[serde(flatten)]
    pub snapshot: WorkerMetrics,
    /// When it arrived (Unix ms).
    pub last_seen: u64,
    /// What the worker's `User-Agent` says it runs in (`HeadlessChrome 156`, `Node`, `native`…).
    pub runtime: String,
    /// The identity (token `sub`) that pushed it: the writer its results are recorded under.
    pub sub: String,
    /// Whether that identity is quarantined (filled in by the dashboard route).
    pub quarantined: bool,
}

/// Why a snapshot was not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The name is not 1–128 characters of `[A-Za-z0-9._:@-]`.
    BadName,
    /// The tenant's table is full of workers heard from recently.
    Full(usize),
}

/// How a table is bounded (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most rows.
    pub max_workers: usize,
    /// Most rows of one identity.
    pub per_sub: usize,
    /// When full: refuse a new name (`true`) or drop the least recently heard row.
    pub refuse_when_full: bool,
}

impl Bounds {
    /// A signed tenant's: its quota, [`MAX_NAMES_PER_SUB`] per identity, refusing when full.
    pub fn visitors(max_workers: usize) -> Self {
        Bounds {
            max_workers,
            per_sub: MAX_NAMES_PER_SUB,
            refuse_when_full: true,
        }
    }

    /// The operator's tenant: `max_workers` rows, the least recently heard making room.
    pub fn fleet(max_workers: usize) -> Self {
        Bounds {
            max_workers,
            per_sub: usize::MAX,
            refuse_when_full: false,
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct WorkerTable {
    rows: Mutex<BTreeMap<String, Entry>>,
}

fn metric_name(s: &str) -> String {
    let n: String = s
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() {
        "_".to_owned()
    } else {
        n
    }
}

/// A Prometheus label value, escaped.
pub(crate) fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl WorkerTable {
    /// Keeps `snap` as its worker's latest (see the [module docs](self) for the bounds).
    ///
    /// # Errors
    /// [`Refused`]: a bad name, or a full table.
    pub fn push(
        &self,
        mut snap: WorkerMetrics,
        user_agent: &str,
        sub: &str,
        now_ms: u64,
        bounds: Bounds,
    ) -> Result<(), Refused> {
        if !crate::identity::is_clean(&snap.worker, 128) {
            return Err(Refused::BadName);
        }
        snap.counters = snap
            .counters
            .into_iter()
            .take(MAX_SERIES_PER_WORKER)
            .map(|(k, v)| (metric_name(&k), v))
            .collect();
        snap.gauges = snap
            .gauges
            .into_iter()
            .filter(|(_, v)| v.is_finite())
            .take(MAX_SERIES_PER_WORKER)
            .map(|(k, v)| (metric_name(&k), v))
            .collect();
        let mut w = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let known = w.get(&snap.worker);
        if known.is_some_and(|e| e.sub != sub) {
            // Another identity's worker of that name: never overwritten (it would be a way to
            // push someone out, or to speak in their name). The name is kept per identity.
            snap.worker = format!("{}/{}", sub, snap.worker);
        }
        if !w.contains_key(&snap.worker) {
            w.retain(|_, e| e.seen.saturating_add(WORKER_QUIET_MS) > now_ms);
            let oldest = |rows: &mut dyn Iterator<Item = (&String, &Entry)>| {
                rows.min_by_key(|(_, e)| e.seen).map(|(k, _)| k.clone())
            };
            let own = w.values().filter(|e| e.sub == sub).count();
            let victim = if own >= bounds.per_sub {
                oldest(&mut w.iter().filter(|(_, e)| e.sub == sub))
            } else if w.len() >= bounds.max_workers {
                if bounds.refuse_when_full {
                    return Err(Refused::Full(bounds.max_workers));
                }
                oldest(&mut w.iter())
            } else {
                None
            };
            if let Some(k) = victim {
                w.remove(&k);
            }
        }
        let runtime = runtime_of(user_agent);
        w.insert(
            snap.worker.clone(),
            Entry {
                snap,
                seen: now_ms,
                runtime,
                sub: sub.to_owned(),
            },
        );
        Ok(())
    }

    /// Every worker heard from within [`WORKER_QUIET_MS`], as the dashboard's rows.
    pub fn rows(&self, now_ms: u64) -> Vec<WorkerRow> {
        let mut w = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|_, e| e.seen.saturating_add(WORKER_QUIET_MS) > now_ms);
        w.values()
            .map(|e| WorkerRow {
                snapshot: e.snap.clone(),
                last_seen: e.seen,
                runtime: e.runtime.clone(),
                sub: e.sub.clone(),
                quarantined: false,
            })
            .collect()
    }

    /// The latest snapshot of every worker heard from within [`WORKER_QUIET_MS`].
    pub fn snapshots(&self, now_ms: u64) -> BTreeMap<String, WorkerMetrics> {
        let mut w = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|_, e| e.seen.saturating_add(WORKER_QUIET_MS) > now_ms);
        w.iter().map(|(k, e)| (k.clone(), e.snap.clone())).collect()
    }

    /// Rows now (quiet ones included until the next read drops them).
    pub fn len(&self) -> usize {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The workers' series as Prometheus text, each labelled with `tenant`.
    pub fn render(&self, tenant: &str, now_ms: u64, out: &mut String) {
        let workers = self.snapshots(now_ms);
        if workers.is_empty() {
            return;
        }
        let t = label(tenant);
        let _ = writeln!(
            out,
            "# HELP ternflow_worker_events_total Counters pushed by workers (POST /v1/metrics), by name."
        );
        let _ = writeln!(out, "# TYPE ternflow_worker_events_total counter");
        for (name, w) in &workers {
            for (k, v) in &w.counters {
                let _ = writeln!(
                    out,
                    "ternflow_worker_events_total{{tenant=\"{t}\",worker=\"{}\",name=\"{k}\"}} {v}",
                    label(name)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP ternflow_worker_reading Gauges pushed by workers (POST /v1/metrics), by name."
        );
        let _ = writeln!(out, "# TYPE ternflow_worker_reading gauge");
        for (name, w) in &workers {
            for (k, v) in &w.gauges {
                let _ = writeln!(
                    out,
                    "ternflow_worker_reading{{tenant=\"{t}\",worker=\"{}\",name=\"{k}\"}} {v}",
                    label(name)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(name: &str) -> WorkerMetrics {
        WorkerMetrics {
            worker: name.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn renders_with_the_tenant_label() {
        let t = WorkerTable::default();
        let mut s = snap("w1");
        s.counters.insert("Jobs Done".into(), 7);
        s.gauges.insert("in_flight".into(), 2.0);
        t.push(s, "", "v1", 0, Bounds::visitors(10)).unwrap();
        let mut out = String::new();
        t.render("acme", 0, &mut out);
        assert!(out.contains(
            "ternflow_worker_events_total{tenant=\"acme\",worker=\"w1\",name=\"jobs_done\"} 7\n"
        ));
        assert!(out.contains(
            "ternflow_worker_reading{tenant=\"acme\",worker=\"w1\",name=\"in_flight\"} 2\n"
        ));
    }

    #[test]
    fn names_are_checked_and_bounded_per_identity_and_per_tenant() {
        let t = WorkerTable::default();
        assert_eq!(
            t.push(snap("w\nINFO forged"), "", "v1", 0, Bounds::visitors(100)),
            Err(Refused::BadName)
        );
        assert_eq!(
            t.push(snap("w\u{1b}[2J"), "", "v1", 0, Bounds::visitors(100)),
            Err(Refused::BadName)
        );
        // One identity inventing names replaces its own oldest, nobody else's.
        t.push(snap("honest"), "", "v2", 0, Bounds::visitors(100))
            .unwrap();
        for i in 0..1_001u64 {
            t.push(
                snap(&format!("n{i}")),
                "",
                "v1",
                i + 1,
                Bounds::visitors(100),
            )
            .unwrap();
        }
        let w = t.snapshots(2_000);
        assert_eq!(w.len(), MAX_NAMES_PER_SUB + 1);
        assert!(w.contains_key("honest"));
        assert!(w.contains_key("n1000") && !w.contains_key("n0"));
        // A name another identity holds is kept apart, not overwritten.
        t.push(snap("honest"), "", "v1", 3_000, Bounds::visitors(100))
            .unwrap();
        let w = t.rows(3_000);
        assert!(w
            .iter()
            .any(|r| r.snapshot.worker == "honest" && r.sub == "v2"));
        // The tenant's quota: full of recent rows, a new name is refused.
        let small = WorkerTable::default();
        small
            .push(snap("a"), "", "s1", 0, Bounds::visitors(2))
            .unwrap();
        small
            .push(snap("b"), "", "s2", 0, Bounds::visitors(2))
            .unwrap();
        assert_eq!(
            small.push(snap("c"), "", "s3", 1, Bounds::visitors(2)),
            Err(Refused::Full(2))
        );
        // A quiet row makes room.
        small
            .push(
                snap("c"),
                "",
                "s3",
                WORKER_QUIET_MS + 1,
                Bounds::visitors(2),
            )
            .unwrap();
        // The operator's fleet: full, the least recently heard makes room.
        let fleet = WorkerTable::default();
        for (i, n) in ["a", "b", "c"].iter().enumerate() {
            fleet
                .push(snap(n), "", "static", i as u64, Bounds::fleet(2))
                .unwrap();
        }
        let names: Vec<String> = fleet.snapshots(3).into_keys().collect();
        assert_eq!(names, ["b", "c"]);
    }
}
