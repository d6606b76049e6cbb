//! The `ternflow` command line.

fn main() {
    println!("ternflow {}", env!("CARGO_PKG_VERSION"));
}
