//! Shared test support: the kernel corpus of `fixtures/ptx/` and its Rust references.
#![allow(dead_code)]

pub mod reference;
