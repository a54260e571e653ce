"""GPU models, MIG profiles, instance types and prices: data files validated on load."""

from gpufleet.catalog.gpus import GpuCatalog, GpuModel, MigProfile, load_gpu_catalog
from gpufleet.catalog.instances import InstanceCatalog, InstanceType, load_instance_catalog
from gpufleet.catalog.spot_prices import SpotPrice, load_spot_prices

__all__ = [
    "GpuCatalog",
    "GpuModel",
    "InstanceCatalog",
    "InstanceType",
    "MigProfile",
    "SpotPrice",
    "load_gpu_catalog",
    "load_instance_catalog",
    "load_spot_prices",
]
