"""Client-side TTFT vs the engine's own (the /metrics histogram's sum), one harness serve process."""
import json, os, re, socket, subprocess, sys, time, tempfile, pathlib, statistics
import httpx
M = os.environ["HARNESS_MODEL"]; REPS = int(os.environ.get("REPS", "12"))
tmp = pathlib.Path(tempfile.mkdtemp()); cfg = tmp / "bench.yaml"
cfg.write_text(f"name: bench\nbackend: llamacpp\ncontext_size: 4096\nparameters:\n  model: {pathlib.Path(M).name}\n"
               "options:\n  - n_parallel:16\n  - threads:2\n  - enable_prefix_caching:false\nengine_args:\n  n_batch: 512\n")
port = 18125
env = dict(os.environ); env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
p = subprocess.Popen([sys.executable, "-m", "harness", "serve", str(cfg), "--models-dir", str(pathlib.Path(M).parent),
                      "--port", str(port), "--log-level", "error"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
for _ in range(300):
    try:
        if c.get("/health").status_code == 200: break
    except Exception: pass
    time.sleep(0.2)
def ttft_sum():
    m = re.search(r'^harness_time_to_first_token_seconds_sum\{[^}]*\} (\S+)', c.get("/metrics").text, re.M)
    return float(m.group(1)) if m else 0.0
def stream_ttft(salt):
    prompt = [1000 + (salt * 7 + i) % 30000 for i in range(128)]
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    first = None; buf = b""
    while True:
        d = s.recv(65536)
        if not d: break
        if first is None and b"data: {" in d: first = time.perf_counter()
        buf += d
        if b"data: [DONE]" in buf: break
    s.close(); return first - t0
stream_ttft(0)
diffs = []
for i in range(REPS):
    a = ttft_sum(); t = stream_ttft(i + 1); time.sleep(0.05); e = ttft_sum() - a
    diffs.append(t - e)
    print(f"{i}: client {t*1e3:.1f} ms  engine {e*1e3:.1f} ms  outside the engine {(t-e)*1e3:.2f} ms", flush=True)
print(f"median outside: {statistics.median(diffs)*1e3:.2f} ms")
p.terminate(); p.wait()
