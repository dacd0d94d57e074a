"""Unit tests of tools/make_random_awq.py: the Qwen2.5-7B layout computed without writing it, and a scaled-down model
written through the same code path (shards, index, values, tokenizer, manifest, determinism)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import make_random_awq as rand
import make_tiny_awq as tiny
import numpy as np
import pytest
from numpy.typing import NDArray
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

QWEN = rand.PRESETS["qwen2.5-7b"]
# Small enough to write in a test, same code path: head size 128 and group size 128 as in the 7B, rows beyond the
# tokenizer in embedding and lm_head, and a shard limit that cuts it into several shards.
SMALL = rand.Preset(
    shape=tiny.Shape(hidden_size=256, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                     intermediate_size=512, vocab_size=8192, max_position_embeddings=4096),
    group_size=128,
    max_shard_bytes=3 * 2**20,
    config_updates=QWEN.config_updates,
)
SMALL_FILES = [
    "config.json", "generation_config.json", "manifest.json", "model-00001-of-00003.safetensors",
    "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
    "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
]


def read_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scaled-down model, written once for the module through main() like the command line."""
    out = tmp_path_factory.mktemp("gen") / "small"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(rand.PRESETS, "small", SMALL)
        assert rand.main(["--out", str(out), "--shape", "small"]) == 0
    return out


@pytest.fixture(scope="module")
def small_tensors(small_dir: Path) -> dict[str, NDArray[Any]]:
    """Every tensor of the scaled-down model, from all its shards."""
    tensors: dict[str, NDArray[Any]] = {}
    for path in sorted(small_dir.glob("model-*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


def test_qwen25_7b_tensors_have_the_real_names_shapes_and_dtypes() -> None:
    """Layer by layer, the tensors are those of Qwen2.5-7B-Instruct-AWQ: AWQ GEMM int32/fp16 linears with group size
    128, q/k/v biases, fp16 norms, and untied fp16 embedding and lm_head of 152064 rows."""
    linears = {  # module: (in, out), written out from the real model's dimensions, not from Shape
        "self_attn.q_proj": (3584, 3584), "self_attn.k_proj": (3584, 512), "self_attn.v_proj": (3584, 512),
        "self_attn.o_proj": (3584, 3584), "mlp.gate_proj": (3584, 18944), "mlp.up_proj": (3584, 18944),
        "mlp.down_proj": (18944, 3584),
    }
    expected: dict[str, tuple[tuple[int, ...], Any]] = {"model.embed_tokens.weight": ((152064, 3584), np.float16)}
    for layer in range(28):
        for module, (in_f, out_f) in linears.items():
            name = f"model.layers.{layer}.{module}"
            expected[f"{name}.qweight"] = ((in_f, out_f // 8), np.int32)
            expected[f"{name}.qzeros"] = ((in_f // 128, out_f // 8), np.int32)
            expected[f"{name}.scales"] = ((in_f // 128, out_f), np.float16)
            if module.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                expected[f"{name}.bias"] = ((out_f,), np.float16)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            expected[f"model.layers.{layer}.{norm}.weight"] = ((3584,), np.float16)
    expected["model.norm.weight"] = ((3584,), np.float16)
    expected["lm_head.weight"] = ((152064, 3584), np.float16)
    specs = rand.tensor_specs(QWEN.shape, QWEN.group_size)
    assert {s.name: (s.shape, s.dtype) for s in specs} == expected
    assert len(specs) == len(expected) == 731
    assert [s.name.rsplit(".", 1)[1] for s in specs[1:5]] == ["qweight", "qzeros", "scales", "bias"]  # AutoAWQ's order


def test_qwen25_7b_size_and_shards_match_the_real_checkpoint() -> None:
    """5.57 GB of tensors, cut like the real checkpoint: 4.0 GB (embedding, layers 0-23) and 1.57 GB (24-27, lm_head)."""
    specs = rand.tensor_specs(QWEN.shape, QWEN.group_size)
    assert sum(s.nbytes for s in specs) == 5_570_747_392
    shards = rand.plan_shards(specs, QWEN.max_shard_bytes)
    assert [round(sum(s.nbytes for s in shard) / 1e9, 2) for shard in shards] == [4.0, 1.57]
    assert [shard[-1].name for shard in shards] == ["model.layers.23.post_attention_layernorm.weight", "lm_head.weight"]
    index = rand.shard_index(shards, rand.shard_filenames(len(shards)))
    assert index["metadata"] == {"total_size": 5_570_747_392}
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert index["weight_map"]["model.layers.24.self_attn.q_proj.qweight"] == "model-00002-of-00002.safetensors"


def test_qwen25_7b_config_updates_carry_the_real_quantization_config() -> None:
    """quantization_config is the real checkpoint's; rope_theta and sliding_window are Qwen2.5's."""
    assert rand.quantization_config(QWEN.group_size) == {
        "bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
        "zero_point": True}
    assert QWEN.config_updates == {"rope_theta": 1000000.0, "sliding_window": 131072}
    assert (QWEN.shape.head_dim, QWEN.shape.kv_size, QWEN.shape.max_position_embeddings) == (128, 512, 32768)


def test_big_matrices_are_drawn_in_bounded_blocks() -> None:
    """The 7B lm_head comes in blocks of at most ROW_BLOCK rows, so memory does not grow with the vocabulary."""
    lm_head = rand.tensor_specs(QWEN.shape, QWEN.group_size)[-1]
    blocks = rand.tensor_blocks(np.random.default_rng(0), lm_head, 4096, [0, 1, 2])
    sizes = [block.shape for block in blocks]
    assert max(rows for rows, _ in sizes) == rand.ROW_BLOCK and sum(rows for rows, _ in sizes) == 152064


def test_write_safetensors_round_trips_and_checks_sizes(tmp_path: Path) -> None:
    """The streaming writer's file loads with safetensors and equals the library's; a short tensor is refused."""
    arrays = {"b": np.arange(6, dtype=np.int32).reshape(2, 3), "a": np.ones(5, dtype=np.float16)}
    specs = [rand.TensorSpec(n, a.shape, a.dtype, "norm") for n, a in arrays.items()]
    rand.write_safetensors(tmp_path / "ours.safetensors", specs, lambda spec: [arrays[spec.name][:1], arrays[spec.name][1:]])
    loaded = load_file(str(tmp_path / "ours.safetensors"))
    assert loaded.keys() == arrays.keys() and all(np.array_equal(loaded[n], a) for n, a in arrays.items())
    with safe_open(str(tmp_path / "ours.safetensors"), "np") as stream:
        assert stream.metadata() == {"format": "pt"}
    # in the library's order (wider dtype first, then by name) the file is byte for byte the library's own
    save_file(arrays, str(tmp_path / "theirs.safetensors"), metadata={"format": "pt"})
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "theirs.safetensors").read_bytes()
    with pytest.raises(ValueError, match="wrote 12 bytes, expected 24"):
        rand.write_safetensors(tmp_path / "short.safetensors", specs[:1], lambda spec: [arrays["b"][:1]])


def test_small_model_files_shards_and_index(small_dir: Path, small_tensors: dict[str, NDArray[Any]]) -> None:
    """Shards, index and tensors agree with the layout computed for the shape; nothing is left beside the model."""
    assert sorted(p.name for p in small_dir.iterdir()) == SMALL_FILES
    assert [p.name for p in small_dir.parent.iterdir()] == ["small"]
    specs = rand.tensor_specs(SMALL.shape, SMALL.group_size)
    assert {name: (t.shape, t.dtype) for name, t in small_tensors.items()} == {s.name: (s.shape, s.dtype) for s in specs}
    index = read_json(small_dir / "model.safetensors.index.json")
    assert index["metadata"]["total_size"] == sum(s.nbytes for s in specs)
    for filename in set(index["weight_map"].values()):
        with safe_open(str(small_dir / filename), "np") as stream:
            assert set(stream.keys()) == {name for name, f in index["weight_map"].items() if f == filename}


def test_small_model_values_are_plausible(small_tensors: dict[str, NDArray[Any]]) -> None:
    """Zero points 6..9, scales 0.002..0.006, dequantized weights of std near 0.02, unit norms, finite fp16 values,
    and embedding/lm_head rows beyond the tokenizer (and lm_head's special rows) zero."""
    prefix = "model.layers.1.mlp.down_proj"
    awq = tiny.AwqTensors(*(small_tensors[f"{prefix}.{part}"] for part in ("qweight", "qzeros", "scales")))
    zeros = tiny.unpack_awq(awq.qzeros)
    assert zeros.min() == 6 and zeros.max() == 9
    assert 0.002 <= awq.scales.min() and awq.scales.max() <= 0.006
    assert 0.015 < tiny.dequantize_awq(awq, group_size=128).std() < 0.025
    assert len(np.unique(tiny.unpack_awq(awq.qweight))) == 16
    assert all(np.isfinite(t).all() for t in small_tensors.values() if t.dtype == np.float16)
    assert (small_tensors["model.norm.weight"] == 1).all()
    embed, head = small_tensors["model.embed_tokens.weight"], small_tensors["lm_head.weight"]
    assert np.abs(embed[:4096]).sum(axis=1).min() > 0 and not embed[4096:].any()
    assert np.abs(head[3:4096]).sum(axis=1).min() > 0 and not head[:3].any() and not head[4096:].any()


def test_small_model_config_and_tokenizer(small_dir: Path) -> None:
    """config.json has the shape, the real quantization_config and ids the tokenizer (the lab's, with its chat
    template) gives its special tokens; the tokenizer is smaller than the model's vocabulary."""
    config = read_json(small_dir / "config.json")
    assert config["quantization_config"] == rand.quantization_config(128)
    assert (config["vocab_size"], config["hidden_size"], config["rope_theta"], config["sliding_window"]) == (
        8192, 256, 1000000.0, 131072)
    assert (small_dir / "tokenizer.json").read_text(encoding="utf-8") == tiny.tokenizer_json(4096)
    tokenizer_config = read_json(small_dir / "tokenizer_config.json")
    assert tokenizer_config["chat_template"] == tiny.CHAT_TEMPLATE and tokenizer_config["model_max_length"] == 4096
    special = {entry["content"]: int(i) for i, entry in tokenizer_config["added_tokens_decoder"].items()}
    assert config["eos_token_id"] == special["<|im_end|>"] and config["bos_token_id"] == special["<|endoftext|>"]
    generation = read_json(small_dir / "generation_config.json")
    assert generation["eos_token_id"] == [special["<|im_end|>"], special["<|endoftext|>"]]


def test_small_model_manifest_and_determinism(small_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest covers every file; the same seed regenerates the same model, another seed other shards."""
    manifest = read_json(small_dir / "manifest.json")
    assert manifest["name"] == "random-small-awq"
    assert [e["path"] for e in manifest["files"]] == [n for n in SMALL_FILES if n != "manifest.json"]
    assert all(e["sha256"] == tiny.sha256_file(small_dir / e["path"]) for e in manifest["files"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(rand.PRESETS, "small", SMALL)
        rand.main(["--out", str(small_dir), "--shape", "small"])
        assert capsys.readouterr().out.startswith("unchanged:")
        with pytest.raises(SystemExit, match="--force"):
            rand.main(["--out", str(small_dir), "--shape", "small", "--seed", "1"])
    assert (small_dir / "manifest.json").read_text(encoding="utf-8") == tiny.json_text(manifest)
