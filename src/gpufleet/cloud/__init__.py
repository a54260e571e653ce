"""Cloud providers behind one contract (``gpufleet.cloud.provider``): kwok, AWS, Aliyun."""
