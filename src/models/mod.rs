//! Models written with TensorRef ops, so they run under the residency manager from Rust, C and
//! every binding: `minilm` (sentence-transformers' all-MiniLM-L6-v2 embeddings).

pub mod minilm;

pub use minilm::{find_model_dir, Batch, MiniLm, MiniLmOptions, WeightMode};
