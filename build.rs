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
    // The kernels generated from libtorch's schema: a file added or removed there too.
    println!("cargo:rerun-if-changed=src/ops/aten/generated");
    let mut build = cc::Build::new();
    build
        .cpp(true)
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
        .warnings(false);
    if let Some(header) = precompile(&build, Path::new("src/shim/libtorch.h")) {
        build.flag("-include").flag(header.to_str().expect("OUT_DIR is UTF-8"));
    }
    build.files(&shims).compile("tensorref_native");
}

/// Precompiles `header` with the flags the shims are compiled with (the compiler silently
/// parses the header instead of a `.gch` made with other flags; `g++ -H` marks a used one with
/// `!`), beside a copy of it in OUT_DIR; returns the copy's path, which the compiler then reads
/// from the `.gch` beside it. None (the shims then compile without it) where the compiler
/// cannot.
fn precompile(build: &cc::Build, header: &Path) -> Option<std::path::PathBuf> {
    let dir = Path::new(&std::env::var("OUT_DIR").ok()?).join("pch");
    std::fs::create_dir_all(&dir).ok()?;
    let copy = dir.join(header.file_name()?);
    std::fs::copy(header, &copy).ok()?;
    let gch = dir.join(format!("{}.gch", header.file_name()?.to_str()?));
    let mut cmd = build.get_compiler().to_command();
    cmd.arg("-x").arg("c++-header").arg(&copy).arg("-o").arg(&gch);
    match cmd.status() {
        Ok(s) if s.success() => Some(copy),
        _ => {
            println!("cargo:warning=the libtorch headers could not be precompiled; each shim parses them itself");
            None
        }
    }
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
