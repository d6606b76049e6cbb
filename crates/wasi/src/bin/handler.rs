//! The HTTP handler component: `wasmtime serve -S cli --env TERNFLOW_SERVER=… handler.wasm`.
//! See `ternflow_wasi::handler`.

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
#[wstd::http_server]
async fn main(
    req: wstd::http::Request<wstd::http::Body>,
) -> Result<wstd::http::Response<wstd::http::Body>, wstd::http::Error> {
    let method = req.method().as_str().to_owned();
    let mut body = req.into_body();
    let bytes = body.contents().await?.to_vec();
    let (reply, served) = ternflow_wasi::handler::handle(&method, &bytes).await;
    Ok(wstd::http::Response::builder()
        .status(reply.status)
        .header("content-type", "application/json")
        .header("x-ternflow-instance-requests", served.to_string())
        .body(wstd::http::Body::from(reply.body))?)
}

#[cfg(not(all(target_arch = "wasm32", target_os = "wasi")))]
fn main() {
    eprintln!("ternflow-wasi-handler is a WASI component: build it with --target wasm32-wasip2 (scripts/build-wasi.sh)");
    std::process::exit(2);
}
