"""The shadow oracle's GPU mode: device-side shadow arrays, instrumented Triton kernels, a device
dispatch mode for torch ops. ``instrument.py`` rewrites kernels, ``device_checks.py`` holds the
checks they call, ``regions.py`` the host side of the shadow, ``torch_mode.py`` the torch ops,
``oracle.py`` the oracle (``--oracle shadow --device cuda``)."""
