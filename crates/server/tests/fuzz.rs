//! Property test: arbitrary bytes and arbitrary JSON posted to every route never yield a 500
//! (or a panic), and every error carries the protocol's error body.

mod common;

use axum::http::StatusCode;
use proptest::prelude::*;
use serde_json::Value;

const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/jobs"),
    ("POST", "/v1/jobs/claim"),
    ("GET", "/v1/jobs/j1"),
    ("POST", "/v1/jobs/j1/heartbeat"),
    ("POST", "/v1/jobs/j1/ack"),
    ("POST", "/v1/jobs/j1/nack"),
    ("GET", "/v1/dlq"),
    ("POST", "/v1/dlq/j1/redrive"),
    ("GET", "/v1/cache/m:k"),
    ("PUT", "/v1/cache/m:k"),
    ("DELETE", "/v1/cache/m:k"),
    ("POST", "/v1/locks/k"),
    ("POST", "/v1/locks/k/renew"),
    ("DELETE", "/v1/locks/k"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/metrics"),
    ("GET", "/v1/stats"),
    ("GET", "/metrics"),
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z:./ ]{0,12}".prop_map(Value::String),
        Just(Value::String("AACAPw==".into())),
        Just(Value::String("".into())),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("text".to_owned()),
                        Just("jobs".to_owned()),
                        Just("worker".to_owned()),
                        Just("max".to_owned()),
                        Just("wait_ms".to_owned()),
                        Just("token".to_owned()),
                        Just("result".to_owned()),
                        Just("vector".to_owned()),
                        Just("model_id".to_owned()),
                        Just("source".to_owned()),
                        Just("error".to_owned()),
                        Just("fence".to_owned()),
                        Just("ttl_ms".to_owned()),
                        Just("texts".to_owned()),
                        Just("priority".to_owned()),
                        Just("delay_ms".to_owned()),
                        Just("id".to_owned()),
                        Just("counters".to_owned()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                ),
                0..5,
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn check(
    route: usize,
    segment: &str,
    body: Vec<u8>,
    rt: &tokio::runtime::Runtime,
) -> Result<(), TestCaseError> {
    let (method, path) = ROUTES[route % ROUTES.len()];
    // Replace the id/key segment with an arbitrary (percent-encoded) one.
    let path = if segment.is_empty() {
        path.to_owned()
    } else {
        let enc: String = segment
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        path.replace("j1", &enc)
            .replace("m:k", &enc)
            .replace("/k", &format!("/{enc}"))
    };
    let path = path.as_str();
    let r = rt.block_on(async {
        let (state, _) = common::state_with(ternflow_server::Config {
            max_wait_ms: 0,
            ..Default::default()
        });
        let app = ternflow_server::app(state);
        common::call_raw(
            &app,
            method,
            path,
            Some(common::ADMIN),
            Some("application/json"),
            body,
        )
        .await
    });
    prop_assert!(
        r.status != StatusCode::INTERNAL_SERVER_ERROR,
        "{method} {path} → 500: {}",
        r.text
    );
    if !r.status.is_success() {
        prop_assert!(
            r.json["error"]["code"].is_string(),
            "{method} {path} {}: {}",
            r.status,
            r.text
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_500(
        route in 0usize..64,
        segment in prop_oneof![Just(String::new()), ".{0,250}"],
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        check(route, &segment, body, &rt)?;
    }

    #[test]
    fn arbitrary_json_never_500(route in 0usize..64, v in json_value()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        check(route, "", serde_json::to_vec(&v).unwrap(), &rt)?;
    }
}
