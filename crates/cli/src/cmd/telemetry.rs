//! `ternflow serve`'s logs and traces: log lines on stderr (text or JSON, filtered by
//! `RUST_LOG`), and, when an OTLP endpoint is configured, every request's span exported by
//! OpenTelemetry, in the trace its `traceparent` names (a job's enqueue, claim, heartbeats, lock
//! and cache calls, ack or nack share the job's trace: the worker sends the `traceparent` it got
//! with the job).
//!
//! Off unless asked for, the standard way: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `--otlp-endpoint`), `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`grpc`, or `http/protobuf`, the default), `OTEL_SERVICE_NAME` (default `ternflow-server`),
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (read by the SDK; parent-based,
//! always-on by default), `OTEL_BSP_*` (the batch exporter's delays and sizes).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// Where and how to export traces (from the flags and the standard variables).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Otlp {
    /// The collector's endpoint (`http://host:4317` for gRPC, `http://host:4318` for HTTP).
    pub endpoint: String,
    /// `grpc` or `http/protobuf`.
    pub protocol: String,
}

impl Otlp {
    /// The export asked for: `flag` (`--otlp-endpoint`), else the standard variables; `None`
    /// when neither names an endpoint.
    pub fn from_env(flag: Option<&str>, protocol_flag: Option<&str>) -> Option<Otlp> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let endpoint = flag
            .map(str::to_owned)
            .or_else(|| var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
        let protocol = protocol_flag
            .map(str::to_owned)
            .or_else(|| var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".to_owned());
        Some(Otlp { endpoint, protocol })
    }

    fn provider(&self) -> Result<SdkTracerProvider, Box<dyn std::error::Error>> {
        let exporter = match self.protocol.as_str() {
            "grpc" => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&self.endpoint)
                .build()?,
            "http/protobuf" => {
                // The base endpoint gets the signal's path, as the specification says; a
                // traces endpoint is taken as it is.
                let traces = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok();
                let url = if traces.as_deref() == Some(self.endpoint.as_str())
                    || self.endpoint.ends_with("/v1/traces")
                {
                    self.endpoint.clone()
                } else {
                    format!("{}/v1/traces", self.endpoint.trim_end_matches('/'))
                };
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url)
                    .build()?
            }
            other => {
                return Err(format!(
                "OTLP protocol {other:?}: ternflow exports traces over `grpc` or `http/protobuf`"
            )
                .into())
            }
        };
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "ternflow-server".to_owned());
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(service)
            .build();
        // The batch exporter on the server's Tokio runtime, not a thread of its own: the HTTP
        // client (hyper) and the gRPC channel (tonic) both need the runtime to send (the
        // threaded processor's HTTP export panicked: "no reactor running").
        let batch = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
        Ok(SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_resource(resource)
            .build())
    }
}

/// Flushes and stops the trace export when dropped (at the end of `serve`).
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("ternflow: flushing traces at shutdown: {e}");
            }
        }
    }
}

/// Logs to stderr (stdout is for what a command prints), filtered by `RUST_LOG` (default
/// `info`): text with colours only when stderr is a terminal, or JSON lines. A line stderr
/// refuses is lost, never the request that logged it. With `otlp`, every span also goes to the
/// OTLP exporter (its own filter: the request spans and what they contain, at `info`). Must run
/// inside a Tokio runtime (the gRPC exporter's connection lives there).
///
/// # Errors
/// An OTLP endpoint or protocol the exporter refuses.
pub fn init(format: &str, otlp: Option<&Otlp>) -> Result<Telemetry, Box<dyn std::error::Error>> {
    init_with(format, otlp, "info,ternflow_server=info")
}

/// [`init`] with `default_filter` where `RUST_LOG` is not set.
///
/// # Errors
/// As [`init`].
pub fn init_with(
    format: &str,
    otlp: Option<&Otlp>,
    default_filter: &str,
) -> Result<Telemetry, Box<dyn std::error::Error>> {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    // A log line that cannot be written (stderr a file on a full disk) is dropped. By default
    // the subscriber reports that with `eprintln!`, which panics when stderr fails, and the
    // panic took down the request being logged (an empty reply to every enqueue that warned).
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    let fmt = if format == "json" {
        fmt.json().with_current_span(false).boxed()
    } else {
        fmt.with_ansi(std::io::stderr().is_terminal()).boxed()
    };
    let provider = otlp.map(Otlp::provider).transpose()?;
    let otel = provider.as_ref().map(|p| {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        // The spans the server makes itself (a job's delivery, a worker's reported steps).
        opentelemetry::global::set_tracer_provider(p.clone());
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("ternflow-server"))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_http_protobuf_is_the_default() {
        // (No OTEL_* variable is set in the test environment.)
        assert_eq!(Otlp::from_env(None, None), None);
        let o = Otlp::from_env(Some("http://127.0.0.1:4318"), None).unwrap();
        assert_eq!(o.protocol, "http/protobuf");
        let o = Otlp::from_env(Some("http://127.0.0.1:4317"), Some("grpc")).unwrap();
        assert_eq!(o.protocol, "grpc");
    }
}
