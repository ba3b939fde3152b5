//! Loading safetensors files into TensorRefs, from Rust (`weights::Weights`) and through the C
//! ABI (`tr_weights_load`): names, dtypes, shapes and values in file order; and the clear errors
//! for a missing file, a truncated or corrupt one, and dtypes libtensorref has no type for. The
//! files are written by hand here, in a temporary folder.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use tensorref::ffi::{tr_tensor_release, tr_weights_load, TrTensor};
use tensorref::weights::{inspect, Weights};
use tensorref::{DType, Error, Stats, Status, Tensor};

/// Handles alive that this thread made: the tests of this file run in parallel threads, so the
/// process-wide count would see the others.
fn live_handles() -> i64 {
    Stats::get().live()
}

/// A fresh file path in a per-process temporary folder.
fn temp_path(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("tensorref-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}-{name}", N.fetch_add(1, Ordering::Relaxed)))
}

/// A safetensors file: 8-byte little-endian header length, JSON header, then the data.
fn safetensors(entries: &[(&str, &str, &[usize], Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut data = vec![];
    for (name, dtype, shape, bytes) in entries {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header += &format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            shape.join(","),
            data.len(),
            data.len() + bytes.len()
        );
        data.extend_from_slice(bytes);
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend(data);
    file
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Three tensors of three dtypes, written in the order b, a, c (file order is by offset).
fn sample() -> Vec<u8> {
    safetensors(&[
        ("layer.b", "F32", &[2, 3], f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
        ("layer.a", "I64", &[3], [7i64, -8, 9].iter().flat_map(|x| x.to_le_bytes()).collect()),
        ("scalar", "F64", &[], 2.5f64.to_le_bytes().to_vec()),
    ])
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = temp_path(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn names_dtypes_shapes_and_values_in_file_order() {
    let path = write("sample.safetensors", &sample());
    let live = live_handles();
    {
        let w = Weights::load(&path).unwrap();
        assert_eq!(w.names().collect::<Vec<_>>(), ["layer.b", "layer.a", "scalar"]);
        let b = w.get("layer.b").unwrap();
        assert_eq!((b.dtype().unwrap(), b.shape().unwrap()), (DType::F32, vec![2, 3]));
        assert_eq!(b.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(w.get("layer.a").unwrap().to_vec::<i64>().unwrap(), [7, -8, 9]);
        let s = w.get("scalar").unwrap();
        assert_eq!((s.shape().unwrap(), s.item().unwrap()), (vec![], 2.5));
        assert_eq!(w.bytes().unwrap(), 24 + 24 + 8);
        assert_eq!(live_handles(), live + 3);
        let err = w.get("nope").unwrap_err();
        assert!(matches!(&err, Error::InvalidArg(m) if m.contains("nope")), "{err}");
        let info = inspect(&path).unwrap();
        assert_eq!(info.iter().map(|i| (i.name.as_str(), i.dtype, i.shape.clone())).collect::<Vec<_>>(),
                   [("layer.b", DType::F32, vec![2, 3]), ("layer.a", DType::I64, vec![3]), ("scalar", DType::F64, vec![])]);
    }
    assert_eq!(live_handles(), live, "dropping the set releases its handles");
}

#[test]
fn a_taken_tensor_outlives_the_set() {
    let path = write("take.safetensors", &sample());
    let t: Tensor = Weights::load(&path).unwrap().take("layer.a").unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), [7, -8, 9]);
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let path = temp_path("absent.safetensors");
    let err = Weights::load(&path).err().unwrap();
    assert!(matches!(&err, Error::Io(m) if m.contains("absent.safetensors")), "{err}");
    assert_eq!(err.status(), Status::TR_ERR_IO);
}

#[test]
fn truncated_files_are_format_errors_and_register_nothing() {
    let full = sample();
    let live = live_handles();
    // Cut inside the length prefix, inside the header, and inside the data.
    for cut in [4, 20, full.len() - 3] {
        let path = write("truncated.safetensors", &full[..cut]);
        let err = Weights::load(&path).err().unwrap();
        assert!(matches!(&err, Error::Format(m) if m.contains("truncated.safetensors")), "cut at {cut}: {err}");
        assert_eq!(err.status(), Status::TR_ERR_FORMAT);
    }
    assert_eq!(live_handles(), live);
}

#[test]
fn corrupt_headers_are_format_errors() {
    let mut garbage_json = sample();
    garbage_json[8] = b'#';
    let overlapping = safetensors(&[("x", "F32", &[2], f32_bytes(&[1.0, 2.0]))])
        .iter()
        .map(|&c| if c == b'8' { b'9' } else { c }) // data_offsets [0,8] -> [0,9]: wrong length
        .collect::<Vec<u8>>();
    let mut huge_len = sample();
    huge_len[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    for (what, bytes) in [("garbage JSON", garbage_json), ("offsets not matching the shape", overlapping), ("header length past the end", huge_len)] {
        let path = write("corrupt.safetensors", &bytes);
        let err = Weights::load(&path).err().unwrap();
        assert!(matches!(err, Error::Format(_)), "{what}: {err}");
    }
}

#[test]
fn unknown_and_unsupported_dtypes_are_dtype_errors_naming_the_tensor() {
    let unknown = safetensors(&[("w", "F32", &[1], f32_bytes(&[1.0])), ("q", "Q4_K", &[2], vec![0, 0])]);
    let err = Weights::load(write("unknown.safetensors", &unknown)).err().unwrap();
    assert!(matches!(&err, Error::Dtype(m) if m.contains("`q`") && m.contains("Q4_K")), "{err}");
    let unsupported = safetensors(&[("u", "U16", &[2], vec![1, 0, 2, 0])]);
    let err = Weights::load(write("u16.safetensors", &unsupported)).err().unwrap();
    assert!(matches!(&err, Error::Dtype(m) if m.contains("`u`") && m.contains("U16")), "{err}");
    assert_eq!(err.status(), Status::TR_ERR_DTYPE);
}

// ---------------------------------------------------------------- C ABI

fn c_path(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

#[test]
fn c_sizes_then_loads_into_the_callers_arrays() {
    let path = c_path(&write("c.safetensors", &sample()));
    let (mut count, mut names_len) = (0usize, 0usize);
    let s = tr_weights_load(path.as_ptr(), std::ptr::null_mut(), 0, std::ptr::null_mut(), 0, &mut count, &mut names_len);
    assert_eq!(s, Status::TR_ERR_BUFFER_TOO_SMALL);
    assert_eq!((count, names_len), (3, "layer.b\0layer.a\0scalar\0".len()));

    let live = live_handles();
    let mut tensors = vec![TrTensor { id: 0 }; count];
    let mut names = vec![0 as std::ffi::c_char; names_len - 1];
    let s = tr_weights_load(path.as_ptr(), tensors.as_mut_ptr(), count, names.as_mut_ptr(), names.len(), &mut count, &mut names_len);
    assert_eq!(s, Status::TR_ERR_BUFFER_TOO_SMALL, "a names buffer one byte short");
    assert!(tensors.iter().all(|t| t.id == 0) && live_handles() == live, "nothing loaded on error");

    names.push(0);
    let s = tr_weights_load(path.as_ptr(), tensors.as_mut_ptr(), count, names.as_mut_ptr(), names.len(), &mut count, &mut names_len);
    assert_eq!(s, Status::TR_OK);
    let text: Vec<u8> = names.iter().map(|&c| c as u8).collect();
    assert_eq!(text, b"layer.b\0layer.a\0scalar\0");
    let b = Tensor::from_raw(tensors[0].into());
    assert_eq!(b.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    drop(b);
    for t in &tensors[1..] {
        assert_eq!(tr_tensor_release(*t), Status::TR_OK);
    }
    assert_eq!(live_handles(), live);
}

#[test]
fn c_errors_are_statuses() {
    let (mut count, mut names_len) = (7usize, 7usize);
    let (null, nul) = (std::ptr::null_mut::<TrTensor>(), std::ptr::null_mut::<std::ffi::c_char>());
    assert_eq!(tr_weights_load(std::ptr::null(), null, 0, nul, 0, &mut count, &mut names_len), Status::TR_ERR_NULL_ARG);
    let missing = c_path(&temp_path("missing.safetensors"));
    assert_eq!(tr_weights_load(missing.as_ptr(), null, 0, nul, 0, std::ptr::null_mut(), &mut names_len), Status::TR_ERR_NULL_ARG);
    assert_eq!(tr_weights_load(missing.as_ptr(), null, 0, nul, 0, &mut count, &mut names_len), Status::TR_ERR_IO);
    assert_eq!((count, names_len), (7, 7), "outputs untouched on a file error");
    let truncated = c_path(&write("c-trunc.safetensors", &sample()[..30]));
    assert_eq!(tr_weights_load(truncated.as_ptr(), null, 0, nul, 0, &mut count, &mut names_len), Status::TR_ERR_FORMAT);
    assert_eq!(tr_weights_load(missing.as_ptr(), null, 5, nul, 0, &mut count, &mut names_len), Status::TR_ERR_NULL_ARG, "NULL array with a length");
}
