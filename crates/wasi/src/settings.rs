//! The component's settings: environment variables (the same names as the edge handler's
//! bindings) and, for the long-running worker, a few command-line flags. Portable: parsed and
//! tested natively.
//!
//! | variable | meaning |
//! |---|---|
//! | `TERNFLOW_SERVER` | base URL of a `ternflow serve` (queue, remote cache, locks, backend) |
//! | `TERNFLOW_TOKEN` | its bearer token (a `worker` token) |
//! | `TERNFLOW_MODEL` | a TERN v1 file in a preopened directory (`wasmtime run --dir`) |
//! | `TERNFLOW_MODEL_URL` | where to fetch the model instead (default `${TERNFLOW_SERVER}/v1/model`) |
//! | `TERNFLOW_MODEL_SHA256` | the model's expected SHA-256 (hex), checked when set |
//! | `TERNFLOW_CONFIG` | the pipeline's settings as JSON (`ternflow_core::Config`, camelCase keys) |
//! | `TERNFLOW_LOCAL_ENTRIES` | bound of the in-memory local cache (default 10 000 vectors) |
//! | `TERNFLOW_LOCAL_BYTES` | its bound in bytes (default 32 MiB: key + vector + 96 per entry) |
//! | `TERNFLOW_REQUEST_TIMEOUT_MS` | limit of one request, ms (a claim adds its long-poll wait) |
//!
//! Worker flags: `--run-ms N` (stop after N ms), `--drain-ms N` (how long in-flight jobs may
//! finish once stopping before they are handed back; default 10 000), `--idle-exit-ms N` (stop
//! once no job was claimed for N ms), `--stop-on-eof` (stop when standard input closes).

use ternflow_core::Config;

/// Default bound of the in-memory local cache, vectors.
pub const DEFAULT_LOCAL_ENTRIES: usize = 10_000;
/// Default limit of one request, ms.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The claim long-poll unless `TERNFLOW_CONFIG` names one (`claimWaitMs`), ms: the component
/// has no `EventSource`, so an idle worker waits inside one claim request at a time.
pub const DEFAULT_CLAIM_WAIT_MS: u64 = 10_000;
/// Default drain time on stop, ms.
pub const DEFAULT_DRAIN_MS: u64 = 10_000;

/// Everything the component reads at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Base URL of the server, without a trailing `/`.
    pub server: Option<String>,
    /// Bearer token.
    pub token: String,
    /// Where the model comes from.
    pub model: ModelSource,
    /// Expected SHA-256 of the model file (hex), if given.
    pub model_sha256: Option<String>,
    /// The pipeline's settings.
    pub config: Config,
    /// Bound of the in-memory local cache, vectors.
    pub local_entries: usize,
    /// Bound of the in-memory local cache, bytes (`TERNFLOW_LOCAL_BYTES`).
    pub local_bytes: usize,
    /// Limit of one request, ms.
    pub request_timeout_ms: u64,
    /// When the long-running worker stops.
    pub run: RunControl,
}

/// Where the engine's model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A file the host preopened for the component.
    File(String),
    /// An HTTP(S) URL (the server's `GET /v1/model` by default).
    Url(String),
    /// No model: every text goes to the backend.
    None,
}

/// When the long-running worker stops, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunControl {
    /// Stop after this long, ms.
    pub run_ms: Option<u64>,
    /// Once stopping, in-flight jobs may finish for this long before they are handed back, ms.
    pub drain_ms: u64,
    /// Stop once no job was claimed for this long, ms.
    pub idle_exit_ms: Option<u64>,
    /// Stop when standard input reaches its end.
    pub stop_on_eof: bool,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            run_ms: None,
            drain_ms: DEFAULT_DRAIN_MS,
            idle_exit_ms: None,
            stop_on_eof: false,
        }
    }
}

impl Settings {
    /// Reads the settings from `env` (a variable's value by name) and the worker's flags
    /// (`args` without the program name).
    ///
    /// # Errors
    /// A message naming the variable or flag that is malformed or unknown.
    pub fn parse(env: impl Fn(&str) -> Option<String>, args: &[String]) -> Result<Self, String> {
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let server = get("TERNFLOW_SERVER").map(|s| s.trim().trim_end_matches('/').to_owned());
        let model = match (get("TERNFLOW_MODEL"), get("TERNFLOW_MODEL_URL"), &server) {
            (Some(path), _, _) => ModelSource::File(path),
            (None, Some(url), _) => ModelSource::Url(url),
            (None, None, Some(s)) => ModelSource::Url(format!("{s}/v1/model")),
            (None, None, None) => ModelSource::None,
        };
        let config = match get("TERNFLOW_CONFIG") {
            Some(json) => parse_config(&json)?,
            None => Config {
                claim_wait_ms: DEFAULT_CLAIM_WAIT_MS,
                ..Config::default()
            },
        };
        let number = |k: &str, default: u64| -> Result<u64, String> {
            get(k).map_or(Ok(default), |v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("{k}: not a number: {v:?}"))
            })
        };
        Ok(Settings {
            token: get("TERNFLOW_TOKEN").unwrap_or_default(),
            model_sha256: get("TERNFLOW_MODEL_SHA256").map(|s| s.trim().to_ascii_lowercase()),
            local_entries: number("TERNFLOW_LOCAL_ENTRIES", DEFAULT_LOCAL_ENTRIES as u64)?.max(1)
                as usize,
            local_bytes: usize::try_from(number(
                "TERNFLOW_LOCAL_BYTES",
                ternflow_core::cache::mem_local::DEFAULT_MAX_BYTES as u64,
            )?)
            .unwrap_or(usize::MAX),
            request_timeout_ms: number("TERNFLOW_REQUEST_TIMEOUT_MS", DEFAULT_REQUEST_TIMEOUT_MS)?,
            run: parse_flags(args)?,
            server,
            model,
            config,
        })
    }
}

/// `TERNFLOW_CONFIG`: a partial [`Config`]; unknown keys are refused (a typo must not be
/// silently ignored).
fn parse_config(json: &str) -> Result<Config, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("TERNFLOW_CONFIG: {e}"))?;
    let known = serde_json::to_value(Config::default()).map_err(|e| e.to_string())?;
    if let (Some(given), Some(known)) = (v.as_object(), known.as_object()) {
        if let Some(k) = given.keys().find(|k| !known.contains_key(*k)) {
            return Err(format!("TERNFLOW_CONFIG: unknown key {k:?}"));
        }
    }
    let wait_given = v.get("claimWaitMs").is_some();
    let mut cfg: Config = serde_json::from_value(v).map_err(|e| format!("TERNFLOW_CONFIG: {e}"))?;
    if !wait_given {
        cfg.claim_wait_ms = DEFAULT_CLAIM_WAIT_MS;
    }
    Ok(cfg)
}

fn parse_flags(args: &[String]) -> Result<RunControl, String> {
    let mut run = RunControl::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse()
                .map_err(|_| format!("{name}: not a number: {v:?}"))
        };
        match flag.as_str() {
            "--run-ms" => run.run_ms = Some(value("--run-ms")?),
            "--drain-ms" => run.drain_ms = value("--drain-ms")?,
            "--idle-exit-ms" => run.idle_exit_ms = Some(value("--idle-exit-ms")?),
            "--stop-on-eof" => run.stop_on_eof = true,
            other => {
                return Err(format!(
                    "unknown flag {other:?} (known: --run-ms N, --drain-ms N, --idle-exit-ms N, --stop-on-eof)"
                ))
            }
        }
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_model_defaults_to_the_servers_and_a_file_wins() {
        let s = Settings::parse(env(&[("TERNFLOW_SERVER", "http://h:1/")]), &[]).unwrap();
        assert_eq!(s.server.as_deref(), Some("http://h:1"));
        assert_eq!(s.model, ModelSource::Url("http://h:1/v1/model".into()));
        let s = Settings::parse(
            env(&[
                ("TERNFLOW_SERVER", "http://h:1"),
                ("TERNFLOW_MODEL", "/m/x.bin"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(s.model, ModelSource::File("/m/x.bin".into()));
        let s = Settings::parse(env(&[]), &[]).unwrap();
        assert_eq!((s.server, s.model), (None, ModelSource::None));
    }

    #[test]
    fn config_is_partial_and_refuses_unknown_keys() {
        let s = Settings::parse(
            env(&[("TERNFLOW_CONFIG", r#"{"concurrency": 4, "workerId": "w1"}"#)]),
            &[],
        )
        .unwrap();
        assert_eq!(
            (s.config.concurrency, s.config.worker_id.as_str()),
            (4, "w1")
        );
        assert_eq!(s.config.claim_wait_ms, DEFAULT_CLAIM_WAIT_MS);
        let s = Settings::parse(env(&[("TERNFLOW_CONFIG", r#"{"claimWaitMs": 300}"#)]), &[]);
        assert_eq!(s.unwrap().config.claim_wait_ms, 300);
        let e =
            Settings::parse(env(&[("TERNFLOW_CONFIG", r#"{"concurrenc": 4}"#)]), &[]).unwrap_err();
        assert!(e.contains("concurrenc"), "{e}");
    }

    #[test]
    fn flags_parse_and_unknown_ones_are_refused() {
        let s = Settings::parse(
            env(&[]),
            &args(&["--run-ms", "500", "--drain-ms", "20", "--stop-on-eof"]),
        )
        .unwrap();
        assert_eq!(
            s.run,
            RunControl {
                run_ms: Some(500),
                drain_ms: 20,
                idle_exit_ms: None,
                stop_on_eof: true
            }
        );
        assert!(Settings::parse(env(&[]), &args(&["--run-ms"])).is_err());
        assert!(Settings::parse(env(&[]), &args(&["--bogus"])).is_err());
        assert!(Settings::parse(env(&[("TERNFLOW_LOCAL_ENTRIES", "x")]), &[]).is_err());
        assert!(Settings::parse(env(&[("TERNFLOW_LOCAL_BYTES", "1e6")]), &[]).is_err());
    }
}
