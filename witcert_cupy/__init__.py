"""witcert_cupy: a subtractively dithered INT8 KV cache with a runtime-certified decode.

The public API is re-exported here; importing it loads no GPU library.  Arrays pick the backend:
NumPy runs on the CPU (numba kernels), CuPy or any CUDA array (``__cuda_array_interface__``,
DLPack) runs on the GPU (CUDA kernels through CuPy ``RawModule``).
"""

from . import reference, sharded
from .config import CertConfig, QuantConfig
from .decode import DecodeResult, decode_attention
from .extend import extend_attention
from .gate import GateReport, gated_decode
from .graph import CapturedStep, decode_plan
from .pool import Fp16Pool, KVPool
from .schemes import SchemePool, get_scheme, list_schemes, register_scheme
from .stream import dither, philox4x32_10
from .synthetic import calibrate_outlier_pairs
from .telemetry import Telemetry
from .write import QuantizedKV, dequantize, quantize

__version__ = "0.1.0"

__all__ = [
    "CapturedStep", "CertConfig", "calibrate_outlier_pairs", "DecodeResult", "decode_plan", "Fp16Pool", "GateReport", "KVPool", "SchemePool", "Telemetry", "gated_decode", "get_scheme", "list_schemes", "register_scheme", "QuantConfig", "QuantizedKV", "decode_attention", "extend_attention",
    "dequantize", "dither", "philox4x32_10", "quantize", "reference", "sharded", "__version__",
]
