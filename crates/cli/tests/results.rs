//! `ternflow enqueue --ids-out` and `ternflow results` against a real `ternflow serve`: the
//! finished jobs' vectors come back in id order, as JSON lines and as a NumPy file.

mod common;

use common::{ternflow, Server};

use serde_json::{json, Value};
use ternflow_core::ports::JobSource;
use ternflow_core::protocol::{AckRequest, JobResult, ResultSource, Vector};
use ternflow_server::test_client::worker_client;

const TOKEN: &str = "results-admin";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_come_back_in_id_order_as_jsonl_and_npy() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(
        &dir.path().join("data"),
        0,
        &[],
        &[("TERNFLOW_TOKENS", format!("{TOKEN}:admin"))],
    );
    let base = srv.base.clone();
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, "alpha\nbeta\ngamma\n").unwrap();
    let ids_file = dir.path().join("ids.txt");
    let st = ternflow()
        .args(["enqueue", "--server", &base, "--token", TOKEN, "--ids-out"])
        .arg(&ids_file)
        .arg(&texts)
        .status()
        .unwrap();
    assert!(st.success());
    let ids: Vec<String> = std::fs::read_to_string(&ids_file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len(), 3);
    // Act as a worker: finish two jobs with known vectors (the dimension and values are ours:
    // the server runs no model "m", so it checks only that they are finite unit vectors).
    let w = worker_client(&base, TOKEN, "w");
    let claimed = w.claim(3, 0).await.unwrap();
    let vec_of = |id: &str| -> Vec<f32> {
        match ids.iter().position(|x| x == id).unwrap() {
            0 => vec![0.0, 1.0],
            _ => vec![0.6, 0.8],
        }
    };
    for j in &claimed {
        if j.id == ids[1] {
            continue; // stays unfinished
        }
        let ack = AckRequest {
            token: j.lease.token.clone(),
            worker: None,
            result: JobResult {
                model_id: "m".into(),
                vector: Vector(vec_of(&j.id)),
                source: ResultSource::Engine,
                by: None,
            },
            cache: None,
            timing: None,
        };
        w.ack(&j.id, &ack, "").await.unwrap();
    }
    let out = dir.path().join("out.jsonl");
    let st = ternflow()
        .args(["results", "--server", &base, "--token", TOKEN, "--ids"])
        .arg(&ids_file)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["id"].as_str().unwrap(), l["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [(&*ids[0], "done"), (&*ids[1], "leased"), (&*ids[2], "done")],
        "in id order, the unfinished one said so"
    );
    assert_eq!(lines[2]["vector"], json!([0.6f32, 0.8f32]));
    let npy = dir.path().join("out.npy");
    let st = ternflow()
        .args(["results", "--server", &base, "--token", TOKEN, "--ids"])
        .arg(&ids_file)
        .arg("--out")
        .arg(&npy)
        .status()
        .unwrap();
    assert!(st.success());
    let bytes = std::fs::read(&npy).unwrap();
    let arr = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(arr.shape(), &[2, 2]);
    assert_eq!(arr.into_vec::<f32>().unwrap(), vec![0.0, 1.0, 0.6, 0.8]);
    let row_ids = std::fs::read_to_string(dir.path().join("out.npy.ids")).unwrap();
    assert_eq!(
        row_ids,
        format!("{}\n{}\n", ids[0], ids[2]),
        "the rows' ids"
    );
    drop(srv);
}
