//! The long-running worker component: `wasmtime run -S http --env TERNFLOW_SERVER=… worker.wasm
//! [--run-ms N] [--drain-ms N] [--idle-exit-ms N] [--stop-on-eof]` (WASI 0.3 build: add `-S p3`).
//! See `ternflow_wasi::worker`.
//!
//! WASI 0.2: `main` on wstd's executor. WASI 0.3: no `main`; the component exports the async
//! `wasi:cli/run@0.3` (a synchronous `main` may not wait on async imports: Wasmtime traps with
//! "cannot block a synchronous task before returning").
#![cfg_attr(all(target_os = "wasi", feature = "p3"), no_main)]

/// Parses the settings and runs the worker; the process exit code.
#[cfg(target_os = "wasi")]
async fn run() -> u8 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = match ternflow_wasi::settings::Settings::parse(|k| std::env::var(k).ok(), &args)
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ternflow-wasi-worker: {e}");
            return 2;
        }
    };
    match ternflow_wasi::worker::run(settings).await {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("ternflow-wasi-worker: {e}");
            1
        }
    }
}

#[cfg(all(target_os = "wasi", feature = "p2"))]
#[wstd::main]
async fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(run().await)
}

#[cfg(all(target_os = "wasi", feature = "p3"))]
mod p3 {
    wasip3::cli::command::export!(Worker);

    struct Worker;

    impl wasip3::exports::cli::run::Guest for Worker {
        async fn run() -> Result<(), ()> {
            match super::run().await {
                0 => Ok(()),
                code => std::process::exit(i32::from(code)),
            }
        }
    }
}

#[cfg(not(target_os = "wasi"))]
fn main() {
    eprintln!("ternflow-wasi-worker is a WASI component: build it with --target wasm32-wasip2 (scripts/build-wasi.sh)");
    std::process::exit(2);
}
