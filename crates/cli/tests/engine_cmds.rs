//! `ternflow gen-model`, `embed` (vectors, `--ids`, `--info`, `--max-tokens`) and `bench` end to end.

use std::io::Write;
use std::process::{Command, Stdio};

fn ternflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ternflow"))
}

#[test]
fn gen_model_embed_and_bench() {
    let dir = std::env::temp_dir().join(format!("ternflow-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("tiny.tern");
    let st = ternflow()
        .args([
            "gen-model",
            "--format",
            "int8",
            "--d",
            "32",
            "--heads",
            "4",
            "--ffn",
            "64",
        ])
        .args(["--out", "16"])
        .arg(&model)
        .status()
        .unwrap();
    assert!(st.success());

    let run = |extra: &[&str], input: &str| {
        let mut child = ternflow()
            .arg("embed")
            .arg("--model")
            .arg(&model)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let vectors = run(&[], "hello world\n\nCafé [PAD]\n");
    let lines: Vec<Vec<f32>> = vectors
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|v| v.len() == 16));
    let ids = run(&["--ids"], "hello world\nCafé [PAD]\n");
    let ids: Vec<Vec<u32>> = ids
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ids[0], vec![101, 7592, 2088, 102]);
    assert_eq!(ids[1], vec![101, 7668, 1031, 11687, 1033, 102]);

    // --info: what each vector covers; a long line is embedded whole unless --max-tokens cuts it
    let long = "word ".repeat(300);
    let info = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["--info"];
        args.extend_from_slice(extra);
        run(&args, &format!("hello world\n{long}\n"))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let whole = info(&[]);
    assert_eq!(whole[0]["tokens"], 2);
    assert_eq!(whole[0]["chunks"], 1);
    assert_eq!(whole[1]["tokens"], 300);
    assert_eq!(whole[1]["chunks"], 3, "126 + 126 + 48 word pieces");
    assert_eq!(whole[1]["truncated"], false);
    let vec_of = |v: &serde_json::Value| -> Vec<f32> {
        serde_json::from_value(v["vector"].clone()).unwrap()
    };
    assert_eq!(
        vec_of(&whole[0]),
        lines[0],
        "--info carries the same vector"
    );
    let cut = info(&["--max-tokens", "126"]);
    assert_eq!(cut[1]["tokens"], 126);
    assert_eq!(cut[1]["chunks"], 1);
    assert_eq!(cut[1]["truncated"], true);
    assert_eq!(cut[0]["truncated"], false);
    assert_ne!(
        vec_of(&cut[1]),
        vec_of(&whole[1]),
        "the tail moves the vector"
    );

    let out = ternflow()
        .arg("bench")
        .arg("--model")
        .arg(&model)
        .args(["--iters", "20"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("load") && text.contains("embeds/s"), "{text}");
    assert!(text.contains("128.0 ids/input"), "{text}");

    let bad = ternflow()
        .args(["embed", "--model"])
        .arg(dir.join("missing.tern"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    std::fs::remove_dir_all(&dir).ok();
}

/// A random tiny model (d 32, 16 outputs) written by `ternflow gen-model` into `dir`.
fn tiny_model(dir: &std::path::Path) -> std::path::PathBuf {
    let model = dir.join("tiny.tern");
    let st = ternflow()
        .args(["gen-model", "--format", "int8", "--d", "32", "--heads", "4"])
        .args(["--ffn", "64", "--out", "16"])
        .arg(&model)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    model
}

/// `ternflow embed --model MODEL` with stdin, stdout and stderr piped.
fn spawn_embed(model: &std::path::Path) -> std::process::Child {
    ternflow()
        .arg("embed")
        .arg("--model")
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn embed_stops_quietly_when_its_reader_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut child = spawn_embed(&model);
    // More lines than a pipe holds, fed from a thread: the command must find its reader gone.
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..100_000 {
            if writeln!(stdin, "line number {i}").is_err() {
                break;
            }
        }
    });
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    // The reader (and so the pipe's only read end) is dropped here, as `head -1` exits.
    assert_eq!(serde_json::from_str::<Vec<f32>>(&first).unwrap().len(), 16);
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {err}", out.status);
    assert_eq!(err, "", "nothing to report");
}

#[test]
fn a_line_that_is_not_utf8_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let input = b"hello\n\xff\xfe bad\nworld\n";
    let mut child = spawn_embed(&model);
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stdin line 2") && err.contains("UTF-8"),
        "{err}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "the line before it was embedded"
    );
    // `enqueue` reads and checks every line before its first request (no server is running).
    let file = dir.path().join("jobs.txt");
    std::fs::write(&file, input).unwrap();
    let out = ternflow()
        .args(["enqueue", "--token", "t", "--server", "http://127.0.0.1:9"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("jobs.txt line 2") && err.contains("UTF-8"),
        "{err}"
    );
    std::fs::write(&file, "fine\n{\"text\": 3}\n").unwrap();
    let out = ternflow()
        .args(["enqueue", "--token", "t", "--server", "http://127.0.0.1:9"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("jobs.txt line 2: bad JSON job"), "{err}");
}
