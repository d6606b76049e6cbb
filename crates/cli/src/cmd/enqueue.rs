//! `ternflow enqueue FILE`: submit jobs, one per line (plain text, or a JSON job object).

use std::io::BufRead;
use std::path::PathBuf;

use ternflow_core::protocol::{EnqueueRequest, EnqueueResponse, NewJob};

use super::client::{check, ServerArgs};
use super::CmdResult;

/// Arguments of `ternflow enqueue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input file (`-` for stdin): one text per line, or one JSON job per line
    /// (`{"text": …, "id"?, "model_id"?, "priority"?, "delay_ms"?, "meta"?}`). Empty lines are skipped.
    pub file: PathBuf,
    /// Jobs per request.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Also write the job ids, in input order, one per line (for `ternflow results --ids`).
    #[arg(long)]
    pub ids_out: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
}

fn parse_line(line: &str) -> Result<NewJob, Box<dyn std::error::Error>> {
    if line.trim_start().starts_with('{') {
        Ok(serde_json::from_str(line).map_err(|e| format!("bad JSON job {line:?}: {e}"))?)
    } else {
        Ok(NewJob::text(line))
    }
}

/// Runs `ternflow enqueue`.
pub fn run(args: Args) -> CmdResult {
    let reader: Box<dyn BufRead> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f =
            std::fs::File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    // Every line is read and checked before the first request: a bad line enqueues nothing.
    let mut jobs = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let at = || format!("{} line {}", args.file.display(), n + 1);
        let line = line.map_err(|e| format!("{}: {e}", at()))?;
        if !line.trim().is_empty() {
            jobs.push(parse_line(&line).map_err(|e| format!("{}: {e}", at()))?);
        }
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let http = reqwest::Client::new();
        let (mut new, mut dup) = (0usize, 0usize);
        let mut ids = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(args.batch.max(1)) {
            let req = EnqueueRequest::Batch {
                jobs: chunk.to_vec(),
            };
            let resp = http
                .post(args.server.url("/v1/jobs"))
                .bearer_auth(&args.server.token)
                .json(&req)
                .send()
                .await?;
            let out: EnqueueResponse = check(resp).await?.json().await?;
            let n = out.jobs.iter().filter(|j| j.new).count();
            ids.extend(out.jobs.iter().map(|j| j.id.clone()));
            new += n;
            dup += out.jobs.len() - n;
        }
        println!("enqueued {new} new job(s), {dup} already known");
        if let Some(path) = &args.ids_out {
            let mut text = ids.join("\n");
            text.push('\n');
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_text_or_json() {
        assert_eq!(
            parse_line("hello world").unwrap(),
            NewJob::text("hello world")
        );
        let j = parse_line(r#"{"text": "x", "priority": 3}"#).unwrap();
        assert_eq!((j.text.as_str(), j.priority), ("x", Some(3)));
        assert!(parse_line("{nope").is_err());
    }
}
