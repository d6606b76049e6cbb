//! Long texts are embedded whole: windows of 126 content ids, their vectors averaged weighted by
//! their ids and renormalised (`ternflow_engine::window`); `max_tokens` cuts a text and says so.

use ternflow_engine::{testing, EmbedOptions, EmbeddingFormat, Engine};

fn engine() -> Engine {
    Engine::from_bytes(&testing::generate(
        &testing::tiny_config(EmbeddingFormat::Int4),
        7,
    ))
    .unwrap()
}

fn long_text() -> String {
    (0..700)
        .map(|i| ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"][i * 5 % 7])
        .collect::<Vec<_>>()
        .join(" ")
}

fn with(
    e: &mut Engine,
    text: &str,
    max_tokens: Option<usize>,
) -> (Vec<f32>, ternflow_engine::EmbedInfo) {
    let mut v = vec![0.0; e.output_dim()];
    let info = e.embed_with(text, EmbedOptions { max_tokens }, &mut v);
    // The count alone (a cached vector's text) says what the embed said, with the engine or
    // with a counter on another thread.
    let options = EmbedOptions { max_tokens };
    assert_eq!(e.info(text, options), info, "{max_tokens:?}");
    assert_eq!(e.counter().info(text, options), info, "{max_tokens:?}");
    (v, info)
}

/// The windows' vectors of `content` summed in f32 in text order, each times its ids, and
/// renormalised: the pooling written out, to the bit.
fn pooled_by_hand(e: &mut Engine, cls: u32, sep: u32, content: &[u32]) -> (Vec<f32>, usize) {
    let windows: Vec<&[u32]> = content.chunks(126).collect();
    let mut sum = vec![0.0f32; e.output_dim()];
    for part in &windows {
        let mut ids = vec![cls];
        ids.extend_from_slice(part);
        ids.push(sep);
        let w = part.len() as f32;
        for (m, x) in sum.iter_mut().zip(e.embed_ids(&ids).unwrap()) {
            *m += w * x;
        }
    }
    let n = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    sum.iter_mut().for_each(|x| *x /= n);
    (sum, windows.len())
}

#[test]
fn a_long_text_is_the_mean_of_its_windows() {
    let mut e = engine();
    let text = long_text();
    let all = e.tokenizer().encode(&text, usize::MAX);
    let content = &all[1..all.len() - 1];
    assert!(content.len() > 126 * 3, "the text spans several windows");
    let (v, info) = with(&mut e, &text, None);
    let (by_hand, chunks) = pooled_by_hand(&mut e, all[0], all[all.len() - 1], content);
    assert_eq!(info.tokens, content.len());
    assert_eq!(info.chunks, chunks);
    assert!(!info.truncated);
    assert_eq!(v, by_hand, "the mean of the windows' vectors, bit for bit");
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    // the whole text counts: its tail moves the vector
    let first_only = e.embed_ids(&e.tokenize(&text)).unwrap();
    assert_ne!(v, first_only);
    assert_eq!(e.embed(&text), v, "embed is embed_with(default)");
}

#[test]
fn max_tokens_cuts_the_text_and_says_so() {
    let mut e = engine();
    let text = long_text();
    // 126 content ids: one window, what the engine did before long texts
    let (v, info) = with(&mut e, &text, Some(126));
    assert_eq!((info.tokens, info.chunks, info.truncated), (126, 1, true));
    assert_eq!(v, e.embed_ids(&e.tokenize(&text)).unwrap());
    // 300: three windows over the first 300 ids
    let (v300, info) = with(&mut e, &text, Some(300));
    assert_eq!((info.tokens, info.chunks, info.truncated), (300, 3, true));
    let all = e.tokenizer().encode(&text, usize::MAX);
    let (by_hand, chunks) = pooled_by_hand(&mut e, all[0], all[all.len() - 1], &all[1..301]);
    assert_eq!(chunks, 3);
    assert_eq!(v300, by_hand);
    // a limit the text fits in changes nothing
    let (vall, info) = with(&mut e, &text, Some(100_000));
    assert!(!info.truncated);
    assert_eq!(vall, e.embed(&text));
    // 0: only [CLS] [SEP]
    let (v0, info) = with(&mut e, &text, Some(0));
    assert_eq!((info.tokens, info.chunks, info.truncated), (0, 1, true));
    assert_eq!(v0, e.embed(""));
}

#[test]
fn a_text_that_fits_one_window_is_one_pass_unchanged() {
    let mut e = engine();
    for text in ["", "short text", &"word ".repeat(126), &"word ".repeat(127)] {
        let ids = e.tokenizer().encode(text, usize::MAX);
        let (v, info) = with(&mut e, text, None);
        assert_eq!(info.tokens, ids.len() - 2);
        if ids.len() <= 128 {
            assert_eq!(info.chunks, 1);
            assert_eq!(v, e.embed_ids(&ids).unwrap(), "{text:?}");
        } else {
            assert_eq!(info.chunks, 2, "127 ids: two windows");
        }
    }
}
