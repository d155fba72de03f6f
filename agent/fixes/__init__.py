"""Source fixes the agent derives from a diagnosis and the workspace: ``rocm_port`` (CUDA -> ROCm guards and HIP
spellings from hipify's mapping), ``excludes`` and ``engine_modules`` (quantization-exclude entries for what the
engine builds quantized, and the same fix in the engine's draft model)."""
