"""CUDA device time: graph replays (:mod:`.graph`), CUPTI kernel sums (:mod:`.cupti`), NVML clocks (:mod:`.nvml`),
brought together by :mod:`.device_time`."""
