"""Built-in fuzz targets: ``reference_runner`` and ``lora_kernels``."""
