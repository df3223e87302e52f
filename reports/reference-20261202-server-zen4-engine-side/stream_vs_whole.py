"""One harness serve process: decode rate of a stream (client stamps per token) vs whole responses
(T(n+1 tokens) - T(1 token)), interleaved, quiet host. Raw sockets, minimal client work."""
import json, os, socket, subprocess, sys, time, tempfile, pathlib, statistics
import httpx
M = os.environ["HARNESS_MODEL"]; GN = int(os.environ.get("GN", "128")); REPS = int(os.environ.get("REPS", "12"))
tmp = pathlib.Path(tempfile.mkdtemp()); cfg = tmp / "bench.yaml"
cfg.write_text(f"name: bench\nbackend: llamacpp\ncontext_size: 4096\nparameters:\n  model: {pathlib.Path(M).name}\n"
               "options:\n  - n_parallel:16\n  - threads:2\n  - enable_prefix_caching:false\nengine_args:\n  n_batch: 512\n")
port = 18124
env = dict(os.environ); env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
p = subprocess.Popen([sys.executable, "-m", "harness", "serve", str(cfg), "--models-dir", str(pathlib.Path(M).parent),
                      "--port", str(port), "--log-level", "error"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
for _ in range(300):
    try:
        if c.get("/health").status_code == 200: break
    except Exception: pass
    time.sleep(0.2)
prompt = list(range(1000, 1128))
def req(n, stream):
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": stream}).encode()
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    stamps = []; buf = b""
    while True:
        d = s.recv(65536)
        if not d: break
        if stream: stamps.append((time.perf_counter(), d.count(b"data: {")))
        buf += d
        if (stream and b"data: [DONE]" in d) or (not stream and b'"usage"' in buf and buf.rstrip().endswith(b"}")): break
    t1 = time.perf_counter(); s.close()
    return t0, t1, stamps
req(8, False)
rs, rw = [], []
for i in range(REPS):
    _, _, st = req(GN, True)
    # decode rate between the first and last content event
    evs = [(t, k) for t, k in st if k]
    first, last = evs[0][0], evs[-1][0]
    n = sum(k for _, k in evs)
    rs.append((n - 1) / (last - first))
    a0, a1, _ = req(1, False); b0, b1, _ = req(GN, False)
    rw.append((GN - 1) / ((b1 - b0) - (a1 - a0)))
    print(f"{i}: stream {rs[-1]:.1f} tok/s  whole {rw[-1]:.1f} tok/s  ratio {rs[-1]/rw[-1]:.3f}", flush=True)
r = [a / b for a, b in zip(rs, rw)]
print(f"stream/whole: geomean {statistics.geometric_mean(r):.3f}  median {statistics.median(r):.3f}  stream {statistics.median(rs):.1f} whole {statistics.median(rw):.1f}")
p.terminate(); p.wait()
