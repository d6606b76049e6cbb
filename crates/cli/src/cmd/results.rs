//! `ternflow results`: the vectors of finished jobs, by id, as JSON lines or a NumPy `.npy`
//! file (`POST /v1/jobs/status`, 1 000 ids per request), optionally waiting until every job has
//! finished.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use npyz::WriterBuilder;
use ternflow_core::protocol::{JobState, JobStatus, StatusList, StatusRequest};

use super::client::{check, ServerArgs};
use super::CmdResult;

/// Ids per status request (the server's limit).
const CHUNK: usize = 1_000;

/// Arguments of `ternflow results`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Job ids, one per line (what `ternflow enqueue --ids-out FILE` wrote).
    #[arg(long)]
    pub ids: PathBuf,
    /// Where to write: `.npy` (float32, one row per done job, in id order, with the row ids in
    /// `FILE.ids`), otherwise JSON lines (one per id: state, model, vector or error).
    #[arg(long)]
    pub out: PathBuf,
    /// Wait up to this many seconds for jobs still queued or in flight.
    #[arg(long, default_value_t = 0)]
    pub wait_secs: u64,
    #[command(flatten)]
    pub server: ServerArgs,
}

fn finished(s: &JobStatus) -> bool {
    matches!(s.state, JobState::Done { .. } | JobState::Dead { .. })
}

/// Runs `ternflow results`.
pub fn run(args: Args) -> CmdResult {
    let text =
        std::fs::read_to_string(&args.ids).map_err(|e| format!("{}: {e}", args.ids.display()))?;
    let ids: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let rt = tokio::runtime::Runtime::new()?;
    let (statuses, missing) = rt.block_on(fetch(&args, &ids))?;
    let (mut done, mut dead, mut pending) = (0, 0, 0);
    for s in statuses.iter().flatten() {
        match s.state {
            JobState::Done { .. } => done += 1,
            JobState::Dead { .. } => dead += 1,
            _ => pending += 1,
        }
    }
    if args.out.extension().is_some_and(|e| e == "npy") {
        write_npy(&args.out, &ids, &statuses)?;
    } else {
        write_jsonl(&args.out, &ids, &statuses)?;
    }
    eprintln!(
        "{} ids: {done} done, {dead} dead, {pending} not finished, {missing} unknown → {}",
        ids.len(),
        args.out.display()
    );
    Ok(())
}

/// Every id's status (`None`: unknown), waiting for unfinished ones up to `--wait-secs`.
async fn fetch(
    args: &Args,
    ids: &[String],
) -> Result<(Vec<Option<JobStatus>>, usize), Box<dyn std::error::Error>> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(args.wait_secs);
    let mut out: Vec<Option<JobStatus>> = vec![None; ids.len()];
    loop {
        for (c, chunk) in ids.chunks(CHUNK).enumerate() {
            let offset = c * CHUNK;
            let todo: Vec<(usize, String)> = chunk
                .iter()
                .enumerate()
                .filter(|(i, _)| !out[offset + i].as_ref().is_some_and(finished))
                .map(|(i, id)| (offset + i, id.clone()))
                .collect();
            if todo.is_empty() {
                continue;
            }
            let req = StatusRequest {
                ids: todo.iter().map(|(_, id)| id.clone()).collect(),
                vectors: true,
            };
            let resp = http
                .post(args.server.url("/v1/jobs/status"))
                .bearer_auth(&args.server.token)
                .json(&req)
                .send()
                .await?;
            let list: StatusList = check(resp).await?.json().await?;
            let mut by_id: std::collections::HashMap<String, JobStatus> =
                list.jobs.into_iter().map(|j| (j.id.clone(), j)).collect();
            for (i, id) in todo {
                out[i] = by_id.remove(&id);
            }
        }
        let unfinished = out
            .iter()
            .filter(|s| s.as_ref().is_some_and(|s| !finished(s)))
            .count();
        if unfinished == 0 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let missing = out.iter().filter(|s| s.is_none()).count();
    Ok((out, missing))
}

fn write_jsonl(
    path: &std::path::Path,
    ids: &[String],
    statuses: &[Option<JobStatus>],
) -> CmdResult {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (id, s) in ids.iter().zip(statuses) {
        let line = match s.as_ref().map(|s| &s.state) {
            Some(JobState::Done { result, info }) => {
                let mut line = serde_json::json!({
                    "id": id, "state": "done", "model_id": result.model_id,
                    "source": result.source, "vector": result.vector.0,
                });
                if let Some(info) = info {
                    line["info"] = serde_json::json!(info);
                }
                line
            }
            Some(JobState::Dead { error, .. }) => {
                serde_json::json!({"id": id, "state": "dead", "error": error})
            }
            Some(JobState::Queued { .. }) => serde_json::json!({"id": id, "state": "queued"}),
            Some(JobState::Leased { .. }) => serde_json::json!({"id": id, "state": "leased"}),
            None => serde_json::json!({"id": id, "state": "unknown"}),
        };
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(())
}

/// A float32 `[rows, dim]` array of the done jobs' vectors in id order; their ids, one per line,
/// in `PATH.ids`.
fn write_npy(path: &std::path::Path, ids: &[String], statuses: &[Option<JobStatus>]) -> CmdResult {
    let rows: Vec<(&String, &Vec<f32>)> = ids
        .iter()
        .zip(statuses)
        .filter_map(|(id, s)| match s.as_ref().map(|s| &s.state) {
            Some(JobState::Done { result, .. }) => Some((id, &result.vector.0)),
            _ => None,
        })
        .collect();
    let dim = rows.first().map_or(0, |(_, v)| v.len());
    if let Some((id, v)) = rows.iter().find(|(_, v)| v.len() != dim) {
        return Err(format!(
            "job {id} has {} dimensions, not {dim}: mixed models?",
            v.len()
        )
        .into());
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[rows.len() as u64, dim as u64])
        .writer(file)
        .begin_nd()?;
    for (_, v) in &rows {
        w.extend(v.iter().copied())?;
    }
    w.finish()?;
    let mut ids_path = path.as_os_str().to_owned();
    ids_path.push(".ids");
    let mut f = std::fs::File::create(PathBuf::from(ids_path))?;
    for (id, _) in &rows {
        writeln!(f, "{id}")?;
    }
    Ok(())
}
