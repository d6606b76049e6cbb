//! A warm `Engine::embed_into` allocates nothing: tokenizer, forward pass and kernels all run in
//! buffers the engine owns. Checked with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use ternflow_engine::testing::{generate, tiny_config};
use ternflow_engine::{EmbeddingFormat, Engine};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_embed_into_does_not_allocate() {
    let file = generate(&tiny_config(EmbeddingFormat::Int4), 5);
    let mut engine = Engine::from_bytes(&file).unwrap();
    let texts = [
        "How do I reset my password?",
        "Héllo, WORLD! Ünïcödé, 東京タワー and emoji 😀",
        &"a long input that fills all one hundred and twenty eight ids ".repeat(30),
        "",
    ];
    let mut out = vec![0f32; engine.output_dim()];
    for t in &texts {
        engine.embed_into(t, &mut out); // warm-up: buffers reach their final size
    }
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..3 {
        for t in &texts {
            engine.embed_into(t, &mut out);
        }
    }
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(after - before, 0, "warm embed_into allocated");
}
