//! Gives the shared library the soname of the CUDA runtime, so programs linked against
//! it (`nvcc -cudart shared`, `-lcudart`) record `libcudart.so.13` (or `.12`), and versions
//! its symbols with that name as NVIDIA's library does (a CUDA 13 program asks for
//! `cudaMalloc@libcudart.so.13`, a CUDA 12 one for `cudaMalloc@libcudart.so.12`). The
//! name is the version node of the crate's `libcudart.map`; this crate's (13) and
//! `so12`'s (12) both build with this script.

fn main() {
    let map =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("libcudart.map");
    let text = std::fs::read_to_string(&map).expect("libcudart.map");
    let soname = text
        .split_whitespace()
        .next()
        .filter(|n| n.starts_with("libcudart.so."))
        .expect("libcudart.map names its version node libcudart.so.N");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", map.display());
}
