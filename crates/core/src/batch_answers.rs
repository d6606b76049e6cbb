//! The batch requests (`POST /v1/jobs/ack`, `/heartbeat`, `/nack`, `/release`) built from the pairs the
//! [`JobSource`](crate::ports::JobSource) batch methods take, and their answers read back as one
//! `Result` per item, in order: the same for every adapter (browser, WASI), so only the transport
//! is theirs. An answer with a different number of items than the request fails the whole batch.

use crate::error::{Error, Result};
use crate::protocol::{
    AckBatchRequest, AckBatchResponse, AckItem, AckItemOutcome, AckRequest, HeartbeatBatchRequest,
    HeartbeatBatchResponse, Lease, LeaseRef, NackBatchRequest, NackBatchResponse, NackItem,
    NackItemOutcome, NackRequest, NackResponse, ReleaseBatchRequest, ReleaseBatchResponse,
    ReleaseOutcome,
};

/// A 404 for job `id`, as the one-job routes answer it.
fn missing(id: &str) -> Error {
    Error::Http {
        status: 404,
        code: "not_found".into(),
        message: format!("no job {id}"),
        retry_after_ms: None,
    }
}

fn same_len(what: &str, got: usize, sent: usize) -> Result<()> {
    if got == sent {
        Ok(())
    } else {
        Err(Error::Protocol(format!(
            "the batch {what} answered {got} results for {sent} items"
        )))
    }
}

impl AckBatchRequest {
    /// The body for `(job id, ack)` pairs.
    pub fn from_pairs(acks: &[(String, AckRequest)]) -> Self {
        AckBatchRequest {
            acks: acks
                .iter()
                .map(|(id, ack)| AckItem {
                    id: id.clone(),
                    ack: ack.clone(),
                })
                .collect(),
            worker: None,
        }
    }
}

impl AckBatchResponse {
    /// One result per ack sent (`sent` of them): done or repeated is `Ok`; a lost lease is
    /// [`Error::LeaseLost`]; an unknown job a 404; a refused ack a 400 with the server's code.
    ///
    /// # Errors
    /// [`Error::Protocol`] when the answer does not have `sent` results.
    pub fn into_results(self, sent: usize) -> Result<Vec<Result<()>>> {
        same_len("ack", self.results.len(), sent)?;
        Ok(self
            .results
            .into_iter()
            .map(|r| match r.outcome {
                AckItemOutcome::Done | AckItemOutcome::Repeated | AckItemOutcome::Pending => Ok(()),
                AckItemOutcome::LeaseLost => Err(Error::LeaseLost(r.id)),
                AckItemOutcome::Missing => Err(missing(&r.id)),
                AckItemOutcome::Refused => {
                    let (code, message) = r
                        .error
                        .map(|e| (e.code, e.message))
                        .unwrap_or_else(|| ("refused".into(), String::new()));
                    Err(Error::Http {
                        status: 400,
                        code,
                        message,
                        retry_after_ms: None,
                    })
                }
            })
            .collect())
    }
}

/// `(job id, token)` pairs as [`LeaseRef`]s.
fn lease_refs(leases: &[(String, String)]) -> Vec<LeaseRef> {
    leases
        .iter()
        .map(|(id, token)| LeaseRef {
            id: id.clone(),
            token: token.clone(),
        })
        .collect()
}

impl HeartbeatBatchRequest {
    /// The body for `(job id, token)` pairs.
    pub fn from_pairs(leases: &[(String, String)]) -> Self {
        HeartbeatBatchRequest {
            leases: lease_refs(leases),
        }
    }
}

impl ReleaseBatchRequest {
    /// The body for `(job id, token)` pairs.
    pub fn from_pairs(leases: &[(String, String)]) -> Self {
        ReleaseBatchRequest {
            leases: lease_refs(leases),
            session: None,
        }
    }
}

impl ReleaseBatchResponse {
    /// One result per lease sent: handed back (whatever it did to the job's attempts), or
    /// [`Error::LeaseLost`] when the token no longer held it.
    ///
    /// # Errors
    /// [`Error::Protocol`] when the answer does not have `sent` results.
    pub fn into_results(self, sent: usize) -> Result<Vec<Result<()>>> {
        same_len("release", self.results.len(), sent)?;
        Ok(self
            .results
            .into_iter()
            .map(|r| match r.outcome {
                ReleaseOutcome::Lost => Err(Error::LeaseLost(r.id)),
                ReleaseOutcome::Released | ReleaseOutcome::Counted | ReleaseOutcome::Dead => Ok(()),
            })
            .collect())
    }
}

impl HeartbeatBatchResponse {
    /// One result per lease sent: the extended lease, or [`Error::LeaseLost`].
    ///
    /// # Errors
    /// [`Error::Protocol`] when the answer does not have `sent` results.
    pub fn into_results(self, sent: usize) -> Result<Vec<Result<Lease>>> {
        same_len("heartbeat", self.results.len(), sent)?;
        Ok(self
            .results
            .into_iter()
            .map(|r| r.lease.ok_or(Error::LeaseLost(r.id)))
            .collect())
    }
}

impl NackBatchRequest {
    /// The body for `(job id, nack)` pairs.
    pub fn from_pairs(nacks: &[(String, NackRequest)]) -> Self {
        NackBatchRequest {
            nacks: nacks
                .iter()
                .map(|(id, nack)| NackItem {
                    id: id.clone(),
                    nack: nack.clone(),
                })
                .collect(),
        }
    }
}

impl NackBatchResponse {
    /// One result per nack sent: retry, dead or done as the one-job nack answers; a lost lease is
    /// [`Error::LeaseLost`]; an unknown job a 404.
    ///
    /// # Errors
    /// [`Error::Protocol`] when the answer does not have `sent` results.
    pub fn into_results(self, sent: usize) -> Result<Vec<Result<NackResponse>>> {
        same_len("nack", self.results.len(), sent)?;
        Ok(self
            .results
            .into_iter()
            .map(|r| match r.outcome {
                NackItemOutcome::Retry { available_at } => Ok(NackResponse::Retry { available_at }),
                NackItemOutcome::Dead => Ok(NackResponse::Dead),
                NackItemOutcome::Done => Ok(NackResponse::Done),
                NackItemOutcome::LeaseLost => Err(Error::LeaseLost(r.id)),
                NackItemOutcome::Missing => Err(missing(&r.id)),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{AckItemResult, ErrorDetail, HeartbeatItem, NackItemResult};

    #[test]
    fn each_outcome_maps_to_its_result_and_a_short_answer_fails_the_batch() {
        let ack = |id: &str, outcome, error| AckItemResult {
            id: id.into(),
            outcome,
            error,
        };
        let r = AckBatchResponse {
            results: vec![
                ack("a", AckItemOutcome::Done, None),
                ack("b", AckItemOutcome::LeaseLost, None),
                ack("c", AckItemOutcome::Missing, None),
                ack(
                    "d",
                    AckItemOutcome::Refused,
                    Some(ErrorDetail {
                        code: "bad_vector".into(),
                        message: "empty".into(),
                    }),
                ),
            ],
        };
        let got = r.clone().into_results(4).unwrap();
        assert!(got[0].is_ok());
        assert!(matches!(&got[1], Err(Error::LeaseLost(id)) if id == "b"));
        assert!(matches!(&got[2], Err(Error::Http { status: 404, .. })));
        assert!(
            matches!(&got[3], Err(Error::Http { status: 400, code, .. }) if code == "bad_vector")
        );
        assert!(matches!(r.into_results(5), Err(Error::Protocol(_))));

        let hb = HeartbeatBatchResponse {
            results: vec![HeartbeatItem {
                id: "x".into(),
                lease: None,
            }],
        };
        assert!(matches!(
            &hb.clone().into_results(1).unwrap()[0],
            Err(Error::LeaseLost(_))
        ));
        assert!(hb.into_results(2).is_err());

        let nk = NackBatchResponse {
            results: vec![
                NackItemResult {
                    id: "p".into(),
                    outcome: NackItemOutcome::Dead,
                },
                NackItemResult {
                    id: "q".into(),
                    outcome: NackItemOutcome::Missing,
                },
                NackItemResult {
                    id: "r".into(),
                    outcome: NackItemOutcome::Done,
                },
            ],
        };
        let wire = serde_json::to_value(&nk).unwrap();
        assert_eq!(
            wire["results"][2],
            serde_json::json!({"id": "r", "outcome": "done"})
        );
        let got = nk.into_results(3).unwrap();
        assert_eq!(got[0].as_ref().unwrap(), &NackResponse::Dead);
        assert!(matches!(&got[1], Err(Error::Http { status: 404, .. })));
        assert_eq!(got[2].as_ref().unwrap(), &NackResponse::Done);
    }
}
