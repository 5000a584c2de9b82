"""interop: DLPack and conversions between jgrad and JAX / NumPy / PyTorch / CuPy."""
