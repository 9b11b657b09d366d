//! PTX simulator (in progress).
