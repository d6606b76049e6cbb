//! [`IntegrityStore`] in memory: writers' standings, what each wrote, proposals and requeues.

use async_trait::async_trait;

use super::{MemoryStore, St};
use crate::error::Result;
use crate::store::{IntegrityStore, Quarantine, Standing, Written};

#[async_trait]
impl IntegrityStore for MemoryStore {
    async fn standing(&self, sub: &str) -> Result<Standing> {
        Ok(self.lock().standing.get(sub).cloned().unwrap_or_default())
    }

    async fn add_verified(&self, sub: &str, n: u64) -> Result<u64> {
        let mut g = self.lock();
        let s = g.standing.entry(sub.to_owned()).or_default();
        s.verified += n;
        Ok(s.verified)
    }

    async fn quarantine(&self, sub: &str, q: Quarantine) -> Result<bool> {
        let mut g = self.lock();
        let s = g.standing.entry(sub.to_owned()).or_default();
        if s.quarantine.is_some() {
            return Ok(false);
        }
        s.quarantine = Some(q);
        Ok(true)
    }

    async fn lift_quarantine(&self, sub: &str) -> Result<bool> {
        let mut g = self.lock();
        match g.standing.get_mut(sub) {
            Some(s) if s.quarantine.is_some() => {
                *s = Standing::default();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn quarantined(&self, limit: usize) -> Result<Vec<(String, Quarantine)>> {
        let g = self.lock();
        let mut v: Vec<(String, Quarantine)> = g
            .standing
            .iter()
            .filter_map(|(sub, s)| Some((sub.clone(), s.quarantine.clone()?)))
            .collect();
        v.sort_by(|a, b| (a.1.at, &a.0).cmp(&(b.1.at, &b.0)));
        v.truncate(limit);
        Ok(v)
    }

    async fn note_written(&self, sub: &str, items: Vec<Written>) -> Result<()> {
        self.lock()
            .written
            .entry(sub.to_owned())
            .or_default()
            .extend(items);
        Ok(())
    }

    async fn written_by(&self, sub: &str) -> Result<Vec<Written>> {
        let g = self.lock();
        let mut v: Vec<Written> = g
            .written
            .get(sub)
            .map(|w| w.iter().cloned().collect())
            .unwrap_or_default();
        // In the order the other stores give: by the encoded item.
        v.sort_by_cached_key(Written::encode);
        Ok(v)
    }

    async fn job_inputs(&self, ids: &[String]) -> Result<Vec<Option<(String, String)>>> {
        let g = self.lock();
        Ok(ids
            .iter()
            .map(|id| g.jobs.get(id).map(|j| (j.text.clone(), j.model_id.clone())))
            .collect())
    }

    async fn propose(&self, id: &str, sub: &str, digest: &str) -> Result<Vec<(String, String)>> {
        let mut g = self.lock();
        let p = g.proposals.entry(id.to_owned()).or_default();
        p.insert(sub.to_owned(), digest.to_owned());
        Ok(p.iter().map(|(s, d)| (s.clone(), d.clone())).collect())
    }

    async fn clear_proposals(&self, id: &str) -> Result<()> {
        self.lock().proposals.remove(id);
        Ok(())
    }

    async fn requeue_done(&self, ids: &[String], _now: u64) -> Result<Vec<String>> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for id in ids {
            let Some(mut j) = g.jobs.get(id).cloned() else {
                continue;
            };
            if !matches!(j.state, St::Done { .. }) {
                continue;
            }
            j.seq = g.next_seq();
            j.state = St::Ready;
            g.put_job(j);
            out.push(id.clone());
        }
        Ok(out)
    }
}
