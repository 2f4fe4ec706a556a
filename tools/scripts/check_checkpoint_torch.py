#!/usr/bin/python3
"""Checks a `ddpkit train --checkpoint-dir` checkpoint from outside ddpkit.

With the standard library only: the manifest's sizes and CRC-32s (Python's zlib.crc32, the
same checksum ddpkit writes) and the safetensors header of model.safetensors (8-byte
little-endian length, JSON header, __metadata__ format "pt", one entry per parameter).
With PyTorch (Debian's python3-torch; an oracle for developers, never needed by the build or
CI): loads the weights — through safetensors.torch.load_file when the safetensors package is
installed, else by reading the same layout with torch.frombuffer — into the PyTorch model the
checkpoint's --model describes (an MLP's nn.Sequential, torchvision's ResNet with its BatchNorm
buffers, nanoGPT's GPT), with load_state_dict(strict=True), after checking the header lists
that model's state_dict() keys in its order.

Usage: tools/scripts/check_checkpoint_torch.py DIR/step-00000040
"""
import json
import os
import struct
import sys
import zlib

import torch_mlp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))


def torch_model_of(spec):
    """The PyTorch model a ddpkit --model spec names (imports torch and torchvision)."""
    family, _, args = spec.partition(":")
    if family == "mlp":
        return torch_mlp.sequential(torch_mlp.widths_of(spec))
    options = dict(a.split("=") for a in args.split(",") if "=" in a)
    if family == "resnet":
        from make_vision_golden import SpecResNet  # noqa: PLC0415
        blocks = [int(a) for a in args.split(",") if "=" not in a]
        return SpecResNet(blocks, width=int(options.get("width", 64)),
                          in_channels=int(options.get("in", 3)),
                          classes=int(options.get("classes", 1000)),
                          small=options.get("stem") == "small")
    if family == "gpt":
        from make_gpt_golden import GPT  # noqa: PLC0415
        return GPT(**{k: int(options[k]) for k in ("layers", "heads", "dim", "ctx", "vocab")},
                   bias=options.get("bias", "1") == "1")
    raise ValueError(f"no PyTorch twin for --model {spec}")


def check_manifest(folder):
    with open(os.path.join(folder, "MANIFEST.json"), "rb") as f:
        manifest = json.load(f)
    assert manifest["format"] == "ddpkit-checkpoint", manifest["format"]
    for entry in manifest["files"]:
        with open(os.path.join(folder, entry["name"]), "rb") as f:
            data = f.read()
        assert len(data) == entry["size"], f"{entry['name']}: size {len(data)} != {entry['size']}"
        assert zlib.crc32(data) == entry["crc32"], f"{entry['name']}: CRC-32 mismatch"
    print(f"manifest: {len(manifest['files'])} files, sizes and CRC-32s match (step {manifest['step']})")
    return manifest


def read_header(path, require_pt=True):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    if require_pt:  # a state dict; --save-grads files carry no metadata
        assert header.get("__metadata__", {}).get("format") == "pt", header.get("__metadata__")
    return data, 8 + length, header


def load_with_torch(path, require_pt=True):
    import torch  # noqa: PLC0415 (optional)
    try:
        from safetensors.torch import load_file  # noqa: PLC0415
        return load_file(path), "safetensors.torch.load_file"
    except ImportError:
        data, start, header = read_header(path, require_pt)
        dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
        state = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            raw = bytearray(data[start + begin:start + end])
            state[name] = torch.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        return state, "torch.frombuffer (no safetensors package)"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    check_manifest(folder)
    model_path = os.path.join(folder, "model.safetensors")
    _, _, header = read_header(model_path)
    names = [n for n in header if n != "__metadata__"]
    print(f"model.safetensors: header ok, {len(names)} tensors: {', '.join(names)}")
    with open(os.path.join(folder, "state.json")) as f:
        state = json.load(f)
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        print("torch not installed: skipped loading into the PyTorch model")
        return
    weights, how = load_with_torch(model_path)
    model = torch_model_of(state["settings"]["--model"])
    expected = list(model.state_dict().keys())
    assert names == expected, f"header order {names} is not state_dict()'s {expected}"
    model.load_state_dict(weights, strict=True)
    print(f"loaded into {state['settings']['--model']} with load_state_dict(strict=True) via {how}")


if __name__ == "__main__":
    main()
