//! Model weights as TensorRefs: a safetensors file loaded into named [`Tensor`] handles, in file
//! order, with their dtypes and shapes.
//!
//! The file is memory-mapped and its header validated by the `safetensors` crate (offsets within
//! the file, no overlaps, shapes matching byte lengths); each tensor's bytes are then copied once,
//! from the page cache, into the libtorch tensor behind its handle. So the process never holds
//! two heap copies of the weights (tch's own safetensors reader would also read the file whole
//! into a buffer first). Under a manager that moves data to a device, each tensor is copied
//! straight into page-locked memory, so it never needs moving there later (`load_page_locked`
//! asks for that without a manager). Missing or unreadable files are `Error::Io`, malformed ones
//! `Error::Format`, dtypes libtensorref has no type for `Error::Dtype`, each naming the file.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use safetensors::tensor::{Dtype as StDtype, SafeTensorError, SafeTensors};
use std::path::Path;

/// The tensors of one safetensors file, in file order. Dropping it releases every handle that
/// was not taken out or retained.
pub struct Weights {
    tensors: Vec<(String, Tensor)>,
}

/// What the header says about one tensor (see [`inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    if path.is_dir() {
        return Err(Error::Io(format!("{} is a directory, not a safetensors file: name the .safetensors file in it", path.display())));
    }
    let file = std::fs::File::open(path).map_err(|e| Error::Io(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: the map is read-only and lives only while this module copies out of it; a file
    // truncated by another process meanwhile is outside what any reader can defend against.
    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::Io(format!("cannot map {}: {e}", path.display())))
}

fn dtype_of(st: StDtype, name: &str, path: &Path) -> Result<DType> {
    Ok(match st {
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::I32 => DType::I32,
        StDtype::I64 => DType::I64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        other => {
            return Err(Error::Dtype(format!(
                "{}: tensor `{name}` has dtype {other:?}, which libtensorref has no type for",
                path.display()
            )))
        }
    })
}

/// A header error in words. An unknown dtype string fails the header's parsing as a whole, and a
/// name given twice leaves offsets that do not tile the data; each is found again here so the
/// message can name the tensor.
fn header_error(e: SafeTensorError, bytes: &[u8], path: &Path) -> Error {
    let strings = header_strings(bytes).unwrap_or_default();
    if let SafeTensorError::InvalidHeaderDeserialization(_) = &e {
        if let Some((name, dtype)) = unknown_dtype(&strings) {
            return Error::Dtype(format!("{}: tensor `{name}` has unknown dtype `{dtype}`", path.display()));
        }
    }
    let why = match (e, duplicate_name(&strings)) {
        (_, Some(name)) => format!("tensor `{name}` is named twice in the header"),
        (SafeTensorError::HeaderTooSmall | SafeTensorError::MetadataIncompleteBuffer, _) => "truncated file".to_string(),
        (SafeTensorError::InvalidHeaderLength, _) => "header length exceeds the file (truncated?)".to_string(),
        (other, _) => other.to_string(),
    };
    Error::Format(format!("{}: not a valid safetensors file: {why}", path.display()))
}

/// A string of the header's JSON: its nesting depth (1: a tensor's name), whether it is a key, and
/// its text.
struct HeaderString {
    depth: u32,
    key: bool,
    text: String,
}

/// The strings of the header's JSON in order (None if the file has no readable header).
fn header_strings(bytes: &[u8]) -> Option<Vec<HeaderString>> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header = std::str::from_utf8(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let (mut depth, mut out) = (0u32, Vec::new());
    let mut chars = header.chars();
    while let Some(c) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            '"' => {
                let text = json_string(&mut chars)?;
                let key = chars.clone().find(|c| !c.is_whitespace()) == Some(':');
                out.push(HeaderString { depth, key, text });
            }
            _ => {}
        }
    }
    Some(out)
}

/// The first tensor whose dtype the header names and safetensors does not know: (name, dtype).
/// The tensor names are the header's top-level keys, each with an object whose "dtype" key holds
/// a string.
fn unknown_dtype(strings: &[HeaderString]) -> Option<(String, String)> {
    const KNOWN: &[&str] = &["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"];
    let (mut name, mut key) = ("", "");
    for s in strings {
        match (s.depth, s.key) {
            (1, true) => name = &s.text,
            (2, true) => key = &s.text,
            (2, false) if key == "dtype" && !KNOWN.contains(&s.text.as_str()) => return Some((name.to_string(), s.text.clone())),
            _ => {}
        }
    }
    None
}

/// The first top-level name the header gives twice (JSON parsers keep the last).
fn duplicate_name(strings: &[HeaderString]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    strings.iter().filter(|s| s.depth == 1 && s.key).find(|s| !seen.insert(&s.text)).map(|s| s.text.clone())
}

/// The rest of a JSON string whose opening quote was just read, unescaped (enough for names and
/// dtypes: a `\uXXXX` escape keeps its letters).
fn json_string(chars: &mut std::str::Chars) -> Option<String> {
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => out.push(match chars.next()? {
                'n' => '\n',
                't' => '\t',
                other => other,
            }),
            c => out.push(c),
        }
    }
}

fn shape_of(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// Reads only the header: names, dtypes and shapes in file order.
pub fn inspect(path: impl AsRef<Path>) -> Result<Vec<TensorInfo>> {
    let path = path.as_ref();
    let map = map_file(path)?;
    let st = SafeTensors::deserialize(&map).map_err(|e| header_error(e, &map, path))?;
    let (_, meta) = SafeTensors::read_metadata(&map).map_err(|e| header_error(e, &map, path))?;
    meta.offset_keys()
        .into_iter()
        .map(|name| {
            let view = st.tensor(&name).map_err(|e| header_error(e, &map, path))?;
            Ok(TensorInfo { dtype: dtype_of(view.dtype(), &name, path)?, shape: shape_of(view.shape()), name })
        })
        .collect()
}

impl Weights {
    /// Loads every tensor of a safetensors file into host memory, each behind a new handle
    /// owned like any new tensor (by the current scope, if one is open). Nothing is registered
    /// unless the whole file is valid.
    pub fn load(path: impl AsRef<Path>) -> Result<Weights> {
        Weights::load_into(path.as_ref(), crate::residency::page_locked_homes())
    }

    /// Like `load`, with every tensor in page-locked memory (CUDA's caching host allocator where
    /// CUDA is available), whether or not a manager is configured.
    pub fn load_page_locked(path: impl AsRef<Path>) -> Result<Weights> {
        Weights::load_into(path.as_ref(), Some(tch::Cuda::is_available()))
    }

    /// `page_locked`: Some(cuda) to allocate page-locked memory (with CUDA's allocator or not).
    fn load_into(path: &Path, page_locked: Option<bool>) -> Result<Weights> {
        let map = map_file(path)?;
        let st = SafeTensors::deserialize(&map).map_err(|e| header_error(e, &map, path))?;
        let (_, meta) = SafeTensors::read_metadata(&map).map_err(|e| header_error(e, &map, path))?;
        let names = meta.offset_keys();
        // Every dtype is checked before anything is copied.
        let mut views = Vec::with_capacity(names.len());
        for name in names {
            let view = st.tensor(&name).map_err(|e| header_error(e, &map, path))?;
            views.push((dtype_of(view.dtype(), &name, path)?, view, name));
        }
        let mut tensors = Vec::with_capacity(views.len());
        for (dtype, view, name) in views {
            let shape = shape_of(view.shape());
            let t = match page_locked {
                None => tch::Tensor::f_from_data_size(view.data(), &shape, dtype.kind())?,
                Some(cuda) => {
                    let t = crate::residency::torch_storage::page_locked_empty(&shape, dtype, cuda)?;
                    if !view.data().is_empty() {
                        // SAFETY: `t` is a new contiguous tensor of exactly the view's bytes
                        // (safetensors checked the shape against the byte length).
                        unsafe { std::ptr::copy_nonoverlapping(view.data().as_ptr(), t.data_ptr().cast::<u8>(), view.data().len()) };
                    }
                    t
                }
            };
            tensors.push((name, Tensor::from_tch(t)));
        }
        Ok(Weights { tensors })
    }

    /// The tensor called `name`, or an error listing what the file holds.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or_else(|| self.missing(name))
    }

    /// Removes the tensor called `name` from the set and hands over its handle.
    pub fn take(&mut self, name: &str) -> Result<Tensor> {
        let i = self.tensors.iter().position(|(n, _)| n == name).ok_or_else(|| self.missing(name))?;
        Ok(self.tensors.remove(i).1)
    }

    fn missing(&self, name: &str) -> Error {
        Error::InvalidArg(format!("no tensor `{name}` among the {} loaded", self.tensors.len()))
    }

    /// Names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }

    /// (name, tensor) pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.tensors.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// Hands over every (name, tensor) pair.
    pub fn into_vec(self) -> Vec<(String, Tensor)> {
        self.tensors
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Bytes of all tensors held.
    pub fn bytes(&self) -> Result<u64> {
        self.tensors.iter().try_fold(0u64, |sum, (_, t)| Ok(sum + (t.numel()? * t.dtype()?.size()) as u64))
    }
}
