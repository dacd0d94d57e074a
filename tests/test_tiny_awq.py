"""Unit tests of tools/make_tiny_awq.py: AWQ packing, the generated checkpoint, its manifest and determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import make_tiny_awq as tiny
import numpy as np
import pytest
from numpy.typing import NDArray
from safetensors.numpy import load_file
from tokenizers import Tokenizer

EXPECTED_FILES = [
    "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
    "tokenizer.json", "tokenizer_config.json",
]


def reference_pack(values: NDArray[np.integer[Any]]) -> NDArray[np.int32]:
    """AutoAWQ's GEMM packing loop, written out literally, as an independent reference."""
    rows, cols = values.shape
    packed = np.zeros((rows, cols // 8), dtype=np.uint32)
    for col in range(cols // 8):
        for i, source in enumerate((0, 2, 4, 6, 1, 3, 5, 7)):
            packed[:, col] |= values[:, col * 8 + source].astype(np.uint32) << np.uint32(i * 4)
    return packed.view(np.int32)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint generated once for the module, through main() like the command line."""
    out = tmp_path_factory.mktemp("gen") / "tiny"
    assert tiny.main(["--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def tensors(model_dir: Path) -> dict[str, NDArray[Any]]:
    """The tensors of the generated model.safetensors."""
    return load_file(str(model_dir / "model.safetensors"))


def read_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def test_pack_known_example_has_awq_nibble_order() -> None:
    """Columns 0..7 land in nibbles as 0, 2, 4, 6, 1, 3, 5, 7 (lowest nibble first); high nibbles go negative."""
    values = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]], dtype=np.uint8)
    packed = tiny.pack_awq(values)
    assert packed.dtype == np.int32 and packed.shape == (2, 1)
    assert packed.view(np.uint32).tolist() == [[0x75316420], [0xFDB9ECA8]]
    assert int(packed[1, 0]) < 0


def test_pack_matches_autoawq_loop_and_unpack_inverts_it() -> None:
    """On random values, pack equals AutoAWQ's loop and unpack gives the values back."""
    values = np.random.default_rng(7).integers(0, 16, size=(32, 64), dtype=np.uint8)
    packed = tiny.pack_awq(values)
    np.testing.assert_array_equal(packed, reference_pack(values))
    np.testing.assert_array_equal(tiny.unpack_awq(packed), values)


@pytest.mark.parametrize("bad", [np.full((1, 8), 16), np.full((1, 8), -1), np.zeros((1, 7)), np.zeros(8)])
def test_pack_rejects_bad_input(bad: NDArray[Any]) -> None:
    """Values outside 0..15, a column count not a multiple of 8, or a 1-D array are refused."""
    with pytest.raises(ValueError):
        tiny.pack_awq(bad)


def test_quantize_round_trip_is_within_half_a_step() -> None:
    """Dequantized weights differ from the originals by at most half a quantization step."""
    weight = np.random.default_rng(3).normal(0, 0.02, (64, 32)).astype(np.float32)
    awq = tiny.quantize_awq(weight, group_size=32)
    assert awq.qweight.shape == (64, 4) and awq.qzeros.shape == (2, 4) and awq.scales.shape == (2, 32)
    step = np.repeat(awq.scales.astype(np.float32), 32, axis=0)
    error = np.abs(tiny.dequantize_awq(awq, group_size=32) - weight)
    assert np.all(error <= step / 2 + 1e-6)


def test_files_and_no_leftovers(model_dir: Path) -> None:
    """The model directory holds the expected files and nothing is left beside it."""
    assert sorted(p.name for p in model_dir.iterdir()) == sorted([*EXPECTED_FILES, "manifest.json"])
    assert [p.name for p in model_dir.parent.iterdir()] == [model_dir.name]


def test_tensor_names_shapes_and_dtypes(tensors: dict[str, NDArray[Any]]) -> None:
    """Names follow HF Qwen2; linears are AWQ GEMM int32/fp16; the rest is fp16."""
    shape = tiny.Shape()
    sizes = {"q_proj": (128, 128), "k_proj": (128, 64), "v_proj": (128, 64), "o_proj": (128, 128),
             "gate_proj": (128, 256), "up_proj": (128, 256), "down_proj": (256, 128)}
    expected: dict[str, tuple[tuple[int, ...], Any]] = {
        "model.embed_tokens.weight": ((4096, 128), np.float16),
        "model.norm.weight": ((128,), np.float16),
        "lm_head.weight": ((4096, 128), np.float16),
    }
    for layer in range(shape.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        expected[f"{prefix}.input_layernorm.weight"] = ((128,), np.float16)
        expected[f"{prefix}.post_attention_layernorm.weight"] = ((128,), np.float16)
        for proj, (in_f, out_f) in sizes.items():
            module = f"{prefix}.{'self_attn' if proj[0] in 'qkvo' else 'mlp'}.{proj}"
            expected[f"{module}.qweight"] = ((in_f, out_f // 8), np.int32)
            expected[f"{module}.qzeros"] = ((in_f // 32, out_f // 8), np.int32)
            expected[f"{module}.scales"] = ((in_f // 32, out_f), np.float16)
            if proj in ("q_proj", "k_proj", "v_proj"):
                expected[f"{module}.bias"] = ((out_f,), np.float16)
    assert {name: (t.shape, t.dtype) for name, t in tensors.items()} == expected
    assert all(np.isfinite(t).all() for t in tensors.values() if t.dtype == np.float16)


def test_lm_head_never_prefers_special_tokens(tensors: dict[str, NDArray[Any]]) -> None:
    """lm_head rows of the three special tokens are zero; the others are not."""
    head = tensors["lm_head.weight"]
    assert not head[:3].any()
    assert np.abs(head[3:]).sum(axis=1).min() > 0


def test_config_fields(model_dir: Path) -> None:
    """config.json describes a Qwen2 AWQ GEMM 4-bit model whose special ids match the tokenizer."""
    config = read_json(model_dir / "config.json")
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "num_key_value_heads", "intermediate_size", "vocab_size",
                                   "max_position_embeddings")} == {
        "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 256, "vocab_size": 4096, "max_position_embeddings": 4096}
    assert config["rope_theta"] == 10000 and config["rms_norm_eps"] == 1e-6
    assert config["tie_word_embeddings"] is False and config["torch_dtype"] == "float16"
    assert config["quantization_config"] == {
        "quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}
    assert config["bos_token_id"] == tokenizer.token_to_id("<|endoftext|>")
    assert config["eos_token_id"] == tokenizer.token_to_id("<|im_end|>")
    assert tokenizer.get_vocab_size() <= config["vocab_size"]


def test_tokenizer_files(model_dir: Path) -> None:
    """Special tokens encode to single ids 0..2 and text round-trips through the byte-level BPE."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    text = "<|im_start|>user\nHello, how are you?<|im_end|>\n"
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == 1 and 2 in encoding.ids
    assert tokenizer.decode(encoding.ids, skip_special_tokens=False) == text
    config = read_json(model_dir / "tokenizer_config.json")
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"
    assert config["model_max_length"] == 4096 and config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert read_json(model_dir / "special_tokens_map.json")["eos_token"] == "<|im_end|>"


def test_chat_template_renders_chatml(model_dir: Path) -> None:
    """The chat template gives ChatML, with the assistant header only when add_generation_prompt is set."""
    template = read_json(model_dir / "tokenizer_config.json")["chat_template"]
    assert "<|im_start|>" in template and "add_generation_prompt" in template
    sandbox = pytest.importorskip("jinja2.sandbox")
    compiled = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chat = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert compiled.render(messages=messages, add_generation_prompt=False) == chat
    assert compiled.render(messages=messages, add_generation_prompt=True) == chat + "<|im_start|>assistant\n"


def test_manifest_matches_files(model_dir: Path) -> None:
    """manifest.json names the model and gives the size and sha256 of every other file, sorted by path."""
    manifest = read_json(model_dir / "manifest.json")
    assert manifest["name"] == "tiny-qwen2-awq"
    assert [entry["path"] for entry in manifest["files"]] == EXPECTED_FILES
    for entry in manifest["files"]:
        path = model_dir / entry["path"]
        assert entry["size"] == path.stat().st_size
        assert entry["sha256"] == tiny.sha256_file(path)


# What `make lab-model` gives the lab today (tokenizers 0.23): any change to these files must be deliberate.
PINNED_DIGESTS = {
    "config.json": "b94bd46139f2820720429939df09b0cad6bcb18fa8a1bb41b2ac832bdd42b56b",
    "generation_config.json": "d66ea78f026b3fd867da89c6701c915bcc48bce8727169b0d0434100ea7e4f76",
    "model.safetensors": "d78217f4d9b874e187019f6d10c4450ed7dc39ef8eb71c80c6f64bfe74fcf217",
    "special_tokens_map.json": "f4d14741faa5d39ad889b2bdaf59cac7f5c0c3839e2835a58e898b9d0b332442",
    "tokenizer.json": "9eb59be1d80d982425856d09dd029b8a75991a8896bcf27db4bbc91bc31c80ae",
    "tokenizer_config.json": "c45499f256ef86081f5da500eb260e0c64de4a40065d0796ebe05801d2ed26ba",
}


def test_default_model_is_byte_identical_to_the_pinned_one(model_dir: Path) -> None:
    """With the defaults (seed 0), every file has the digest the lab's model had when it was pinned."""
    manifest = read_json(model_dir / "manifest.json")
    assert {entry["path"]: entry["sha256"] for entry in manifest["files"]} == PINNED_DIGESTS


def test_same_seed_is_byte_identical_other_seed_differs(model_dir: Path, tmp_path: Path) -> None:
    """A second run with seed 0 gives the same manifest; seed 1 changes only the weights."""
    tiny.main(["--out", str(tmp_path / "again")])
    tiny.main(["--out", str(tmp_path / "seed1"), "--seed", "1"])
    assert (tmp_path / "again" / "manifest.json").read_bytes() == (model_dir / "manifest.json").read_bytes()
    digests = {e["path"]: e["sha256"] for e in read_json(model_dir / "manifest.json")["files"]}
    other = {e["path"]: e["sha256"] for e in read_json(tmp_path / "seed1" / "manifest.json")["files"]}
    assert {path for path in digests if digests[path] != other[path]} == {"model.safetensors"}


def test_existing_model_is_kept_refused_or_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same model is left alone, a different one is refused without --force and replaced with it."""
    out = tmp_path / "model"
    tiny.main(["--out", str(out)])
    before = (out / "manifest.json").read_bytes()
    tiny.main(["--out", str(out)])
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["written", "unchanged"]
    with pytest.raises(SystemExit, match="--force"):
        tiny.main(["--out", str(out), "--seed", "1"])
    assert (out / "manifest.json").read_bytes() == before
    tiny.main(["--out", str(out), "--seed", "1", "--force"])
    assert (out / "manifest.json").read_bytes() != before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
