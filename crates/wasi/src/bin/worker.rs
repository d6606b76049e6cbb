//! The long-running worker component: `wasmtime run -S http --env TERNFLOW_SERVER=… worker.wasm
//! [--run-ms N] [--drain-ms N] [--idle-exit-ms N] [--stop-on-eof]`. See `ternflow_wasi::worker`.

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
#[wstd::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = match ternflow_wasi::settings::Settings::parse(|k| std::env::var(k).ok(), &args)
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ternflow-wasi-worker: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match ternflow_wasi::worker::run(settings).await {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ternflow-wasi-worker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", target_os = "wasi")))]
fn main() {
    eprintln!("ternflow-wasi-worker is a WASI component: build it with --target wasm32-wasip2 (scripts/build-wasi.sh)");
    std::process::exit(2);
}
