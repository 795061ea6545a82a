"""The CUDA C sources of witcert_cupy (``*.cu``, ``*.cuh``), shipped inside the wheel as
``witcert_cupy/cuda`` and read by :mod:`witcert_cupy._cuda`; nothing to import here."""
