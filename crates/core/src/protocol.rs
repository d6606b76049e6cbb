//! The HTTP protocol types shared by the server and the worker.
