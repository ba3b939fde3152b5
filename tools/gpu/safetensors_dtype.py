"""Rewrites a safetensors file with every floating tensor in another dtype (F16 or F32), with
nothing but the standard library and torch (the format: an 8-byte little-endian header length,
a JSON header of names, dtypes, shapes and byte offsets, then the data).

    python3 safetensors_dtype.py IN OUT F16|F32
"""
import json
import struct
import sys

import torch

DTYPES = {"F16": (torch.float16, 2), "F32": (torch.float32, 4)}


def main(src: str, dst: str, to: str) -> None:
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] in DTYPES and info["dtype"] != to:
            t = torch.frombuffer(bytearray(raw), dtype=DTYPES[info["dtype"]][0]).to(DTYPES[to][0])
            raw, info = t.numpy().tobytes(), {**info, "dtype": to}
        out_header[name] = {**info, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(out_header).encode()
    head += b" " * (-len(head) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for c in chunks:
            f.write(c)


if __name__ == "__main__":
    main(*sys.argv[1:4])
