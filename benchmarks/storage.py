"""Checkpoint upload throughput to an S3 endpoint on 127.0.0.1 (moto): raytf's upload path (retrying copy, then
the commit marker) against a plain pyarrow.fs.copy_files of the same files, interleaved.

Run: python -m benchmarks.storage [--mb 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import pyarrow.fs as pafs

from raytf._storage import RunDir
from raytf.config import StorageConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    endpoint = f"127.0.0.1:{server._server.server_port}"
    try:
        local = tempfile.mkdtemp(prefix="raytf-bench-ckpt-")
        # A checkpoint's shape: one large data shard and a small index.
        with open(os.path.join(local, "ckpt.data-00000-of-00001"), "wb") as f:
            f.write(os.urandom(args.mb * 1024 * 1024))
        with open(os.path.join(local, "ckpt.index"), "wb") as f:
            f.write(os.urandom(16 * 1024))
        opts = StorageConfig(path="s3://bench/runs", endpoint_override=endpoint, scheme="http", region="us-east-1")
        rd = RunDir(opts, "upload")
        rd.makedirs()
        fs = rd.fs
        times: dict[str, list[float]] = {"raytf upload_checkpoint": [], "pyarrow copy_files": []}
        for i in range(args.repeats):
            t = time.perf_counter()
            rd.checkpoints.upload(local, i + 1, i + 1, {})
            times["raytf upload_checkpoint"].append(time.perf_counter() - t)
            t = time.perf_counter()
            pafs.copy_files(local, f"bench/plain/{i}", source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=fs, use_threads=True)
            times["pyarrow copy_files"].append(time.perf_counter() - t)
    finally:
        server.stop()
    size = args.mb + 16 / 1024
    base = statistics.median(times["pyarrow copy_files"])
    print(f"\ncheckpoint of {size:.1f} MB to S3 at {endpoint} (moto), {args.repeats} interleaved repeats")
    print(f"{'path':26} {'median s':>9} {'MB/s':>8} {'ratio to copy_files':>20}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:26} {m:9.3f} {size / m:8.1f} {base / m:20.2f}")


if __name__ == "__main__":
    main()
