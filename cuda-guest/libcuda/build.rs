//! Gives the shared library the soname of the CUDA driver, so programs linked against
//! it (`-lcuda`) record `libcuda.so.1` as their dependency.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
