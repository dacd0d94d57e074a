"""Run on a lab host with the release's Python: the cpu flavour's plain-torch W4A16 kernel, fed an AWQ layer through
vLLM's own conversions (AWQ to standard packing, then CPUWNA16LinearKernel's blocking), against AWQ's definition
x @ ((q - z) * s). Prints the largest error relative to the output's scale."""

import types

import torch
import vllm_fleet_cpu_kernels
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
from vllm.model_executor.layers.quantization.auto_awq import _convert_awq_to_standard_format
from vllm.model_executor.parameter import GroupQuantScaleParameter, PackedvLLMParameter
from vllm.scalar_type import scalar_types

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
INPUTS, OUTPUTS, GROUP = 128, 96, 32


def awq_pack(values: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit values along the output dim in AWQ's interleaved order, as AWQ GEMM checkpoints store them."""
    rows, cols = values.shape
    ordered = values.view(rows, cols // 8, 8)[:, :, AWQ_ORDER]
    return sum(ordered[:, :, i] << (4 * i) for i in range(8)).to(torch.int32)


def packed(data: torch.Tensor) -> PackedvLLMParameter:
    """Return an AWQ checkpoint parameter: input dim 0, output dim 1, packed along the output dim."""
    return PackedvLLMParameter(data=data, input_dim=0, output_dim=1, packed_dim=1, packed_factor=8,
                               weight_loader=lambda *args, **kwargs: None)


def main() -> None:
    """Convert a random AWQ layer the way vLLM does, run the kernel and print its relative error."""
    config = set_current_vllm_config(VllmConfig())
    config.__enter__()
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method="tcp://127.0.0.1:29555")
    initialize_model_parallel(1, 1)
    torch.manual_seed(0)
    groups = INPUTS // GROUP
    values = torch.randint(0, 16, (INPUTS, OUTPUTS), dtype=torch.int32)
    points = torch.randint(0, 16, (groups, OUTPUTS), dtype=torch.int32)
    scales = (torch.rand(groups, OUTPUTS) * 0.1).to(torch.bfloat16)
    layer = torch.nn.Module()
    layer.qweight, layer.qzeros = packed(awq_pack(values)), packed(awq_pack(points))
    layer.scales = GroupQuantScaleParameter(data=scales, input_dim=0, output_dim=1, weight_loader=lambda *a, **k: None)
    _convert_awq_to_standard_format(layer, "qweight", "qzeros", 4)
    kernel = CPUWNA16LinearKernel.__new__(CPUWNA16LinearKernel)
    kernel.w_q_name, kernel.w_s_name = "qweight", "scales"
    kernel.config = types.SimpleNamespace(weight_type=scalar_types.uint4)
    kernel._process_gptq_weights_w4a16(layer)
    zeros = layer.qzeros.data.t().contiguous()  # the kernel's [groups, outputs / 8] layout
    x = torch.randn(5, INPUTS).to(torch.bfloat16)
    out = torch.empty(5, OUTPUTS, dtype=torch.bfloat16)
    vllm_fleet_cpu_kernels.gemm_wna16(x, layer.qweight.data, out, layer.scales.data, zeros, None, 8, "vec")
    weight = (values - points.repeat_interleave(GROUP, 0)).float() * scales.float().repeat_interleave(GROUP, 0)
    reference = x.float() @ weight
    print((out.float() - reference).abs().max().item() / reference.abs().max().item())


if __name__ == "__main__":
    main()
