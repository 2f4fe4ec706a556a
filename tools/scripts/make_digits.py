#!/usr/bin/python3
"""The handwritten digits Debian's python3-sklearn ships, as ddpkit training data.

sklearn's load_digits(): 1,797 grey 8x8 images (values 0..16) of the digits 0-9, bundled with
the package (no download). Writes two safetensors files that `ddpkit train --data` reads:
x float32 [N, 1, 8, 8] (pixel / 16) and y int64 [N] — a seeded shuffle, the last 20% held out:

    tools/scripts/make_digits.py --out /tmp/digits      # /tmp/digits.train.safetensors, .test
    ddpkit train --model resnet:1,1,1,1,width=16,in=1,classes=10,stem=small \\
        --data /tmp/digits.train.safetensors --eval-data /tmp/digits.test.safetensors

Needs python3-sklearn and python3-numpy (apt-get install python3-sklearn); not torch.
"""
import argparse
import json
import os
import struct
import sys

try:
    import numpy as np
    from sklearn.datasets import load_digits
except ImportError as e:
    sys.exit(f"make_digits.py: {e}; install Debian's python3-sklearn (apt-get install python3-sklearn)")


def write_safetensors(path, tensors):
    """A safetensors file (the format's own layout: u64 header length, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        dtype = {"float32": "F32", "int64": "I64"}[str(array.dtype)]
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))
    os.replace(tmp, path)  # never a half-written file under the real name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="prefix: writes PREFIX.train/.test.safetensors")
    parser.add_argument("--test-share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(args.seed).permutation(len(y))
    cut = len(y) - int(round(args.test_share * len(y)))
    for part, rows in (("train", order[:cut]), ("test", order[cut:])):
        path = f"{args.out}.{part}.safetensors"
        write_safetensors(path, {"x": x[rows], "y": y[rows]})
        print(f"{path}: {len(rows)} images")


if __name__ == "__main__":
    main()
