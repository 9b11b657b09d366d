//! CUDA accelerator for guests of a VMM.
//!
//! - [`ptx`]: the PTX front end (lexer, parser, entry parameter lists), independent of
//!   any consumer.
//! - [`sim`]: a PTX simulator that decodes a module once and executes its kernels on
//!   the CPU with the results a GPU would give, plus the checks a GPU does not make
//!   (bounds, freed pointers, divergent barriers, runaway kernels).

pub mod ptx;
pub mod sim;
