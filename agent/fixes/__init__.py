"""Source fixes the agent derives from a diagnosis and the workspace (``rocm_port``: CUDA -> ROCm guards and HIP
spellings from hipify's mapping)."""
