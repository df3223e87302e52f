import os, sys, subprocess, time
sys.path.insert(0, "/work/main/plugins")
from harness_plugins.llamacpp.bench_http import LlamaServerArm, ServerArm
kind = sys.argv[1]; conc = int(sys.argv[2]); out = sys.argv[3]
model = os.environ["HARNESS_MODEL"]
cls = {"llama-server": LlamaServerArm, "server": ServerArm}[kind]
arm = cls({"model": model, "max_num_seqs": 16, "n_ctx": 4096, "threads": 2})
try:
    arm.warmup(); arm.measure(128, 64, conc)
    p = subprocess.Popen(["perf", "record", "-a", "-F", "499", "-g", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    t = time.time(); ms = []
    for _ in range(4):
        m = arm.measure(128, 64, conc); ms.append(m)
    p.send_signal(2); p.wait()
    for m in ms: print({k: round(v, 2) for k, v in m.items()})
finally:
    arm.close()
