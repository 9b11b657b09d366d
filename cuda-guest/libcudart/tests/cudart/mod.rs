//! This workspace's `libcudart.so.<major>` for the test programs: the cdylib of the
//! dev-dependency `vmgpu-libcudart<major>` (`cargo test -p vmgpu-libcudart` builds it),
//! installed under its soname in a folder of the dynamic loader's path.

use std::path::Path;

/// Copies `libvmgpu_libcudart<major>.so` (the newest of `target/<profile>/deps` and
/// `target/<profile>`) to `dir/libcudart.so.<major>`.
pub fn install(dir: &Path, major: u32) {
    let exe = std::env::current_exe().expect("the test binary");
    let deps = exe.parent().expect("target/<profile>/deps");
    let file = format!("libvmgpu_libcudart{major}.so");
    let lib = [deps.join(&file), deps.parent().unwrap().join(&file)]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("{file} is built (cargo test -p vmgpu-libcudart builds it)"));
    std::fs::copy(lib, dir.join(format!("libcudart.so.{major}")))
        .unwrap_or_else(|e| panic!("install libcudart.so.{major}: {e}"));
}
