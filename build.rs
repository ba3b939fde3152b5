//! Makes every binary of this crate (the cdylib, tests, examples, benches) find libtorch at run
//! time, and keeps libtorch_cuda linked so CUDA is usable where the wheel ships it.
//! torch-sys publishes its library folder as DEP_TCH_LIBTORCH_LIB (its `links` key is `tch`).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/native");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=DEP_TCH_LIBTORCH_LIB is unset; binaries will need LD_LIBRARY_PATH");
        println!("cargo:rustc-env=TR_LIBTORCH_VERSION=unknown");
        return;
    };
    println!("cargo:rustc-env=TR_LIBTORCH_VERSION={}", libtorch_version(Path::new(&lib)));
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    if Path::new(&lib).join("libtorch_cuda.so").exists() {
        // The linker would drop it as unneeded, and tch::Cuda::is_available() would then be false.
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
    compile_native(Path::new(&lib));
}

/// The C++ shims in src/native (DLPack exchange through libtorch's own converters; side-stream
/// copies for the residency manager on CUDA), compiled
/// against the headers of the wheel that provides libtorch.
fn compile_native(lib: &Path) {
    let include = lib.join("../include");
    cc::Build::new()
        .cpp(true)
        .file("src/native/dlpack.cpp")
        .file("src/native/streams.cpp")
        .file("src/native/tensors.cpp")
        .file("src/native/storage.cpp")
        .file("src/native/autograd.cpp")
        .file("src/native/random.cpp")
        .file("src/native/device_memory.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("tensorref_native");
}

/// The version of the PyTorch wheel that provides libtorch (its `torch/version.py`, beside `lib`).
fn libtorch_version(lib: &Path) -> String {
    let text = std::fs::read_to_string(lib.join("../version.py")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("__version__ = "))
        .map(|v| v.trim().trim_matches(['\'', '"']).to_string())
        .unwrap_or_else(|| "unknown".into())
}
