//! pcie
