//! PTX front end: a hand-written lexer and recursive-descent parser for the PTX ISA
//! 6.0–8.8 subset that clang and NVRTC emit, producing a syntax tree ([`Module`]) with
//! every kernel's parameter list (name, type, size, alignment, offset).
//!
//! It knows nothing about execution; [`crate::sim`] decodes its output.
//!
//! ```
//! let ptx = r#"
//! .version 7.0
//! .target sm_80
//! .address_size 64
//! .visible .entry k(.param .u64 out, .param .u32 n) { ret; }
//! "#;
//! let m = cuda_guest::ptx::parse("k.ptx", ptx).unwrap();
//! let k = m.entry("k").unwrap();
//! assert_eq!(k.params[1].name, "n");
//! assert_eq!((k.params[1].size, k.params[1].align, k.params[1].offset), (4, 4, 8));
//! ```

mod ast;
mod parser;

pub use ast::*;
pub use parser::{parse, space_name};

/// A syntax error, positioned like a JIT log: module, line, column and construct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{module}:{line}:{column}: error in {construct}: {message}")]
pub struct ParseError {
    /// Module name given to [`parse`].
    pub module: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The construct being parsed (e.g. ``instruction `ld` ``, `parameter list of .entry k`).
    pub construct: String,
    /// What went wrong.
    pub message: String,
}
