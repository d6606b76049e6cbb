//! The HTTP handler component: `wasmtime serve -S cli --env TERNFLOW_SERVER=… handler.wasm`
//! (WASI 0.3 build: add `-S p3`; one instance then serves several requests at once). See
//! `ternflow_wasi::handler`.
#![cfg_attr(all(target_os = "wasi", feature = "p3"), no_main)]

#[cfg(all(target_os = "wasi", feature = "p2"))]
#[wstd::http_server]
async fn main(
    req: wstd::http::Request<wstd::http::Body>,
) -> Result<wstd::http::Response<wstd::http::Body>, wstd::http::Error> {
    let method = req.method().as_str().to_owned();
    let mut body = req.into_body();
    let bytes = body.contents().await?.to_vec();
    let (reply, instance) = ternflow_wasi::handler::handle(&method, &bytes).await;
    Ok(wstd::http::Response::builder()
        .status(reply.status)
        .header("content-type", "application/json")
        .header("x-ternflow-instance-requests", instance.served.to_string())
        .header(
            "x-ternflow-instance-in-flight",
            instance.in_flight.to_string(),
        )
        .body(wstd::http::Body::from(reply.body))?)
}

/// `wasi:http/handler@0.3`: an async export, so the host may start the next request on this
/// instance while this one waits (on the remote cache, the backend, the body).
#[cfg(all(target_os = "wasi", feature = "p3"))]
mod p3 {
    use ternflow_core::http_handler as contract;
    use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response};
    use wasip3::wit_bindgen::StreamResult;
    use wasip3::{wit_future, wit_stream};

    wasip3::http::service::export!(Handler);

    struct Handler;

    fn method_name(m: &Method) -> String {
        match m {
            Method::Get => "GET".into(),
            Method::Head => "HEAD".into(),
            Method::Post => "POST".into(),
            Method::Put => "PUT".into(),
            Method::Delete => "DELETE".into(),
            Method::Connect => "CONNECT".into(),
            Method::Options => "OPTIONS".into(),
            Method::Trace => "TRACE".into(),
            Method::Patch => "PATCH".into(),
            Method::Other(s) => s.clone(),
        }
    }

    impl wasip3::exports::http::handler::Guest for Handler {
        async fn handle(request: Request) -> Result<Response, ErrorCode> {
            let method = method_name(&request.get_method());
            let (done_tx, done_rx) = wit_future::new(|| Ok(()));
            let (mut contents, trailers) = Request::consume_body(request, done_rx);
            drop(done_tx);
            // Read up to one byte over the bound, then stop: a body past it is refused without
            // being held in memory.
            let limit = contract::MAX_BODY_BYTES;
            let mut bytes = Vec::new();
            let over = loop {
                let want = (limit + 1 - bytes.len()).min(64 * 1024);
                let (status, chunk) = contents.read(Vec::with_capacity(want)).await;
                bytes.extend_from_slice(&chunk);
                if bytes.len() > limit {
                    break true;
                }
                if !matches!(status, StreamResult::Complete(_)) {
                    break false;
                }
            };
            if over {
                // Unread; the contract answers 413 `too_large` for what was read.
                drop(contents);
            } else {
                trailers.await?;
            }
            let (reply, instance) = ternflow_wasi::handler::handle(&method, &bytes).await;
            let headers = Fields::new();
            for (name, value) in [
                ("content-type", "application/json".to_owned()),
                ("content-length", reply.body.len().to_string()),
                ("x-ternflow-instance-requests", instance.served.to_string()),
                (
                    "x-ternflow-instance-in-flight",
                    instance.in_flight.to_string(),
                ),
            ] {
                headers
                    .append(name, value.as_bytes())
                    .map_err(|e| ErrorCode::InternalError(Some(format!("{name}: {e:?}"))))?;
            }
            let (mut body_tx, body_rx) = wit_stream::new();
            let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
            let (response, _sent) = Response::new(headers, Some(body_rx), trailers_rx);
            response
                .set_status_code(reply.status)
                .map_err(|()| ErrorCode::InternalError(Some("status".into())))?;
            // The body is written once the host reads it, after this returns.
            wasip3::wit_bindgen::spawn_local(async move {
                let _ = body_tx.write_all(reply.body).await;
                drop(trailers_tx);
            });
            Ok(response)
        }
    }
}

#[cfg(not(target_os = "wasi"))]
fn main() {
    eprintln!("ternflow-wasi-handler is a WASI component: build it with --target wasm32-wasip2 (scripts/build-wasi.sh)");
    std::process::exit(2);
}
