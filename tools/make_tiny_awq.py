#!/usr/bin/env python3
"""Write a tiny random Qwen2 checkpoint in AutoAWQ GEMM 4-bit layout, without torch or transformers.

The checkpoint is what the lab serves with the real vLLM CPU build: a Qwen2ForCausalLM of hidden size 128,
2 layers, 4 heads of 32 (2 KV heads), its linears quantized to 4 bits (group size 32, zero point, GEMM
packing), embeddings, norms and lm_head in float16, and a byte-level BPE tokenizer trained here on a
built-in English corpus, with a ChatML chat template. The output is deterministic: the same seed gives
byte-identical files (the seed drives the weights; the tokenizer does not depend on it).

Usage: tools/make_tiny_awq.py --out DIR [--seed 0] [--name tiny-qwen2-awq] [--force]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

T = TypeVar("T")

BITS = 4
GROUP_SIZE = 32
PACK_FACTOR = 32 // BITS  # 4-bit values per int32
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a packed int32 holds column AWQ_ORDER[i] of its 8
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column c of the 8 sits in nibble AWQ_REVERSE_ORDER[c]

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)  # ids 0, 1, 2
CORPUS_SEED = 20240611  # fixed: the tokenizer is the same for every --seed
INIT_STD = 0.02
SAFETENSORS_METADATA = {"format": "pt"}  # as save_pretrained writes it: transformers' loader checks the key

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

LINEARS = (  # (module path inside a layer, has bias, input size attribute, output size attribute)
    ("self_attn.q_proj", True, "hidden_size", "q_size"),
    ("self_attn.k_proj", True, "hidden_size", "kv_size"),
    ("self_attn.v_proj", True, "hidden_size", "kv_size"),
    ("self_attn.o_proj", False, "q_size", "hidden_size"),
    ("mlp.gate_proj", False, "hidden_size", "intermediate_size"),
    ("mlp.up_proj", False, "hidden_size", "intermediate_size"),
    ("mlp.down_proj", False, "intermediate_size", "hidden_size"),
)


@dataclass(frozen=True)
class Shape:
    """The model's dimensions."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    vocab_size: int = 4096
    max_position_embeddings: int = 4096

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def q_size(self) -> int:
        """Output size of q_proj."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Output size of k_proj and v_proj."""
        return self.num_key_value_heads * self.head_dim


@dataclass(frozen=True)
class AwqTensors:
    """One linear in AutoAWQ GEMM layout: packed weights, packed zero points, fp16 scales."""

    qweight: NDArray[np.int32]  # [in, out / 8]
    qzeros: NDArray[np.int32]  # [in / group, out / 8]
    scales: NDArray[np.float16]  # [in / group, out]


# --- AWQ packing and quantization (pure) ---------------------------------------------------------------


def pack_awq(values: NDArray[np.integer[Any]]) -> NDArray[np.int32]:
    """Pack 4-bit values [rows, cols] into int32 [rows, cols / 8] in AutoAWQ GEMM nibble order."""
    v = np.asarray(values)
    if v.ndim != 2 or v.shape[1] % PACK_FACTOR:
        raise ValueError(f"need a 2-D array with a multiple of {PACK_FACTOR} columns, got shape {v.shape}")
    if v.size and (v.min() < 0 or v.max() > 15):
        raise ValueError("values must lie in 0..15")
    groups = v.astype(np.uint32).reshape(v.shape[0], -1, PACK_FACTOR)[:, :, list(AWQ_ORDER)]
    shifts = np.arange(PACK_FACTOR, dtype=np.uint32) * BITS
    packed = np.bitwise_or.reduce(groups << shifts, axis=-1)
    return np.ascontiguousarray(packed, dtype=np.uint32).view(np.int32)


def unpack_awq(packed: NDArray[np.int32]) -> NDArray[np.uint8]:
    """Inverse of pack_awq: int32 [rows, cols / 8] back to 4-bit values [rows, cols]."""
    p = np.ascontiguousarray(packed, dtype=np.int32).view(np.uint32)
    if p.ndim != 2:
        raise ValueError(f"need a 2-D array, got shape {p.shape}")
    shifts = np.arange(PACK_FACTOR, dtype=np.uint32) * BITS
    nibbles = (p[:, :, None] >> shifts) & 0xF  # [rows, cols / 8, 8]; nibble i holds column AWQ_ORDER[i]
    return nibbles[:, :, list(AWQ_REVERSE_ORDER)].reshape(p.shape[0], -1).astype(np.uint8)


def quantize_awq(weight: NDArray[np.floating[Any]], group_size: int = GROUP_SIZE) -> AwqTensors:
    """Quantize an [in, out] weight to 4 bits with a zero point per group of input rows, as AutoAWQ does."""
    in_features, out_features = weight.shape
    if in_features % group_size or out_features % PACK_FACTOR:
        raise ValueError(f"shape {weight.shape} does not fit group size {group_size} and packing by {PACK_FACTOR}")
    max_int = 2**BITS - 1
    w = np.asarray(weight, dtype=np.float32).reshape(in_features // group_size, group_size, out_features)
    w_max, w_min = w.max(axis=1), w.min(axis=1)  # [in / group, out]
    scales = (np.maximum(w_max - w_min, 1e-5) / max_int).astype(np.float16)
    s = scales.astype(np.float32)
    zeros = np.clip(-np.round(w_min / s), 0, max_int)
    q = np.clip(np.round(w / s[:, None, :]) + zeros[:, None, :], 0, max_int)
    return AwqTensors(
        qweight=pack_awq(q.reshape(in_features, out_features).astype(np.uint8)),
        qzeros=pack_awq(zeros.astype(np.uint8)),
        scales=scales,
    )


def dequantize_awq(tensors: AwqTensors, group_size: int = GROUP_SIZE) -> NDArray[np.float32]:
    """The float [in, out] weight that an AWQ GEMM linear stands for: (q - zero) * scale."""
    q = unpack_awq(tensors.qweight).astype(np.float32)
    zeros = np.repeat(unpack_awq(tensors.qzeros).astype(np.float32), group_size, axis=0)
    scales = np.repeat(tensors.scales.astype(np.float32), group_size, axis=0)
    return (q - zeros) * scales


# --- tokenizer (pure given its corpus) ------------------------------------------------------------------

PARAGRAPHS = (
    ("The quick brown fox jumps over the lazy dog. A small model can still say hello, count to ten and "
     "answer a question, even when its answers make no sense at all."),
    ("Every morning the server wakes up, reads its configuration, loads the weights from the disk and "
     "starts to listen on its port. When a request arrives, it turns the words into tokens, runs them "
     "through the layers and sends the next token back to the client."),
    ("Hello! How are you today? I am fine, thank you. What would you like to know? Please tell me more "
     "about your question, and I will try my best to help."),
    ("Once upon a time there was a little village between two rivers. The people grew apples and wheat, "
     "they baked bread in the evening and they told stories by the fire until late at night."),
    ("To install the package, open a terminal, create a virtual environment and run the installer. "
     "Then check the version, write a short test and read the logs if something goes wrong."),
    ("Spring brings rain and green leaves; summer is warm and bright; autumn turns the trees red and "
     "yellow; winter is cold, quiet and white with snow."),
)

NAMES = (
    "Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "James", "Kate", "Louis",
    "Maria", "Noah", "Olivia", "Peter", "Quinn", "Rachel", "Samuel", "Tina", "Victor", "William", "Zoe",
)
PLACES = (
    "London", "Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Dublin", "Oslo", "Lisbon", "Tokyo",
    "Boston", "Chicago", "Denver", "Seattle", "Toronto", "Sydney", "Cairo", "Nairobi", "Lima",
    "the city", "the village", "the station", "the market", "the library", "the office", "the garden",
)
NOUNS = (
    "time", "year", "people", "way", "day", "man", "woman", "child", "world", "life", "hand", "part", "place",
    "week", "case", "point", "number", "group", "problem", "fact", "house", "school", "water", "room",
    "mother", "father", "friend", "book", "word", "story", "question", "answer", "night", "morning",
    "evening", "city", "country", "river", "mountain", "forest", "tree", "flower", "garden", "road",
    "street", "car", "train", "plane", "ship", "window", "door", "table", "chair", "letter", "song",
    "picture", "idea", "reason", "result", "change", "minute", "hour", "month", "teacher", "student",
    "doctor", "worker", "family", "dog", "cat", "bird", "horse", "fish", "apple", "bread", "cheese",
    "coffee", "tea", "milk", "sugar", "salt", "music", "game", "team", "market", "money", "price",
    "computer", "server", "program", "file", "network", "model", "token", "message", "request",
    "response", "machine", "memory", "disk", "screen", "keyboard", "engine", "light", "sound", "color",
    "voice", "paper", "pencil", "kitchen", "bottle", "glass", "box", "bag", "key", "map", "plan", "test",
    "job", "rule", "law", "power", "energy", "science", "history", "language", "moment", "season",
    "user", "assistant", "system", "chat", "prompt", "reply", "weight", "layer", "cluster", "node", "service",
    "package", "version", "update", "record", "report", "error", "warning", "signal", "channel", "bridge",
    "island", "ocean", "beach", "desert", "valley", "village", "castle", "tower", "church", "museum",
    "theatre", "hospital", "airport", "harbour", "factory", "farm", "field", "hill", "lake", "sky", "cloud",
    "storm", "wind", "rain", "snow", "sun", "moon", "star", "planet", "stone", "sand", "wood", "metal",
    "gold", "iron", "glassware", "blanket", "pillow", "jacket", "shirt", "shoe", "hat", "coat", "ring",
    "clock", "watch", "camera", "phone", "radio", "lamp", "candle", "mirror", "basket", "bucket", "ladder",
    "hammer", "needle", "thread", "rope", "wheel", "engineer", "farmer", "baker", "painter", "singer",
    "writer", "driver", "pilot", "sailor", "soldier", "king", "queen", "prince", "princess", "neighbour",
    "stranger", "visitor", "customer", "manager", "brother", "sister", "uncle", "aunt", "cousin", "baby",
    "orange", "banana", "potato", "tomato", "carrot", "onion", "pepper", "butter", "honey",
    "soup", "salad", "dinner", "breakfast", "lunch", "holiday", "journey", "adventure", "secret", "dream",
    "promise", "mistake", "lesson", "exercise", "solution", "choice", "chance", "danger",
    "courage", "freedom", "silence", "knowledge", "wisdom", "beauty", "kindness", "patience", "future",
    "animal", "rabbit", "mouse", "tiger", "lion", "elephant", "monkey", "wolf", "bear", "fox", "owl",
)
VERBS = (  # base, past, -ing, third person
    ("walk", "walked", "walking", "walks"), ("talk", "talked", "talking", "talks"),
    ("look", "looked", "looking", "looks"), ("open", "opened", "opening", "opens"),
    ("close", "closed", "closing", "closes"), ("start", "started", "starting", "starts"),
    ("finish", "finished", "finishing", "finishes"), ("help", "helped", "helping", "helps"),
    ("play", "played", "playing", "plays"), ("work", "worked", "working", "works"),
    ("call", "called", "calling", "calls"), ("ask", "asked", "asking", "asks"),
    ("need", "needed", "needing", "needs"), ("want", "wanted", "wanting", "wants"),
    ("move", "moved", "moving", "moves"), ("live", "lived", "living", "lives"),
    ("believe", "believed", "believing", "believes"), ("carry", "carried", "carrying", "carries"),
    ("watch", "watched", "watching", "watches"), ("follow", "followed", "following", "follows"),
    ("learn", "learned", "learning", "learns"), ("change", "changed", "changing", "changes"),
    ("answer", "answered", "answering", "answers"), ("listen", "listened", "listening", "listens"),
    ("travel", "travelled", "travelling", "travels"), ("cook", "cooked", "cooking", "cooks"),
    ("clean", "cleaned", "cleaning", "cleans"), ("paint", "painted", "painting", "paints"),
    ("visit", "visited", "visiting", "visits"), ("deploy", "deployed", "deploying", "deploys"),
    ("install", "installed", "installing", "installs"), ("test", "tested", "testing", "tests"),
    ("build", "built", "building", "builds"), ("write", "wrote", "writing", "writes"),
    ("read", "read", "reading", "reads"), ("see", "saw", "seeing", "sees"),
    ("find", "found", "finding", "finds"), ("give", "gave", "giving", "gives"),
    ("take", "took", "taking", "takes"), ("make", "made", "making", "makes"),
    ("know", "knew", "knowing", "knows"), ("think", "thought", "thinking", "thinks"),
    ("come", "came", "coming", "comes"), ("go", "went", "going", "goes"),
    ("get", "got", "getting", "gets"), ("say", "said", "saying", "says"),
    ("tell", "told", "telling", "tells"), ("bring", "brought", "bringing", "brings"),
    ("begin", "began", "beginning", "begins"), ("keep", "kept", "keeping", "keeps"),
    ("hold", "held", "holding", "holds"), ("run", "ran", "running", "runs"),
    ("sing", "sang", "singing", "sings"), ("swim", "swam", "swimming", "swims"),
    ("drive", "drove", "driving", "drives"), ("eat", "ate", "eating", "eats"),
    ("drink", "drank", "drinking", "drinks"), ("sleep", "slept", "sleeping", "sleeps"),
    ("buy", "bought", "buying", "buys"), ("sell", "sold", "selling", "sells"),
    ("send", "sent", "sending", "sends"), ("leave", "left", "leaving", "leaves"),
    ("meet", "met", "meeting", "meets"), ("pay", "paid", "paying", "pays"),
    ("teach", "taught", "teaching", "teaches"), ("understand", "understood", "understanding", "understands"),
    ("remember", "remembered", "remembering", "remembers"), ("forget", "forgot", "forgetting", "forgets"),
)
ADJECTIVES = (
    "good", "new", "first", "last", "long", "great", "little", "own", "other", "old", "right", "big",
    "high", "different", "small", "large", "next", "early", "young", "important", "few", "public", "bad",
    "same", "able", "happy", "sad", "quick", "slow", "bright", "dark", "warm", "cold", "hot", "cool",
    "quiet", "loud", "clean", "busy", "empty", "full", "easy", "hard", "simple", "strange", "beautiful",
    "friendly", "careful", "useful", "modern", "ancient", "green", "blue", "red", "yellow", "white",
    "black", "brown", "golden", "silver", "tiny", "huge", "gentle", "brave", "clever", "honest",
    "calm", "cheap", "expensive", "famous", "fresh", "heavy", "light", "narrow", "wide", "deep", "shallow",
    "soft", "sharp", "smooth", "rough", "sweet", "bitter", "salty", "hungry", "thirsty", "tired", "angry",
    "proud", "lonely", "lucky", "polite", "rude", "curious", "nervous", "patient", "serious", "funny",
    "wonderful", "terrible", "perfect", "broken", "hidden", "secret", "distant", "foreign", "local",
    "northern", "southern", "eastern", "western", "central", "purple", "pink", "grey", "orange", "wooden",
)
ADVERBS = (
    "quickly", "slowly", "carefully", "happily", "quietly", "loudly", "early", "late", "often", "never",
    "always", "sometimes", "usually", "again", "together", "alone", "today", "yesterday", "tomorrow",
    "soon", "finally", "suddenly", "almost", "really", "very", "well",
)
TEMPLATES = (
    "{Name} {past} the {adj} {noun} in {place}.",
    "The {adj} {noun} {third} {adv}.",
    "Why did {name} {base} the {noun}?",
    "{Name} and {name2} were {ing} near the {adj} {noun} {adv}.",
    "Can you {base} a {adj} {noun} for me, please?",
    "I {past} {number} {noun}s in {place} {adv}.",
    "We will {base} the {noun} at {hour}:{minute} on {day}.",
    "She {third} that the {noun} is {adj}, but he {past} it {adv}.",
    "Is the {noun} {adj} or {adj2}?",
    "They {past} {number} {adj} {noun}s and paid {price} dollars.",
    "\"{Base} the {noun}!\" said {name}.",
    "It was a {adj} {noun}; {name} {past} it in {year}.",
    "Question: what does the {adj} {noun} {base}? Answer: it {third} the {noun2}.",
    "My {noun} is {adj} and my {noun2} is {adj2}.",
    "Please {base} the {noun} before you {base2} the {noun2}.",
    "{Name} is {ing} the {noun} because it is {adj}.",
    "{Adj} {noun}s {base} {adv} in {place}.",
    "{Noun} and {noun2}: {adj}, {adj2} and {adv} {past}.",
    "{Ing} the {noun}, {name} {past} the {adj} {noun2}.",
    "{Adv}, the {noun}s {past} into the {adj} {noun2}.",
    "user: How do I {base} the {noun}? assistant: First {base2} the {adj} {noun2}, then wait.",
    "{Noun}s are more {adj} than {noun2}s, said the {adj2} {noun}.",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def corpus_lines(seed: int = CORPUS_SEED, sentences: int = 20000) -> list[str]:
    """A deterministic English corpus: the fixed paragraphs plus sentences filled from templates."""
    rng = np.random.default_rng(seed)

    def pick(choices: Sequence[T]) -> T:
        """One of choices, drawn by the corpus generator."""
        return choices[int(rng.integers(len(choices)))]

    lines = list(PARAGRAPHS)
    for _ in range(sentences):
        base, past, ing, third = pick(VERBS)
        base2 = pick(VERBS)[0]
        name, noun, adj, adv = pick(NAMES), pick(NOUNS), pick(ADJECTIVES), pick(ADVERBS)
        fields = {
            "Name": name, "name": name, "name2": pick(NAMES), "place": pick(PLACES),
            "noun": noun, "noun2": pick(NOUNS), "adj": adj, "adj2": pick(ADJECTIVES),
            "adv": adv, "base": base, "Base": base.capitalize(), "base2": base2, "past": past,
            "ing": ing, "Ing": ing.capitalize(), "third": third, "Noun": noun.capitalize(),
            "Adj": adj.capitalize(), "Adv": adv.capitalize(), "day": pick(DAYS), "number": str(int(rng.integers(2, 1000))),
            "price": f"{int(rng.integers(1, 500))}.{int(rng.integers(100)):02d}",
            "year": str(int(rng.integers(1800, 2100))), "hour": f"{int(rng.integers(24)):02d}",
            "minute": f"{int(rng.integers(60)):02d}",
        }
        lines.append(pick(TEMPLATES).format(**fields))
    return lines


def train_tokenizer(lines: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE tokenizer (specials <|endoftext|>, <|im_start|>, <|im_end|> get ids 0, 1, 2)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread: training must not depend on scheduling
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


@functools.lru_cache(maxsize=2)
def tokenizer_json(vocab_size: int) -> str:
    """tokenizer.json text of the tokenizer trained on the built-in corpus (cached: it never changes)."""
    return train_tokenizer(corpus_lines(), vocab_size).to_str(pretty=True) + "\n"


# --- configuration files (pure) -------------------------------------------------------------------------


def model_config(shape: Shape, bos_id: int, eos_id: int) -> dict[str, Any]:
    """config.json of a Qwen2ForCausalLM with an AWQ GEMM 4-bit quantization_config."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": INIT_STD,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "max_window_layers": shape.num_hidden_layers,
        "model_type": "qwen2",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_key_value_heads": shape.num_key_value_heads,
        "quantization_config": {
            "bits": BITS,
            "group_size": GROUP_SIZE,
            "quant_method": "awq",
            "version": "gemm",
            "zero_point": True,
        },
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab_size,
    }


def generation_config(bos_id: int, eos_ids: Sequence[int], pad_id: int) -> dict[str, Any]:
    """generation_config.json: which ids start, end and pad a sequence."""
    return {"bos_token_id": bos_id, "eos_token_id": list(eos_ids), "pad_token_id": pad_id}


def tokenizer_config(special_ids: Mapping[str, int], max_length: int) -> dict[str, Any]:
    """tokenizer_config.json for transformers' PreTrainedTokenizerFast, with the ChatML chat template."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(token_id): {
                "content": token, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True,
            }
            for token, token_id in special_ids.items()
        },
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def special_tokens_map() -> dict[str, Any]:
    """special_tokens_map.json, matching tokenizer_config.json."""
    return {"additional_special_tokens": [IM_START, IM_END], "eos_token": IM_END, "pad_token": ENDOFTEXT}


# --- weights (pure given the generator) -----------------------------------------------------------------


def lm_head_weight(rng: np.random.Generator, shape: Shape, text_ids: int, special: Sequence[int]) -> NDArray[np.float16]:
    """lm_head [vocab, hidden]; rows of special ids and of ids the tokenizer lacks are zero, so greedy
    decoding of random weights emits ordinary text tokens and never stops early on an end token."""
    weight = rng.normal(0.0, INIT_STD, (shape.vocab_size, shape.hidden_size)).astype(np.float32)
    weight[text_ids:] = 0.0
    weight[list(special)] = 0.0
    return weight.astype(np.float16)


def model_tensors(
    rng: np.random.Generator, shape: Shape, text_ids: int, special: Sequence[int]
) -> dict[str, NDArray[Any]]:
    """Every tensor of the checkpoint, named as in HF Qwen2, linears in AWQ GEMM layout."""
    def normal(*dims: int) -> NDArray[np.float32]:
        """Small random values of the given dims."""
        return rng.normal(0.0, INIT_STD, dims).astype(np.float32)

    ones = np.ones(shape.hidden_size, dtype=np.float16)
    tensors: dict[str, NDArray[Any]] = {
        "model.embed_tokens.weight": normal(shape.vocab_size, shape.hidden_size).astype(np.float16),
    }
    for layer in range(shape.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.input_layernorm.weight"] = ones.copy()
        tensors[f"{prefix}.post_attention_layernorm.weight"] = ones.copy()
        for module, has_bias, in_attr, out_attr in LINEARS:
            in_features, out_features = getattr(shape, in_attr), getattr(shape, out_attr)
            awq = quantize_awq(normal(in_features, out_features))
            tensors[f"{prefix}.{module}.qweight"] = awq.qweight
            tensors[f"{prefix}.{module}.qzeros"] = awq.qzeros
            tensors[f"{prefix}.{module}.scales"] = awq.scales
            if has_bias:
                tensors[f"{prefix}.{module}.bias"] = normal(out_features).astype(np.float16)
    tensors["model.norm.weight"] = ones.copy()
    tensors["lm_head.weight"] = lm_head_weight(rng, shape, text_ids, special)
    return tensors


# --- files ----------------------------------------------------------------------------------------------


def json_text(data: Any) -> str:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(directory: Path, name: str) -> dict[str, Any]:
    """manifest.json's content: name, and path, size and sha256 of every other file, sorted by path."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "manifest.json")
    return {
        "name": name,
        "files": [
            {"path": p.relative_to(directory).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in files
        ],
    }


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of a model directory, or None if it has none that parses."""
    try:
        data = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def tokenizer_ids(tokenizer_text: str, vocab_size: int) -> tuple[dict[str, int], int]:
    """The special tokens' ids and the number of ids the tokenizer produces, checked against the model's vocab_size."""
    tokenizer = Tokenizer.from_str(tokenizer_text)
    special_ids = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    if any(tokenizer.token_to_id(token) != index for token, index in special_ids.items()):
        raise RuntimeError(f"the tokenizer does not give the special tokens the ids {special_ids}")
    text_ids = tokenizer.get_vocab_size(with_added_tokens=True)
    if text_ids > vocab_size:
        raise RuntimeError(f"tokenizer has {text_ids} tokens, more than vocab_size {vocab_size}")
    return special_ids, text_ids


def write_text_files(
    directory: Path, shape: Shape, tokenizer_text: str, special_ids: Mapping[str, int],
    config_updates: Mapping[str, Any] | None = None,
) -> None:
    """Write config.json (config_updates over model_config), generation_config.json and the tokenizer files."""
    bos_id, eos_id, pad_id = special_ids[ENDOFTEXT], special_ids[IM_END], special_ids[ENDOFTEXT]
    texts = {
        "config.json": json_text(model_config(shape, bos_id, eos_id) | dict(config_updates or {})),
        "generation_config.json": json_text(generation_config(bos_id, [eos_id, pad_id], pad_id)),
        "tokenizer.json": tokenizer_text,
        "tokenizer_config.json": json_text(tokenizer_config(special_ids, shape.max_position_embeddings)),
        "special_tokens_map.json": json_text(special_tokens_map()),
    }
    for filename, text in texts.items():
        (directory / filename).write_text(text, encoding="utf-8")


def write_manifest(directory: Path, name: str) -> dict[str, Any]:
    """Write manifest.json for the files in directory; return it."""
    manifest = build_manifest(directory, name)
    (directory / "manifest.json").write_text(json_text(manifest), encoding="utf-8")
    return manifest


def write_model(directory: Path, name: str, seed: int, shape: Shape = Shape()) -> dict[str, Any]:
    """Write the whole checkpoint and its manifest into an existing empty directory; return the manifest."""
    tokenizer_text = tokenizer_json(shape.vocab_size)
    special_ids, text_ids = tokenizer_ids(tokenizer_text, shape.vocab_size)
    write_text_files(directory, shape, tokenizer_text, special_ids)
    tensors = model_tensors(np.random.default_rng(seed), shape, text_ids, list(special_ids.values()))
    save_file(tensors, str(directory / "model.safetensors"), metadata=SAFETENSORS_METADATA)
    return write_manifest(directory, name)


def install(staged: Path, out: Path, force: bool) -> str:
    """Move the staged model to out by rename; keep an identical model, refuse a different one unless force."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if not out.exists() and not out.is_symlink():
        staged.rename(out)
        return "written"
    if out.is_dir() and read_manifest(out) == read_manifest(staged):
        shutil.rmtree(staged)
        return "unchanged"
    if not force:
        shutil.rmtree(staged)
        raise SystemExit(f"error: {out} exists and is not this model; use --force to replace it")
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    out.rename(aside / out.name)
    staged.rename(out)
    shutil.rmtree(aside)
    return "replaced"


def argument_parser(doc: str | None, default_name: str | None) -> argparse.ArgumentParser:
    """The options every model generator takes: --out, --seed, --name, --force."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--out", required=True, type=Path, help="model directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    name_help = f" (default {default_name})" if default_name else ""
    parser.add_argument("--name", default=default_name, help=f"name recorded in manifest.json{name_help}")
    parser.add_argument("--force", action="store_true", help="replace an existing different model at --out")
    return parser


def run(out: Path, seed: int, force: bool, write: Callable[[Path], Mapping[str, Any]]) -> int:
    """Let write() fill a directory beside out and return its manifest, rename it into place, say what happened."""
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        manifest = write(staged)
        staged.chmod(0o755)
        outcome = install(staged, out, force)
    finally:
        if staged.exists():
            shutil.rmtree(staged)
    size = sum(entry["size"] for entry in manifest["files"])
    print(f"{outcome}: {out} ({manifest['name']}, seed {seed}, {len(manifest['files'])} files, {size} bytes)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the tiny model beside --out, then rename it into place."""
    args = argument_parser(__doc__, "tiny-qwen2-awq").parse_args(argv)
    return run(args.out, args.seed, args.force, lambda directory: write_model(directory, args.name, args.seed))


if __name__ == "__main__":
    sys.exit(main())
