#!/usr/bin/env python3
"""Write a full-size Qwen2 checkpoint with random weights in AutoAWQ GEMM 4-bit layout (Qwen2.5-7B-Instruct-AWQ's shapes).

It stands in for the real checkpoint in memory and speed tests where the real weights cannot be downloaded: every
tensor has the real one's name, shape and dtype, the shards and model.safetensors.index.json split the weights as the
real checkpoint does, and config.json carries its dimensions and quantization_config. The values are random: 4-bit
codes drawn directly as packed int32 words, zero points near the middle of 0..15 and small positive fp16 scales, so
the dequantized weights are about as large as trained ones and activations stay finite; the model talks nonsense at
the real model's speed. The tokenizer, chat template and other small files are the tiny lab model's
(tools/make_tiny_awq.py, vocab 4096); embedding and lm_head keep the real vocab_size rows, zero beyond the
tokenizer's ids (and for the special tokens in lm_head), so greedy decoding stays inside the tokenizer. Tensors are
drawn and written one at a time, the two 152064-row matrices in blocks of rows, so memory stays far below a shard's
size. The same seed gives byte-identical files.

Usage: tools/make_random_awq.py --out DIR [--shape qwen2.5-7b] [--seed 0] [--name NAME] [--force]
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import make_tiny_awq as tiny
import numpy as np
from numpy.typing import NDArray

TOKENIZER_VOCAB = tiny.Shape().vocab_size  # the lab's tokenizer: a bigger BPE trained on its small corpus adds nothing
ZERO_RANGE = (6, 9)  # AutoAWQ zero points of roughly symmetric weights sit near the middle of 0..15
SCALE_RANGE = (0.002, 0.006)  # with codes uniform in 0..15 around those zeros, weights get a std near tiny.INIT_STD
ROW_BLOCK = 8192  # rows of embedding or lm_head drawn at once: about 60 MB of fp16 for hidden size 3584
INDEX_FILE = "model.safetensors.index.json"
SAFETENSORS_DTYPES = {np.dtype(np.int32): "I32", np.dtype(np.float16): "F16"}


@dataclass(frozen=True)
class Preset:
    """A real checkpoint to imitate: its shape, AWQ group size, shard size and config.json keys beyond the tiny model's."""

    shape: tiny.Shape
    group_size: int
    max_shard_bytes: int
    config_updates: Mapping[str, Any]


PRESETS = {
    "qwen2.5-7b": Preset(  # Qwen/Qwen2.5-7B-Instruct-AWQ
        shape=tiny.Shape(
            hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
            intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768,
        ),
        group_size=128,
        max_shard_bytes=4 * 10**9,  # splits the weights as the real checkpoint's two shards (4.0 GB + 1.57 GB)
        config_updates={"rope_theta": 1000000.0, "sliding_window": 131072},
    ),
}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the checkpoint: its name, shape and dtype, and which kind of values it holds."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    kind: str  # qweight, qzeros, scales, bias, norm, embedding or lm_head

    @property
    def nbytes(self) -> int:
        """Size of the tensor's data."""
        return math.prod(self.shape) * self.dtype.itemsize


# --- layout (pure) --------------------------------------------------------------------------------------


def quantization_config(group_size: int) -> dict[str, Any]:
    """quantization_config as AutoAWQ wrote it into Qwen2.5-7B-Instruct-AWQ's config.json."""
    return {
        "bits": tiny.BITS,
        "group_size": group_size,
        "modules_to_not_convert": None,
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    }


def awq_linear_specs(name: str, in_features: int, out_features: int, has_bias: bool, group_size: int) -> list[TensorSpec]:
    """The tensors of one AWQ GEMM linear, in the order AutoAWQ registers them."""
    if in_features % group_size or out_features % tiny.PACK_FACTOR:
        raise ValueError(f"{name}: {in_features}x{out_features} does not fit group size {group_size} and packing by 8")
    int32, fp16, packed = np.dtype(np.int32), np.dtype(np.float16), out_features // tiny.PACK_FACTOR
    specs = [
        TensorSpec(f"{name}.qweight", (in_features, packed), int32, "qweight"),
        TensorSpec(f"{name}.qzeros", (in_features // group_size, packed), int32, "qzeros"),
        TensorSpec(f"{name}.scales", (in_features // group_size, out_features), fp16, "scales"),
    ]
    if has_bias:
        specs.append(TensorSpec(f"{name}.bias", (out_features,), fp16, "bias"))
    return specs


def tensor_specs(shape: tiny.Shape, group_size: int) -> list[TensorSpec]:
    """Every tensor, named as in HF Qwen2 and in its state-dict order (the order that fills the shards)."""
    fp16, matrix, vector = np.dtype(np.float16), (shape.vocab_size, shape.hidden_size), (shape.hidden_size,)
    specs = [TensorSpec("model.embed_tokens.weight", matrix, fp16, "embedding")]
    for layer in range(shape.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        for module, has_bias, in_attr, out_attr in tiny.LINEARS:
            in_features, out_features = getattr(shape, in_attr), getattr(shape, out_attr)
            specs += awq_linear_specs(f"{prefix}.{module}", in_features, out_features, has_bias, group_size)
        specs += [TensorSpec(f"{prefix}.{norm}.weight", vector, fp16, "norm")
                  for norm in ("input_layernorm", "post_attention_layernorm")]
    specs.append(TensorSpec("model.norm.weight", vector, fp16, "norm"))
    specs.append(TensorSpec("lm_head.weight", matrix, fp16, "lm_head"))
    return specs


def plan_shards(specs: Sequence[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Cut specs, in order, into shards as transformers does: a new shard when the next tensor would overflow one."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return shards


def shard_filenames(count: int) -> list[str]:
    """File names of count shards, as transformers names them."""
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{index:05d}-of-{count:05d}.safetensors" for index in range(1, count + 1)]


def shard_index(shards: Sequence[Sequence[TensorSpec]], filenames: Sequence[str]) -> dict[str, Any]:
    """model.safetensors.index.json's content: total tensor bytes and which file holds each tensor."""
    return {
        "metadata": {"total_size": sum(spec.nbytes for shard in shards for spec in shard)},
        "weight_map": {spec.name: filename for shard, filename in zip(shards, filenames) for spec in shard},
    }


def safetensors_header(specs: Sequence[TensorSpec]) -> bytes:
    """Length prefix and JSON header of a safetensors file holding specs back to back in this order."""
    header: dict[str, Any] = {"__metadata__": tiny.SAFETENSORS_METADATA}
    offset = 0
    for spec in specs:
        header[spec.name] = {
            "dtype": SAFETENSORS_DTYPES[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as the safetensors library pads it
    return struct.pack("<Q", len(text)) + text


# --- values (pure given the generator) ------------------------------------------------------------------


def matrix_blocks(
    rng: np.random.Generator, spec: TensorSpec, text_ids: int, special: Sequence[int]
) -> Iterator[NDArray[np.float16]]:
    """Row blocks of embedding or lm_head: normal rows for the ids the tokenizer produces, zero rows for the others;
    lm_head's special-token rows are zero too, so greedy decoding of random weights neither stops early nor emits ids
    the tokenizer cannot decode."""
    rows, cols = spec.shape
    for start in range(0, rows, ROW_BLOCK):
        block = np.zeros((min(ROW_BLOCK, rows - start), cols), dtype=np.float16)
        drawn = max(0, min(len(block), text_ids - start))
        block[:drawn] = rng.standard_normal((drawn, cols), dtype=np.float32) * tiny.INIT_STD
        if spec.kind == "lm_head":
            block[[i - start for i in special if start <= i < start + len(block)]] = 0
        yield block


def small_values(rng: np.random.Generator, spec: TensorSpec) -> NDArray[Any]:
    """The values of a tensor small enough to draw whole: AWQ tensors, biases, norms."""
    if spec.kind == "qweight":  # every 32-bit word is eight valid 4-bit codes
        return rng.integers(0, 2**32, spec.shape, dtype=np.uint32).view(np.int32)
    if spec.kind == "qzeros":
        rows, words = spec.shape
        zeros = rng.integers(ZERO_RANGE[0], ZERO_RANGE[1] + 1, (rows, words * tiny.PACK_FACTOR), dtype=np.uint8)
        return tiny.pack_awq(zeros)
    if spec.kind == "scales":
        low, high = SCALE_RANGE
        return (rng.random(spec.shape, dtype=np.float32) * (high - low) + low).astype(np.float16)
    if spec.kind == "bias":
        return (rng.standard_normal(spec.shape, dtype=np.float32) * tiny.INIT_STD).astype(np.float16)
    if spec.kind == "norm":
        return np.ones(spec.shape, dtype=np.float16)
    raise ValueError(f"{spec.name}: no values for kind {spec.kind!r}")


def tensor_blocks(
    rng: np.random.Generator, spec: TensorSpec, text_ids: int, special: Sequence[int]
) -> Iterable[NDArray[Any]]:
    """The values of one tensor as consecutive blocks of rows."""
    if spec.kind in ("embedding", "lm_head"):
        return matrix_blocks(rng, spec, text_ids, special)
    return [small_values(rng, spec)]


# --- files ----------------------------------------------------------------------------------------------


def write_safetensors(
    path: Path, specs: Sequence[TensorSpec], blocks: Callable[[TensorSpec], Iterable[NDArray[Any]]]
) -> None:
    """Write a safetensors file tensor by tensor, drawing each tensor's blocks only when its turn comes."""
    with path.open("wb") as stream:
        stream.write(safetensors_header(specs))
        for spec in specs:
            written = 0
            for block in blocks(spec):
                if block.dtype != spec.dtype:
                    raise TypeError(f"{spec.name}: got {block.dtype}, expected {spec.dtype}")
                stream.write(np.ascontiguousarray(block).data)
                written += block.nbytes
            if written != spec.nbytes:  # the header already promised spec.nbytes
                raise ValueError(f"{spec.name}: wrote {written} bytes, expected {spec.nbytes}")


def write_model(directory: Path, name: str, seed: int, preset: Preset) -> dict[str, Any]:
    """Write the tokenizer and config files, the weight shards and their index, then the manifest; return the manifest."""
    shape = preset.shape
    tokenizer_text = tiny.tokenizer_json(TOKENIZER_VOCAB)
    special_ids, text_ids = tiny.tokenizer_ids(tokenizer_text, shape.vocab_size)
    config_updates = {**preset.config_updates, "quantization_config": quantization_config(preset.group_size)}
    tiny.write_text_files(directory, shape, tokenizer_text, special_ids, config_updates)

    rng = np.random.default_rng(seed)
    special = sorted(special_ids.values())
    shards = plan_shards(tensor_specs(shape, preset.group_size), preset.max_shard_bytes)
    filenames = shard_filenames(len(shards))
    for shard, filename in zip(shards, filenames):
        write_safetensors(directory / filename, shard, lambda spec: tensor_blocks(rng, spec, text_ids, special))
    if len(shards) > 1:
        (directory / INDEX_FILE).write_text(tiny.json_text(shard_index(shards, filenames)), encoding="utf-8")
    return tiny.write_manifest(directory, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the model beside --out, then rename it into place."""
    parser = tiny.argument_parser(__doc__, None)
    parser.add_argument("--shape", choices=sorted(PRESETS), default="qwen2.5-7b",
                        help="checkpoint to imitate (default qwen2.5-7b); the name defaults to random-SHAPE-awq")
    args = parser.parse_args(argv)
    name = args.name or f"random-{args.shape}-awq"
    preset = PRESETS[args.shape]
    return tiny.run(args.out, args.seed, args.force, lambda directory: write_model(directory, name, args.seed, preset))


if __name__ == "__main__":
    sys.exit(main())
