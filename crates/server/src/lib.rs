//! `ternflow-server`: the companion server. Work in progress (issue 5).
