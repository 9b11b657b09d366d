//! Gives the shared library the soname of the CUDA runtime, so programs linked against
//! it (`nvcc -cudart shared`, `-lcudart`) record `libcudart.so.13`, and versions its
//! symbols with that name as NVIDIA's library does (nvcc-built programs ask for
//! `cudaMalloc@libcudart.so.13`).

fn main() {
    let map =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("libcudart.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libcudart.map");
}
