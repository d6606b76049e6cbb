//! The protocol's serde shapes, checked on JSON.

use super::*;
use serde_json::json;

#[test]
fn enqueue_accepts_one_or_batch() {
    let one: EnqueueRequest = serde_json::from_value(json!({"text": "hi"})).unwrap();
    assert_eq!(one.into_jobs(), vec![NewJob::text("hi")]);
    let batch: EnqueueRequest =
        serde_json::from_value(json!({"jobs": [{"text": "a", "priority": 2}, {"text": "b"}]}))
            .unwrap();
    let jobs = batch.into_jobs();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].priority, Some(2));
    assert!(serde_json::from_value::<EnqueueRequest>(json!({"nope": 1})).is_err());
}

#[test]
fn claim_defaults() {
    let c: ClaimRequest = serde_json::from_value(json!({"worker": "w"})).unwrap();
    assert_eq!((c.max, c.wait_ms), (1, 0));
}

#[test]
fn ack_round_trip_and_source_names() {
    let a = AckRequest {
        cache: None,
        timing: None,
        token: "t".into(),
        worker: None,
        result: JobResult {
            model_id: "m".into(),
            vector: Vector(vec![1.0]),
            source: ResultSource::Backend,
            by: None,
        },
    };
    let v = serde_json::to_value(&a).unwrap();
    assert_eq!(
        v,
        json!({"token": "t", "result": {"model_id": "m", "vector": "AACAPw==", "source": "backend"}})
    );
    assert_eq!(serde_json::from_value::<AckRequest>(v).unwrap(), a);
}

#[test]
fn job_status_is_tagged_by_state() {
    let s = JobStatus {
        id: "x".into(),
        attempt: 1,
        state: JobState::Queued { available_at: 5 },
    };
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        json!({"id": "x", "attempt": 1, "state": "queued", "available_at": 5})
    );
    let dead = JobStatus {
        id: "x".into(),
        attempt: 3,
        state: JobState::Dead {
            error: JobError {
                code: "c".into(),
                message: "m".into(),
                retryable: false,
            },
            history: vec![],
        },
    };
    let v = serde_json::to_value(&dead).unwrap();
    assert_eq!(v["state"], "dead");
    assert_eq!(serde_json::from_value::<JobStatus>(v).unwrap(), dead);
}

#[test]
fn enqueue_bodies_read_in_one_pass() {
    let one: EnqueueRequest =
        serde_json::from_str(r#"{"text": "a", "priority": 2, "x": [1]}"#).unwrap();
    let mut want = NewJob::text("a");
    want.priority = Some(2);
    assert_eq!(one, EnqueueRequest::One(want));
    let batch: EnqueueRequest =
        serde_json::from_str(r#"{"jobs": [{"text": "a"}, {"text": "b", "id": "j"}]}"#).unwrap();
    let jobs = batch.clone().into_jobs();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[1].id.as_deref(), Some("j"));
    // Written and read back unchanged.
    let back: EnqueueRequest =
        serde_json::from_str(&serde_json::to_string(&batch).unwrap()).unwrap();
    assert_eq!(back, batch);
    let e = serde_json::from_str::<EnqueueRequest>(r#"{"priority": 1}"#).unwrap_err();
    assert!(e.to_string().contains("missing field `text`"), "{e}");
    let e = serde_json::from_str::<EnqueueRequest>(r#"{"jobs": [{"txt": "a"}]}"#).unwrap_err();
    assert!(e.to_string().contains("missing field `text`"), "{e}");
    let e = serde_json::from_str::<EnqueueRequest>(r#"{"text": "a", "jobs": []}"#).unwrap_err();
    assert!(e.to_string().contains("not both"), "{e}");
    assert!(serde_json::from_str::<EnqueueRequest>(r#"{"text": 5}"#).is_err());
    assert!(serde_json::from_str::<EnqueueRequest>("[]").is_err());
}

#[test]
fn nack_error_retryable_defaults_true() {
    let n: NackRequest =
        serde_json::from_value(json!({"token": "t", "error": {"code": "c", "message": "m"}}))
            .unwrap();
    assert!(n.error.retryable);
}

#[test]
fn events() {
    let e = ServerEvent::Jobs(JobsEvent { depth: 3 });
    assert_eq!(e.name(), "jobs");
    assert_eq!(e.data_json(), r#"{"depth":3}"#);
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v, json!({"event": "jobs", "data": {"depth": 3}}));
    assert_eq!(serde_json::from_value::<ServerEvent>(v).unwrap(), e);
}

#[test]
fn error_body_shape() {
    let b = ErrorBody {
        error: ErrorDetail {
            code: "not_found".into(),
            message: "no such job".into(),
        },
        entry: None,
        expires_at: None,
    };
    assert_eq!(
        serde_json::to_value(&b).unwrap(),
        json!({"error": {"code": "not_found", "message": "no such job"}})
    );
}
