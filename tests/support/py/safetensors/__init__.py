# A stand-in for the `safetensors` package's safe_open (pip install
# safetensors), which Debian 12 does not ship: only what docs/model-formats.md's two
# lines use (keys, get_tensor, metadata, as a context manager), F32 and I64
# (batch norm's num_batches_tracked) only, read with json and torch.frombuffer. tests/test_export_torch.sh puts it on
# PYTHONPATH only when the real package cannot be imported.
import json

import torch


class safe_open:
    def __init__(self, filename, framework="pt", device="cpu"):
        assert framework == "pt" and device == "cpu"
        with open(filename, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        self._metadata = header.pop("__metadata__", None)
        self._tensors = {}
        dtypes = {"F32": torch.float32, "I64": torch.int64}
        for name, info in header.items():
            assert info["dtype"] in dtypes, info["dtype"]
            begin, end = info["data_offsets"]
            data = bytearray(raw[8 + n + begin:8 + n + end])
            self._tensors[name] = torch.frombuffer(data, dtype=dtypes[info["dtype"]]).reshape(info["shape"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._tensors)

    def get_tensor(self, name):
        return self._tensors[name]

    def metadata(self):
        return self._metadata
