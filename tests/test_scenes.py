"""Unit tests of scene resolution: presets, overrides, owned keys, clashes and exposure."""

from typing import Any

import pytest
import yaml

from conftest import REPO

from ansible_collections.vllm.fleet.plugins.plugin_utils import cards, scenes

from ansible_collections.vllm.fleet.plugins.plugin_utils.errors import FleetError

DEFAULTS = yaml.safe_load((REPO / "roles/vllm_scenes/defaults/main.yml").read_text())
PRESETS: dict[str, Any] = cards.presets()
MODELS = scenes.models_by_name([{"name": "qwen", "engine_args": {"quantization": "awq", "dtype": "float16"},
                                 "served_model_name": "qwen2.5-7b"}], "/var/lib/vllm/models")


def resolve(*host_scenes: Any) -> list[dict[str, Any]]:
    """Resolve scenes against the role's built-in presets and one model."""
    return scenes.resolve_scenes(list(host_scenes), PRESETS, MODELS)


def test_builtin_presets_carry_the_seed_figures() -> None:
    """realtime is 0.90/4096/16 and batch 0.95/4096/64, both with prefix caching and chunked prefill."""
    realtime, batch = resolve({"name": "realtime", "model": "qwen"}, {"name": "batch", "model": "qwen"})
    assert {k: realtime["engine_args"][k] for k in ("gpu-memory-utilization", "max-model-len", "max-num-seqs")} == {
        "gpu-memory-utilization": 0.90, "max-model-len": 4096, "max-num-seqs": 16}
    assert {k: batch["engine_args"][k] for k in ("gpu-memory-utilization", "max-model-len", "max-num-seqs")} == {
        "gpu-memory-utilization": 0.95, "max-model-len": 4096, "max-num-seqs": 64}
    for scene in (realtime, batch):
        assert scene["engine_args"]["enable-prefix-caching"] is True
        assert scene["engine_args"]["enable-chunked-prefill"] is True
    assert (realtime["port"], batch["port"]) == (8000, 8001)


def test_overrides_win_and_defaults_are_safe() -> None:
    """Host overrides beat preset and model args; the default listen address is loopback on GPU 0."""
    (scene,) = resolve({"name": "realtime", "model": "qwen", "engine_args": {"max_num_seqs": 32, "dtype": "bfloat16"}})
    assert scene["engine_args"]["max-num-seqs"] == 32 and scene["engine_args"]["dtype"] == "bfloat16"
    assert scene["engine_args"]["quantization"] == "awq"
    assert (scene["host"], scene["gpus"], scene["served_model_name"]) == ("127.0.0.1", [0], "qwen2.5-7b")


def test_the_only_model_is_the_default() -> None:
    """A host with one model serves it without naming it; with two, the scene must choose."""
    (scene,) = resolve({"name": "realtime"})
    assert scene["model"] == "qwen"
    two = {**MODELS, "llama": {"path": "/m/llama"}}
    with pytest.raises(scenes.SceneError, match="model None is not among"):
        scenes.resolve_scenes([{"name": "realtime"}], PRESETS, two)


def test_a_scene_on_several_gpus_runs_one_rank_per_gpu() -> None:
    """Two GPUs and no tensor_parallel_size give 2; one GPU gets none (vLLM's 1); a size given stays for the rules."""
    two, one, given = resolve({"name": "realtime", "model": "qwen", "gpus": [0, 1]},
                              {"name": "batch", "model": "qwen", "gpus": [2]},
                              {"name": "other", "preset": "batch", "model": "qwen", "port": 8002, "gpus": [3, 4],
                               "engine_args": {"tensor_parallel_size": 1}})
    assert two["engine_args"]["tensor-parallel-size"] == 2 and "tensor-parallel-size" not in one["engine_args"]
    assert given["engine_args"]["tensor-parallel-size"] == 1


def test_user_scene_takes_a_preset() -> None:
    """A scene of the user's own names its preset and keeps its own name."""
    (scene,) = resolve({"name": "nightly", "preset": "batch", "model": "qwen", "port": 8100})
    assert (scene["name"], scene["preset"], scene["port"]) == ("nightly", "batch", 8100)


def test_config_file_is_dash_keyed_and_has_no_secret() -> None:
    """The --config mapping holds model path and server args but never the API key."""
    (scene,) = resolve({"name": "realtime", "model": "qwen", "api_key_var": "vault_key"})
    config = scenes.config_file(scene)
    assert config["model"] == "/var/lib/vllm/models/qwen" and config["served-model-name"] == "qwen2.5-7b"
    assert all("_" not in key for key in config)
    assert not any("key" in key for key in config)


@pytest.mark.parametrize(("scene", "message"), [
    ({"name": "fast", "model": "qwen"}, "no preset 'fast'"),
    ({"name": "realtime", "model": "llama"}, "model 'llama' is not among"),
    ({"name": "realtime", "model": "qwen", "gpu_memory_utilization": 0.5},
     "unknown key 'gpu_memory_utilization'; engine arguments go under engine_args"),
    ({"name": "realtime", "model": "qwen", "engine_arg": {"max_num_seqs": 8}},
     "unknown key 'engine_arg'; did you mean engine_args?"),
    ({"name": "realtime", "model": "qwen", "engine_args": ["max_num_seqs=8"]},
     "engine_args: ['max_num_seqs=8'] must be a mapping"),
    ({"name": "realtime", "model": "qwen", "engine_args": {"port": 9000}}, "engine_args must not set ['port']"),
    ({"name": "realtime", "model": "qwen", "port": "8000"}, "port '8000' must be an integer"),
    ({"name": "realtime", "model": "qwen", "gpus": "0"}, "gpus '0' must be a list"),
    ({"name": "Real Time", "model": "qwen"}, "scene name 'Real Time' must match"),
    ({"name": "realtime", "model": "qwen", "memory_budget_gib": "21.6"}, "must be a positive number of GiB"),
])
def test_bad_scenes_name_the_variable_and_fix(scene: dict[str, Any], message: str) -> None:
    """Each bad scene is refused with a message that names the scene and what to change."""
    with pytest.raises(scenes.SceneError, match=r"vllm_scenes_list\[name=") as error:
        resolve(scene)
    assert message in str(error.value)


def test_port_clash_between_scenes() -> None:
    """Two scenes on one port are refused, naming both."""
    with pytest.raises(scenes.SceneError, match="scenes 'realtime' and 'batch' share port 8000"):
        resolve({"name": "realtime", "model": "qwen"}, {"name": "batch", "model": "qwen", "port": 8000})


def test_exposure_off_loopback_is_refused_even_with_a_key() -> None:
    """Any listen address beyond loopback is a problem, key or not (vLLM guards only /v1); loopback is not."""
    open_scene, keyed, local = resolve({"name": "realtime", "model": "qwen", "host": "0.0.0.0"},
                                       {"name": "batch", "model": "qwen", "host": "10.0.0.5", "api_key_var": "k"},
                                       {"name": "own", "preset": "batch", "model": "qwen", "port": 8002})
    assert "listens on 0.0.0.0, reachable off the host" in scenes.exposure_problems(open_scene)[0]
    assert "through the fleet gateway" in scenes.exposure_problems(keyed)[0]
    assert scenes.exposure_problems(local) == []


def test_gpu_index_the_host_lacks() -> None:
    """A scene asking for GPU 1 on a one-GPU host is refused; GPU 0 is fine."""
    (scene,) = resolve({"name": "realtime", "model": "qwen", "gpus": [0, 1]})
    assert "asks for GPU [1] but the host has [0]" in scenes.gpu_problems(scene, [0])[0]
    assert scenes.gpu_problems(scene, [0, 1]) == []


H200 = {"present": True, "profile": "generic", "gpus": [{"index": 0, "memory_total_mib": 143771},
                                                      {"index": 1, "memory_total_mib": 24564}]}


def test_memory_budget_gives_a_big_card_the_utilization_of_a_small_one() -> None:
    """21.6 GiB (a 24 GiB card at 0.90) of a 143,771 MiB H200 is 0.1538, rounded down; scenes without a budget stay."""
    plain, budgeted, shared = resolve({"name": "realtime", "model": "qwen"},
                                      {"name": "batch", "model": "qwen", "memory_budget_gib": 21.6},
                                      {"name": "own", "preset": "batch", "model": "qwen", "port": 8002, "gpus": [0, 1],
                                       "memory_budget_gib": 20})
    applied = scenes.apply_memory_budgets([plain, budgeted, shared], H200, "vllm_scenes_list")
    assert applied[0] == plain
    assert applied[1]["engine_args"]["gpu-memory-utilization"] == 0.1538 == int(21.6 * 1024 / 143771 * 1e4) / 1e4
    assert applied[2]["engine_args"]["gpu-memory-utilization"] == int(20 * 1024 / 24564 * 1e4) / 1e4  # the smaller card
    assert budgeted["engine_args"]["gpu-memory-utilization"] == 0.95  # the input is not changed


@pytest.mark.parametrize(("facts", "budget", "message"), [
    (None, 21.6, "needs the memory of GPU [0] from the host's GPU facts"),
    ({"present": False, "profile": "cpu", "gpus": []}, 21.6, "needs the memory of GPU [0]"),
    (H200, 200, "200 GiB is more than the 143771 MiB of GPU [0]; lower the budget"),
])
def test_memory_budget_without_facts_or_beyond_the_card(facts: Any, budget: float, message: str) -> None:
    """A budget needs the card's memory from GPU facts and must fit the card."""
    (scene,) = resolve({"name": "realtime", "model": "qwen", "memory_budget_gib": budget})
    with pytest.raises(scenes.SceneError, match=r"vllm_scenes_list\[name=realtime\]\.memory_budget_gib") as error:
        scenes.apply_memory_budgets([scene], facts, "vllm_scenes_list")
    assert message in str(error.value)


@pytest.mark.parametrize(("value", "expected"), [("127.0.0.1", True), ("0.0.0.0", True), ("::1", True), ("fe80::1", True),
                                                 ("256.1.1.1", False), ("[::1]", False), ("host.example", False),
                                                 ("fe80::1%eth0", False), ("10.0.0.1:80", False), (None, False)])
def test_is_ip_literal(value: object, expected: bool) -> None:
    """Listen addresses must be bare IP literals."""
    assert scenes.is_ip_literal(value) is expected


@pytest.mark.parametrize(("value", "expected"), [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                                 ("localhost", True), ("127.0.0.1.example.net", False),
                                                 ("127.attacker.example", False), ("0.0.0.0", False), ("::", False),
                                                 ("::ffff:127.0.0.1", False), ("10.0.0.1", False), (None, False)])
def test_is_loopback_judges_the_address_not_its_spelling(value: object, expected: bool) -> None:
    """Loopback is 127.0.0.0/8, ::1 or localhost; a host name that starts with 127. is not."""
    assert scenes.is_loopback(value) is expected
    if isinstance(value, str):
        scene = {"name": "realtime", "host": value}
        assert (scenes.exposure_problems(scene) == []) is expected


@pytest.mark.parametrize(("listen", "url"), [("0.0.0.0", "http://127.0.0.1:8000"), ("::", "http://[::1]:8000"),
                                             ("127.0.0.1", "http://127.0.0.1:8000"), ("::1", "http://[::1]:8000"),
                                             ("10.213.1.2", "http://10.213.1.2:8000")])
def test_local_url_reaches_wildcards_over_loopback(listen: str, url: str) -> None:
    """Probes on the host reach wildcard listeners over loopback, with IPv6 addresses in brackets."""
    assert scenes.local_url(listen, 8000) == url
    assert scenes.reach_address(listen) == url.removeprefix("http://").rsplit(":", 1)[0].strip("[]")


def test_custom_presets_are_checked_like_scenes() -> None:
    """A custom preset's misspelt key is refused naming the preset, and the error says where presets go."""
    presets = {**PRESETS, "nightly": {"port": 8100, "engine_arg": {"max_num_seqs": 8}}}
    with pytest.raises(scenes.SceneError, match=r"^vllm_scenes_custom_presets.nightly \(the preset of "
                                                r"vllm_scenes_list\[name=n\]\): unknown key 'engine_arg'; did you mean "
                                                r"engine_args\?"):
        scenes.resolve_scenes([{"name": "n", "preset": "nightly"}], presets, MODELS)
    with pytest.raises(scenes.SceneError, match="or add it to vllm_scenes_custom_presets"):
        resolve({"name": "fast", "model": "qwen"})


def test_each_scene_gets_a_user_of_its_own_within_useradds_limit() -> None:
    """<service user>-<scene>; past 32 characters cut and suffixed with a digest of the whole name, still unique."""
    long_a, long_b = "a" * 31, "a" * 30 + "b"
    users = scenes.scene_users(["realtime", long_a, long_b], "vllm")
    assert users["realtime"] == "vllm-realtime"
    assert len(users[long_a]) == len(users[long_b]) == 32 and users[long_a] != users[long_b]
    assert users[long_a].startswith("vllm-aaaaa") and scenes.scene_user("vllm", long_a) == users[long_a]


def test_two_scenes_that_would_share_a_user_are_refused() -> None:
    """A short name equal to another's cut form would make two scenes one user: refused, naming both."""
    long_name = "b" * 31
    with pytest.raises(FleetError, match="would share a user"):
        scenes.scene_users([long_name, scenes.scene_user("vllm", long_name).removeprefix("vllm-")], "vllm")


def test_a_hosts_scenes_are_made_whole_in_one_call() -> None:
    """host_scenes is the role's one pipeline: gpus: all becomes a scene per card, budgets become each card's share,
    scenes over several cards get their settings; resolve_problem reports what it raises, word for word."""
    facts = {**H200, "gpus": [{**H200["gpus"][0], "index": 0}, {**H200["gpus"][0], "index": 1}], "p2p": {}}
    made = scenes.host_scenes([{"name": "each", "preset": "realtime", "model": "qwen", "gpus": "all",
                                "memory_budget_gib": 21.6},
                               {"name": "both", "preset": "batch", "model": "qwen", "port": 9000, "gpus": [0, 1]}],
                              PRESETS, MODELS, facts, "h1: vllm_scenes_list")
    assert [scene["name"] for scene in made] == ["each-gpu0", "each-gpu1", "both"]
    assert made[0]["engine_args"]["gpu-memory-utilization"] == 0.1538
    assert made[2]["env"]["NCCL_P2P_DISABLE"] == "1"
    over = [{"name": "big", "model": "qwen", "memory_budget_gib": 500}]
    with pytest.raises(FleetError) as raised:
        scenes.host_scenes(over, PRESETS, MODELS, facts, "h1: vllm_scenes_list")
    assert scenes.resolve_problem(over, PRESETS, MODELS, facts, "h1: vllm_scenes_list") == str(raised.value)


UNIT = {"cache_dir": "/c", "config_dir": "/e", "service_user": "vllm", "unit_prefix": "vllm-scene-", "max_sequences": 4,
        "keep_alive_s": 3600, "cpu_kvcache_gib": 2, "env": {"OMP_NUM_THREADS": "8", "HF_HUB_OFFLINE": "0"}}


def test_a_scene_comes_whole_with_its_config_unit_and_environment() -> None:
    """With the unit's settings, each scene carries what its files print: the vLLM config mapping, its unit's name,
    user, folders and files, and its own cards only (none on cpu); two scenes that would share a user are refused."""
    rt = {"name": "rt", "preset": "realtime", "model": "qwen"}
    scene = scenes.host_scenes([{**rt, "gpus": [1]}], PRESETS, MODELS, None, "v", "cuda", UNIT)[0]
    assert scene["config"] == scenes.config_file(scene) and scene["config"]["port"] == scene["port"]
    assert scene["unit"] == {
        "name": "vllm-scene-rt.service", "user": "vllm-rt", "cache_dir": "/c/rt", "runtime_directory": "vllm-scene-rt",
        "inductor_link": "/run/vllm-scene-rt/torchinductor_vllm-rt", "config_file": "/e/rt.yaml",
        "env_file": "/e/rt.env",
        "device_allow": ["/dev/nvidiactl rw", "/dev/nvidia1 rw", "char-nvidia-uvm rw", "char-nvidia-caps r"]}
    assert scene["unit"]["inductor_link"].startswith(scene["environment"]["TMPDIR"] + "/")
    cpu = scenes.host_scenes([rt], PRESETS, MODELS, None, "v", "cpu", UNIT)
    assert cpu[0]["unit"]["device_allow"] == []
    long_name = "b" * 31
    twin = scenes.scene_user("vllm", long_name).removeprefix("vllm-")
    twins = [{**rt, "name": long_name}, {**rt, "name": twin, "port": 8001}]
    assert scenes.host_scenes(twins, PRESETS, MODELS, None, "v")  # without the unit's settings, no user is made
    with pytest.raises(FleetError, match="would share a user"):
        scenes.host_scenes(twins, PRESETS, MODELS, None, "v", "cpu", UNIT)
    assert "would share a user" in scenes.resolve_problem(twins, PRESETS, MODELS, None, "v", "cpu", UNIT)


def test_a_scenes_environment_is_the_kits_then_the_flavours_then_the_hosts_then_its_own() -> None:
    """Caches under the scene's folder, its runtime directory, the request bounds; cuda's card order and JIT caches,
    cpu's KV cache; the host's env over those, the scene's own over everything; every value a string."""
    scene = {"name": "rt", "gpus": [0, 1], "env": {"OMP_NUM_THREADS": "4", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}}
    cuda = scenes.unit_environment(scene, "cuda", UNIT)
    assert (cuda["CUDA_VISIBLE_DEVICES"], cuda["HF_HOME"]) == ("0,1", "/c/rt/huggingface")
    assert cuda["TMPDIR"] == "/run/vllm-scene-rt"
    assert (cuda["VLLM_MAX_N_SEQUENCES"], cuda["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) == ("4", "3600")
    assert cuda["FLASHINFER_WORKSPACE_BASE"] == "/c/rt/flashinfer" and "VLLM_CPU_KVCACHE_SPACE" not in cuda
    assert (cuda["CUDA_DEVICE_ORDER"], cuda["OMP_NUM_THREADS"], cuda["HF_HUB_OFFLINE"]) == ("FASTEST_FIRST", "4", "0")
    cpu = scenes.unit_environment({**scene, "env": {}}, "cpu", UNIT)
    assert (cpu["VLLM_CPU_KVCACHE_SPACE"], cpu["VLLM_USE_AOT_COMPILE"]) == ("2", "0") and "HUMMING_CACHE_DIR" not in cpu
    made = scenes.host_scenes([{"name": "realtime", "model": "qwen"}], PRESETS, MODELS, None, "v", "cpu", UNIT)
    assert made[0]["environment"] == scenes.unit_environment(made[0], "cpu", UNIT)
