//! `ternflow-engine`: Ternlight (TERN v1) sentence-embedding inference. Work in progress (issue 3).
