"""MiniLM on CUDA against sentence-transformers on the same GPU and the same weights: every run
the CUDA test suite wrote (each policy, weight mode, budget and batch size) is compared with
sentence-transformers' embeddings of the same sentences; the largest difference must be at most
1e-4. Also embeds a batch with both, timed, for a throughput comparison.

    python3 minilm_check.py MODEL_DIR RUNS_JSON
"""
import json
import sys
import time

import torch
from sentence_transformers import SentenceTransformer


def main(model_dir: str, runs_json: str) -> int:
    runs = json.load(open(runs_json))
    st = SentenceTransformer(model_dir, device="cuda")
    reference = st.encode(runs["sentences"], convert_to_tensor=True, normalize_embeddings=True).float().cpu()
    worst = 0.0
    for run in runs["runs"]:
        ours = torch.tensor(run["embeddings"]).reshape(reference.shape)
        diff = (ours - reference).abs().max().item()
        worst = max(worst, diff)
        print(f"  {run['name']:<18} batch {run['batch_size']}: max |ours - sentence-transformers| {diff:.2e}")
    ok = worst <= 1e-4
    print(f"MiniLM on CUDA vs sentence-transformers {getattr(sys.modules['sentence_transformers'], '__version__', '')} "
          f"on the same GPU: {len(runs['runs'])} runs, worst {worst:.2e} ({'ok' if ok else 'FAILED'}, bar 1e-4)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
