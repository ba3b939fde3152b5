//! Makes every binary of this crate (the cdylib, tests, examples, benches) find libtorch at run
//! time, and keeps libtorch_cuda linked so CUDA is usable where the wheel ships it.
//! torch-sys publishes its library folder as DEP_TCH_LIBTORCH_LIB (its `links` key is `tch`).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
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

/// The C++ shims, each beside the Rust module that wraps it (src/shim says how they report
/// errors), compiled against the headers of the wheel that provides libtorch.
fn compile_native(lib: &Path) {
    let include = lib.join("../include");
    let mut shims = vec![];
    cpp_files(Path::new("src"), &mut shims);
    shims.sort();
    cc::Build::new()
        .cpp(true)
        .files(&shims)
        .include("src/shim")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("tensorref_native");
}

/// Every `.cpp` file under `dir`.
fn cpp_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            cpp_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "cpp") {
            found.push(path);
        }
    }
}

/// The version of the PyTorch wheel that provides libtorch (its `torch/version.py`, beside `lib`).
fn libtorch_version(lib: &Path) -> String {
    let text = std::fs::read_to_string(lib.join("../version.py")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("__version__ = "))
        .map(|v| v.trim().trim_matches(['\'', '"']).to_string())
        .unwrap_or_else(|| "unknown".into())
}
