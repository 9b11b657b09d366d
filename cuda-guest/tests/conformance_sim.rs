//! The driver API's conformance suite (`conformance/mod.rs`) on `SimBackend` directly:
//! each check on a simulator instance of its own, so a sticky fault poisons nothing
//! else.

#[macro_use]
mod conformance;

conformance_suite!(conformance::sim, conformance::Faults::InProcess);
