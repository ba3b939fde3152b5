//! Makes every binary of this crate (the cdylib, tests, examples, benches) find libtorch at run
//! time, and keeps libtorch_cuda linked so CUDA is usable where the wheel ships it.
//! torch-sys publishes its library folder as DEP_TCH_LIBTORCH_LIB (its `links` key is `tch`).
use std::path::Path;

fn main() {
    // The C++ shims alone, file by file: watching `src` would recompile them on every Rust edit.
    // A new .cpp file is picked up on the next change to build.rs or to any shim.
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=DEP_TCH_LIBTORCH_LIB is unset; binaries will need LD_LIBRARY_PATH");
        println!("cargo:rustc-env=TR_LIBTORCH_VERSION=unknown");
        return;
    };
    println!("cargo:rustc-env=TR_LIBTORCH_VERSION={}", libtorch_version(Path::new(&lib)));
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    // Installed (`make install`), the library is found by this name, which programs linked
    // against it record.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtensorref.so");
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
    sources(Path::new("src"), "cpp", &mut shims);
    shims.sort();
    let mut headers = vec![];
    sources(Path::new("src"), "h", &mut headers);
    for f in shims.iter().chain(&headers) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    cc::Build::new()
        .cpp(true)
        .files(&shims)
        .include("src/shim")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // Line tables only: full debug information of libtorch's templates costs a third more
        // time per file (about 30 s against 20 s on the 2-core machine), and backtraces keep
        // their files and lines.
        .debug(false)
        .flag("-g1")
        .warnings(false)
        .compile("tensorref_native");
}

/// Every file under `dir` whose extension is `ext`.
fn sources(dir: &Path, ext: &str, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, ext, found);
        } else if path.extension().is_some_and(|e| e == ext) {
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
